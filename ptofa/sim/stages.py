"""FA stage labels of ops ("qk", "p", "pv", "gu", "other") for the trace's `stage` field.

A pipe gets its stage from the name of its slot view (`%qk_slot`, `%p_h`, `%pv_base`,
...), else from its id (0 qk, 1 p, 2 pv, the ptofa numbering). The producer side of a
pipe works in that pipe's stage; the consumer side works in the next stage (the vectors
pop QK to compute P, the cube pops P to compute PV, the vectors pop PV to update O).
A tile op on one of the ptofa builder's tiles takes that tile's stage
(`pipeline.tile_plan`, through treshape/subview aliases). Any other cube op takes the
stage of the next pipe-related op in textual order (its data is on the way to a pipe);
a vector op takes the stage of the previous one (its data came from a pipe).
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from ptofa.ir import dialect as d
from ptofa.pipeline import FAConfig, tile_plan

# Builder tile name -> stage; the exp_max ring tiles are numbered (exp_ring0, ...).
_TILE_STAGE = {spec.name.rstrip("0123456789"): spec.stage for spec in tile_plan(FAConfig(qk_preload=2))}

_BY_ID = {0: "qk", 1: "p", 2: "pv"}
_NEXT = {"qk": "p", "p": "pv", "pv": "gu"}


def _name_stage(value: SSAValue) -> str | None:
    seen = 0
    while value is not None and seen < 8:
        hint = (value.name_hint or "").lower()
        for prefix in ("qk", "pv", "p"):
            if hint.startswith(prefix):
                return prefix
        owner = value.owner
        if isinstance(owner, (d.MakeTensorViewOp, d.AddPtrOp)):
            value = owner.ptr
        else:
            return None
        seen += 1
    return None


def _tile_stage(op: Operation) -> str | None:
    """The stage of the builder tile an op writes (or, for a store, reads)."""
    if isinstance(op, d.TStoreOp):
        value = op.src
    elif isinstance(op, d._InsOutsOp):
        value = op.dst
    else:
        return None
    while isinstance(value.owner, (d.TReshapeOp, d.SubviewOp)):
        value = value.owner.src
    return _TILE_STAGE.get((value.name_hint or "").rstrip("0123456789"))


def _entry_pipe(value: SSAValue) -> d._PipeDataOp | None:
    """The talloc/tpop that produced an entry view (through partition_view)."""
    owner = value.owner
    if isinstance(owner, d.PartitionViewOp):
        owner = owner.source.owner
    if isinstance(owner, d.PIPE_DATA_OPS):
        return owner
    return None


def op_stages(func_op: func.FuncOp, kind: str | None) -> dict[Operation, str]:
    pipe_stage: dict[int, str] = {}
    ops = [op for op in func_op.walk() if op is not func_op]
    for op in ops:
        if isinstance(op, d.PIPE_INIT_OPS):
            pipe_stage[op.id_value] = (_name_stage(op.gm_slot_tensor) if op.gm_slot_tensor is not None else None) or _BY_ID.get(op.id_value, "other")

    def side_stage(pipe_op: d._PipeDataOp) -> str:
        base = pipe_stage.get(pipe_op.id_value, _BY_ID.get(pipe_op.id_value, "other"))
        consumer = pipe_op.ROLE in ("tpop", "tfree")
        return _NEXT.get(base, "other") if consumer else base

    anchors: dict[Operation, str] = {}
    for op in ops:
        if isinstance(op, d.PIPE_DATA_OPS):
            anchors[op] = side_stage(op)
        elif isinstance(op, (d.TLoadOp, d.TStoreOp)):
            view = op.src if isinstance(op, d.TLoadOp) else op.dst
            pipe_op = _entry_pipe(view)
            if pipe_op is not None:
                anchors[op] = side_stage(pipe_op)
    stages: dict[Operation, str] = {}
    order = ops if kind != "cube" else list(reversed(ops))
    current = "other"
    for op in order:
        current = anchors.get(op, current)
        stages[op] = _tile_stage(op) or current
    return stages
