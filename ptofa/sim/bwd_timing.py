"""Timing model of the backward: replay each kernel's trace (`ptofa.sim.timing`) and add them.

The two kernels run one after the other, so the backward's time is the sum of their
launches. Each launch is timed like the forward's (`ptofa.sim.timing.predict`): the
traced blocks are replayed per core and hardware queue, the untraced ones copied from a
traced block with the same unit count, and the launch takes at least its compulsory HBM
traffic. Matmul work: the dq kernel computes S, dP and dQ, the dkdv kernel S^T, dP^T,
dV and dK: 7 of the forward's 2 GEMMs per visible score (FlashAttention-2's single
fused pass has 5; the split into two deterministic kernels recomputes S and dP). The
atomic-dQ mode's dkdv kernel adds dQ: 5 GEMMs, between two vector-only kernels (prep, post).
Its atomic-add tstore is timed as a plain FIX-pipe store: CANN documents what the atomic
mode does (the GM destination is read, added to and written back) but publishes no cost for
it, so only its extra GM read is modelled, in the launch's HBM floor (`compulsory_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ptofa.kernels.bwd_pipeline import BwdConfig, work_units
from ptofa.pipeline import DTYPE_BYTES, ProblemShape
from ptofa.sim import SimResult
from ptofa.sim.socspec import SocSpec, get_soc
from ptofa.sim.timing import (
    TimingError,
    TimingResult,
    busy_fractions,
    steady_utilization,
    critical_path_shares,
    intervals,
    launch_cycles,
    replay,
    steady_bound,
)

GEMMS = {"dq": 3, "dkdv": 4, "prep": 0, "post": 0}  # matmuls per visible score entry, each 2 * D flops
FORWARD_GEMMS = 2


def gemms(config: BwdConfig, kernel: str) -> int:
    """Matmuls per visible score entry of `kernel` (the atomic-dQ dkdv kernel also computes dQ = dS K;
    with two dkdv passes S^T is computed twice)."""
    return GEMMS[kernel] + int(kernel == "dkdv") * (int(config.atomic_dq) + config.dkdv_passes - 1)


def compulsory_bytes(config: BwdConfig, shape: ProblemShape, kernel: str) -> int:
    """GM traffic each kernel cannot avoid: its inputs read once, its outputs written once."""
    e = DTYPE_BYTES[config.in_dtype]
    q_side = shape.batch * shape.s0 * shape.heads * config.head * e
    kv_side = shape.batch * shape.s1 * shape.kv_heads * config.head * e
    stats = shape.batch * shape.heads * shape.s0 * 4
    dq_f32 = q_side * 4 // e
    if kernel == "dq":  # Q, dO, O, K, V, LSE in; dQ, D out
        return 4 * q_side + 2 * kv_side + 2 * stats
    if kernel == "prep":  # O, dO in; D and the zeroed dQ f32 accumulator out
        return 2 * q_side + stats + dq_f32
    if kernel == "post":  # dQ f32 in, dQ out
        return dq_f32 + q_side
    atomic = 2 * dq_f32 if config.atomic_dq else 0  # each dQ f32 element read and written by the adds at least once
    return 2 * q_side + 4 * kv_side + 2 * stats + atomic  # Q, dO, K, V, LSE, D in; dK, dV out


def predict_kernel(sim: SimResult, config: BwdConfig, shape: ProblemShape, kernel: str,
                   soc: str | SocSpec = "910B2") -> TimingResult:
    """Predicted time of one backward kernel's launch from its traced `SimResult`.

    `flops` (and so the TFLOPS the summary prints) keeps the forward's convention,
    4 * N * D per visible score, so kernels compare on one scale; `cube_bound_us` counts
    this kernel's own GEMMs."""
    spec = get_soc(soc)
    if sim.trace is None:
        raise TimingError(f"the {kernel} launch was run without a trace")
    replays = replay(sim.trace, spec, config.slot_num)
    if not replays:
        raise TimingError(f"the {kernel} trace has no ops")
    units = work_units(config, kernel, shape.batch, shape.heads, shape.kv_heads, shape.s0, shape.s1)
    cycles, waves, note = launch_cycles({b: r.cycles for b, r in replays.items()}, sim.block_dim, units, spec)
    macs = shape.flops(config.head) // 2 // FORWARD_GEMMS * gemms(config, kernel)
    cores = min(sim.block_dim, spec.cube_cores)
    cube_us = spec.cycles_to_us(macs / (cores * spec.cube_macs_per_cycle))
    hbm_us = spec.cycles_to_us(compulsory_bytes(config, shape, kernel) / (spec.hbm_bytes_per_cycle_per_core * spec.cube_cores))
    critical = max(replays.values(), key=lambda r: r.cycles)
    shares = critical_path_shares(critical)
    bound = "HBM" if hbm_us >= spec.cycles_to_us(cycles) else steady_bound(shares)
    busy: dict[tuple[int, str, str], float] = {}
    for r in replays.values():
        busy.update(busy_fractions(r))
    return TimingResult(soc=spec, block_dim=sim.block_dim, kernel_us=max(spec.cycles_to_us(cycles), hbm_us),
                        flops=shape.flops(config.head),
                        block_us={b: spec.cycles_to_us(r.cycles) for b, r in replays.items()}, busy=busy, bound=bound,
                        bound_shares=shares, intervals=intervals(replays, spec), waves=waves, cube_bound_us=cube_us,
                        hbm_bound_us=hbm_us, extrapolation=note,
                        steady_util=steady_utilization(critical))


@dataclass
class BackwardTiming:
    """The backward's predicted time: one `TimingResult` per kernel, run back to back."""

    kernels: dict[str, TimingResult]
    gemms: int  # matmuls per visible score entry, all kernels

    @property
    def total_us(self) -> float:
        return sum(t.kernel_us for t in self.kernels.values())

    def summary(self, forward_us: float | None = None) -> str:
        lines = [f"backward predicted {self.total_us:.2f} us = "
                 + " + ".join(f"{k} {t.kernel_us:.2f} us ({t.bound}-bound)" for k, t in self.kernels.items())]
        if forward_us:
            lines.append(f"backward/forward ratio {self.total_us / forward_us:.2f} (forward {forward_us:.2f} us; "
                         f"matmul work {self.gemms}/{FORWARD_GEMMS} = {self.gemms / FORWARD_GEMMS:.1f}x)")
        lines += [f"[{k}] {t.summary()}" for k, t in self.kernels.items()]
        return "\n".join(lines)


def predict_backward(results: dict[str, SimResult], config: BwdConfig, shape: ProblemShape,
                     soc: str | SocSpec = "910B2") -> BackwardTiming:
    """Time `config.kernels` from the traced launches `run_backward(..., trace=True)` returned."""
    return BackwardTiming({k: predict_kernel(results[k], config, shape, k, soc) for k in config.kernels},
                          sum(gemms(config, k) for k in config.kernels))
