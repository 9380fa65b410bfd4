"""CPU simulator of a parsed `.pto` module (see `executor`).

    from ptofa.sim import GmPointer, simulate
    result = simulate(parse_pto(text, path), {"q": GmPointer.of(q), ..., "s0": 1024}, block_dim=8)
    result = simulate(parsed, args, 8, RunOptions(trace=True, fault="extra_tpop"))

`RunOptions` (`options`) says how to run a module, `faults` how a fault breaks it.
The op families' modules (`tileops`, `maskops`, `fusedops`, ...) register each op's semantics
in `registry`; the executor imports them all (so they are registered before it compiles a
module), and the compiler takes every op's semantics from the registry (it imports no family
but `tileops` and `pipeops`, whose helpers it calls).
This package's `__init__` imports nothing: its public names (`simulate`, `GmPointer`, the errors,
`RunOptions`) load their module on first use, so a module that needs only the chip
(`socspec`) or the run options does not load the simulator. Inside ptofa, import a name from
the module that defines it.
The timing model (`timing`, `bwd_timing`, constants in `socspec`) replays a run's trace.

May import: `ptofa.ir`, `ptofa.pipeline`, `ptofa.kernels` (configs); never the launch
layer, the torch-facing calls or the command line.
"""

import importlib

# Public name -> the module that defines it (imported when the name is first used).
_LAZY = {
    "FAULTS": "ptofa.sim.options",
    "GmPointer": "ptofa.sim.memory",
    "RunOptions": "ptofa.sim.options",
    "SimDeadlock": "ptofa.sim.errors",
    "SimError": "ptofa.sim.errors",
    "SimImbalance": "ptofa.sim.errors",
    "SimMemoryOverflow": "ptofa.sim.errors",
    "SimResult": "ptofa.sim.executor",
    "SimSlotHazard": "ptofa.sim.errors",
    "SimStepLimit": "ptofa.sim.errors",
    "simulate": "ptofa.sim.executor",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'ptofa.sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
