"""One table from each PTO op class to its simulator semantics and its timing cost.

Registrations sit next to the code they name, one sim module per dialect family
(`family_home` says which: e.g. `ir/dialect/vector.py` -> `sim/tileops.py` and
`sim/timing.py`, `fused.py` -> `sim/fusedops.py` for both, `intops.py` ->
`sim/accessops.py` and `sim/timing.py`):

* `@semantics(*ops)` on a factory `build(op, slot) -> fn(vals)`;
* `@compiled_by(*ops)` on a `_FunctionCompiler` method `(self, op) -> (fn, may_block)`
  for ops that need the compiler's state (tile allocation counters, pipe slots);
* `cost(*ops, queue=..., cycles=...)`.

The compiler looks an op up once, when it compiles it to a closure; the timing model
looks a trace record up by op name. `tests/test_op_registry.py` checks that every op of
the `PTO` dialect has exactly one of each; `tests/test_op_semantics.py` that every
simulated op has a test against numpy.
"""

from __future__ import annotations

import sys
from collections import Counter
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
    where: str = ""  # the module that registered it


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
    caller = sys._getframe(1).f_globals.get("__name__", "")  # where the family's costs live (`family_home`)
    rule = Cost(queue if callable(queue) else (lambda op, q=queue: q), cycles, caller)
    _add(COSTS, op_classes, rule, "a timing cost")
    COST_BY_NAME.update((cls.name, rule) for cls in op_classes)
    return rule


def family_home(op_class: type, table: str) -> str | None:
    """The module where the ops of `op_class`'s dialect family (its `ptofa.ir.dialect` module)
    register their `"semantics"` or `"cost"`, as a path (`ptofa/sim/fusedops.py`); the most common
    one among the family's registered ops (ignoring compiler methods), None for a family with none."""
    family = op_class.__module__
    if table == "semantics":
        homes = [s.build.__module__ for cls, s in SEMANTICS.items() if cls.__module__ == family and not s.by_compiler]
    else:
        homes = [c.where for cls, c in COSTS.items() if cls.__module__ == family and c.where]
    if not homes:
        return None
    return Counter(homes).most_common(1)[0][0].replace(".", "/") + ".py"
