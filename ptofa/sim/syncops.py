"""Hand-written synchronization (`ptofa.ir.dialect.sync`) in the simulator.

A pipe flag (`set_flag` / `wait_flag`, the `_dyn` forms, `record_event` / `wait_event`) only
orders work between the pipes of one core; the simulator runs every op of a core in program
order, which already satisfies any such ordering, so the flags do nothing here. Intra-block
flags and `syncall` make one core wait for another: the simulator does not interleave cores
at those points, so it refuses them when it compiles the kernel. Event-id arrays are
simulated like local arrays: a read of an element no set wrote is a `SimError`.
"""

from __future__ import annotations

from ptofa.ir import dialect as d
from ptofa.ir.dialect import sync
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import scalar_cycles


@registry.semantics(*sync.FLAG_OPS)
def pipe_flag(op, slot: Slot) -> Fn:
    def fn(vals):
        return None

    return fn


@registry.semantics(*sync.INTRA_BLOCK_OPS, d.SyncAllOp)
def cross_core_wait(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: a wait for another core is not simulated (the simulator does not interleave cores at "
                   "hand-written flags)")


@registry.semantics(d.TSyncOp)
def tsync(op, slot: Slot) -> Fn:
    """Waits for earlier work on its operands: the simulator runs every op of a core in program
    order, so there is nothing left to wait for."""

    def fn(vals):
        return None

    return fn


@registry.semantics(d.DeclareEventIdArrayOp)
def declare_eventid_array(op, slot: Slot) -> Fn:
    res, size = slot(op.result), op.result.type.size.data

    def fn(vals):
        vals[res] = [None] * size

    return fn


def _where(name: str, size: int, index: int) -> int:
    if not 0 <= index < size:
        raise SimError(f"{name}: index {index} is outside the event-id array of {size}")
    return index


@registry.semantics(d.EventIdArrayGetOp)
def eventid_array_get(op, slot: Slot) -> Fn:
    arr, idx, res = slot(op.array), slot(op.index), slot(op.result)
    name, size = op.name, op.array.type.size.data

    def fn(vals):
        i = _where(name, size, vals[idx])
        value = vals[arr][i]
        if value is None:
            raise SimError(f"{name}: element {i} is read before any eventid_array_set wrote it")
        vals[res] = value

    return fn


@registry.semantics(d.EventIdArraySetOp)
def eventid_array_set(op, slot: Slot) -> Fn:
    arr, idx, val = slot(op.array), slot(op.index), slot(op.value)
    name, size = op.name, op.array.type.size.data

    def fn(vals):
        vals[arr][_where(name, size, vals[idx])] = vals[val]

    return fn


registry.cost(*sync.OPS, queue="S", cycles=scalar_cycles)
