"""Semantics of stack-local scalar arrays (`ptofa.ir.dialect.localarray`): each execution of a
declaration makes a fresh array; reading an element no set wrote (uninitialised C++ storage)
or indexing outside the shape is a `SimError`."""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import scalar_cycles


class LocalArray:
    """The values and which of them were written."""

    __slots__ = ("values", "written")

    def __init__(self, dims: tuple[int, ...]):
        self.values = np.zeros(dims, dtype=object)
        self.written = np.zeros(dims, dtype=bool)


def _where(name: str, dims: tuple[int, ...], vals, slots: list[int]) -> tuple[int, ...]:
    idx = tuple(vals[s] for s in slots)
    if any(not 0 <= i < n for i, n in zip(idx, dims)):
        raise SimError(f"{name}: index {list(idx)} is outside the local array's shape {list(dims)}")
    return idx


@registry.semantics(d.DeclareLocalArrayOp)
def declare_local_array(op, slot: Slot) -> Fn:
    res, dims = slot(op.result), op.result.type.dims

    def fn(vals):
        vals[res] = LocalArray(dims)

    return fn


@registry.semantics(d.LocalArrayGetOp)
def local_array_get(op, slot: Slot) -> Fn:
    arr, res, idx = slot(op.array), slot(op.result), [slot(v) for v in op.indices]
    dims, name = op.array.type.dims, op.name

    def fn(vals):
        a = vals[arr]
        where = _where(name, dims, vals, idx)
        if not a.written[where]:
            raise SimError(f"{name}: element {list(where)} is read before any local_array_set wrote it")
        vals[res] = a.values[where]

    return fn


@registry.semantics(d.LocalArraySetOp)
def local_array_set(op, slot: Slot) -> Fn:
    arr, val, idx = slot(op.array), slot(op.value), [slot(v) for v in op.indices]
    dims, name = op.array.type.dims, op.name

    def fn(vals):
        a = vals[arr]
        where = _where(name, dims, vals, idx)
        a.values[where] = vals[val]
        a.written[where] = True

    return fn


registry.cost(d.DeclareLocalArrayOp, d.LocalArrayGetOp, d.LocalArraySetOp, queue="S", cycles=scalar_cycles)
