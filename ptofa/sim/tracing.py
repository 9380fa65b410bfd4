"""Trace recording wrappers (only compiled in when `simulate(..., trace=True)`).

Tile ops append one `TraceOp` each, with buffer ids of the tiles and GM slots they
read and write; scalar ops (arith, pointer and view arithmetic, treshape, subview,
pipe init) are counted and flushed as one `scalar` record before the next traced op.
Pipe ops record themselves (`pipeops`).
"""

from __future__ import annotations

from ptofa.ir import dialect as d
from ptofa.sim.memory import NP_DTYPES, GmView, Tile
from ptofa.sim.trace import TraceOp

_REDUCTIONS = (d.TRowMaxOp, d.TRowSumOp, d.TRowMinOp)


def wrap_scalar(fn, line: int):
    def traced_scalar(vals):
        fn(vals)
        core = vals[0]
        if core.trace_ops is None:
            return
        if core.pending_scalar == 0:
            core.pending_line = line
        core.pending_scalar += 1

    return traced_scalar


def _widest_tile_element(op) -> int:
    """Bytes of the widest element among an op's tile operands (static: the tile_buf types)."""
    widths = [NP_DTYPES[d.elem_name(v.type.dtype)].itemsize for v in op.operands
              if isinstance(v.type, d.TileBufType) and d.elem_name(v.type.dtype) in NP_DTYPES]
    return max(widths, default=4)


def _buffer_id(value) -> int | None:
    if isinstance(value, Tile):
        return value.root
    if isinstance(value, GmView) and value.slot >= 0:
        return value.slot
    return None


def _loc(value) -> str:
    return value.space if isinstance(value, Tile) else "gm"


def wrap_tile_op(op, fn, opid: int, slot, infos):
    ins = [slot(v) for v in op.ins_values()] if hasattr(op, "ins_values") else [slot(v) for v in op.operands]
    dst = slot(op.dst) if hasattr(op, "dst") else ins[-1]
    is_matmul = isinstance(op, (d.TMatmulOp, d.TMatmulAccOp, d.TMatmulBiasOp))
    is_move = isinstance(op, (d.TLoadOp, d.TStoreOp, d.TMovOp))
    is_reduce = isinstance(op, _REDUCTIONS)
    lhs = slot(op.lhs) if is_matmul else 0
    rhs = slot(op.rhs) if is_matmul else 0
    elem_bytes = _widest_tile_element(op)

    def traced(vals):
        fn(vals)
        core = vals[0]
        if core.trace_ops is None:
            return
        info = infos[opid]
        reads = tuple(b for b in (_buffer_id(vals[s]) for s in ins) if b is not None)
        out = vals[dst]
        wb = _buffer_id(out)
        rec = TraceOp(core.name, core.block, info.name, info.line, info.stage, reads, (wb,) if wb is not None else ())
        first = vals[ins[0]] if ins else None
        rec.src_loc = _loc(first) if first is not None and not isinstance(first, (int, float)) else ""
        rec.dst_loc = _loc(out)
        if is_matmul:
            a, b = vals[lhs], vals[rhs]
            rec.macs = a.vr * a.vc * b.vc
            rec.src_loc = "left"
        elif is_move:
            if isinstance(out, Tile):
                rec.nbytes = out.v.size * out.data.dtype.itemsize
            else:
                rec.nbytes = first.v.size * out.dtype.itemsize
            gm = out if isinstance(out, GmView) else first if isinstance(first, GmView) else None
            if gm is not None:
                rec.gm_view = (id(gm.buf), gm.offset, gm.shape, gm.strides, gm.dtype.itemsize)
        elif isinstance(out, Tile):
            rec.elems = out.v.size
            rec.rows = out.vr
            rec.elem_bytes = elem_bytes
            if is_reduce:
                rec.src_elems = first.v.size
        elif isinstance(first, Tile):  # a tile written to GM by index (mscatter)
            rec.elems = first.v.size
        core.flush_scalar()
        core.trace_ops.append(rec)

    return traced
