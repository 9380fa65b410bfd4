"""CPU simulator of a parsed `.pto` module (see `executor`).

    from ptofa.sim import GmPointer, simulate
    result = simulate(parse_pto(text, path), {"q": GmPointer.of(q), ..., "s0": 1024}, block_dim=8)
"""

from ptofa.sim.errors import SimDeadlock, SimError, SimImbalance, SimMemoryOverflow, SimSlotHazard, SimStepLimit
from ptofa.sim.executor import SimResult, simulate
from ptofa.sim.memory import GmPointer

__all__ = [
    "GmPointer",
    "SimDeadlock",
    "SimError",
    "SimImbalance",
    "SimMemoryOverflow",
    "SimResult",
    "SimSlotHazard",
    "SimStepLimit",
    "simulate",
]
