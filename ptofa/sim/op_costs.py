"""What one traced op costs on the A2/A3 core: its hardware queue (`queue_of`) and its cycles
(`duration_cycles`), one `registry.cost` per op class — the vector instructions' repeat and
start-up model, the row reductions and broadcasts, GM/L1/L0 transfers at the port rates of the
`SocSpec`, the cube's matmuls, scalar work and the pipe protocol's ops. `timing` replays a trace
with these costs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace as dataclass_replace

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.socspec import VECTOR_COUNT_MODE_FLOOR, VECTOR_INSTRUCTIONS, SocSpec
from ptofa.sim.trace import TraceOp


class TimingError(RuntimeError):
    """The trace cannot be replayed (unknown op, deadlocked pipes, bad block index)."""


def core_kind(core: str) -> str:
    return "cube" if core == "cube" else "vec"


# --- op costs: one `registry.cost` per op class ----------------------------------------


def on_vector(op: TraceOp) -> str:
    """V on a vector core; the cube has no vector unit."""
    if core_kind(op.core) == "vec":
        return "V"
    raise TimingError(f"line {op.line}: no cube queue for {op.op} ({op.src_loc} -> {op.dst_loc})")


def tstore_queue(op: TraceOp) -> str:
    return "FIX" if op.src_loc == "acc" else "MTE3"


def tmov_queue(op: TraceOp) -> str:
    if op.src_loc == "mat" and op.dst_loc in ("left", "right", "bias"):
        return "MTE1"
    if op.src_loc == "acc":
        return "FIX"
    if op.src_loc == "vec" and op.dst_loc != "vec":
        return "MTE3"
    return on_vector(op)


def tpush_queue(op: TraceOp) -> str:
    """The producer's store queue, where `tpush` sets "ready" after the stores before it."""
    return "FIX" if core_kind(op.core) == "cube" else "MTE3"


def vector_repeats(op: TraceOp, soc: SocSpec, elems: int | None = None) -> int:
    """Vector repeats of an op: its elements (the larger of source and destination) in the
    widest operand type, over the bytes one repeat moves (`SocSpec.vec_bytes_per_cycle`)."""
    n = max(op.elems, op.src_elems) if elems is None else elems
    return math.ceil(n * op.elem_bytes / soc.vec_bytes_per_cycle)


def instruction_cycles(name: str, repeats: int, count_mode: bool = False, startup: bool = True) -> float:
    """One vector instruction: slope * repeats (`VECTOR_INSTRUCTIONS`), plus its head + tail when it
    starts a stream (`startup`), plus the count-mode dispatch floor of a binary ALU op issued in
    count mode. pto-isa's vector stream model (`SocSpec` docstring): back-to-back instructions
    overlap their start-up latency and pay only the slope."""
    head, slope, tail = VECTOR_INSTRUCTIONS[name]
    return slope * repeats + (head + tail if startup else 0) + (VECTOR_COUNT_MODE_FLOOR if count_mode else 0)


def startup_cycles(name: str) -> float:
    """Head + tail of one vector instruction: what it pays at the start of a stream."""
    head, _, tail = VECTOR_INSTRUCTIONS[name]
    return head + tail


# Stream-start latency of each vector op: what its cost includes for the first of its instructions,
# and what it saves when it follows the previous V op back to back (`_BlockReplayer._step`).
_VECTOR_STARTUP: dict[str, Callable[[TraceOp, SocSpec], float]] = {}


def vector_cost(*op_classes: type, cycles, startup: Callable[[TraceOp, SocSpec], float], queue=None) -> None:
    """Register the cost of vector ops (`registry.cost`) and their stream-start latency."""
    registry.cost(*op_classes, queue=queue or on_vector, cycles=cycles)
    for cls in op_classes:
        _VECTOR_STARTUP[cls.name] = startup


def vector_startup(op: TraceOp, soc: SocSpec) -> float:
    """The stream-start latency in a V op's cost (0 for ops without one)."""
    rule = _VECTOR_STARTUP.get(op.op)
    return rule(op, soc) if rule is not None else 0.0


def vector_cycles(factor: str | None = None):
    """Vector ops without an instruction mapping: a binary-ALU-class instruction (`vadd`),
    its per-repeat slope times the SoC attribute `factor` for slow op classes."""

    def cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
        scale = getattr(soc, factor) if factor else 1.0
        _, slope, _ = VECTOR_INSTRUCTIONS["vadd"]
        return soc.v_op_cycles + scale * slope * vector_repeats(op, soc)

    return cycles


def one_instruction(name: str):
    """An elementwise tile op that lowers to one vector instruction over its repeats."""

    def cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
        return instruction_cycles(name, vector_repeats(op, soc))

    return cycles


# The composite row ops follow their A2/A3 implementation in pto-isa (public source,
# github.com/PTO-ISA/pto-isa, include/pto/npu/a2a3/): a sequence of vector instructions, which
# pays one stream start (its first instruction's head + tail).

_ROW_REDUCE = {"pto.trowmax": ("vmax", "vcmax"), "pto.trowsum": ("vadd", "vcadd"), "pto.trowmin": ("vmin", "vcmin")}


def _row_chunks(op: TraceOp, soc: SocSpec) -> tuple[int, int]:
    """(rows, column chunks of one repeat) of a row reduction's [R, C] source."""
    rows = max(op.rows or op.elems, 1)
    cols = max(op.src_elems, op.elems) // rows
    return rows, max(1, math.ceil(cols / (soc.vec_bytes_per_cycle // op.elem_bytes)))


def row_reduce_cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
    """trowmax / trowsum / trowmin of an [R, C] source (TRowReduceOps.hpp, TRowReduceInstr):
    with E elements per repeat, C <= E is one in-repeat reduce (vcmax / vcadd) of R repeats;
    otherwise count-mode binary ops fold the ceil(C / E) column chunks into a
    one-repeat-per-row temp (ceil(C / E) - 1 of them, R repeats each) and the in-repeat
    reduce finishes."""
    fold, final = _ROW_REDUCE[op.op]
    rows, chunks = _row_chunks(op, soc)
    folds = sum(instruction_cycles(fold, rows, count_mode=True, startup=i == 0) for i in range(chunks - 1))
    return folds + instruction_cycles(final, rows, startup=chunks == 1)


def row_reduce_startup(op: TraceOp, soc: SocSpec) -> float:
    fold, final = _ROW_REDUCE[op.op]
    return startup_cycles(fold if _row_chunks(op, soc)[1] > 1 else final)


def _broadcast(op: TraceOp) -> float:
    """vbrcb of the [R, 1] column to one 32 B block per row, ceil(R / 8) repeats
    (TRowExpandBinOp.hpp, TRowExpandBinaryInstr): the first instruction of a row expansion."""
    return instruction_cycles("vbrcb", math.ceil(max(op.rows, 1) / 8))


def row_expand(*steps: str):
    """trowexpand*: the column broadcast, then `steps` over the tile (trowexpandexpdif,
    TRowExpandExpdif.hpp: TROWEXPANDSUB then TEXP in place; two passes, not one fused one)."""

    def cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
        return _broadcast(op) + sum(instruction_cycles(step, vector_repeats(op, soc), startup=False) for step in steps)

    return cycles


def first_instruction(name: str) -> Callable[[TraceOp, SocSpec], float]:
    """The stream-start latency of an op whose first instruction is `name`."""
    return lambda op, soc: startup_cycles(name)


def v_op_startup(op: TraceOp, soc: SocSpec) -> float:
    return soc.v_op_cycles


def transfer_cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
    """A data move: the queue's fixed cost plus its bytes over the queue's rate (GM moves at the
    core's own L2 port rate; what all cores move together is `shared_floor_us`'s)."""
    if queue == "MTE2":
        return soc.mte2_op_cycles + op.nbytes / soc.mte2_gm_bytes
    if queue == "MTE1":
        rate = soc.mte1_l1_to_l0a_bytes if op.dst_loc == "left" else soc.mte1_l1_to_l0b_bytes
        return soc.mte1_op_cycles + op.nbytes / rate
    if queue == "FIX":
        return soc.fix_op_cycles + op.nbytes / soc.fix_l0c_to_gm_bytes
    if queue == "MTE3":
        return soc.mte3_op_cycles + op.nbytes / soc.mte3_ub_to_gm_bytes
    return instruction_cycles("vcopy", math.ceil(op.nbytes / soc.vec_bytes_per_cycle))  # a vec -> vec tmov


def matmul_cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
    return soc.m_op_cycles + math.ceil(op.macs / soc.cube_macs_per_cycle)


def scalar_cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
    return op.scalar_ops * soc.scalar_op_cycles


def pipe_cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
    return soc.pipe_op_cycles


registry.cost(d.TLoadOp, queue="MTE2", cycles=transfer_cycles)
registry.cost(d.TStoreOp, queue=tstore_queue, cycles=transfer_cycles)
vector_cost(d.TMovOp, queue=tmov_queue, cycles=transfer_cycles, startup=first_instruction("vcopy"))
registry.cost(d.TMatmulOp, d.TMatmulAccOp, queue="M", cycles=matmul_cycles)
# Elementwise tile ops: one vector instruction each (pto-isa A2/A3 cost model classes).
for _op, _instr in {
    d.TAddOp: "vadd", d.TSubOp: "vsub", d.TMulOp: "vmul", d.TMaxOp: "vmax", d.TMinOp: "vmin", d.TDivOp: "vdiv",
    d.TAddsOp: "vadds", d.TSubsOp: "vadds", d.TMulsOp: "vmuls", d.TDivsOp: "vdiv", d.TMaxsOp: "vmaxs",
    d.TMinsOp: "vmins", d.TExpOp: "vexp", d.TLogOp: "vln", d.TSqrtOp: "vsqrt", d.TRsqrtOp: "vrsqrt",
    d.TRecipOp: "vdiv", d.TAbsOp: "vabs", d.TNegOp: "vmuls", d.TReluOp: "vrelu", d.TCvtOp: "vconv",
    d.TSelOp: "vsel",
}.items():
    vector_cost(_op, cycles=one_instruction(_instr), startup=first_instruction(_instr))


def texpands_queue(op: TraceOp) -> str:
    """V on a vector core; on the cube (an L1 tile) MTE2: pto-isa's A2/A3 fill of a Mat tile is
    `create_cbuf_matrix` (TSetValue.hpp), an L1 write that no vector or cube compute unit runs;
    assumption: it occupies MTE2 like a load into L1 of the same bytes."""
    return "MTE2" if core_kind(op.core) == "cube" else "V"


vector_cost(
    d.TExpandsOp, queue=texpands_queue, startup=first_instruction("vector_dup"),
    cycles=lambda op, queue, soc: transfer_cycles(dataclass_replace(op, nbytes=op.nbytes or op.elems * op.elem_bytes),
                                                  queue, soc) if queue == "MTE2"
    else one_instruction("vector_dup")(op, queue, soc),
)
for _op, _steps in {
    d.TRowExpandSubOp: ("vsub",), d.TRowExpandAddOp: ("vadd",), d.TRowExpandMulOp: ("vmul",),
    d.TRowExpandMaxOp: ("vmax",), d.TRowExpandMinOp: ("vmin",), d.TRowExpandDivOp: ("vdiv",),
    d.TRowExpandExpdifOp: ("vsub", "vexp"),
}.items():
    vector_cost(_op, cycles=row_expand(*_steps), startup=first_instruction("vbrcb"))
vector_cost(d.TRowMaxOp, d.TRowSumOp, d.TRowMinOp, cycles=row_reduce_cycles, startup=row_reduce_startup)
# Masks, iota, column broadcasts and padding: elementwise-rate vector work (tcolexpanddiv divides).
vector_cost(
    d.TTriOp, d.TCmpSOp, d.TCmpOp, d.TCIOp, d.TFillPadOp,
    d.TColExpandAddOp, d.TColExpandSubOp, d.TColExpandMulOp, d.TColExpandMaxOp, d.TColExpandMinOp,
    cycles=vector_cycles(),
    startup=v_op_startup,
)
vector_cost(d.TColExpandDivOp, cycles=vector_cycles("vec_transcendental_factor"), startup=v_op_startup)
# Window copies run where ptoas puts them: vec -> vec on V, mat -> left/right on MTE1,
# acc -> mat on FIX (tmov's queues); the trace records elements, moved as 4-byte words.
vector_cost(
    d.TExtractOp, d.TInsertOp, queue=tmov_queue, startup=first_instruction("vcopy"),
    cycles=lambda op, queue, soc: one_instruction("vcopy")(op, queue, soc) if queue == "V"
    else transfer_cycles(dataclass_replace(op, nbytes=op.nbytes or 4 * op.elems), queue, soc),
)
vector_cost(d.TTransOp, d.TGatherOp, d.TGatherBOp, d.TColExpandOp, *d.intops.OPS, cycles=vector_cycles(),
            startup=v_op_startup)
# Scalar-unit work; the simulator batches these ops (with arith and scf) into `scalar` records.
SCALAR_COST = registry.cost(
    d.GetBlockIdxOp, d.GetBlockNumOp, d.GetSubblockIdxOp, d.GetSubblockNumOp, d.SetFftsOp,
    d.AddPtrOp, d.MakeTensorViewOp, d.PartitionViewOp, d.TReshapeOp, d.SubviewOp, d.SetValidShapeOp, *d.PIPE_INIT_OPS,
    d.LoadScalarOp, d.StoreScalarOp, d.TSetValOp, d.TGetValOp, d.TPrintOp,
    d.ReserveBufferOp, d.ImportReservedBufferOp, d.CastPtrOp, d.BarrierOp,
    queue="S",
    cycles=scalar_cycles,
)
# A section is a region: its ops are traced one by one, the section itself costs nothing.
registry.cost(d.SectionCubeOp, d.SectionVectorOp, queue="S", cycles=lambda op, queue, soc: 0.0)
# ptoas plans tile addresses at compile time: alloc_tile costs nothing (and is not traced).
registry.cost(d.AllocTileOp, queue="S", cycles=lambda op, queue, soc: 0.0)
# Pipe records are looked up by their kind; a talloc / tpop wait stalls the scalar unit.
PIPE_COSTS = {
    "talloc": registry.cost(d.TallocToAivOp, d.TallocToAicOp, queue="S", cycles=pipe_cycles),
    "tpop": registry.cost(d.TpopFromAicOp, d.TpopFromAivOp, queue="S", cycles=pipe_cycles),
    "tpush": registry.cost(d.TpushToAivOp, d.TpushToAicOp, queue=tpush_queue, cycles=pipe_cycles),
    "tfree": registry.cost(d.TfreeFromAicOp, d.TfreeFromAivOp, queue="MTE2", cycles=pipe_cycles),
}


def cost_of(op: TraceOp) -> registry.Cost:
    """The registered cost of a trace record: batched scalar work, a pipe op by kind, else by op name."""
    if op.op == "scalar":
        return SCALAR_COST
    if op.pipe_kind:
        rule = PIPE_COSTS.get(op.pipe_kind)
        if rule is None:
            raise TimingError(f"line {op.line}: unknown pipe_kind {op.pipe_kind!r} on {op.op}")
        return rule
    rule = registry.COST_BY_NAME.get(op.op)
    if rule is None:
        raise TimingError(f"line {op.line}: no timing cost registered for {op.op}")
    return rule


def queue_of(op: TraceOp) -> str:
    """The hardware queue an op runs on."""
    return cost_of(op).queue(op)


def duration_cycles(op: TraceOp, queue: str, soc: SocSpec) -> float:
    """Cycles an op occupies its queue."""
    return cost_of(op).cycles(op, queue, soc)
