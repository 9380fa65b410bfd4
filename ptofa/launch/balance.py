"""A dense problem through the balanced split-KV launch, checked and timed: `run_fa run --balance`
and the balanced points of `run_fa sweep --balance`.

The dense batch runs as B equal packed sequences on the varlen kernel with the timing model's
per-unit split counts (`splitkv.plan_splits`: e.g. only the units of the incomplete last wave
split), then the reduce kernel over the split units. The predicted time is the full timing
model on both traced launches, one after the other (`timing.predict` of the forward kernel plus
`splitkv.reduce_us`), not the planner's estimate; the row says how the launch was split.
"""

from __future__ import annotations

import math
import time

import torch

from ptofa.launch.base import TORCH_DTYPES, RunResult, check_output
from ptofa.launch.plan import dense_as_varlen, plan_split
from ptofa.launch.sim import launch
from ptofa.launch.splitkv import plan_varlen, reduce_us
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.reference import make_inputs
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import DEFAULT_SOC, SocSpec, get_soc
from ptofa.sim.timing import predict


def run_balanced(config: FAConfig, shape: ProblemShape, backend: str = "sim", seed: int = 0, soc: str | SocSpec = DEFAULT_SOC,
                 num_splits: int = 0, timing: bool = True, key_mask: torch.Tensor | None = None) -> RunResult:
    """Run the dense `shape` split-KV on the simulator (`num_splits` 0: the balanced per-unit plan;
    > 0: every unit split that many ways), check O (and LSE) against the dense reference and
    predict the time of the forward launch plus the reduce launch (`timing` is always on: the
    sweep's run-function signature). `RunResult.extra["split"]` says how the units were split
    (`splitkv.Plan.describe`)."""
    result = RunResult.start(config, shape, "sim")
    if backend != "sim" or key_mask is not None or not timing:
        result.status, result.message = "error", (f"--balance: a timed run on the simulator without a key-padding "
                                                  f"mask, not backend={backend}, key_mask given={key_mask is not None}")
        return result
    batch, heads, kv_heads = shape.batch, shape.heads, shape.kv_heads
    spec = get_soc(soc)
    vconfig, vshape, table_of = dense_as_varlen(config, batch, shape.s0, shape.s1, heads, kv_heads, shape.window)
    q, k, v = make_inputs(shape, config.head, seed, TORCH_DTYPES[config.in_dtype], kv_heads)
    scale = shape.default_scale(config.head)
    out = torch.full((batch * shape.s0, heads, config.head), math.nan, dtype=TORCH_DTYPES[config.out_dtype])
    lse = torch.full((heads, batch * shape.s0), math.nan) if config.lse else None
    started = time.perf_counter()
    plan = plan_split(plan_varlen(vconfig, vshape, table_of, num_splits, spec), vshape, spec, scale=scale)
    results = launch(plan, {"q": q.reshape(-1, heads, config.head), "k": k.reshape(-1, kv_heads, config.head),
                            "v": v.reshape(-1, kv_heads, config.head), "o": out, "lse": lse, "block_table": None},
                     options=RunOptions(trace=True))
    result.wall_s = time.perf_counter() - started
    dense_lse = None if lse is None else lse.reshape(heads, batch, shape.s0).permute(1, 0, 2)
    check_output(result, out.view(batch, shape.s0, heads, config.head), q, k, v, scale, window=shape.window,
                 lse=dense_lse, out_dtype=config.out_dtype)
    timed = predict(results[0].trace, plan.config, vshape, soc=spec, block_dim=plan.block_dim)
    red_us = 0.0 if len(results) == 1 else reduce_us(results[1].trace, plan.config, vshape, plan.table, spec)
    total_us = timed.kernel_us + red_us
    result.predicted_us = total_us
    result.predicted_tflops = timed.flops / (total_us * 1e-6) / 1e12
    result.extra.update({
        "split": plan.describe(), "main_us": round(timed.kernel_us, 2), "reduce_us": round(red_us, 2),
        "block_dim": plan.block_dim, "predicted_bound": timed.bound, "predicted_util": timed.steady_util,
        "peak_fraction": result.predicted_tflops * 1e12 / timed.soc.peak_flops,
        "timing_summary": timed.summary(), "utilization": timed.utilization_line(),
    })
    return result


def balanced_line(result: RunResult) -> str:
    """One line for `run_fa run --balance`: the split, the predicted time of both launches, the check."""
    extra = result.extra
    return (f"balanced split-KV (units x splits: {extra.get('split', '?')}; {extra.get('block_dim', '?')} blocks): "
            f"{result.status}  "
            f"predicted {result.predicted_us or 0.0:.1f} us = main {extra.get('main_us', 0.0):.1f} + reduce "
            f"{extra.get('reduce_us', 0.0):.1f} us, {result.predicted_tflops or 0.0:.1f} TFLOP/s  {result.message}")
