"""Semantics of stack-local structs (`ptofa.ir.dialect.structs`): each execution of a declaration
makes fresh storage, a field keyed by its path; reading a field no set wrote (uninitialised
C++ storage) is a `SimError`."""

from __future__ import annotations

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import scalar_cycles


@registry.semantics(d.DeclareStructOp)
def declare_struct(op, slot: Slot) -> Fn:
    res = slot(op.s)

    def fn(vals):
        vals[res] = {}

    return fn


@registry.semantics(d.StructGetOp)
def struct_get(op, slot: Slot) -> Fn:
    s, res, path, name = slot(op.s), slot(op.value), op.indices, op.name

    def fn(vals):
        fields = vals[s]
        if path not in fields:
            raise SimError(f"{name}: field {list(path)} is read before any struct_set wrote it")
        vals[res] = fields[path]

    return fn


@registry.semantics(d.StructSetOp)
def struct_set(op, slot: Slot) -> Fn:
    s, val, path = slot(op.s), slot(op.value), op.indices

    def fn(vals):
        vals[s][path] = vals[val]

    return fn


registry.cost(d.DeclareStructOp, d.StructGetOp, d.StructSetOp, queue="S", cycles=scalar_cycles)
