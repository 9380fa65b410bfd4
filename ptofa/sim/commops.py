"""`pto.comm.*`, `pto.cmo.cacheinvalid` and `pto.fence.barrier_all` in the simulator: it runs
one device, so communication is refused when a kernel using it is compiled; the single
device's cache invalidation and fence have nothing to order (every op runs in program
order on coherent memory)."""

from __future__ import annotations

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import TimingError, scalar_cycles


@registry.semantics(*d.COMM_OPS)
def comm(op, slot: Slot) -> Fn:
    if isinstance(op, (d.comm.CommWaitAsyncEventOp, d.comm.CommTestAsyncEventOp)) and isinstance(op.event[0].owner, d.TPrefetchAsyncOp):
        res = slot(op.result)

        def done(vals):  # an L2 prefetch has no visible result to wait for
            vals[res] = 1

        return done
    raise SimError(f"{op.name}: inter-device communication is not simulated (the simulator runs one device)")


@registry.semantics(d.CmoCacheInvalidOp, d.FenceBarrierAllOp)
def ordering(op, slot: Slot) -> Fn:
    def fn(vals):
        return None

    return fn


def _unmodelled(op, queue: str, soc) -> float:
    raise TimingError(f"line {op.line}: {op.op} has no timing model (communication is not simulated)")


registry.cost(*d.COMM_OPS, queue="S", cycles=_unmodelled)
registry.cost(d.CmoCacheInvalidOp, d.FenceBarrierAllOp, queue="S", cycles=scalar_cycles)
