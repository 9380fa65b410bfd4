"""The timing model for any kernel: a simulated launch's trace -> predicted NPU time.

`timing.predict` times a FlashAttention launch from its config and shape (work units,
compulsory Q/K/V/O bytes, visible-score FLOPs). A kernel of your own has none of those,
so `predict_kernel` takes every figure from the trace itself:

* the launch time: each block's replay (`timing.replay`, the same per-queue model and
  constants of `socspec`) plus the block start-up, blocks run back to back per cube core
  (`timing.launch_cycles`; untraced blocks are copied from a traced one);
* the shared floors (`shared_limits.shared_floor_us`): every byte the blocks' `tload`s read from GM
  and `tstore`s write to it passes the chip's L2, shared by all cores; the distinct bytes
  (the union of the GM regions touched) come from or go to HBM once, and re-reads of bytes
  already touched hit the L2 while the distinct bytes fit in it (`shared_limits.l2_miss_fraction`).
  So data reuse shows: a GEMM that re-reads its panels is bounded by their L2 traffic, not by
  HBM. The prediction is never below either floor;
* the cube floor: the traced matmuls' MACs on the used cube cores at peak.

The result is a `timing.TimingResult`, so `run_fa run --timeline/--trace` draw it as they
draw FlashAttention's.
"""

from __future__ import annotations

from collections import defaultdict

import numpy

from ptofa.sim.socspec import SocSpec, get_soc
from ptofa.sim.op_costs import TimingError
from ptofa.sim.shared_limits import gm_bytes, l2_miss_fraction, limiting, shared_floor_us
from ptofa.sim.timing import (
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

def gm_traffic_bytes(trace: Trace) -> int:
    """Bytes the trace's loads read from GM and its stores write to GM (pipe slots included)."""
    return sum(gm_bytes(ops) for ops in trace.cores.values())


def _row_spans(view: tuple) -> numpy.ndarray:
    """[start, end) byte spans of one traced GM view (`TraceOp.gm_view`), one per contiguous row."""
    _, offset, shape, strides, item = view
    if not shape or min(shape) <= 0:
        return numpy.empty((0, 2), dtype=numpy.int64)
    *lead, last = shape
    *lead_strides, last_stride = strides
    if last_stride != 1:  # no contiguous rows: every element is its own span
        lead, lead_strides, last = [*lead, last], [*lead_strides, last_stride], 1
    starts = numpy.full((1,), offset, dtype=numpy.int64)
    for n, stride in zip(lead, lead_strides):
        starts = (starts[:, None] + numpy.arange(n, dtype=numpy.int64)[None, :] * stride * item).ravel()
    return numpy.stack([starts, starts + last * item], axis=1)


def gm_footprint_bytes(trace: Trace) -> int:
    """Distinct GM bytes the trace's loads and stores touch: the union of their regions per buffer."""
    spans: dict[int, list[numpy.ndarray]] = defaultdict(list)
    for ops in trace.cores.values():
        for op in ops:
            if op.gm_view and op.op in ("pto.tload", "pto.tstore"):
                spans[op.gm_view[0]].append(_row_spans(op.gm_view))
    total = 0
    for parts in spans.values():
        ordered = numpy.concatenate(parts)
        ordered = ordered[numpy.argsort(ordered[:, 0], kind="stable")]
        reach = numpy.maximum.accumulate(ordered[:, 1])
        # a span starts a new run where it begins past everything before it
        new_run = numpy.ones(len(ordered), dtype=bool)
        new_run[1:] = ordered[1:, 0] > reach[:-1]
        run_id = numpy.cumsum(new_run) - 1
        run_start = ordered[new_run, 0]
        run_end = numpy.zeros(len(run_start), dtype=numpy.int64)
        numpy.maximum.at(run_end, run_id, ordered[:, 1])
        total += int((run_end - run_start).sum())
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
    traffic = gm_traffic_bytes(trace)
    distinct = gm_footprint_bytes(trace)
    from_hbm = distinct + (traffic - distinct) * l2_miss_fraction(spec.l2_bytes, distinct)
    l2_bound_us, hbm_bound_us = shared_floor_us(spec, traffic * traced_share, from_hbm * traced_share)
    cores_used = min(block_dim, spec.cube_cores)
    cube_bound_us = spec.cycles_to_us(macs / (cores_used * spec.cube_macs_per_cycle))
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
        flops=int(2 * macs),
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
        gm_bytes_per_unit=traffic / len(block_cycles),
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
        f"floors: L2 {result.l2_bound_us:.2f} us (every load and store, all cores), HBM {result.hbm_bound_us:.2f} us "
        f"(the distinct bytes, and re-reads that miss the L2), cube {result.cube_bound_us:.2f} us; "
        f"busy in block {block}: {busy or 'none'}; {result.extrapolation}."
    )
