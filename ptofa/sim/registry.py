"""One table from each PTO op class to its simulator semantics and its timing cost.

Registrations sit next to the code they name:

* `@semantics(*ops)` on a factory `build(op, slot) -> fn(vals)` (`ptofa.sim.tileops`;
  set_ffts, addptr and the runtime ids in `ptofa.sim.compiler`);
* `@compiled_by(*ops)` on a `_FunctionCompiler` method `(self, op) -> (fn, may_block)`
  for ops that need the compiler's state (tile allocation counters, pipe slots);
* `cost(*ops, queue=..., cycles=...)` in `ptofa.sim.timing`.

The compiler looks an op up once, when it compiles it to a closure; the timing model
looks a trace record up by op name. `tests/test_op_registry.py` checks that every op of
the `PTO` dialect has exactly one of each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ptofa.sim.socspec import SocSpec
    from ptofa.sim.trace import TraceOp


@dataclass(frozen=True)
class Semantics:
    """How the simulator runs an op: `build(op, slot)`, or `build(compiler, op)` when `by_compiler`."""

    build: Callable
    by_compiler: bool

    @property
    def where(self) -> str:
        return f"{self.build.__module__}.{self.build.__qualname__}"


@dataclass(frozen=True)
class Cost:
    """Timing-model cost of an op: the hardware queue it occupies and its cycles there."""

    queue: Callable[[TraceOp], str]
    cycles: Callable[[TraceOp, str, SocSpec], float]


SEMANTICS: dict[type, Semantics] = {}
COSTS: dict[type, Cost] = {}
COST_BY_NAME: dict[str, Cost] = {}  # op name -> cost, for trace records


def _add(table: dict, op_classes: tuple[type, ...], entry: object, what: str) -> None:
    for cls in op_classes:
        if cls in table:
            raise ValueError(f"{cls.name} already has {what}: {table[cls]}")
        table[cls] = entry


def semantics(*op_classes: type) -> Callable:
    """Decorator: `build(op, slot) -> fn(vals)` runs the ops of these classes."""

    def register(build: Callable) -> Callable:
        _add(SEMANTICS, op_classes, Semantics(build, by_compiler=False), "simulator semantics")
        return build

    return register


def compiled_by(*op_classes: type) -> Callable:
    """Decorator of a compiler method `(self, op) -> (fn, may_block)` that runs these ops."""

    def register(method: Callable) -> Callable:
        _add(SEMANTICS, op_classes, Semantics(method, by_compiler=True), "simulator semantics")
        return method

    return register


def cost(
    *op_classes: type, queue: str | Callable[[TraceOp], str], cycles: Callable[[TraceOp, str, SocSpec], float]
) -> Cost:
    """Register the timing cost of these ops: `queue` (a queue name, or `queue(trace_op)`)
    and `cycles(trace_op, queue, soc)`. Returns the shared `Cost`."""
    rule = Cost(queue if callable(queue) else (lambda op, q=queue: q), cycles)
    _add(COSTS, op_classes, rule, "a timing cost")
    COST_BY_NAME.update((cls.name, rule) for cls in op_classes)
    return rule
