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
  back to back pays its repeats alone (`op_costs.instruction_cycles`, `op_costs.vector_startup`;
  every op's queue and cycles are `op_costs`').
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
  at the HBM rate (`shared_limits`), however fast each core's own
  ports are. The host's enqueue of the launch (`SocSpec.host_launch_us`) is not device time
  and is not included; the summary names it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from ptofa.kernels.units import block_units
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.sim.op_costs import TimingError, core_kind, duration_cycles, queue_of, vector_startup
from ptofa.sim.shared_limits import gm_bytes, launch_floors_us, limiting
from ptofa.sim.socspec import SocSpec, get_soc
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
