"""Run options of one simulated launch: what changes how a kernel is run, not the kernel.

`FAConfig` holds only what changes the emitted `.pto`; everything here is applied by
the simulator to the parsed module it is given (`ptofa.sim.simulate(..., options)`):

    fault        test only: break the parsed module before running it
                 (`ptofa.sim.faults`): "drop_tfree", "extra_tpop" or "swap_pipe_ids"
    trace        record an execution trace (`SimResult.trace`, input of the timing model)
    trace_blocks blocks to record (default: every executed block)
    blocks       blocks to execute (default: all of `block_dim`; the others' outputs stay unwritten)
    max_steps    stop with `SimStepLimit` after this many op executions
    gm_guard     bounds-check every GM tensor access (`SimError: GM access out of range`);
                 the simulator always does, so only the default True is accepted
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ptofa.pipeline import ConfigError

FAULTS = ("drop_tfree", "extra_tpop", "swap_pipe_ids")


def _block_tuple(blocks: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if blocks is None else tuple(sorted({int(b) for b in blocks}))


@dataclass(frozen=True)
class RunOptions:
    """Simulator run options (see the module docstring); validated on creation (`ConfigError`)."""

    fault: str | None = None
    trace: bool = False
    trace_blocks: tuple[int, ...] | None = None
    blocks: tuple[int, ...] | None = None
    max_steps: int | None = None
    gm_guard: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "trace_blocks", _block_tuple(self.trace_blocks))
        object.__setattr__(self, "blocks", _block_tuple(self.blocks))
        if self.fault not in (None, *FAULTS):
            raise ConfigError(f"fault injection: fault={self.fault!r} is not one of {', '.join(FAULTS)}")
        if not self.gm_guard:
            raise ConfigError(
                "gm_guard: gm_guard=False is not available; the simulator bounds-checks every GM access "
                "(ptofa.sim.memory.GmView.array)"
            )
