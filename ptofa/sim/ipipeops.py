"""ptoas's internal `!pto.pipe` handle form (`ptofa.ir.dialect.ipipes`) in the simulator: refused
when the kernel is compiled. Its slot protocol, flag ids and the addresses that tpop / talloc
bind to declared entries are ptoas's lowering, which the simulator does not reproduce; the
frontend pipes (`pto.aic_initialize_pipe` ...) are what it runs."""

from __future__ import annotations

from ptofa.ir.dialect import ipipes
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import pipe_cycles


@registry.semantics(*ipipes.OPS)
def internal_pipe(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: ptoas's internal pipe-handle form is not simulated (write the frontend "
                   "pto.aic_initialize_pipe / pto.aiv_initialize_pipe pipes)")


registry.cost(*ipipes.OPS, queue="S", cycles=pipe_cycles)
