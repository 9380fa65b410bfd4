"""ALiBi's arithmetic (still a switch: `FAConfig.alibi`), attention sinks (`Sinks`) and the kernels'
hooks that apply `config.mods` (`apply_forward`, `apply_backward`, `apply_finish`).

ALiBi acts on a tile of scaled scores s (f32) after the mods, before the masks, in flash-attn's order
(softcapping, `builtin_mods/softcap.py`, first):

    s = s - slope * |i + S1 - S0 - j|         (query i, key j, the slope of the row's head)

ALiBi's bias of a score tile at (first row i0, first column j0) is a function of
d = (j0 + c) - (i0 + r) - (S1 - S0): `alibi_bias` makes the column part with `tci` (one row,
start j0 - i0 - diag) converted to f32; the row part (r, slope * r, -slope * r) are one-row
tiles viewed as columns (`AlibiRows`, r once per kernel, the slopes' multiples per unit). A
tile on one side of the diagonal takes its bias in two passes (the bias is linear there), a
tile the diagonal crosses in six (|d| built in a scratch tile). The dkdv kernel's transposed
tiles (rows are keys) give the negated difference; |d| is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue

from ptofa.api import F32, I32, pto, scalar, tile
from ptofa.kernels.hostparam import HostParam
from ptofa.kernels.mods import FinishSite, Mod, Site
from ptofa.pipeline import mod_prefixes


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


@dataclass(frozen=True)
class Sinks(Mod):
    """Attention sinks (gpt-oss): a per-head logit that joins each row's softmax denominator, so that
    O = sum_j exp(s_j) v_j / (exp(sink[h]) + sum_j exp(s_j)) and LSE = ln(exp(sink[h]) + sum_j exp(s_j)).
    The sinks are an f32 [H] argument (`<prefix>sinks`).

    At the finish hook the sink is one more key without a value, merged as the online softmax merges a
    tile: m' = max(m, sink), alpha = exp(m - m'), l = alpha * l + exp(sink - m'), O = alpha * O, m = m'.
    Every exp is of a value <= 0, so any sink is exact; a row that saw no key (m the mask value) gets
    alpha = 0, l = 1, O = 0 and LSE = sink, the limit of the formula. Split-KV: only split 0 of a unit
    takes the sink (its partial LSE carries it into the reduce's weights), so it counts once."""

    name: str = "sinks"
    scores = False  # (a class attribute: the scores are the plain kernel's, S may be rounded as there)

    def tiles(self, config, prefix: str) -> list:
        from ptofa.pipeline import TileSpec

        return [TileSpec(f"{prefix}{name}", "vector", "gu", "vec", 1, config.vec_rows, "f32")
                for name in ("sink_row", "sink_alpha")]

    def params(self, prefix: str) -> list:
        import ctypes

        return [HostParam(f"{prefix}sinks", "uint8_t*", ctypes.c_void_p, "attention sinks [H], f32")]

    def emit_finish(self, site: FinishSite, prefix: str) -> None:
        if site.split is None:
            self._merge(site, prefix)
            return
        with pto.if_(scalar.eq(site.split, 0, name="sink_split")):
            self._merge(site, prefix)

    @staticmethod
    def _merge(site: FinishSite, prefix: str) -> None:
        sink = pto.load_scalar(site.args[f"{prefix}sinks"], site.h, name="sink")
        row, alpha = site.tiles[f"{prefix}sink_row"], site.tiles[f"{prefix}sink_alpha"]
        tile.maxs(site.m, sink, out=row)  # m'
        tile.sub(site.m, row, out=alpha)
        tile.exp(alpha, out=alpha)  # exp(m - m')
        tile.mul(site.l, alpha, out=site.l)
        tile.mov(row, site.m)
        tile.muls(row, scalar.const(-1.0, F32, name="minus_one"), out=row)
        tile.adds(row, sink, out=row)
        tile.exp(row, out=row)  # exp(sink - m')
        tile.add(site.l, row, out=site.l)
        alpha_col = tile.reshape(alpha, site.rows, 1, name="sink_alpha_col", blayout="col_major")
        tile.row_expand_mul(site.o, alpha_col, out=site.o, tmp=site.row_tmp)


# The forward kernel's hooks: where its mods apply.


def _each_mod(mods: tuple, site: Site, emit) -> None:
    """emit(mod, prefix) for each mod in order; a mask's only on tiles outside the unit's full range."""
    for mod, prefix in zip(mods, mod_prefixes(mods)):
        if mod.mask and site.full is not None:
            lo, hi = site.full
            with pto.if_(scalar.or_(scalar.lt(site.t, lo), scalar.ge(site.t, hi))):
                emit(mod, prefix)
        else:
            emit(mod, prefix)


def apply_forward(config, site: Site) -> None:
    """The hook: `config.mods` in order; a mask's IR only on tiles outside the unit's full range."""
    _each_mod(config.mods, site, lambda mod, prefix: mod.emit_forward(site, prefix))


def apply_backward(mods: tuple, site: Site, grad: SSAValue | None) -> None:
    """The backward kernels' hook (`BwdConfig.mods`, the forward config's mods with IR on the scores):
    each mod's forward IR on the recomputed scores in order and, with `grad` (dP - D), its derivative
    multiplied in, so grad ends as dP - D times the chain's derivative; without `grad` (the dkdv
    kernel's dV-only pass) the forward IR alone. A mask's IR only on tiles outside the unit's full range."""
    if grad is None:
        _each_mod(mods, site, lambda mod, prefix: mod.emit_forward(site, prefix))
    else:
        _each_mod(mods, site, lambda mod, prefix: mod.emit_backward(site, prefix, grad))


def apply_finish(config, site: FinishSite) -> None:
    """The finish hook: each of `config.mods` in order."""
    for mod, prefix in zip(config.mods, mod_prefixes(config.mods)):
        mod.emit_finish(site, prefix)
