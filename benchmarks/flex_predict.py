"""Predicted time (the timing model, 910B2) of flex_attention with a document mask against the same call
without a mask: block sparsity makes it scale with the visited tiles, not the dense count.

    PYTHONPATH=. python benchmarks/flex_predict.py --seq 1024 --docs 1 2 4
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from ptofa.attention.flex import create_block_mask, plan_flex
from ptofa.launch.sim import launch
from ptofa.sim.options import RunOptions
from ptofa.sim.timing import predict


def predicted_us(q, k, v, block_mask) -> tuple[float, int]:
    """(predicted kernel us, KV tiles visited) of one planned call, run on the simulator with a trace."""
    call = plan_flex(q, k, v, block_mask=block_mask, backend="sim")
    (sim,) = launch(call.plan, call.tensors, options=RunOptions(trace=True))
    ranges = call.tensors["tile_ranges"]
    plan = call.plan
    timed = predict(sim.trace, plan.config, plan.shape, soc=plan.soc, block_dim=plan.block_dim)
    return float(timed.kernel_us), int((ranges[:, 1] - ranges[:, 0]).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--docs", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    s, heads = args.seq, args.heads
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, s, 64, generator=g).half() for _ in range(3))
    for docs in args.docs:
        doc = torch.arange(s) * docs // s

        def same_doc(b, h, qi, kv, doc=doc):
            return doc[qi] == doc[kv]

        us, tiles = predicted_us(q, k, v, create_block_mask(same_doc, 1, heads, s, s))
        print(f"S={s} heads={heads} documents={docs}: {tiles} KV tiles visited, predicted {us:.1f} us")


if __name__ == "__main__":
    main()
