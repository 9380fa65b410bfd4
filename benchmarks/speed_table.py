"""The README's speed table: the forward's best predicted config per size and softmax dtype, what bounds
it, and how the prediction moves with the chip's shared constants halved and doubled.

    python benchmarks/speed_table.py [--s 1024,2048,4096,8192,16384,32768] [--markdown]

B = N = 1, D = 128, S0 = S1, no mask, fp16, 910B2. Each (TILE_S1, QK_PRELOAD) candidate, with single and
with paired Q blocks (`FAConfig.q_pair`, "pair" in the config column; `--no-pair`: single only), is predicted
as `run_fa tune` predicts it (`ptofa.launch.tune`: a probe of one head's first rows, its busiest
block scaled to the launch, then the shared L2 / HBM limits); the best one is printed with its
bound and the GM bytes one unit (128 rows, or 256 paired) moves (every load and store, the pipe slots included).
The last columns repeat the prediction with `SocSpec.l2_shared_bytes` and `hbm_shared_bytes` (the
shared L2 and HBM rates, see ptofa/sim/socspec.py) halved and doubled: the L2 rate is an assumption
(the CANN platform config gives it per AI core, not for the chip), so the table shows what hangs on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import time

from ptofa.launch.calls import blocks_for
from ptofa.launch.tune import TuneShape, busiest_block_us, launch_us
from ptofa.pipeline import ConfigError, FAConfig

CANDIDATES = ((256, 2), (256, 3), (512, 2), (512, 3), (1024, 2), (1024, 3))
SOFTMAX = ("f32", "f16")
VARIANTS = (("l2_shared_bytes", 0.5), ("l2_shared_bytes", 2.0), ("hbm_shared_bytes", 0.5), ("hbm_shared_bytes", 2.0))


def best_row(s: int, softmax: str, pairs: tuple[bool, ...] = (False, True)) -> tuple:
    """(config, predicted us, TFLOP/s, bound, GM MB per unit, TFLOP/s per variant) of the best candidate."""
    shape = TuneShape(1, 1, 1, s, s, 128)
    spec, problem = shape.spec(), shape.problem()
    best = None
    for (tile_s1, qk_preload), q_pair in itertools.product(CANDIDATES, pairs):
        try:
            config = FAConfig(head=128, tile_s1=tile_s1, qk_preload=qk_preload, softmax_dtype=softmax, q_pair=q_pair)
        except ConfigError:
            continue
        block_dim = blocks_for(problem.work_units(config), spec)
        busiest = busiest_block_us(config, shape, spec, block_dim)
        us, bound = launch_us(config, problem, spec, block_dim, busiest)
        if best is None or us < best[1]:
            best = (config, us, bound, busiest, block_dim)
    config, us, bound, busiest, block_dim = best
    flops = problem.flops(128)
    variants = []
    for name, factor in VARIANTS:
        changed = dataclasses.replace(spec, **{name: getattr(spec, name) * factor})
        variants.append(flops / launch_us(config, problem, changed, block_dim, busiest)[0] / 1e6)
    return config, us, flops / us / 1e6, bound, busiest[2] / 1e6, variants


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--s", default="1024,2048,4096,8192,16384,32768", help="comma-separated S0 = S1 values")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown (for the README)")
    ap.add_argument("--no-pair", action="store_true", help="single Q blocks only (the form before q_pair)")
    opts = ap.parse_args()
    started = time.perf_counter()
    header = ("S0 = S1", "softmax", "tile/preload", "predicted us", "TFLOP/s", "bound", "GM MB/unit",
              "L2 x0.5", "L2 x2", "HBM x0.5", "HBM x2")
    if opts.markdown:
        print("| " + " | ".join(header) + " |")
        print("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    else:
        print("  ".join(header))
    for softmax in SOFTMAX:
        for s in (int(x) for x in opts.s.split(",")):
            config, us, tflops, bound, mb, variants = best_row(s, softmax, (False,) if opts.no_pair else (False, True))
            form = f"{config.tile_s1}/{config.qk_preload}" + (" pair" if config.q_pair else "")
            cells = (str(s), softmax, form, f"{us:.1f}", f"{tflops:.0f}", bound,
                     f"{mb:.1f}", *(f"{v:.0f}" for v in variants))
            print(("| " + " | ".join(cells) + " |") if opts.markdown else "  ".join(cells), flush=True)
    print(f"\npredicted by the timing model (910B2; TFLOP/s = 4*S0*S1*D / time); "
          f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
