"""Simulator speed against the torch fp32 reference, in one process.

    python benchmarks/bench_sim.py [--s0 8192 --s1 8192 --head 128 --tile-s1 256 --qk-preload 3] [--profile]

Prints the simulator's wall time for the whole launch (parse of the emitted `.pto`
text, compile to closures and execution of every block), the wall time of an fp32
torch attention on the same fp16 inputs (upcast once, not timed), and their ratio.
The issue's goal: ratio <= 10 on a 2-core machine for B = N = 1, S0 = S1 = 8192, D = 128.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
import torch

from ptofa.fa_builder import emit_fa
from ptofa.launch.plan import blocks_for
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.reference import check_accuracy, make_inputs, reference_attention
from ptofa.launch.sim import sim_kernel_args
from ptofa.sim.socspec import DEFAULT_SOC, get_soc
from ptofa.sim import simulate
from ptofa.ir.textio import check_text


def torch_fp32_attention(q32: torch.Tensor, k32: torch.Tensor, v32: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale * Q K^T) V in fp32 on BSND inputs (the reference's math, unchunked)."""
    q, k, v = (t.transpose(1, 2) for t in (q32, k32, v32))
    p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * scale, dim=-1)
    return torch.matmul(p, v).transpose(1, 2)


def _field(item: str) -> tuple[str, object]:
    """`name=value` of --set: true/false, an int, or the text."""
    name, sep, text = item.partition("=")
    if not sep:
        raise SystemExit(f"--set {item!r}: expected FIELD=VALUE")
    lowered = text.lower()
    if lowered in ("true", "false"):
        return name, lowered == "true"
    return name, int(text) if text.lstrip("-").isdigit() else text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--s0", type=int, default=8192)
    ap.add_argument("--s1", type=int, default=8192)
    ap.add_argument("--head", type=int, default=128)
    ap.add_argument("--tile-s1", type=int, default=256)
    ap.add_argument("--qk-preload", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile of the simulator run")
    ap.add_argument("--check", action="store_true", help="also check O with the accuracy rule (not timed)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any other FAConfig field, e.g. --set cube_rowsum=false --set cube_s1=128 "
                         "(to time the simulator on the kernel an earlier run used)")
    opts = ap.parse_args()

    # fp32 O, as in earlier runs of this benchmark (the kernel default is now the input dtype).
    fields = dict(head=opts.head, tile_s1=opts.tile_s1, qk_preload=opts.qk_preload, out_dtype="f32")
    fields.update(_field(item) for item in opts.set)
    config = FAConfig(**fields)
    shape = ProblemShape(opts.batch, opts.heads, opts.s0, opts.s1)
    shape.check(config)
    block_dim = blocks_for(shape.work_units(config), get_soc(DEFAULT_SOC))
    scale = shape.default_scale(config.head)
    text = emit_fa(config)
    q, k, v = make_inputs(shape, config.head, seed=0)
    o = np.full((shape.batch, shape.s0, shape.heads, config.head), np.nan, dtype=np.float32)
    args = sim_kernel_args(config, shape, q.numpy(), k.numpy(), v.numpy(), o, block_dim, scale)

    profiler = cProfile.Profile() if opts.profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    sim = simulate(check_text(text, "fa.pto"), args, block_dim)
    if profiler:
        profiler.disable()
    sim_s = time.perf_counter() - start

    q32, k32, v32 = q.float(), k.float(), v.float()
    start = time.perf_counter()
    torch_fp32_attention(q32, k32, v32, scale)
    ref_s = time.perf_counter() - start

    print(f"shape B={shape.batch} N={shape.heads} S0={shape.s0} S1={shape.s1} D={config.head}; "
          f"config {config.summary()}; block_dim={block_dim}; torch threads={torch.get_num_threads()}")
    print(f"simulator:            {sim_s:8.2f} s  ({sim.steps} op executions, {1e6 * sim_s / max(sim.steps, 1):.1f} us/op)")
    print(f"torch fp32 reference: {ref_s:8.2f} s")
    print(f"ratio sim / reference: {sim_s / ref_s:6.2f}  (goal <= 10)")
    if opts.check:
        ref32, ref16 = reference_attention(q, k, v, scale)
        print(check_accuracy(o, ref32, ref16).summary())
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
