"""Semantics and timing costs of `ptofa.ir.dialect.reductions` and `ptofa.ir.dialect.quant`: column
reductions, the row product, tcolexpandexpdif, arg reductions, tlrelu, taxpy, taddc / tsubc
and tdequant (the sorts of `ptofa.ir.dialect.sorts` and tquant are refused). Each factory
resolves its op once and returns `fn(vals)`, which writes only dst's valid region."""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot, np_dtype
from ptofa.sim.op_costs import on_vector, scalar_cycles, vector_cycles

_COL = {d.TColMaxOp: np.max, d.TColMinOp: np.min, d.TColSumOp: np.sum, d.TColProdOp: np.prod}
_ARG = {d.TColArgMaxOp: np.argmax, d.TColArgMinOp: np.argmin, d.TRowArgMaxOp: np.argmax, d.TRowArgMinOp: np.argmin}


def _no_bf16(op, *values) -> None:
    for v in values:
        if d.elem_name(v.type.dtype) == "bf16":
            raise SimError(f"{op.name}: bf16 tiles are not simulated")


def _need(name: str, what: str, got: tuple, want: tuple) -> None:
    if got != want:
        raise SimError(f"shape agreement: {name}: {what} {got} != {want}")


@registry.semantics(*_COL)
def col_reduce(op, slot: Slot) -> Fn:
    """dst[0, :vc] = reduce over src's valid rows; f16 sums accumulate in f32 and round once."""
    _no_bf16(op, op.src, op.dst)
    f = _COL[type(op)]
    src, dst = slot(op.src), slot(op.dst)
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        if s.vr == 0:
            raise SimError(f"{name}: src %{s.name} has no valid rows")
        _need(name, "dst valid shape", t.v.shape, (1, s.vc))
        t.v[...] = f(s.v.astype(np.float64) if s.v.dtype.kind == "f" else s.v, axis=0, keepdims=True).astype(t.v.dtype)

    return fn


@registry.semantics(d.TColExpandExpdifOp)
def col_expand_expdif(op, slot: Slot) -> Fn:
    """dst[r, c] = exp(src[r, c] - row[0, c]) on the valid region."""
    a, r, dst = slot(op.src), slot(op.row), slot(op.dst)
    name = op.name

    def fn(vals):
        x, rv, t = vals[a], vals[r], vals[dst]
        _need(name, "dst valid shape", t.v.shape, x.v.shape)
        if rv.vr < 1 or rv.vc != t.vc:
            raise SimError(f"shape agreement: {name}: the row operand %{rv.name} has valid shape {rv.vr}x{rv.vc}, the tile {t.vc} valid columns")
        np.exp(x.v - rv.v[:1], out=t.v)

    return fn


@registry.semantics(d.TRowProdOp)
def row_prod(op, slot: Slot) -> Fn:
    """dst[:vr, 0] = product over each valid row."""
    _no_bf16(op, op.src, op.dst)
    src, dst = slot(op.src), slot(op.dst)
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        out = t.v[:, :1]
        _need(name, "dst valid rows", (out.shape[0],), (s.vr,))
        out[...] = np.prod(s.v.astype(np.float64) if s.v.dtype.kind == "f" else s.v, axis=1, keepdims=True).astype(t.v.dtype)

    return fn


@registry.semantics(*_ARG)
def arg_reduce(op, slot: Slot) -> Fn:
    """The index of the first extreme element of each column (into dst's row) or row (into dst's column)."""
    _no_bf16(op, op.src)
    f = _ARG[type(op)]
    axis = op.AXIS
    src, dst = slot(op.src), slot(op.dst)
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        if s.vr == 0 or s.vc == 0:
            raise SimError(f"{name}: src %{s.name} has valid shape {s.vr}x{s.vc}")
        idx = f(s.v, axis=axis)
        out = t.v[:1, :] if axis == 0 else t.v[:, :1]
        _need(name, "dst valid extent", out.shape, (1, s.vc) if axis == 0 else (s.vr, 1))
        out[...] = idx.reshape(out.shape).astype(t.v.dtype)

    return fn


@registry.semantics(d.TLReluOp)
def tlrelu(op, slot: Slot) -> Fn:
    src, k, dst = slot(op.src), slot(op.scalar), slot(op.dst)
    cast = np_dtype(op.src.type.dtype).type
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        _need(name, "dst valid shape", t.v.shape, s.v.shape)
        t.v[...] = np.where(s.v > 0, s.v, s.v * cast(vals[k]))

    return fn


@registry.semantics(d.TAxpyOp)
def taxpy(op, slot: Slot) -> Fn:
    """dst += scalar * src, computed in dst's type (an f16 src is widened first)."""
    src, k, dst = slot(op.src), slot(op.scalar), slot(op.dst)
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        _need(name, "dst valid shape", t.v.shape, s.v.shape)
        t.v[...] = t.v + t.v.dtype.type(vals[k]) * s.v.astype(t.v.dtype)

    return fn


@registry.semantics(d.TAddCOp, d.TSubCOp)
def ternary(op, slot: Slot) -> Fn:
    a, b, c, dst = slot(op.src0), slot(op.src1), slot(op.src2), slot(op.dst)
    sign = 1 if isinstance(op, d.TAddCOp) else -1
    name = op.name

    def fn(vals):
        x, y, z, t = vals[a], vals[b], vals[c], vals[dst]
        for other in (y, z, t):
            _need(name, "valid shapes", other.v.shape, x.v.shape)
        t.v[...] = (x.v + y.v if sign > 0 else x.v - y.v) + z.v

    return fn


@registry.semantics(d.TDequantOp)
def tdequant(op, slot: Slot) -> Fn:
    """dst = (f32(src) - offset[i, 0]) * scale[i, 0] on the valid region."""
    src, scale, offset, dst = slot(op.src), slot(op.scale), slot(op.offset), slot(op.dst)
    name = op.name

    def fn(vals):
        s, k, z, t = vals[src], vals[scale], vals[offset], vals[dst]
        _need(name, "dst valid shape", t.v.shape, s.v.shape)
        if k.data.shape[0] < s.vr or z.data.shape[0] < s.vr:
            raise SimError(f"{name}: scale / offset hold fewer than {s.vr} rows")
        rows = s.vr
        t.v[...] = (s.v.astype(np.float32) - z.data[:rows, :1].astype(np.float32)) * k.data[:rows, :1].astype(np.float32)

    return fn


@registry.semantics(d.TQuantOp)
def tquant(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: the hardware's quantization rounding and saturation are not simulated")


@registry.semantics(d.SetQuantScalarOp, d.SetQuantVectorOp)
def set_quant(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: the FIX pipe's quantizing push (acc_push_epilogue) is not simulated")


@registry.semantics(d.TSort32Op, d.TMrgSortOp)
def sort(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: the hardware's packed value-index sort layout is not simulated")


# Vector-unit work: reductions (and sorts) at the reduce rate, the fused elementwise ops at the plain rate.
registry.cost(*_COL, d.TRowProdOp, *_ARG, d.TSort32Op, d.TMrgSortOp, queue=on_vector, cycles=vector_cycles("vec_reduce_factor"))
registry.cost(d.TLReluOp, d.TAxpyOp, d.TAddCOp, d.TSubCOp, d.TQuantOp, d.TDequantOp, queue=on_vector, cycles=vector_cycles())
# Setting the FIX pipe's quantization registers: scalar-unit work.
registry.cost(d.SetQuantScalarOp, d.SetQuantVectorOp, queue="S", cycles=scalar_cycles)
registry.cost(d.TColExpandExpdifOp, queue=on_vector, cycles=vector_cycles("vec_transcendental_factor"))
