"""Timing model of the backward: replay each kernel's trace (`ptofa.sim.timing`) and add them.

The two kernels run one after the other, so the backward's time is the sum of their
launches. Each launch is timed like the forward's (`ptofa.sim.timing.predict`): the
traced blocks are replayed per core and hardware queue, the untraced ones copied from a
traced block with the same unit count, and the launch takes at least what the chip's shared
L2 and HBM allow (`shared_limits.shared_floor_us`: every traced load and store at the L2 rate, the
compulsory bytes at the HBM rate). Matmul work: the dq kernel computes S, dP and dQ, the dkdv kernel S^T, dP^T,
dV and dK: 7 of the forward's 2 GEMMs per visible score (FlashAttention-2's single
fused pass has 5; the split into two deterministic kernels recomputes S and dP). The
atomic-dQ mode's dkdv kernel adds dQ: 5 GEMMs, between two row-wise kernels (prep: D from the cube's
dO O^T, one [dq_block_q, dq_block_q] GEMM per row block; post: vector-only). The dq kernel's G = dO O^T
(D) is one such GEMM per unit, beside the per-score ones `GEMMS` counts.
Its atomic-add tstore is timed as a plain FIX-pipe store: CANN documents what the atomic
mode does (the GM destination is read, added to and written back) but publishes no cost for
it, so only its extra GM read is modelled, in the launch's HBM floor (`compulsory_bytes`).

Varlen (`BwdConfig.varlen`): the dq and dkdv kernels walk unit tables whose units differ in work,
so a launch is predicted from its table (`predict_kernel(..., table=)`, `table_schedule`): a unit
costs `unit_cycles` + `step_cycles` x its steps (the score tiles it visits:
`units.backward_table_steps`), the blocks' loads are those costs summed over the units the
persistent loop's snake gives each block (`units.block_loads`, the kernels' own order), and the
blocks run in waves on the cube cores as in `launch_cycles`. The two per-unit figures are not
constants: they are solved (least squares, non-negative) from this launch's own replayed blocks,
each of which ran a known set of units (`units.schedule`); for units of equal work they reduce to
the replayed blocks' mean time per unit. The row-wise prep and post run over all packed rows as one
batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ptofa.kernels.bwd_pipeline import BwdConfig, work_units
from ptofa.kernels.units import backward_table_steps, block_loads, schedule
from ptofa.pipeline import DTYPE_BYTES, ProblemShape
from ptofa.sim.executor import SimResult
from ptofa.sim.socspec import SocSpec, get_soc
from ptofa.sim.op_costs import TimingError
from ptofa.sim.shared_limits import gm_bytes, limiting, shared_floor_us
from ptofa.sim.timing import (
    TimingResult,
    busy_fractions,
    steady_utilization,
    critical_path_shares,
    intervals,
    launch_cycles,
    replay,
    steady_bound,
    units_of_block,
    wave_cycles,
)

GEMMS = {"dq": 3, "dkdv": 4, "prep": 0, "post": 0}  # matmuls per visible score entry, each 2 * D flops
FORWARD_GEMMS = 2


def gemms(config: BwdConfig, kernel: str) -> int:
    """Matmuls per visible score entry of `kernel` (the atomic-dQ dkdv kernel also computes dQ = dS K;
    with two dkdv passes S^T is computed twice)."""
    return GEMMS[kernel] + int(kernel == "dkdv") * (int(config.atomic_dq) + config.dkdv_passes - 1)


def gram_macs(config: BwdConfig, shape: ProblemShape, kernel: str) -> int:
    """MACs of D's G = dO O^T: a [rows, rows] x D GEMM per block of `dq_block_q` query rows (the dq kernel's
    units: each sequence's own blocks; the row-wise prep's: blocks of all packed rows)."""
    if kernel not in ("dq", "prep"):
        return 0
    lengths = ([q for q, _ in shape.seqlens] if shape.seqlens is not None and kernel == "dq"
               else [shape.s0] * launch_batch(shape))
    bq = config.dq_block_q
    return shape.heads * config.head * sum((n // bq) * bq * bq + (n % bq) ** 2 for n in lengths)


def launch_batch(shape: ProblemShape) -> int:
    """The batch the kernels are launched with: packed sequences (`shape.seqlens`) are one batch of
    S0 = total_q and S1 = total_k rows."""
    return 1 if shape.seqlens is not None else shape.batch


def compulsory_bytes(config: BwdConfig, shape: ProblemShape, kernel: str) -> int:
    """GM traffic each kernel cannot avoid: its inputs read once, its outputs written once."""
    e = DTYPE_BYTES[config.in_dtype]
    batch = launch_batch(shape)
    q_side = batch * shape.s0 * shape.heads * config.head * e
    kv_side = batch * shape.s1 * shape.kv_heads * config.head * e
    stats = batch * shape.heads * shape.s0 * 4
    dq_f32 = q_side * 4 // e
    if kernel == "dq":  # Q, dO, O, K, V, LSE in; dQ, D out
        return 4 * q_side + 2 * kv_side + 2 * stats
    if kernel == "prep":  # O, dO in; D and the zeroed dQ f32 accumulator out
        return 2 * q_side + stats + dq_f32
    if kernel == "post":  # dQ f32 in, dQ out
        return dq_f32 + q_side
    atomic = 2 * dq_f32 if config.atomic_dq else 0  # each dQ f32 element read and written by the adds at least once
    return 2 * q_side + 4 * kv_side + 2 * stats + atomic  # Q, dO, K, V, LSE, D in; dK, dV out


@dataclass(frozen=True)
class TableSchedule:
    """A varlen launch's predicted blocks from its unit table: each rank's `steps`, a unit's and a
    step's cycles (solved from the replayed blocks), and per block the cycles of the units the
    snake gives it (`units.block_loads`)."""

    steps: tuple[int, ...]  # by rank (table entry)
    unit_cycles: float
    step_cycles: float
    loads: tuple[float, ...]  # cycles per block
    round_robin: tuple[float, ...]  # the same costs handed out round robin (what the snake is compared with)

    @property
    def makespan(self) -> float:
        """Cycles of the busiest block (0 without units)."""
        return max(self.loads, default=0.0)


def _per_unit_cycles(replayed: Mapping[int, float], plan: Sequence[Sequence[int]],
                     steps: Sequence[int]) -> tuple[float, float]:
    """(unit cycles a, step cycles c >= 0) with block b's replayed cycles ~ a n_b + c T_b (n_b units,
    T_b steps), least squares over the replayed blocks; one term alone when the blocks cannot tell
    the two apart (units of equal work) or the pair would be negative."""
    rows = [(len(plan[b]), sum(steps[r] for r in plan[b]), cycles) for b, cycles in replayed.items()]
    snn, snt, stt = (sum(n * n for n, _, _ in rows), sum(n * t for n, t, _ in rows),
                     sum(t * t for _, t, _ in rows))
    snc, stc = sum(n * y for n, _, y in rows), sum(t * y for _, t, y in rows)
    candidates = []
    det = snn * stt - snt * snt
    if det > 1e-9 * snn * stt:
        a, c = (snc * stt - stc * snt) / det, (stc * snn - snc * snt) / det
        if a >= 0 and c >= 0:
            candidates.append((a, c))
    if snn:
        candidates.append((snc / snn, 0.0))
    if stt:
        candidates.append((0.0, stc / stt))
    return min(candidates, key=lambda ac: sum((ac[0] * n + ac[1] * t - y) ** 2 for n, t, y in rows))


def table_schedule(replayed: Mapping[int, float], block_dim: int, steps: Sequence[int]) -> TableSchedule:
    """The `TableSchedule` of a launch of `block_dim` blocks over a table of these per-rank steps, from
    its replayed blocks' cycles (block -> cycles; each block ran the ranks `units.schedule` gives it)."""
    a, c = _per_unit_cycles(replayed, schedule(len(steps), block_dim, snake=True), steps)
    costs = [a + c * s for s in steps]
    return TableSchedule(tuple(steps), a, c, tuple(block_loads(costs, block_dim, snake=True)),
                         tuple(block_loads(costs, block_dim, snake=False)))


def predict_kernel(sim: SimResult, config: BwdConfig, shape: ProblemShape, kernel: str,
                   soc: str | SocSpec = "910B2", table=None) -> TimingResult:
    """Predicted time of one backward kernel's launch from its traced `SimResult` (a varlen dq or dkdv
    launch: with its unit `table`, `table_schedule`).

    `flops` (and so the TFLOPS the summary prints) keeps the forward's convention,
    4 * N * D per visible score, so kernels compare on one scale; `cube_bound_us` counts
    this kernel's own GEMMs (D's `gram_macs` included)."""
    return _predict(sim, config, shape, kernel, soc, table)[0]


def _predict(sim: SimResult, config: BwdConfig, shape: ProblemShape, kernel: str, soc: str | SocSpec,
             table) -> tuple[TimingResult, TableSchedule | None]:
    spec = get_soc(soc)
    if sim.trace is None:
        raise TimingError(f"the {kernel} launch was run without a trace")
    replays = replay(sim.trace, spec, config.slot_num)
    if not replays:
        raise TimingError(f"the {kernel} trace has no ops")
    plan = None
    if config.varlen and kernel in ("dq", "dkdv"):
        if table is None:
            raise TimingError(f"the varlen {kernel} launch is predicted from its unit table (table=)")
        steps = backward_table_steps(config, kernel, table.tolist(), shape.window, shape.heads // shape.kv_heads)
        if len(replays) < sim.block_dim:
            raise TimingError(f"the varlen {kernel} trace has {len(replays)} of {sim.block_dim} blocks; it needs every "
                              f"block (run_backward(..., trace=True) traces them)")
        plan = table_schedule({b: r.cycles for b, r in replays.items()}, sim.block_dim, steps)
        cycles, waves = wave_cycles(list(plan.loads), spec)
        note = (f"blocks from the unit table: {len(steps)} units in the snake, {plan.unit_cycles:.0f} cycles a unit + "
                f"{plan.step_cycles:.0f} a step (solved from the {len(replays)} replayed blocks); "
                f"{spec.block_start_us:g} us block start-up per wave")
    else:
        units = work_units(config, kernel, launch_batch(shape), shape.heads, shape.kv_heads, shape.s0, shape.s1)
        cycles, waves, note = launch_cycles({b: r.cycles for b, r in replays.items()}, sim.block_dim, units, spec)
    macs = shape.flops(config.head) // 2 // FORWARD_GEMMS * gemms(config, kernel) + gram_macs(config, shape, kernel)
    cores = min(sim.block_dim, spec.cube_cores)
    cube_us = spec.cycles_to_us(macs / (cores * spec.cube_macs_per_cycle))
    traced = sum(gm_bytes(ops) for ops in sim.trace.cores.values())
    if plan is None:  # the untraced blocks move what the traced ones do per unit
        traced_units = sum(units_of_block(b, sim.block_dim, units) for b in replays)
        traced *= units / max(traced_units, 1)
    l2_us, hbm_us = shared_floor_us(spec, traced, compulsory_bytes(config, shape, kernel))
    critical = max(replays.values(), key=lambda r: r.cycles)
    shares = critical_path_shares(critical)
    kernel_us, bound = limiting(spec.cycles_to_us(cycles), l2_us, hbm_us, steady_bound(shares))
    busy: dict[tuple[int, str, str], float] = {}
    for r in replays.values():
        busy.update(busy_fractions(r))
    return TimingResult(soc=spec, block_dim=sim.block_dim, kernel_us=kernel_us,
                        flops=shape.flops(config.head),
                        block_us={b: spec.cycles_to_us(r.cycles) for b, r in replays.items()}, busy=busy, bound=bound,
                        bound_shares=shares, intervals=intervals(replays, spec), waves=waves, cube_bound_us=cube_us,
                        hbm_bound_us=hbm_us, extrapolation=note,
                        steady_util=steady_utilization(critical), l2_bound_us=l2_us), plan


@dataclass
class BackwardTiming:
    """The backward's predicted time: one `TimingResult` per kernel, run back to back (and for a varlen
    launch the `TableSchedule` of its dq and dkdv kernels)."""

    kernels: dict[str, TimingResult]
    gemms: int  # matmuls per visible score entry, all kernels
    schedules: dict[str, TableSchedule] = field(default_factory=dict)

    @property
    def total_us(self) -> float:
        return sum(t.kernel_us for t in self.kernels.values())

    def summary(self, forward_us: float | None = None) -> str:
        lines = [f"backward predicted {self.total_us:.2f} us = "
                 + " + ".join(f"{k} {t.kernel_us:.2f} us ({t.bound}-bound)" for k, t in self.kernels.items())]
        if forward_us:
            lines.append(f"backward/forward ratio {self.total_us / forward_us:.2f} (forward {forward_us:.2f} us; "
                         f"matmul work {self.gemms}/{FORWARD_GEMMS} = {self.gemms / FORWARD_GEMMS:.1f}x)")
        for k, plan in self.schedules.items():
            us = self.kernels[k].soc.cycles_to_us
            lines.append(f"[{k}] unit table: {len(plan.steps)} units, {sum(plan.steps)} steps on {len(plan.loads)} "
                         f"blocks; predicted busiest block {us(plan.makespan):.2f} us in the kernel's snake "
                         f"(round robin over the table: {us(max(plan.round_robin, default=0.0)):.2f} us)")
        lines += [f"[{k}] {t.summary()}" for k, t in self.kernels.items()]
        return "\n".join(lines)


def predict_backward(results: dict[str, SimResult], config: BwdConfig, shape: ProblemShape,
                     soc: str | SocSpec = "910B2", tables: Mapping[str, object] | None = None) -> BackwardTiming:
    """Time `config.kernels` from the traced launches `run_backward(..., trace=True)` returned (a varlen
    config: with the unit `tables` of its dq and dkdv launches, `varlen.backward_tables`)."""
    timed = {k: _predict(results[k], config, shape, k, soc, (tables or {}).get(k)) for k in config.kernels}
    return BackwardTiming({k: t for k, (t, _) in timed.items()}, sum(gemms(config, k) for k in config.kernels),
                          {k: plan for k, (_, plan) in timed.items() if plan is not None})
