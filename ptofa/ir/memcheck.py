"""Static local-memory check of one kernel function, the way ptoas's PlanMemory fails.

ptoas plans every `pto.alloc_tile` (and the hidden scratch of ops written without a
tmp operand) into its on-chip space and may overlap buffers whose live ranges do not
intersect; when the live bytes of a space exceed its capacity it stops with
`vec overflow, requires N bits while M bits avaliable!` (pto-ir.md 0.11).

`peak_usage` computes live ranges over the function's ops in program order: a tile
lives from its alloc to its last use (uses through `treshape`/`subview` views and the
slots of a multi-buffer tile count; a multi-buffer tile needs all its slots),
and a use inside a loop that the alloc is outside of keeps the tile live to the end
of that loop. Hidden scratch lives only at its op. The peak is therefore a lower
bound of what any planner needs: exceeding a capacity is a certain failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import func, scf
from xdsl.ir import Operation, SSAValue

from ptofa.ir import dialect as d
from ptofa.ir.target import ALIGNMENT, CAPACITY, align

_LOOPS = (scf.ForOp, scf.WhileOp)


@dataclass(frozen=True)
class Peak:
    space: str
    nbytes: int
    at: Operation  # the op at which the peak is reached
    live: tuple[tuple[str, int], ...]  # (tile name, aligned bytes) live there


def peak_usage(func_op: func.FuncOp) -> dict[str, Peak]:
    """Peak live bytes per local space of `func_op` (only spaces that are used)."""
    order: dict[Operation, int] = {}
    end: dict[Operation, int] = {}
    ops = list(func_op.walk())
    for i, op in enumerate(ops):
        order[op] = i
    for op in reversed(ops):  # a region op ends where its last nested op is
        last = order[op]
        for region in op.regions:
            for block in region.blocks:
                for inner in block.ops:
                    last = max(last, end[inner])
        end[op] = last

    intervals: list[tuple[int, int, str, str, int]] = []  # start, stop, space, name, bytes
    for op in ops:
        if isinstance(op, (d.AllocTileOp, d.AllocMultiTileOp)):
            t = op.result.type if isinstance(op, d.AllocTileOp) else op.slot_type
            nbytes = t.nbytes if isinstance(op, d.AllocTileOp) else op.result.type.nbytes
            if t.space not in CAPACITY:
                continue
            defining_loops = _enclosing_loops(op)
            uses = [u for u in _uses(op.result) if u in order]
            # ptoas's PlanMemory starts a buffer's life at its first writer, not at its
            # alloc (PTOAS test/lit/pto/plan_memory_modern_first_writer_reuse.pto).
            start = stop = order[op]
            if uses:
                start = stop = min(order[u] for u in uses)
            for use_op in uses:
                stop = max(stop, order[use_op])
                for loop in _enclosing_loops(use_op):
                    if loop not in defining_loops:
                        start = min(start, order[loop])
                        stop = max(stop, end[loop])
            name = op.result.name_hint or f"tile@{order[op]}"
            intervals.append((start, stop, t.space, name, align(nbytes, ALIGNMENT[t.space])))
        hidden = d.hidden_scratch(op)
        if hidden is not None:
            space, shape, nbytes = hidden
            intervals.append((order[op], order[op], space, f"<hidden {shape} of {op.name}>", align(nbytes, ALIGNMENT[space])))

    peaks: dict[str, Peak] = {}
    for space in {iv[2] for iv in intervals}:
        mine = [iv for iv in intervals if iv[2] == space]
        for point in sorted({iv[0] for iv in mine}):
            live = [(name, nbytes) for start, stop, _, name, nbytes in mine if start <= point <= stop]
            total = sum(b for _, b in live)
            if space not in peaks or total > peaks[space].nbytes:
                peaks[space] = Peak(space, total, ops[point], tuple(live))
    return peaks


def _uses(value: SSAValue) -> list[Operation]:
    """Ops using `value` or any view of it."""
    out: list[Operation] = []
    for use in list(value.uses):
        out.append(use.operation)
        if isinstance(use.operation, (d.TReshapeOp, d.SubviewOp, d.MultiTileGetOp)):
            out += _uses(use.operation.result)
    return out


def _enclosing_loops(op: Operation) -> list[Operation]:
    loops = []
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, _LOOPS):
            loops.append(parent)
        parent = parent.parent_op()
    return loops


def memory_errors(func_op: func.FuncOp) -> list[tuple[Operation | None, str]]:
    """ptoas's PlanMemory overflow, with the tiles live at the peak. A level3 program (its
    allocations carry explicit `addr`s) places its tiles itself: ptoas runs no PlanMemory there
    (PTOAS tools/ptoas/ptoas.cpp), so there is no overflow to report."""
    if any(isinstance(op, d.ALLOC_OPS) and op.addr is not None for op in func_op.walk()):
        return []
    errors: list[tuple[Operation | None, str]] = []
    for space, peak in sorted(peak_usage(func_op).items()):
        cap = CAPACITY[space]
        if peak.nbytes > cap:
            tiles = ", ".join(f"{n} {b}B" for n, b in sorted(peak.live, key=lambda x: -x[1]))
            errors.append((peak.at, f"memory capacity: {space} overflow, requires {peak.nbytes * 8} bits while {cap * 8} "
                                    f"bits avaliable (ptoas's words; {peak.nbytes} > {cap} bytes live in "
                                    f"@{func_op.sym_name.data}: {tiles})"))
    return errors
