"""The split-KV reduce kernel: combine the partial O and LSE of every split, weighted by the LSEs.

A `split_kv` forward kernel (`fa_fwd`) writes, for split i of a unit's S splits, the split's
normalised O_i (fp32) and LSE_i to the partials: split i's block O_i [total_q, N, D] then
LSE_i [N, total_q] (`pipeline.partial_elems`); a row that saw no key in a split has O_i = 0
and LSE_i = -inf. Units of one split wrote their result themselves and are not reduced.
This vector-only kernel computes per query row and head

    M = max(max_i LSE_i, -3e38)    (finite even when every split is empty)
    w_i = exp(LSE_i - M)           (0 for an empty split)
    O = sum_i w_i O_i / max(sum_i w_i, 1)
    LSE = M + ln(max(sum_i w_i, 1)), +inf where every split was empty

The max split has w = 1, so the divisor's clamp only acts on rows with no key at all,
which get O = 0 and LSE = +inf: what the unsplit kernel writes for them.

Work units are the forward units of more than one split, read from a host-built table
(`pipeline.REDUCE_TABLE`, `varlen.reduce_table`: head, first packed row, rows, split count),
shared by the blocks in a persistent loop; each vector core owns up to 64 of a unit's rows
(the forward kernel's split of a Q block, and the same strided [rows, D] views of O). Each
unit combines exactly its own splits, so a launch may split its units differently (only
the last wave, say) and the reduce never reads a partial no split wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import builtin
from xdsl.ir import SSAValue

from ptofa.kernels import argspec
from ptofa.api import F32, KernelModule, parse_ir_type, pto, scalar, tile
from ptofa.kernels.common import HALF_NEG, NEG_INIT, alloc
from ptofa.pipeline import REDUCE_TABLE, FAConfig, TileSpec
from ptofa.ir.textio import print_pto


def reduce_tile_plan(c: FAConfig) -> list[TileSpec]:
    """Every tile the reduce kernel allocates (one vector core's rows of a unit)."""
    rows, d = c.vec_rows, c.head
    tiles = [
        TileSpec("lse_in", "vector", "gu", "vec", 1, rows, "f32", dynamic=True),
        TileSpec("m_max", "vector", "gu", "vec", 1, rows, "f32"),
        TileSpec("weight", "vector", "gu", "vec", 1, rows, "f32"),
        TileSpec("w_sum", "vector", "gu", "vec", 1, rows, "f32"),
        TileSpec("o_in", "vector", "gu", "vec", rows, d, "f32", dynamic=True),
        TileSpec("o_acc", "vector", "gu", "vec", rows, d, "f32", dynamic=True),
    ]
    if c.out_dtype != "f32":
        tiles.append(TileSpec("o_out", "vector", "gu", "vec", rows, d, c.out_dtype, dynamic=True))
    if c.lse:
        tiles += [TileSpec("row_ok", "vector", "gu", "vec", 1, rows, "f32"),
                  TileSpec("lse_out", "vector", "gu", "vec", 1, rows, "f32", dynamic=True)]
    return tiles


@dataclass
class _Rows:
    """The rows one vector core reduces in one unit."""

    h: SSAValue
    q_row: SSAValue  # first packed query row
    valid: SSAValue  # rows that exist (<= vec_rows)
    splits: SSAValue  # the unit's split count


class _Reducer:
    """Per-function values: arguments, tiles, their [R, 1] column views, constants."""

    def __init__(self, c: FAConfig, args: dict[str, SSAValue]) -> None:
        self.c, self.args = c, args
        self.heads = scalar.index_cast(args["heads"], name="heads")
        self.s0 = scalar.index_cast(args["s0"], name="s0")
        self.q_stride = scalar.mul(self.heads, c.head, name="q_stride")
        self.o_per_split = scalar.mul(self.s0, self.q_stride, name="o_per_split")
        self.per_split = scalar.add(self.o_per_split, scalar.mul(self.s0, self.heads), name="per_split")
        self.lse_base = pto.add_ptr(args["partials"], self.o_per_split, name="part_lse")
        self.t = {spec.name: alloc(spec) for spec in reduce_tile_plan(c)}
        self.col = {name: tile.reshape(self.t[name], c.vec_rows, 1, name=f"{name}_col", blayout="col_major")
                    for name in ("weight", "w_sum")}
        self.k = {name: scalar.const(value, F32, name=name) for name, value in (
            ("neg", NEG_INIT), ("zero", 0.0), ("one", 1.0), ("minus_one", -1.0), ("half_pos", HALF_NEG))}

    def _o_view(self, base: SSAValue, r: _Rows, name: str) -> SSAValue:
        """[valid, D] rows of head h in a [total_q, N, D] tensor at `base`."""
        off = scalar.mul(scalar.add(scalar.mul(r.q_row, self.heads), r.h), self.c.head)
        view = pto.as_tensor(pto.add_ptr(base, off), [r.valid, self.c.head], [self.q_stride, 1], name=f"{name}_view")
        return pto.slice_view(view, [0, 0], [r.valid, self.c.head], name=f"{name}_rows")

    def _lse_view(self, base: SSAValue, r: _Rows, name: str) -> SSAValue:
        """[1, valid] LSE entries of head h in a [N, total_q] tensor at `base`."""
        off = scalar.add(scalar.mul(r.h, self.s0), r.q_row)
        view = pto.as_tensor(pto.add_ptr(base, off), [1, r.valid], [r.valid, 1], name=f"{name}_view")
        return pto.slice_view(view, [0, 0], [1, r.valid], name=f"{name}_part")

    def _load_lse(self, split: SSAValue, r: _Rows) -> SSAValue:
        lse_in = self.t["lse_in"]
        tile.set_valid(lse_in, 1, r.valid)
        base = pto.add_ptr(self.lse_base, scalar.mul(split, self.per_split), name="split_lse")
        pto.load(self._lse_view(base, r, "lse_in"), lse_in)
        tile.set_valid(lse_in, 1, self.c.vec_rows)
        return lse_in

    def reduce(self, r: _Rows) -> None:
        """Combine the splits of these rows and store O (and LSE)."""
        c, t, k = self.c, self.t, self.k
        rows = c.vec_rows
        tile.fill(k["neg"], out=t["m_max"])
        with pto.range(0, r.splits, name="split") as split:
            tile.max(t["m_max"], self._load_lse(split, r), out=t["m_max"])
        tile.fill(k["zero"], out=t["w_sum"])
        tile.set_valid(t["o_acc"], rows, c.head)
        tile.fill(k["zero"], out=t["o_acc"])
        with pto.range(0, r.splits, name="split") as split:
            tile.sub(self._load_lse(split, r), t["m_max"], out=t["weight"])
            tile.exp(t["weight"], out=t["weight"])
            tile.add(t["w_sum"], t["weight"], out=t["w_sum"])
            o_in = t["o_in"]
            tile.set_valid(o_in, r.valid, c.head)
            pto.load(self._o_view(pto.add_ptr(self.args["partials"], scalar.mul(split, self.per_split)), r, "o_in"), o_in)
            tile.set_valid(o_in, rows, c.head)
            tile.row_expand_mul(o_in, self.col["weight"], out=o_in)
            tile.add(t["o_acc"], o_in, out=t["o_acc"])
        tile.maxs(t["w_sum"], k["one"], out=t["w_sum"])
        tile.row_expand_div(t["o_acc"], self.col["w_sum"], out=t["o_acc"])
        self._store(r)

    def _store(self, r: _Rows) -> None:
        c, t, k = self.c, self.t, self.k
        tile.set_valid(t["o_acc"], r.valid, c.head)
        o_rows = self._o_view(self.args["o"], r, "o")
        if c.out_dtype == "f32":
            pto.store(t["o_acc"], o_rows)
        else:
            tile.set_valid(t["o_out"], r.valid, c.head)
            tile.cvt(t["o_acc"], out=t["o_out"])
            pto.store(t["o_out"], o_rows)
        if not c.lse:
            return
        lse = t["lse_out"]
        tile.set_valid(lse, 1, c.vec_rows)
        tile.log(t["w_sum"], out=lse)
        tile.add(lse, t["m_max"], out=lse)
        # row_ok = 1 where some split saw a key (M is a real LSE), else 0; then 0 or +inf.
        tile.adds(t["m_max"], k["half_pos"], out=t["row_ok"])
        tile.maxs(t["row_ok"], k["zero"], out=t["row_ok"])
        tile.mins(t["row_ok"], k["one"], out=t["row_ok"])
        tile.rdivs(k["one"], t["row_ok"], out=t["row_ok"])
        tile.adds(t["row_ok"], k["minus_one"], out=t["row_ok"])
        tile.add(lse, t["row_ok"], out=lse)
        tile.set_valid(lse, 1, r.valid)
        pto.store(lse, self._lse_view(self.args["lse"], r, "lse"))


def _vector_kernel(c: FAConfig, args: dict[str, SSAValue]) -> None:
    red = _Reducer(c, args)
    units = scalar.index_cast(args["num_units"], name="units")
    row_base = scalar.mul(pto.get_subblock_idx(), c.vec_rows, name="row_base")
    with pto.range(pto.get_block_idx(), units, pto.get_block_num(), name="unit") as unit:
        rec = scalar.mul(unit, len(REDUCE_TABLE), name="unit_rec")
        field = {name: scalar.index_cast(pto.load_scalar(args["units"], scalar.add(rec, i)), name=name)
                 for i, name in enumerate(REDUCE_TABLE)}
        q_row = scalar.add(field["row"], row_base, name="q_row")
        valid = scalar.min(scalar.max(scalar.sub(field["rows"], row_base), 0), c.vec_rows, name="valid_rows")
        with pto.if_(scalar.gt(valid, 0)):
            red.reduce(_Rows(field["head"], q_row, valid, field["splits"]))


def build_reduce(config: FAConfig) -> builtin.ModuleOp:
    """The reduce kernel: an entry calling one vector function."""
    km = KernelModule(config.target)
    entry_types = {a.name: parse_ir_type(a.ir_type) for a in argspec.reduce_entry_args(config)}
    vector_args = [(name, t) for name, t in entry_types.items() if name != "ffts"]
    with km.function(argspec.REDUCE_ENTRY_NAME, list(entry_types.items()), entry=True) as args:
        pto.set_ffts(args["ffts"])
        pto.call(argspec.REDUCE_FUNC_NAME, [args[name] for name, _ in vector_args])
    with km.function(argspec.REDUCE_FUNC_NAME, vector_args, kind="vector") as args:
        _vector_kernel(config, args)
    return km.module


def emit_reduce(config: FAConfig) -> str:
    """The `.pto` text of the reduce kernel for `config` (its head, output dtype and LSE switch)."""
    return print_pto(build_reduce(config))
