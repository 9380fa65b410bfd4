"""The timing model for any kernel: a simulated launch's trace -> predicted NPU time.

`timing.predict` times a FlashAttention launch from its config and shape (work units,
compulsory Q/K/V/O bytes, visible-score FLOPs). A kernel of your own has none of those,
so `predict_kernel` takes every figure from the trace itself:

* the launch time: each block's replay (`timing.replay`, the same per-queue model and
  constants of `socspec`) plus the block start-up, blocks run back to back per cube core
  (`timing.launch_cycles`; untraced blocks are copied from a traced one);
* the HBM floor: the bytes the traced blocks' `tload`s read from GM and `tstore`s write to
  it, at the chip's HBM rate (every byte counted once per access: no L2 reuse is assumed,
  so the floor is the traffic of the kernel as written); the prediction is never below it;
* the cube floor: the traced matmuls' MACs on the used cube cores at peak.

The result is a `timing.TimingResult`, so `run_fa run --timeline/--trace` draw it as they
draw FlashAttention's.
"""

from __future__ import annotations

from ptofa.sim.socspec import SocSpec, get_soc
from ptofa.sim.timing import (
    TimingError,
    TimingResult,
    busy_fractions,
    critical_path_shares,
    intervals,
    launch_cycles,
    replay,
    steady_bound,
    steady_utilization,
)
from ptofa.sim.trace import Trace

GM = "gm"


def gm_traffic_bytes(trace: Trace) -> int:
    """Bytes the trace's loads read from GM and its stores write to GM (pipe slots excluded)."""
    total = 0
    for ops in trace.cores.values():
        for op in ops:
            if op.op == "pto.tload" and op.src_loc == GM:
                total += op.nbytes
            elif op.op == "pto.tstore" and op.dst_loc == GM:
                total += op.nbytes
    return total


def trace_macs(trace: Trace) -> int:
    return sum(op.macs for ops in trace.cores.values() for op in ops)


def predict_kernel(trace: Trace, soc: str | SocSpec = "910B2", block_dim: int | None = None,
                   slot_num: int = 8) -> TimingResult:
    """Predicted time of the launch `trace` was recorded from (any kernel; see the module doc).

    `slot_num` is the slot count of the kernel's pipes, if it has any (ptofa's kernels: 8)."""
    spec = get_soc(soc)
    block_dim = block_dim or trace.block_dim
    replays = replay(trace, spec, slot_num)
    if not replays:
        raise TimingError("the trace has no ops: run the simulator with trace=True")
    block_cycles = {b: r.cycles for b, r in replays.items()}
    # Every block is one unit of work here: a block not traced costs what a traced one does.
    cycles, waves, note = launch_cycles(block_cycles, block_dim, block_dim, spec)
    traced_share = block_dim / len(block_cycles)
    macs = trace_macs(trace) * traced_share
    gm_bytes = gm_traffic_bytes(trace) * traced_share
    cores_used = min(block_dim, spec.cube_cores)
    cube_bound_us = spec.cycles_to_us(macs / (cores_used * spec.cube_macs_per_cycle))
    hbm_bound_us = spec.cycles_to_us(gm_bytes / (spec.hbm_bytes_per_cycle_per_core * spec.cube_cores))
    replay_us = spec.cycles_to_us(cycles)
    critical = max(replays.values(), key=lambda r: r.cycles)
    shares = critical_path_shares(critical)
    busy: dict[tuple[int, str, str], float] = {}
    for r in replays.values():
        busy.update(busy_fractions(r))
    return TimingResult(
        soc=spec,
        block_dim=block_dim,
        kernel_us=max(replay_us, hbm_bound_us),
        flops=int(2 * macs),
        block_us={b: spec.cycles_to_us(c) for b, c in block_cycles.items()},
        busy=busy,
        bound="HBM" if hbm_bound_us >= replay_us else steady_bound(shares),
        bound_shares=shares,
        intervals=intervals(replays, spec),
        waves=waves,
        cube_bound_us=cube_bound_us,
        hbm_bound_us=hbm_bound_us,
        extrapolation=note,
        steady_util=steady_utilization(critical),
    )


def kernel_summary(result: TimingResult) -> str:
    """One paragraph: predicted time, what bounds it, the floors and the busiest queues."""
    block = result.critical_block
    busy = ", ".join(
        f"{core} {queue} {frac:.0%}"
        for (b, core, queue), frac in sorted(result.busy.items(), key=lambda kv: -kv[1])
        if b == block and queue != "S" and frac >= 0.05
    )
    replayed = max(result.block_us.values())
    flops = f", {result.tflops:.2f} TFLOP/s of matmul" if result.flops else ""
    return (
        f"Predicted {result.kernel_us:.2f} us on {result.soc.name} (timing model; block_dim={result.block_dim}, "
        f"{result.waves} wave(s){flops}); bound by {result.bound}; slowest block replays in {replayed:.2f} us; "
        f"floors: HBM {result.hbm_bound_us:.2f} us (GM traffic of the loads and stores), cube {result.cube_bound_us:.2f} us; "
        f"busy in block {block}: {busy or 'none'}; {result.extrapolation}."
    )
