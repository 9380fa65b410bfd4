"""Closures of the pipe ops: init (construct a TPipe end), talloc / tpush / tpop / tfree
on global entries, and the producer-side destructor drain at function exit.

A closure returns None when it completed, or a generator when it must wait for a
flag: the core's runner then `yield from`s it, which hands control back to the
scheduler until the flag arrives (docs/sources.md §3.5). Entry views really point at the
slot memory: `base + (index % S) * slot_size`, plus the sub-block offset on the
vector side of a split pipe.
"""

from __future__ import annotations

from ptofa.ir import dialect as d
from ptofa.sim.errors import SimError
from ptofa.sim.memory import GmView, elem_np_dtype
from ptofa.sim.pipes import PipeProtocol
from ptofa.sim.trace import TraceOp


class PipeEnd:
    """One core's end of a pipe: the shared protocol plus this side's GM slot base."""

    __slots__ = ("proto", "core", "buf", "base", "is_producer", "init_opid")

    def __init__(self, proto: PipeProtocol, core: str, buf, base: int, is_producer: bool, init_opid: int):
        self.proto = proto
        self.core = core
        self.buf = buf
        self.base = base
        self.is_producer = is_producer
        self.init_opid = init_opid


def init_pipe(op: d._InitPipeOp, slot, pipe_slot: int, opid: int):
    tv_s = slot(op.gm_slot_tensor)
    pid, dir_mask, slot_num, slot_size = op.id_value, op.dir_value, op.slot_num_value, op.slot_size.value.data
    cube_side = op.CORE == "cube"

    def fn(vals):
        core = vals[0]
        if (core.kind == "cube") != cube_side:
            raise SimError(f"{op.name} runs on {core.name}; it belongs in {op.CORE} code")
        pipes = core.block_state.pipes
        proto = pipes.get(pid)
        if proto is None:
            proto = pipes[pid] = PipeProtocol(pid, dir_mask, slot_num, slot_size)
        elif (proto.dir_mask, proto.slot_num, proto.slot_size) != (dir_mask, slot_num, slot_size):
            raise SimError(
                f"pipe id {pid}: this side declares dir_mask={dir_mask}, slot_num={slot_num}, slot_size={slot_size}; "
                f"the peer declared dir_mask={proto.dir_mask}, slot_num={proto.slot_num}, slot_size={proto.slot_size}"
            )
        if vals[pipe_slot] is not None:
            raise SimError(f"pipe id {pid} is initialised twice on {core.name}")
        tv = vals[tv_s]
        is_producer = core.name in proto.producers
        vals[pipe_slot] = PipeEnd(proto, core.name, tv.buf, tv.offset, is_producer, opid)
        core.launch.rings.append((core.block, pid, core.name, tv.buf, tv.offset, tv.offset + slot_num * slot_size))
        core.ends.append(vals[pipe_slot])

    return fn


def _entry_geometry(op: d._PipeDataOp, vector_side_offset: bool):
    """(dtype, shape, strides, per-sub-block byte offset) of the entry view of a data op."""
    t = op.entry_type
    dtype = elem_np_dtype(d.elem_name(t.elem))
    shape = t.dims
    if d.DYN in shape:
        raise SimError(f"{op.name}: the entry type {t} needs a static shape")
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1])
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    strides = list(reversed(strides))
    split = op.split_value
    sub_off = 0
    if vector_side_offset and split == 1:
        sub_off = rows * cols * dtype.itemsize
    elif vector_side_offset and split == 2:
        sub_off = cols * dtype.itemsize
        if len(strides) >= 2:
            strides[-2] = 2 * cols  # the left/right half keeps the full slot's row pitch
    return dtype, tuple(shape), tuple(strides), sub_off


def _entry_view(core, end: PipeEnd, index: int, dtype, shape, strides, sub_off) -> GmView:
    proto = end.proto
    s = index % proto.slot_num
    offset = end.base + s * proto.slot_size + core.sb * sub_off
    key = (core.block, proto.pipe_id, s)
    ids = core.launch.slot_ids
    slot_id = ids.get(key)
    if slot_id is None:
        slot_id = ids[key] = core.launch.new_buffer_id()
    return GmView(end.buf, offset, dtype, shape, strides, slot_id)


def _end(vals, pipe_slot: int, op) -> PipeEnd:
    end = vals[pipe_slot]
    if end is None:
        raise SimError(f"{op.name}: pipe id {op.id_value} is used before its initialize_pipe ran")
    return end


def _trace(core, opid: int, kind: str, pipe_id: int, index: int, reads=(), writes=()) -> None:
    info = core.program.ops[opid]
    core.flush_scalar()
    core.trace_ops.append(
        TraceOp(core.name, core.block, info.name, info.line, info.stage, tuple(reads), tuple(writes), pipe_id=pipe_id, pipe_kind=kind, pipe_index=index)
    )


def talloc(op: d._PipeDataOp, slot, pipe_slot: int, opid: int):
    res = slot(op.entry)
    geo = _entry_geometry(op, vector_side_offset=op.CORE == "vector")

    def finish(vals, core, end):
        t = end.proto.alloc(core.name)
        vals[res] = _entry_view(core, end, t, *geo)
        if core.trace_ops is not None:
            _trace(core, opid, "talloc", op.id_value, t)

    def wait(vals, core, end):
        proto = end.proto
        core.wait = (opid, proto, f"a free credit (talloc #{proto.allocs[core.name] + 1})")
        while not proto.has_credit(core.name):
            yield
        core.wait = None
        core.launch.progress += 1
        proto.take_credit(core.name)
        finish(vals, core, end)

    def fn(vals):
        core = vals[0]
        end = _end(vals, pipe_slot, op)
        proto = end.proto
        if proto.alloc_needs_credit(core.name):
            if not proto.has_credit(core.name):
                return wait(vals, core, end)
            proto.take_credit(core.name)
        finish(vals, core, end)
        return None

    return fn


def tpush(op: d._PipeDataOp, slot, pipe_slot: int, opid: int):
    def fn(vals):
        core = vals[0]
        end = _end(vals, pipe_slot, op)
        n = end.proto.push(core.name)
        if core.trace_ops is not None:
            _trace(core, opid, "tpush", op.id_value, n)

    return fn


def tpop(op: d._PipeDataOp, slot, pipe_slot: int, opid: int):
    res = slot(op.entry)
    geo = _entry_geometry(op, vector_side_offset=op.CORE == "vector")

    def finish(vals, core, end):
        u = end.proto.pop(core.name)
        vals[res] = _entry_view(core, end, u, *geo)
        if core.trace_ops is not None:
            _trace(core, opid, "tpop", op.id_value, u)

    def wait(vals, core, end):
        proto = end.proto
        core.wait = (opid, proto, f"data (tpop #{proto.pops[core.name] + 1})")
        while not proto.has_data(core.name):
            yield
        core.wait = None
        core.launch.progress += 1
        finish(vals, core, end)

    def fn(vals):
        core = vals[0]
        end = _end(vals, pipe_slot, op)
        proto = end.proto
        proto.check_pop(core.name)
        if not proto.has_data(core.name):
            return wait(vals, core, end)
        finish(vals, core, end)
        return None

    return fn


def tfree(op: d._PipeDataOp, slot, pipe_slot: int, opid: int):
    def fn(vals):
        core = vals[0]
        end = _end(vals, pipe_slot, op)
        u = end.proto.pops[core.name] - 1
        end.proto.release(core.name)
        if core.trace_ops is not None:
            _trace(core, opid, "tfree", op.id_value, u)

    return fn


def drain(core, end: PipeEnd, return_opid: int):
    """Producer destructor: wait for the credits sent but never consumed (a generator)."""
    proto = end.proto
    need = proto.drain_needed(core.name)
    for k in range(need):
        if not proto.has_credit(core.name):
            core.wait = (return_opid, proto, f"destructor drain credit {k + 1} of {need}")
            while not proto.has_credit(core.name):
                yield
            core.wait = None
            core.launch.progress += 1
        proto.take_credit(core.name)
        proto.drained[core.name] += 1


OPS = {
    "talloc": talloc,
    "tpush": tpush,
    "tpop": tpop,
    "tfree": tfree,
}
