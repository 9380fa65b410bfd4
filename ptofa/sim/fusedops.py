"""Semantics and costs of `ptofa.ir.dialect.fused`: tprelu, trowexpand, taddsc / tsubsc,
tconcat / tconcatidx, tmatmul.bias; ptrtoint / inttoptr are refused (an integer address has
no simulated memory)."""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot, copy_bits, np_dtype, tmatmul
from ptofa.sim.op_costs import matmul_cycles, on_vector, scalar_cycles, vector_cycles


def _same(name: str, *tiles) -> None:
    if len({t.v.shape for t in tiles}) > 1:
        raise SimError(f"shape agreement: {name}: valid shapes differ: " + ", ".join(f"%{t.name} {t.vr}x{t.vc}" for t in tiles))


@registry.semantics(d.TPReluOp)
def tprelu(op, slot: Slot) -> Fn:
    a, k, dst = slot(op.src0), slot(op.src1), slot(op.dst)
    name = op.name

    def fn(vals):
        x, s, t = vals[a], vals[k], vals[dst]
        _same(name, x, s, t)
        t.v[...] = np.where(x.v > 0, x.v, s.v * x.v)

    return fn


@registry.semantics(d.TRowExpandOp)
def trowexpand(op, slot: Slot) -> Fn:
    if d.elem_name(op.dst.type.dtype) == "bf16":
        raise SimError(f"{op.name}: bf16 tiles are not simulated")
    src, dst = slot(op.src), slot(op.dst)
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        if s.vr != t.vr:
            raise SimError(f"shape agreement: {name}: src valid rows {s.vr} != dst valid rows {t.vr}")
        t.v[...] = s.v[:, :1]

    return fn


@registry.semantics(d.TAddReluOp)
def taddrelu(op, slot: Slot) -> Fn:
    """dst = max(0, src0 + src1) on the valid region (in the tiles' element type, as VADDRELU)."""
    a, b, dst = slot(op.src0), slot(op.src1), slot(op.dst)
    name = op.name

    def fn(vals):
        x, y, t = vals[a], vals[b], vals[dst]
        if not (x.v.shape == y.v.shape == t.v.shape):
            raise SimError(f"shape agreement: {name}: valid shapes {x.vr}x{x.vc}, {y.vr}x{y.vc} and {t.vr}x{t.vc} differ")
        np.maximum(x.v + y.v, 0, out=t.v)

    return fn


@registry.semantics(d.TAddSCOp, d.TSubSCOp)
def scalar_sandwich(op, slot: Slot) -> Fn:
    a, k, b, dst = slot(op.src0), slot(op.scalar), slot(op.src1), slot(op.dst)
    sign = 1 if isinstance(op, d.TAddSCOp) else -1
    cast = np_dtype(op.dst.type.dtype).type
    name = op.name

    def fn(vals):
        x, y, t = vals[a], vals[b], vals[dst]
        _same(name, x, y, t)
        t.v[...] = (x.v + cast(vals[k]) if sign > 0 else x.v - cast(vals[k])) + y.v

    return fn


@registry.semantics(d.TConcatOp, d.TConcatIdxOp)
def tconcat(op, slot: Slot) -> Fn:
    """Per row: src0's first n0 columns, then src1's first n1 (tconcat: all valid columns; tconcatidx:
    the counts in column 0 of the index tiles, clipped to the valid columns and dst's width)."""
    a, b, dst = slot(op.src0), slot(op.src1), slot(op.dst)
    counted = isinstance(op, d.TConcatIdxOp)
    n0_s, n1_s = (slot(op.src0_idx), slot(op.src1_idx)) if counted else (-1, -1)
    name = op.name

    def fn(vals):
        x, y, t = vals[a], vals[b], vals[dst]
        if not x.vr == y.vr == t.vr:
            raise SimError(f"shape agreement: {name}: valid rows {x.vr}, {y.vr}, {t.vr} differ")
        if not counted:
            if x.vc + y.vc > t.data.shape[1]:
                raise SimError(f"{name}: {x.vc} + {y.vc} columns exceed dst %{t.name}'s {t.data.shape[1]}")
            copy_bits(t.data[: t.vr, : x.vc], x.v)
            copy_bits(t.data[: t.vr, x.vc : x.vc + y.vc], y.v)
            return
        n0, n1 = vals[n0_s].v[:, 0], vals[n1_s].v[:, 0]
        for i in range(t.vr):
            c0 = max(0, min(int(n0[i]), x.vc, t.vc))
            c1 = max(0, min(int(n1[i]), y.vc, t.vc - c0))
            copy_bits(t.data[i, :c0], x.v[i, :c0])
            copy_bits(t.data[i, c0 : c0 + c1], y.v[i, :c1])

    return fn


@registry.semantics(d.TMatmulBiasOp)
def tmatmul_bias(op, slot: Slot) -> Fn:
    """C = A @ B through the tmatmul semantics, then the bias row added to each valid row."""
    product = tmatmul(op, slot)
    bias, dst, lhs, rhs = slot(op.bias), slot(op.dst), slot(op.lhs), slot(op.rhs)

    def fn(vals):
        product(vals)
        c, b = vals[dst], vals[bias]
        m, n = vals[lhs].vr, vals[rhs].vc
        if b.vc < n:
            raise SimError(f"{op.name}: bias %{b.name} has {b.vc} valid columns, the product has {n}")
        c.data[:m, :n] += b.data[:1, :n].astype(c.data.dtype)

    return fn


@registry.semantics(d.PtrToIntOp, d.IntToPtrOp)
def address_cast(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: pointers and integer addresses do not convert in the simulator (GM buffers have no addresses)")


registry.cost(d.TPReluOp, d.TRowExpandOp, d.TAddSCOp, d.TSubSCOp, d.TConcatOp, d.TConcatIdxOp, d.TAddReluOp, queue=on_vector, cycles=vector_cycles())
registry.cost(d.TMatmulBiasOp, queue="M", cycles=matmul_cycles)
registry.cost(d.PtrToIntOp, d.IntToPtrOp, queue="S", cycles=scalar_cycles)
