"""Semantics and costs of `ptofa.dialect.fused`: tprelu, trowexpand, taddsc / tsubsc,
tmatmul.bias; ptrtoint / inttoptr are refused (an integer address has no simulated memory)."""

from __future__ import annotations

import numpy as np

from ptofa import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot, np_dtype, tmatmul
from ptofa.sim.timing import matmul_cycles, on_vector, scalar_cycles, vector_cycles


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


registry.cost(d.TPReluOp, d.TRowExpandOp, d.TAddSCOp, d.TSubSCOp, queue=on_vector, cycles=vector_cycles())
registry.cost(d.TMatmulBiasOp, queue="M", cycles=matmul_cycles)
registry.cost(d.PtrToIntOp, d.IntToPtrOp, queue="S", cycles=scalar_cycles)
