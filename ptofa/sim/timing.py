"""Timing model of the emitted kernel: replays a functional-simulator `Trace`.

Model (constants in `ptofa.sim.socspec`, nothing fitted to measurements):

* Each core (cube, vec0, vec1 of a block) has in-order hardware queues
  (the PTO pipes of pto-isa): cube MTE2 / MTE1 / M / FIX, vector MTE2 / V / MTE3, and the
  scalar unit S. An op occupies its queue for a fixed cost plus its size over the
  queue's rate; queues run concurrently.
* The scalar unit issues ops in program order, `op_dispatch_cycles` apart;
  `scalar` records cost `scalar_ops * scalar_op_cycles`. Only cross-core waits
  (`talloc` waiting for a free credit, `tpop` waiting for data) stall issue.
* An op starts when it is issued, its queue is free and its buffers are ready:
  RAW waits for the last writer, WAR for the last readers, WAW for the last
  writer (what `ptoas --enable-insert-sync` enforces with flags), plus
  `intra_core_flag_cycles` when the two ops sit on different queues.
* Pipes (the address-based GM slot protocol of the PTO tpush/tpop ops): `tpush` sets
  "ready" on the producer's store queue (FIX on the cube, MTE3 on a vector), so it
  completes after the stores issued before it; `tfree` sets "free" on MTE2 after the preceding loads, and only
  every `P = sync_period` pops. Pop u waits for push u of every producer of the
  pipe (both AIVs for V2C); talloc t >= S with t % P == 0 waits for free credit
  (t - S) / P + 1 of every consumer (both AIVs for C2V). A flag becomes visible
  to the peer `cross_core_flag_cycles` after it is set.
* Queues are private to a core and cores interact only through pipe flags, so
  each op's times are fixed once its predecessors are known; the replay computes
  them in dependency order (identical to a discrete-event simulation of this
  model). A pop or talloc whose matching flag is never set is a deadlock.
* Vector ops follow pto-isa's vector stream model: an instruction pays its head and tail
  only when it starts a stream (the V queue was idle); one that follows the previous V op
  back to back pays its repeats alone (`instruction_cycles`, `vector_startup`).
* Launch time: blocks are independent. Block i of a persistent launch runs units
  i, i + block_dim, ... A block missing from the trace takes the time of a traced
  block with the same unit count, else a traced block's time scaled by the unit
  ratio. Blocks beyond the cube-core count run in waves: core c runs blocks
  c, c + cores, ... back to back, each block after its start-up (`SocSpec.block_start_us`,
  the first wave's `first_wave_start_us`: public A2/A3 measurements); a replay starts with
  empty queues, so the first tiles' pipeline fill is in each block's time, and the busiest
  core's last block is the last wave's tail.
* Shared limits: every core's GM loads and stores (pipe slots included) pass the chip's one
  L2, and its HBM serves every core; a launch takes at least its GM bytes at the L2 rate
  and its HBM bytes (Q, K, V and O once, plus the K/V re-reads that miss the L2: `hbm_bytes`)
  at the HBM rate (`shared_floor_us`, `launch_floors_us`), however fast each core's own
  ports are. The host's enqueue of the launch (`SocSpec.host_launch_us`) is not device time
  and is not included; the summary names it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace

from ptofa.ir import dialect as d
from ptofa.kernels.units import block_units
from ptofa.pipeline import DTYPE_BYTES, FAConfig, ProblemShape
from ptofa.sim import registry
from ptofa.sim.socspec import VECTOR_COUNT_MODE_FLOOR, VECTOR_INSTRUCTIONS, SocSpec, get_soc
from ptofa.sim.trace import Trace, TraceOp

CUBE_QUEUES = ("MTE2", "MTE1", "M", "FIX", "S")
VEC_QUEUES = ("MTE2", "V", "MTE3", "S")

# Resource names used by the critical-path summary.
BOUND_NAMES = {
    ("cube", "M"): "cube M",
    ("cube", "MTE1"): "MTE1",
    ("cube", "FIX"): "FIX",
    ("vec", "V"): "vector V",
    ("vec", "MTE3"): "MTE3",
}
PIPE_WAITS = "pipe waits"
SCALAR = "scalar issue"
INTRA_SYNC = "intra-core sync"
# Part of the critical path counted as "steady state": the middle half of the block's time.
STEADY_WINDOW = (0.25, 0.75)
UTIL_CORE = {"cube": "cube", "vec": "vector"}
# Queues of the steady-state utilization per core kind, in print order (the compute queue first).
UTIL_QUEUES = {"cube": ("M", "MTE2", "MTE1", "FIX", "idle"), "vector": ("V", "MTE2", "MTE3", "idle")}


class TimingError(RuntimeError):
    """The trace cannot be replayed (unknown op, deadlocked pipes, bad block index)."""


@dataclass(frozen=True)
class OpInterval:
    """Where and when one traced op ran (µs from the block's start)."""

    block: int
    core: str
    queue: str
    op: str
    stage: str
    line: int
    start_us: float
    end_us: float
    wait_from_us: float  # issue time; < start_us when the op waited (pipe waits: cross-core)
    pipe_id: int = -1
    pipe_kind: str = ""
    pipe_index: int = -1  # producer t / consumer u counter before this op, as replayed


@dataclass
class TimingResult:
    """Predicted launch time, what bounds it, and the replayed blocks' op intervals.

    `bound` is the resource holding at least half of the slowest replayed block's
    critical path inside its steady window (`STEADY_WINDOW`), "pipe waits" when no
    resource does (cube and vector wait on each other), or "L2" / "HBM" when what all
    cores move together through the chip's L2 / HBM takes longer than the replayed time.
    """

    soc: SocSpec
    block_dim: int
    kernel_us: float
    flops: int
    block_us: dict[int, float]  # replayed blocks
    busy: dict[tuple[int, str, str], float]  # (block, core, queue) -> busy fraction of the block time
    bound: str  # resource that bounds the steady state of the slowest replayed block
    bound_shares: dict[str, float]  # share of that block's steady critical path per resource
    intervals: list[OpInterval]
    waves: int
    cube_bound_us: float  # all matmul MACs on the used cube cores at peak
    hbm_bound_us: float  # the launch's HBM bytes at the chip's HBM rate (`shared_floor_us`)
    extrapolation: str
    steady_util: dict[str, float]  # `steady_utilization` of the slowest replayed block
    l2_bound_us: float = 0.0  # every core's GM loads and stores at the chip's L2 rate (`shared_floor_us`)
    gm_bytes_per_unit: float = 0.0  # GM bytes one work unit loads and stores (pipe slots included)

    @property
    def tflops(self) -> float:
        return self.flops / (self.kernel_us * 1e-6) / 1e12 if self.kernel_us > 0 else 0.0

    @property
    def peak_fraction(self) -> float:
        """Reached fraction of the chip's cube fp16 peak (every cube core, `SocSpec.peak_flops`)."""
        return self.tflops * 1e12 / self.soc.peak_flops

    @property
    def critical_block(self) -> int:
        return max(self.block_us, key=lambda b: self.block_us[b])

    def summary(self) -> str:
        block = self.critical_block
        busy = ", ".join(
            f"{core} {queue} {frac:.0%}"
            for (b, core, queue), frac in sorted(self.busy.items(), key=lambda kv: -kv[1])
            if b == block and queue != "S" and frac >= 0.05
        )
        shares = ", ".join(f"{name} {share:.0%}" for name, share in self.bound_shares.items() if share >= 0.05)
        return (
            f"Predicted {self.kernel_us:.2f} us on {self.soc.name} "
            f"({self.tflops:.1f} TFLOPS, 4*B*N*D*visible scores; block_dim={self.block_dim}, {self.waves} wave(s)); "
            f"steady state bound by {self.bound} (critical path of block {block}: {shares}); "
            f"busy in block {block}: {busy or 'none'}; "
            f"limits: cube {self.cube_bound_us:.2f} us, L2 {self.l2_bound_us:.2f} us, HBM {self.hbm_bound_us:.2f} us "
            f"(shared by all cores); {self.extrapolation}; "
            f"a lone synchronous call also waits {self.soc.host_launch_us:g} us for the host to enqueue the launch."
        )

    def utilization_line(self) -> str:
        """The steady state's queue utilization, its bound and the fraction of cube peak, in one line."""
        util = ", ".join(f"{name} {frac:.0%}" for name, frac in self.steady_util.items())
        return (
            f"steady state of block {self.critical_block} (middle half): {util}; bound: {self.bound}; "
            f"{self.peak_fraction:.1%} of cube fp16 peak ({self.soc.peak_flops / 1e12:.1f} TFLOP/s)"
        )


@dataclass
class _Scheduled:
    """Replay state of one executed op (cycles from the block start)."""

    queue: str
    issue: float
    start: float
    end: float
    # What fixed `start`: ("queue"|"sync"|"pipe", (core, index)) or ("issue", None).
    cause: tuple[str, tuple[str, int] | None]
    # What fixed `issue`: the previous op in program order, via its issue or (blocking) its end.
    issue_cause: tuple[str, tuple[str, int] | None]
    pipe_index: int = -1


@dataclass
class BlockReplay:
    """Per-core op timings of one block."""

    block: int
    cycles: float
    ops: dict[str, list[TraceOp]]
    sched: dict[str, list[_Scheduled]]


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


def _pipe_roles(ops: dict[str, list[TraceOp]]) -> dict[int, tuple[list[str], list[str]]]:
    """pipe id -> (producer cores, consumer cores) seen in one block."""
    producers: dict[int, set[str]] = defaultdict(set)
    consumers: dict[int, set[str]] = defaultdict(set)
    for core, core_ops in ops.items():
        for op in core_ops:
            if op.pipe_kind in ("talloc", "tpush"):
                producers[op.pipe_id].add(core)
            elif op.pipe_kind in ("tpop", "tfree"):
                consumers[op.pipe_id].add(core)
    return {p: (sorted(producers[p]), sorted(consumers[p])) for p in set(producers) | set(consumers)}


class _BlockReplayer:
    def __init__(self, block: int, ops: dict[str, list[TraceOp]], soc: SocSpec, slot_num: int) -> None:
        self.block = block
        self.ops = ops
        self.soc = soc
        self.slot_num = slot_num
        self.period = slot_num if slot_num <= 2 else slot_num // 2
        self.roles = _pipe_roles(ops)
        self.sched: dict[str, list[_Scheduled]] = {c: [] for c in ops}
        self.queue_last: dict[str, dict[str, int]] = {c: {} for c in ops}
        self.last_writer: dict[str, dict[int, int]] = {c: {} for c in ops}
        self.readers: dict[str, dict[int, list[int]]] = {c: defaultdict(list) for c in ops}
        self.counters: dict[str, dict[tuple[int, str], int]] = {c: defaultdict(int) for c in ops}
        # Flag events visible to the peer: (pipe, producer core, push index) and
        # (pipe, consumer core, credit number) -> (visible time, (core, op index)).
        self.ready: dict[tuple[int, str, int], tuple[float, tuple[str, int]]] = {}
        self.free: dict[tuple[int, str, int], tuple[float, tuple[str, int]]] = {}

    def run(self) -> BlockReplay:
        pending = {c for c, core_ops in self.ops.items() if core_ops}
        while pending:
            progressed = False
            for core in sorted(pending):
                while len(self.sched[core]) < len(self.ops[core]):
                    if not self._step(core):
                        break
                    progressed = True
                if len(self.sched[core]) == len(self.ops[core]):
                    pending.discard(core)
            if pending and not progressed:
                raise TimingError(self._deadlock_message(pending))
        end = max((s.end for ss in self.sched.values() for s in ss), default=0.0)
        return BlockReplay(self.block, end, self.ops, self.sched)

    def _deadlock_message(self, pending: set[str]) -> str:
        stuck = []
        for core in sorted(pending):
            op = self.ops[core][len(self.sched[core])]
            stuck.append(f"{core} at line {op.line} {op.op} (pipe {op.pipe_id} {op.pipe_kind})")
        return f"pipe deadlock in block {self.block}: blocked on " + "; ".join(stuck)

    def _pipe_wait(self, core: str, op: TraceOp) -> tuple[float, tuple[str, int] | None] | None:
        """(time the cross-core flag is visible, op that set it); (0, None) if no wait; None if unknown yet."""
        producers, consumers = self.roles[op.pipe_id]
        index = self.counters[core][(op.pipe_id, op.pipe_kind)]
        if op.pipe_kind == "tpop":
            events = [self.ready.get((op.pipe_id, p, index)) for p in producers]
        elif op.pipe_kind == "talloc":
            s, p = self.slot_num, self.period
            if not (index >= s and (s == 1 or index % p == 0)):
                return 0.0, None
            credit = index - s + 1 if s == 1 else (index - s) // p + 1
            events = [self.free.get((op.pipe_id, c, credit)) for c in consumers]
        else:
            return 0.0, None
        if not events or any(e is None for e in events):
            return None
        return max(events, key=lambda e: e[0])

    def _step(self, core: str) -> bool:
        i = len(self.sched[core])
        op = self.ops[core][i]
        soc = self.soc
        queue = queue_of(op)
        if queue not in (CUBE_QUEUES if core_kind(core) == "cube" else VEC_QUEUES):
            raise TimingError(f"line {op.line}: {op.op} runs on {queue}, which {core} does not have")

        wait = self._pipe_wait(core, op) if op.pipe_kind else (0.0, None)
        if wait is None:
            return False

        issue, issue_cause = 0.0, ("start", None)
        if i > 0:
            prev = self.sched[core][i - 1]
            if prev.queue == "S":  # scalar work and cross-core waits stall issue until done
                issue, issue_cause = prev.end + soc.op_dispatch_cycles, ("end", (core, i - 1))
            else:
                issue, issue_cause = prev.issue + soc.op_dispatch_cycles, ("issue", (core, i - 1))

        candidates: list[tuple[float, str, tuple[str, int] | None]] = [(issue, "issue", None)]
        if wait[1] is not None:
            candidates.append((wait[0], "pipe", wait[1]))
        if queue in self.queue_last[core]:
            j = self.queue_last[core][queue]
            candidates.append((self.sched[core][j].end, "queue", (core, j)))
        for j in self._hazards(core, op):
            other = self.sched[core][j]
            if other.queue == queue:
                candidates.append((other.end, "queue", (core, j)))
            else:
                candidates.append((other.end + soc.intra_core_flag_cycles, "sync", (core, j)))
        start, kind, ref = max(candidates, key=lambda c: c[0])

        index = -1
        if op.pipe_kind:
            index = self.counters[core][(op.pipe_id, op.pipe_kind)]
            self.counters[core][(op.pipe_id, op.pipe_kind)] += 1
        duration = duration_cycles(op, queue, soc)
        if queue == "V" and kind == "queue" and self.sched[core][ref[1]].queue == "V":
            duration -= vector_startup(op, soc)  # back to back in the V stream: no start-up latency
        end = start + duration
        self.sched[core].append(_Scheduled(queue, issue, start, end, (kind, ref), issue_cause, index))
        self.queue_last[core][queue] = i
        self._record_buffers(core, op, i)
        visible = end + soc.cross_core_flag_cycles
        if op.pipe_kind == "tpush":
            self.ready[(op.pipe_id, core, index)] = (visible, (core, i))
        elif op.pipe_kind == "tfree":
            popped = self.counters[core][(op.pipe_id, "tpop")]  # u: pops so far
            if popped % self.period == 0:
                self.free[(op.pipe_id, core, popped // self.period)] = (visible, (core, i))
        return True

    def _hazards(self, core: str, op: TraceOp) -> list[int]:
        deps: list[int] = []
        writer = self.last_writer[core]
        for buf in op.reads:  # RAW
            if buf in writer:
                deps.append(writer[buf])
        for buf in op.writes:  # WAW, WAR
            if buf in writer:
                deps.append(writer[buf])
            deps.extend(self.readers[core][buf])
        return deps

    def _record_buffers(self, core: str, op: TraceOp, i: int) -> None:
        for buf in op.reads:
            self.readers[core][buf].append(i)
        for buf in op.writes:
            self.last_writer[core][buf] = i
            self.readers[core][buf] = []


def replay(trace: Trace, soc: str | SocSpec = "910B2", slot_num: int = 8) -> dict[int, BlockReplay]:
    """Replay every block in the trace; raises `TimingError` on a pipe deadlock."""
    spec = get_soc(soc)
    by_block: dict[int, dict[str, list[TraceOp]]] = defaultdict(dict)
    for (block, core), ops in trace.cores.items():
        by_block[block][core] = ops
    return {b: _BlockReplayer(b, cores, spec, slot_num).run() for b, cores in sorted(by_block.items())}


def _bound_name(core: str, queue: str) -> str:
    if queue == "MTE2":
        return "MTE2"
    if queue == "S":
        return SCALAR
    return BOUND_NAMES[(core_kind(core), queue)]


def critical_path_shares(rep: BlockReplay, window: tuple[float, float] = STEADY_WINDOW) -> dict[str, float]:
    """Walk the critical path back from the last op and share its steady window by resource.

    Time on an op is charged to its queue (cross-core waits `tpop`/`talloc`/`tpush`/
    `tfree` to pipe waits), gaps to the link that caused them: cross-core flag
    latency to pipe waits, intra-core flag latency to intra-core sync, dispatch to
    scalar issue.
    """
    lo, hi = window[0] * rep.cycles, window[1] * rep.cycles
    charged: dict[str, float] = defaultdict(float)

    def charge(name: str, a: float, b: float) -> None:
        overlap = min(b, hi) - max(a, lo)
        if overlap > 0:
            charged[name] += overlap

    last = max(
        ((c, i) for c, ss in rep.sched.items() for i in range(len(ss))),
        key=lambda ci: rep.sched[ci[0]][ci[1]].end,
        default=None,
    )
    node: tuple[str, int] | None = last
    at_issue = False  # walking "issue" links: at the op's issue time, not its end
    while node is not None:
        core, i = node
        s = rep.sched[core][i]
        op = rep.ops[core][i]
        if not at_issue:
            charge(PIPE_WAITS if op.pipe_kind else _bound_name(core, s.queue), s.start, s.end)
            kind, ref = s.cause
            if kind != "issue":
                pred = rep.sched[ref[0]][ref[1]]
                if kind in ("pipe", "sync"):  # a "queue" predecessor leaves no gap
                    charge(PIPE_WAITS if kind == "pipe" else INTRA_SYNC, pred.end, s.start)
                node = ref
                continue
            at_issue = True
        kind, ref = s.issue_cause
        if ref is None:
            break
        pred = rep.sched[ref[0]][ref[1]]
        if kind == "end":
            charge(SCALAR, pred.end, s.issue)
            at_issue = False
        else:
            charge(SCALAR, pred.issue, s.issue)
        node = ref
    total = sum(charged.values())
    return {k: v / total for k, v in sorted(charged.items(), key=lambda kv: -kv[1])} if total else {}


def steady_bound(shares: dict[str, float]) -> str:
    """The resource holding at least half the steady critical path; else the cores wait on
    each other through the pipes (the path alternates between cube and vector work)."""
    top = next(iter(shares), None)
    if top is None:
        return "none"
    return top if shares[top] >= 0.5 else PIPE_WAITS


def busy_fractions(rep: BlockReplay) -> dict[tuple[int, str, str], float]:
    busy: dict[tuple[int, str, str], float] = defaultdict(float)
    for core, ss in rep.sched.items():
        for s in ss:
            busy[(rep.block, core, s.queue)] += s.end - s.start
    return {k: v / rep.cycles for k, v in busy.items()} if rep.cycles else dict(busy)


def steady_utilization(rep: BlockReplay, window: tuple[float, float] = STEADY_WINDOW) -> dict[str, float]:
    """Busy fraction of each queue inside the block's steady window, averaged over cores of a kind.

    "cube idle" / "vector idle" is the fraction of the window in which none of a core's
    data queues works: the core waits for the other kind's pipe flags (or for issue).
    """
    lo, hi = window[0] * rep.cycles, window[1] * rep.cycles
    span = hi - lo
    if span <= 0:
        return {}
    busy: dict[str, float] = defaultdict(float)
    cores: dict[str, int] = defaultdict(int)
    for core, ss in rep.sched.items():
        name = UTIL_CORE[core_kind(core)]
        cores[name] += 1
        spans = sorted((max(s.start, lo), min(s.end, hi)) for s in ss if s.queue != "S" and s.end > lo and s.start < hi)
        for s in ss:
            if s.queue != "S":
                busy[f"{name} {s.queue}"] += max(0.0, min(s.end, hi) - max(s.start, lo))
        busy[f"{name} idle"] += span - _union_length(spans)
    return {f"{name} {queue}": busy[f"{name} {queue}"] / span / cores[name]
            for name, queues in UTIL_QUEUES.items() if cores[name] for queue in queues}


def _union_length(spans: list[tuple[float, float]]) -> float:
    """Length covered by sorted (start, end) spans."""
    total, reach = 0.0, -math.inf
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def units_of_block(block: int, block_dim: int, work_units: int) -> int:
    """Work units of block `block` of the persistent loop (`units.block_units`: block i runs
    loop indices i, i + block_dim, ...; a snake only changes which rank each one is)."""
    return len(block_units(block, block_dim, work_units, snake=False))


def blocks_to_trace(block_dim: int, work_units: int) -> list[int]:
    """One block per distinct unit count: enough for `predict` to time the whole launch."""
    first: dict[int, int] = {}
    for b in range(block_dim):
        first.setdefault(units_of_block(b, block_dim, work_units), b)
    return sorted(first.values())


def launch_cycles(
    block_cycles: dict[int, float], block_dim: int, work_units: int, soc: SocSpec, queued: bool = False
) -> tuple[float, int, str]:
    """(launch cycles, waves, how missing blocks were extrapolated).

    Each block costs its replayed time (which starts with empty queues, so the first
    tiles' pipeline fill is in it) plus the chip's block start-up (`SocSpec.block_start_us`; the
    first wave's `first_wave_start_us` unless the launch is `queued` behind another); core c runs
    blocks c, c + cores, ... back to back, so a launch of several waves ends with its busiest
    core's last block (the last wave's tail)."""
    if any(b >= block_dim for b in block_cycles):
        raise TimingError(f"trace has block {max(block_cycles)} but block_dim={block_dim}")
    traced_units = {b: units_of_block(b, block_dim, work_units) for b in block_cycles}
    per_block: list[float] = []
    copied = scaled = 0
    for b in range(block_dim):
        n = units_of_block(b, block_dim, work_units)
        if b in block_cycles:
            per_block.append(block_cycles[b])
            continue
        same = [block_cycles[t] for t, u in traced_units.items() if u == n]
        if same:
            per_block.append(max(same))
            copied += 1
        else:
            ref = min(traced_units, key=lambda t: (abs(traced_units[t] - n), t))
            per_block.append(block_cycles[ref] * n / traced_units[ref] if traced_units[ref] else 0.0)
            scaled += 1
    cycles, waves = wave_cycles(per_block, soc, queued)
    first = soc.block_start_us if queued else soc.first_wave_start_us
    note = (
        f"{len(block_cycles)} of {block_dim} blocks replayed, {copied} copied from a block "
        f"with the same unit count, {scaled} scaled by unit count; block start-up {first:g} us "
        f"for the first wave, {soc.block_start_us:g} us per later one"
    )
    return cycles, waves, note


def wave_cycles(per_block: list[float], soc: SocSpec, queued: bool = False) -> tuple[float, int]:
    """(launch cycles, waves) of blocks of these cycles: core c runs blocks c, c + cores, ... back to
    back, each after the chip's block start-up (the first wave's longer, `SocSpec.first_wave_start_us`,
    unless the launch is `queued` behind another), and the launch ends with the busiest core."""
    cores = soc.cube_cores
    per_core = [sum(per_block[c::cores]) + len(per_block[c::cores]) * soc.block_start_cycles
                + soc.first_wave_extra_cycles(queued) for c in range(min(len(per_block), cores))]
    return max(per_core, default=0.0), math.ceil(len(per_block) / cores)


def compulsory_bytes(config: FAConfig, shape: ProblemShape) -> int:
    """Q, K, V read once and O written once (BSND, or packed rows for varlen; K/V with kv_heads)."""
    packed = shape.seqlens is not None
    q_rows = shape.s0 if packed else shape.batch * shape.s0
    k_rows = shape.s1 if packed else shape.batch * shape.s1
    in_b, out_b = DTYPE_BYTES[config.in_dtype], DTYPE_BYTES[config.out_dtype]
    return config.head * (shape.heads * q_rows * (in_b + out_b) + 2 * shape.kv_heads * k_rows * in_b)


def gm_bytes(ops) -> int:
    """GM bytes that traced ops load (`tload` from GM) and store (`tstore` to GM), pipe slots included:
    every one of them passes through the chip's L2."""
    total = 0
    for op in ops:
        if op.op == "pto.tload" and op.src_loc == "gm":
            total += op.nbytes
        elif op.op == "pto.tstore" and op.dst_loc == "gm":
            total += op.nbytes
    return total


def shared_floor_us(spec: SocSpec, l2_bytes: float, hbm_bytes: float) -> tuple[float, float]:
    """(L2 us, HBM us): what every core of a launch moves together, at the chip's shared L2 rate
    (`SocSpec.l2_bytes_per_s`, reads and writes together) and HBM rate (`SocSpec.hbm_bytes_per_s`).
    A launch takes at least both, however fast each core's own ports are."""
    return l2_bytes / spec.l2_bytes_per_s * 1e6, hbm_bytes / spec.hbm_bytes_per_s * 1e6


def l2_miss_fraction(resident_bytes: float, working_set_bytes: float) -> float:
    """Share of re-reads that miss an L2 of `resident_bytes` free for a working set of `working_set_bytes`
    (assumption: the part that does not fit misses, the rest hits)."""
    if working_set_bytes <= resident_bytes:
        return 0.0
    return 1.0 - max(resident_bytes, 0.0) / working_set_bytes


def hbm_bytes(config: FAConfig, shape: ProblemShape, spec: SocSpec, block_dim: int) -> float:
    """Bytes a FlashAttention launch moves to and from HBM: Q, K, V and O once (`compulsory_bytes`),
    plus the K/V re-reads that miss the L2.

    Each unit (one Q block of one head) reads the K and V of every key it sees, so K/V are read
    once per Q block; the first read of each comes from HBM, the others hit the L2 while the K/V of
    the heads in flight fit beside the blocks' slot rings (`FAConfig.gm_slot_bytes_per_block`, both
    live in GM and so in the L2). At long S they no longer fit and the re-reads come from HBM."""
    in_b = DTYPE_BYTES[config.in_dtype]
    packed = shape.seqlens is not None
    kv_heads = shape.kv_heads * (1 if packed else shape.batch)
    kv_once = 2 * config.head * in_b * shape.kv_heads * (shape.s1 if packed else shape.batch * shape.s1)
    kv_reads = shape.flops(config.head) * in_b / (2 * config.cube_s0)
    concurrent = min(block_dim, spec.cube_cores)
    units_per_kv_head = max(1.0, shape.work_units(config) / kv_heads)
    in_flight = min(kv_heads, math.ceil(concurrent / units_per_kv_head) + 1)
    resident = spec.l2_bytes - config.gm_slot_bytes_per_block * concurrent
    miss = l2_miss_fraction(resident, in_flight * kv_once / kv_heads)
    return compulsory_bytes(config, shape) + max(0.0, kv_reads - kv_once) * miss


def launch_floors_us(config: FAConfig, shape: ProblemShape, spec: SocSpec, block_dim: int,
                     gm_bytes_per_unit: float) -> tuple[float, float]:
    """(L2 us, HBM us) of a FlashAttention launch whose units each move `gm_bytes_per_unit` through GM."""
    return shared_floor_us(spec, gm_bytes_per_unit * shape.work_units(config), hbm_bytes(config, shape, spec, block_dim))


def limiting(replay_us: float, l2_us: float, hbm_us: float, bound: str) -> tuple[float, str]:
    """(launch us, bound): the replayed time unless a shared limit takes longer."""
    return max((replay_us, bound), (l2_us, "L2"), (hbm_us, "HBM"), key=lambda t: t[0])


def predict(
    trace: Trace,
    config: FAConfig,
    shape: ProblemShape,
    soc: str | SocSpec = "910B2",
    block_dim: int | None = None,
) -> TimingResult:
    """Predicted kernel time of the launch the trace was recorded from."""
    spec = get_soc(soc)
    block_dim = block_dim or trace.block_dim
    replays = replay(trace, spec, config.slot_num)
    if not replays:
        raise TimingError("the trace has no ops")
    block_cycles = {b: r.cycles for b, r in replays.items()}
    cycles, waves, note = launch_cycles(block_cycles, block_dim, shape.work_units(config), spec)
    cores_used = min(block_dim, spec.cube_cores)
    macs = shape.flops(config.head) // 2  # QK and PV over the visible scores
    cube_bound_us = spec.cycles_to_us(macs / (cores_used * spec.cube_macs_per_cycle))
    traced_units = sum(units_of_block(b, block_dim, shape.work_units(config)) for b in replays)
    per_unit = sum(gm_bytes(ops) for ops in trace.cores.values()) / max(traced_units, 1)
    l2_bound_us, hbm_bound_us = launch_floors_us(config, shape, spec, block_dim, per_unit)

    critical = max(replays.values(), key=lambda r: r.cycles)
    shares = critical_path_shares(critical)
    kernel_us, bound = limiting(spec.cycles_to_us(cycles), l2_bound_us, hbm_bound_us, steady_bound(shares))
    busy: dict[tuple[int, str, str], float] = {}
    for r in replays.values():
        busy.update(busy_fractions(r))
    return TimingResult(
        soc=spec,
        block_dim=block_dim,
        kernel_us=kernel_us,
        flops=shape.flops(config.head),
        block_us={b: spec.cycles_to_us(c) for b, c in block_cycles.items()},
        busy=busy,
        bound=bound,
        bound_shares=shares,
        intervals=intervals(replays, spec),
        waves=waves,
        cube_bound_us=cube_bound_us,
        hbm_bound_us=hbm_bound_us,
        extrapolation=note,
        steady_util=steady_utilization(critical),
        l2_bound_us=l2_bound_us,
        gm_bytes_per_unit=per_unit,
    )


def intervals(replays: dict[int, BlockReplay], soc: SocSpec) -> list[OpInterval]:
    us = soc.cycles_to_us
    return [
        OpInterval(
            block=r.block,
            core=core,
            queue=s.queue,
            op=op.op,
            stage=op.stage,
            line=op.line,
            start_us=us(s.start),
            end_us=us(s.end),
            wait_from_us=us(s.issue),
            pipe_id=op.pipe_id,
            pipe_kind=op.pipe_kind,
            pipe_index=s.pipe_index,
        )
        for r in replays.values()
        for core in sorted(r.sched, key=core_order)
        for op, s in zip(r.ops[core], r.sched[core])
    ]


def core_order(core: str) -> tuple[int, str]:
    """Cube first, then the vector cores by name."""
    return (0 if core == "cube" else 1, core)
