"""Which ops of the dialect ptoas's default back end can lower for A2/A3.

ptoas 0.60 verifies more ops than its default back end (EmitC, the one `run_fa compile`
uses) lowers: `PTOToEmitC` marks the whole PTO dialect illegal and converts only the ops it
has a conversion pattern for, so any other op that reaches it fails with `failed to legalize
operation 'pto.X' that was explicitly marked illegal` (docs/sources.md §2.17). An op reaches it
unless a pass of the default pipeline has rewritten it before (pipe frontend lowering,
buffer resolution, memory planning, sync lowering). The facts below come from PTOAS's
sources (lib/PTO/Transforms/PTOToEmitC.cpp, populatePTOToEmitCPatterns, and the passes named);
`scripts/ptoas_lowering.py PTOAS_DIR` re-derives them from a PTOAS checkout and reports any
op of the dialect whose entry here disagrees.

The vpto back end (`ptoas --pto-backend=vpto`, or a module attribute `pto.backend = "vpto"`)
lowers a different set; ptofa checks the EmitC path only and leaves the rule out when a
program selects vpto.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation

BACKENDS = ("emitc", "vpto")

# Ops that a pass of the default A2/A3 pipeline rewrites before PTOToEmitC runs (every other
# op of the dialect that is not in NOT_LOWERED_BY_EMITC has a PTOToEmitC pattern).
LOWERED_BEFORE_EMITC: dict[str, str] = {
    **{name: "PTOLowerFrontendPipeOpsPass (to initialize_l2g2l_pipe / initialize_l2l_pipe and their data ops)" for name in (
        "pto.aic_initialize_pipe", "pto.aiv_initialize_pipe", "pto.talloc_to_aic", "pto.talloc_to_aiv", "pto.tpush_to_aic",
        "pto.tpush_to_aiv", "pto.tpop_from_aic", "pto.tpop_from_aiv", "pto.tfree_from_aic", "pto.tfree_from_aiv")},
    "pto.reserve_buffer": "PTOResolveReservedBuffersPass",
    "pto.import_reserved_buffer": "PTOResolveReservedBuffersPass",
    "pto.alloc_multi_tile": "PTOResolveBufferSelectPass (an addressed alloc_tile per slot)",
    "pto.multi_tile_get": "PTOResolveBufferSelectPass",
    "pto.subview": "PTOResolveBufferSelectPass (an addressed alloc_tile)",
    "pto.record_event": "LoweringSyncToPipePass (to set_flag / wait_flag)",
    "pto.wait_event": "LoweringSyncToPipePass (to set_flag / wait_flag)",
}

# Ops that ptoas parses and verifies for A2/A3 but whose default back end cannot lower.
NOT_LOWERED_BY_EMITC: dict[str, str] = {
    "pto.taddrelu": "only the vpto back end lowers it (LowerPTOToUBufOps, to pto.ub.vaddrelu)",
}


def module_backend(module: ModuleOp) -> str | None:
    """The back end a module selects with `pto.backend = "emitc"|"vpto"` (any case, as ptoas's
    driver reads it), "emitc" without the attribute (ptoas's default), None for another value."""
    attr = module.attributes.get("pto.backend")
    if attr is None:
        return "emitc"
    if isinstance(attr, StringAttr) and attr.data.lower() in BACKENDS:
        return attr.data.lower()
    return None


def lowering_errors(module: ModuleOp, backend: str | None = None) -> list[tuple[Operation | None, str]]:
    """The ops ptoas would fail to lower with `backend` (default: what the module selects, as
    ptoas does when no --pto-backend is given)."""
    if backend is None:
        backend = module_backend(module)
        if backend is None:
            return [(None, f"module: invalid pto.backend {module.attributes['pto.backend']}; expected \"emitc\" or \"vpto\"")]
    if backend != "emitc":
        return []
    errors: list[tuple[Operation | None, str]] = []
    for op in module.walk():
        why = NOT_LOWERED_BY_EMITC.get(op.name)
        if why is not None:
            errors.append((op, f"'{op.name}' lowering: ptoas parses and verifies it, but its default (EmitC) back end cannot "
                               f"lower it for A2/A3 ('failed to legalize operation '{op.name}' that was explicitly marked illegal'); "
                               f"{why}: compile with --pto-backend=vpto or write module attributes {{pto.backend = \"vpto\"}}"))
    return errors
