"""Fault injection for simulator tests: break a parsed FlashAttention module before running it.

The builder always emits the real kernel; `RunOptions.fault` names a transformation
of the parsed module that the simulator applies before it compiles the module
(`ptofa.sim.simulate`). Each fault is one protocol mistake the simulator must report:

    drop_tfree     remove the vector side's `pto.tfree_from_aic` of the QK pipe (id 0,
                   compute_p): the next tpop of that pipe finds the entry still held
                   (`SimImbalance`: "second tpop before the tfree")
    extra_tpop     insert one more `pto.tpop_from_aic` of the PV pipe (id 2) before the
                   vector function's last `pto.trowexpanddiv` (after the epilogue loop of
                   the unit loop): nothing ever pushes it (`SimDeadlock`)
    swap_pipe_ids  swap pipe ids 0 and 2 on the vector side (inits and data ops): QK data
                   is read from the PV pipe and back (`SimDeadlock`, or the verifier's
                   "slot_size differs" when the two slots differ in shape)

`inject_fault` works on a copy, prints it and parses and verifies the text again, so
that reports name lines of the mutated text and the verifier rejects what it rejects
in a kernel written that way (`PtoCheckError`). `fault_text` is the mutated text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import PurePath

from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Operation

from ptofa.sim.errors import SimError
from ptofa.sim.options import FAULTS
from ptofa.ir.textio import ParsedModule, check_text, kernel_kind, print_pto

# Pipe ids of the FlashAttention kernel (`ptofa.pipeline.FAConfig.pipes`): QK and PV are
# cube -> vector pipes, P goes back to the cube.
QK_PIPE_ID = 0
PV_PIPE_ID = 2

# Pipe ops of a vector kernel function (their `id` property names the pipe).
_VECTOR_PIPE_OPS = frozenset(
    {"pto.aiv_initialize_pipe", "pto.talloc_to_aic", "pto.tpush_to_aic", "pto.tpop_from_aic", "pto.tfree_from_aic"}
)


def _vector_functions(module: builtin.ModuleOp) -> list[func.FuncOp]:
    return [op for op in module.walk() if isinstance(op, func.FuncOp) and kernel_kind(op) == "vector"]


def _ops(f: func.FuncOp, name: str, pipe_id: int | None = None) -> Iterator[Operation]:
    for op in f.walk():
        if op.name == name and (pipe_id is None or _pipe_id(op) == pipe_id):
            yield op


def _pipe_id(op: Operation) -> int | None:
    attr = op.properties.get("id")
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def _drop_tfree(module: builtin.ModuleOp) -> int:
    dropped = 0
    for f in _vector_functions(module):
        for op in list(_ops(f, "pto.tfree_from_aic", QK_PIPE_ID)):
            op.detach()
            op.erase()
            dropped += 1
    return dropped


def _extra_tpop(module: builtin.ModuleOp) -> int:
    inserted = 0
    for f in _vector_functions(module):
        divs = list(_ops(f, "pto.trowexpanddiv"))
        pv_pop = next(_ops(f, "pto.tpop_from_aic", PV_PIPE_ID), None)
        if not divs or pv_pop is None:
            continue
        extra = pv_pop.clone()  # same pipe, split and entry type
        extra.results[0].name_hint = "extra_entry"
        anchor = divs[-1]
        block = anchor.parent_block()
        assert block is not None
        block.insert_op_before(extra, anchor)
        inserted += 1
    return inserted


def _swap_pipe_ids(module: builtin.ModuleOp) -> int:
    swapped = 0
    swap = {QK_PIPE_ID: PV_PIPE_ID, PV_PIPE_ID: QK_PIPE_ID}
    for f in _vector_functions(module):
        for op in f.walk():
            pid = _pipe_id(op)
            if op.name in _VECTOR_PIPE_OPS and pid in swap:
                old = op.properties["id"]
                assert isinstance(old, IntegerAttr)
                op.properties["id"] = IntegerAttr(swap[pid], old.type)
                swapped += 1
    return swapped


_PASSES: dict[str, tuple[Callable[[builtin.ModuleOp], int], str]] = {
    "drop_tfree": (_drop_tfree, f"vector-side pto.tfree_from_aic of pipe {QK_PIPE_ID}"),
    "extra_tpop": (_extra_tpop, f"vector function with a pto.tpop_from_aic of pipe {PV_PIPE_ID} and a pto.trowexpanddiv"),
    "swap_pipe_ids": (_swap_pipe_ids, f"vector-side pipe op of pipe {QK_PIPE_ID} or {PV_PIPE_ID}"),
}
assert set(_PASSES) == set(FAULTS)


def apply_fault(module: builtin.ModuleOp, fault: str) -> None:
    """Mutate `module` in place; `SimError` when it has nothing the fault applies to."""
    if fault not in _PASSES:
        raise SimError(f"fault={fault!r} is not one of {', '.join(FAULTS)}")
    apply, needs = _PASSES[fault]
    if apply(module) == 0:
        raise SimError(f"fault {fault}: nothing to break, the module has no {needs}")


def fault_text(parsed: ParsedModule, fault: str) -> str:
    """The `.pto` text of a copy of `parsed` with `fault` applied (`parsed` is left unchanged)."""
    module = parsed.module.clone()
    apply_fault(module, fault)
    return print_pto(module)


def fault_path(path: str, fault: str) -> str:
    """Where the mutated text is reported: `fa.pto` -> `fa.<fault>.pto`."""
    p = PurePath(path)
    if p.suffix == ".pto":
        return str(p.with_name(f"{p.stem}.{fault}.pto"))
    return f"{path}.{fault}"


def inject_fault(parsed: ParsedModule, fault: str, path: str | None = None) -> ParsedModule:
    """`parsed` with `fault` applied, printed, parsed and verified again (`PtoCheckError`).

    Lines of the result (and of every report about it) are lines of `fault_text`,
    named `path` (default `fault_path(parsed.path, fault)`).
    """
    return check_text(fault_text(parsed, fault), path or fault_path(parsed.path, fault))
