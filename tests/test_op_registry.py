"""Every op of the PTO dialect has one simulator semantics and one timing cost
(`ptofa.sim.registry`), and the registry names no op outside the dialect."""

from __future__ import annotations

import pytest

import ptofa.sim.executor  # noqa: F401  (registers the simulator semantics)
import ptofa.sim.timing  # noqa: F401  (registers the timing costs)
from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.trace import TraceOp

OPS = list(d.PTO.operations)


@pytest.mark.parametrize("op_class", OPS, ids=[op.name for op in OPS])
def test_op_has_semantics_and_cost(op_class: type) -> None:
    family = op_class.__module__.replace(".", "/") + ".py"
    if op_class not in registry.SEMANTICS:
        home = registry.family_home(op_class, "semantics") or "ptofa/sim/compiler.py (a @registry.compiled_by method)"
        pytest.fail(
            f"{op_class.name} has no simulator semantics: add @registry.semantics({op_class.__name__}) to its "
            f"factory in {home}, where the ops of {family} have theirs (docs/adding-an-op.md)"
        )
    if op_class not in registry.COSTS:
        home = registry.family_home(op_class, "cost") or "ptofa/sim/timing.py"
        pytest.fail(
            f"{op_class.name} has no timing cost: add registry.cost({op_class.__name__}, queue=..., cycles=...) "
            f"in {home}, where the ops of {family} have theirs (docs/adding-an-op.md)"
        )
    assert registry.COST_BY_NAME[op_class.name] is registry.COSTS[op_class]


def test_registry_names_only_dialect_ops() -> None:
    for table in (registry.SEMANTICS, registry.COSTS):
        strays = sorted(getattr(cls, "name", cls.__name__) for cls in set(table) - set(OPS))
        assert strays == [], f"registered but not in the PTO dialect: {strays}"
    assert set(registry.COST_BY_NAME) <= {op.name for op in OPS}


def test_a_second_registration_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    for table in ("SEMANTICS", "COSTS", "COST_BY_NAME"):  # a failing case must not register
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    with pytest.raises(ValueError, match="pto.tmax already has simulator semantics"):
        registry.semantics(d.TMaxOp)(lambda op, slot: None)
    with pytest.raises(ValueError, match="pto.tmax already has a timing cost"):
        registry.cost(d.TMaxOp, queue="V", cycles=lambda op, queue, soc: 0.0)


def test_compiler_handlers_are_compiler_methods() -> None:
    for cls in (d.AllocTileOp, *d.PIPE_INIT_OPS, *d.PIPE_DATA_OPS):
        assert registry.SEMANTICS[cls].by_compiler
        assert registry.SEMANTICS[cls].where.startswith("ptofa.sim.compiler._FunctionCompiler.")
    assert registry.SEMANTICS[d.TMaxOp].where == "ptofa.sim.tileops.binary"


def test_cost_rules_by_op_class() -> None:
    def queue(cls: type, core: str = "vec0", **kw) -> str:
        return registry.COSTS[cls].queue(TraceOp(core, 0, cls.name, 0, "other", **kw))

    assert queue(d.TMaxOp) == queue(d.TExpOp) == queue(d.TRowSumOp) == "V"
    assert queue(d.TMatmulAccOp, "cube") == "M"
    assert queue(d.TStoreOp, "cube", src_loc="acc") == "FIX"
    assert queue(d.TpushToAivOp, "cube") == "FIX"
    assert queue(d.TpushToAicOp) == "MTE3"
    assert queue(d.SubviewOp) == queue(d.TallocToAicOp) == "S"


def test_adding_an_op_family_table_is_the_registry() -> None:
    """docs/adding-an-op.md's table of where each dialect family registers is what the registry says."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "adding-an-op.md").read_text()
    rows = dict((m[0], (m[1], m[2])) for m in re.findall(r"^\| `(\w+)\.py` \| (sim/\w+\.py)[^|]* \| (sim/\w+\.py) \|$", doc, re.M))
    families = {}
    for op in OPS:
        families.setdefault(op.__module__.rsplit(".", 1)[-1], op)
    assert set(rows) == set(families)
    for family, op in families.items():
        semantics = registry.family_home(op, "semantics") or "ptofa/sim/compiler.py"
        assert ("ptofa/" + rows[family][0], "ptofa/" + rows[family][1]) == (semantics, registry.family_home(op, "cost")), family
