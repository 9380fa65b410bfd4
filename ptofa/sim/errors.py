"""Exceptions of the CPU simulator: each message is a report a kernel developer can act on."""

from __future__ import annotations


class SimError(RuntimeError):
    """The simulated kernel did something illegal (out-of-range GM access, bad shapes, ...)."""


class SimDeadlock(SimError):
    """Every live core of a block is blocked in a pipe op (or in a pipe destructor drain)."""


class SimImbalance(SimError):
    """Pipe discipline broken: pushes/pops/frees do not balance at exit, or pop/free do not alternate."""


class SimSlotHazard(SimError):
    """A producer re-allocated a ring slot whose previous entry a consumer has not freed yet.

    pto-isa's TALLOC waits for a free credit only when `t >= SlotNum and t % SyncPeriod == 0`;
    when SlotNum is not a multiple of SyncPeriod (odd SlotNum >= 5) slot `t % SlotNum` can
    be handed out again with no wait, and the producer's store races the consumer's load.
    """


class SimMemoryOverflow(SimError):
    """The live tiles of one on-chip space of one core exceed its capacity."""


class SimStepLimit(SimError):
    """The launch executed more ops than `max_steps`."""
