"""CPU simulator of a parsed `.pto` module (see `executor`).

    from ptofa.sim import GmPointer, simulate
    result = simulate(parse_pto(text, path), {"q": GmPointer.of(q), ..., "s0": 1024}, block_dim=8)
    result = simulate(parsed, args, 8, RunOptions(trace=True, fault="extra_tpop"))

`RunOptions` (`options`) says how to run a module, `faults` how a fault breaks it.
The op families' modules (`tileops`, `maskops`, `fusedops`, ...) register each op's semantics
in `registry`; this package imports them all, and the compiler takes every op's semantics
from the registry (it imports no family but `tileops` and `pipeops`, whose helpers it calls).
The timing model (`timing`, `bwd_timing`, constants in `socspec`) replays a run's trace.

May import: `ptofa.ir`, `ptofa.pipeline`, `ptofa.kernels` (configs); never the launch
layer, the torch-facing calls or the command line.
"""

from ptofa.sim import (  # noqa: F401 (each family registers its ops' semantics in `registry`)
    accessops, commops, extraops, fusedops, gatherops, gmqueryops, ipipeops, localarrayops, maskops, multitile, partialops,
    scatterops, structops, syncops,
)
from ptofa.sim.errors import SimDeadlock, SimError, SimImbalance, SimMemoryOverflow, SimSlotHazard, SimStepLimit
from ptofa.sim.executor import SimResult, simulate
from ptofa.sim.memory import GmPointer
from ptofa.sim.options import FAULTS, RunOptions

__all__ = [
    "FAULTS",
    "GmPointer",
    "RunOptions",
    "SimDeadlock",
    "SimError",
    "SimImbalance",
    "SimMemoryOverflow",
    "SimResult",
    "SimSlotHazard",
    "SimStepLimit",
    "simulate",
]
