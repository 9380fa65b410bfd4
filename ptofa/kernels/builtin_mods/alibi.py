"""ALiBi (flash-attn's `alibi_slopes`) as a built-in `mods.Mod`: after the mods before it (softcapping
first, `builtin_mods/softcap.py`), before the masks,

    s = s - slope * |i + S1 - S0 - j|         (query i, key j, the slope of the row's head)

the slopes an f32 [N] or [B, N] kernel argument (`alibi_slopes`, `alibi_stride` = 0 or N).

ALiBi's bias of a score tile at (first row i0, first column j0) is a function of
d = (j0 + c) - (i0 + r) - (S1 - S0): `alibi_bias` makes the column part with `tci` (one row,
start j0 - i0 - diag) converted to f32; the row part (r, slope * r, -slope * r) are one-row
tiles viewed as columns (`AlibiRows`, r once per kernel, the slopes' multiples per unit). A
tile on one side of the diagonal takes its bias in two passes (the bias is linear there), a
tile the diagonal crosses in six (|d| built in a scratch tile). The dkdv kernel's transposed
tiles (rows are keys) give the negated difference; |d| is the same.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from xdsl.ir import SSAValue

from ptofa.api import F32, I32, pto, scalar, tile
from ptofa.kernels.hostparam import HostParam
from ptofa.kernels.mods import Mod, Site, UnitSite
from ptofa.pipeline import TileSpec


@dataclass
class AlibiRows:
    """The row side of ALiBi's bias on a kernel's score tiles of `rows` rows: the row index
    0 .. rows - 1 and, per work unit (`scale_rows`), slope * r and -slope * r, each a [rows, 1]
    col-major view of a one-row f32 tile."""

    rows: int
    index: SSAValue  # [1, rows] f32 tile: r
    pos: SSAValue  # [1, rows] f32 tile: slope * r
    neg: SSAValue  # [1, rows] f32 tile: -slope * r
    index_col: SSAValue
    pos_col: SSAValue
    neg_col: SSAValue

    @classmethod
    def make(cls, index_i32: SSAValue, index: SSAValue, pos: SSAValue, neg: SSAValue, rows: int) -> AlibiRows:
        """Once per kernel: r by `tci` into `index_i32` (a [1, rows] i32 tile: ptoas's `tcvt` takes
        a source of the destination's shape), converted to f32, and the column views."""
        tile.set_valid(index_i32, 1, rows)
        tile.ci(scalar.const(0, I32), out=index_i32)
        tile.cvt(index_i32, out=index)
        cols = [tile.reshape(t, rows, 1, name=f"alibi_{n}_col", blayout="col_major")
                for t, n in ((index, "index"), (pos, "pos"), (neg, "neg"))]
        return cls(rows, index, pos, neg, *cols)

    def scale_rows(self, slope: SSAValue) -> None:
        """slope * r and -slope * r for a work unit's slope."""
        tile.muls(self.index, slope, out=self.pos)
        tile.muls(self.pos, scalar.const(-1.0, F32, name="minus_one"), out=self.neg)


def alibi_bias(scores: SSAValue, bias: SSAValue, index_i32: SSAValue, index_f32: SSAValue, rows: AlibiRows,
               start: SSAValue, cols: SSAValue, slope: SSAValue, tmp: SSAValue | None) -> None:
    """scores -= slope * |d|, d = start + c - r for row r, column c (`start` an index: the first
    column's position minus the first row's, the diagonal S1 - S0 included; `cols` the valid columns).

    A tile on one side of the diagonal (d >= 0, or d <= 0, everywhere in it) has a bias linear in
    c and r: slope * (start + c) as one row added with `tcolexpandadd`, slope * r as one column
    subtracted with `trowexpandsub`, with the signs of that side: two passes over the tile. A
    tile the diagonal crosses builds |d| in `bias` (of the scores' valid shape): `texpands` 0,
    `tcolexpandadd`, `trowexpandsub`, `tabs`, `tmuls`, `tsub`. `tmp`: the trowexpandsub's scratch
    (None: ptoas's hidden one)."""
    for t in (index_i32, index_f32):
        tile.set_valid(t, 1, cols)
    tile.ci(scalar.index_cast(start, I32), out=index_i32)
    tile.cvt(index_i32, out=index_f32)  # start + c
    d_min = scalar.sub(start, rows.rows - 1, name="alibi_d_min")
    d_max = scalar.add(start, scalar.sub(cols, 1), name="alibi_d_max")
    minus_one = scalar.const(-1.0, F32, name="minus_one")
    with pto.if_(scalar.ge(d_min, 0)):  # |d| = d: scores += -slope (start + c) + slope r
        tile.muls(index_f32, slope, out=index_f32)
        tile.muls(index_f32, minus_one, out=index_f32)
        tile.col_expand_add(scores, index_f32, out=scores)
        tile.row_expand_sub(scores, rows.neg_col, out=scores, tmp=tmp)
    with pto.if_(scalar.le(d_max, 0)):  # |d| = -d: scores += slope (start + c) - slope r
        tile.muls(index_f32, slope, out=index_f32)
        tile.col_expand_add(scores, index_f32, out=scores)
        tile.row_expand_sub(scores, rows.pos_col, out=scores, tmp=tmp)
    with pto.if_(scalar.and_(scalar.lt(d_min, 0), scalar.gt(d_max, 0))):  # the diagonal crosses the tile
        tile.fill(scalar.const(0.0, F32, name="zero"), out=bias)
        tile.col_expand_add(bias, index_f32, out=bias)
        tile.row_expand_sub(bias, rows.index_col, out=bias, tmp=tmp)
        tile.abs(bias, out=bias)
        tile.muls(bias, slope, out=bias)
        tile.sub(scores, bias, out=scores)


def slope(args: dict[str, SSAValue], b: SSAValue, h: SSAValue) -> SSAValue:
    """The slope of (batch or packed sequence b, q head h): slopes [N] (stride 0) or [B, N]."""
    off = scalar.add(scalar.mul(b, scalar.index_cast(args["alibi_stride"])), h)
    return pto.load_scalar(args["alibi_slopes"], off, name="slope")


@dataclass(frozen=True)
class Alibi(Mod):
    """ALiBi: its tiles keep the kernels' names (`alibi_*`), its arguments flash-attn's."""

    name: str = "alibi"
    builtin = True
    hides = False
    scores = False  # (S may reach it in the input dtype, as it reaches the plain kernel)
    tci_ops = 1  # a tile's key positions
    grad_tci_ops = 1
    setup_tci_ops = 1  # the row index

    def tiles(self, config, prefix: str) -> list:
        return self.grad_tiles(config.vec_s0, config.tile_s1, prefix)

    def grad_tiles(self, rows: int, cols: int, prefix: str) -> list:
        """A tile's key positions (tci, i32 -> f32), the row index 0 .. rows - 1 (i32 -> f32), +-slope * it."""
        return [TileSpec(f"alibi_{name}", "vector", "p", "vec", 1, n, dtype, dynamic=name not in ("pos", "neg"))
                for name, n, dtype in (("i32", cols, "i32"), ("f32", cols, "f32"), ("rows_i32", rows, "i32"),
                                       ("rows", rows, "f32"), ("pos", rows, "f32"), ("neg", rows, "f32"))]

    def params(self, prefix: str) -> list:
        return [HostParam("alibi_slopes", "uint8_t*", ctypes.c_void_p, "ALiBi slopes [N] or [B, N] f32"),
                HostParam("alibi_stride", "int64_t", ctypes.c_int64, "elements between batches of the slopes (0: [N])")]

    def emit_setup(self, site: UnitSite, prefix: str) -> None:
        site.state["alibi_rows"] = AlibiRows.make(*(site.tiles[f"alibi_{n}"] for n in ("rows_i32", "rows", "pos", "neg")),
                                                  site.rows)

    def emit_unit(self, site: UnitSite, prefix: str) -> None:
        site.state["alibi_slope"] = slope(site.args, site.b, site.h)
        site.state["alibi_rows"].scale_rows(site.state["alibi_slope"])

    def emit_forward(self, site: Site, prefix: str) -> None:
        rows, (s0, s1) = site.state["alibi_rows"], site.seq_lens
        if site.transposed:  # dkdv: rows are keys k0 + r, columns queries q0 + c; the head is the step's
            start = scalar.sub(scalar.add(site.q0, scalar.sub(s1, s0)), site.k0, name="alibi_start")
            value = slope(site.args, site.b, site.h)
            rows.scale_rows(value)
        else:  # column c, row r: key k0 + c, query q0 + r; the unit's slope (`emit_unit`)
            start = scalar.sub(site.k0, scalar.add(site.q0, scalar.sub(s1, s0)), name="alibi_start")
            value = site.state["alibi_slope"]
        alibi_bias(site.scores, site.tmp, site.tiles["alibi_i32"], site.tiles["alibi_f32"], rows, start, site.keys, value,
                   site.row_tmp)

    def reference(self, scores, b, h, q_idx, kv_idx, values=None):
        """`values`: the slopes (`alibi_slopes`, [N] or [B, N]) and the sequence lengths `s0`, `s1`."""
        slopes = values["alibi_slopes"]
        per_row = slopes[h] if slopes.dim() == 1 else slopes[b, h]
        return scores - per_row * torch.abs(q_idx + values["s1"] - values["s0"] - kv_idx)
