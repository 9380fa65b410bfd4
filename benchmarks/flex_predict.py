"""Predicted time (the timing model, 910B2) of flex_attention: a document mask's time against its visited
tiles (block sparsity: it scales with them, not the dense count), and the cost of each kind of mod on a
causal call against ptofa's plain causal kernel.

    PYTHONPATH=. python benchmarks/flex_predict.py --seq 1024 --docs 1 2 4 --mods
"""

from __future__ import annotations

import argparse

import torch

from ptofa.attention.flex import create_block_mask, plan_flex
from ptofa.launch.sim import launch
from ptofa.sim.options import RunOptions
from ptofa.sim.timing import predict


def _predict(plan, tensors) -> float:
    (sim,) = launch(plan, tensors, options=RunOptions(trace=True))
    return float(predict(sim.trace, plan.config, plan.shape, soc=plan.soc, block_dim=plan.block_dim).kernel_us)


def predicted_us(q, k, v, block_mask, score_mod=None, sinks=None) -> tuple[float, int]:
    """(predicted kernel us, KV tiles visited) of one planned call, run on the simulator with a trace."""
    call = plan_flex(q, k, v, score_mod=score_mod, block_mask=block_mask, backend="sim", sinks=sinks)
    ranges = call.tensors["tile_ranges"]
    return _predict(call.plan, call.tensors), int((ranges[:, 1] - ranges[:, 0]).sum())


def plain_causal_us(q, k, v) -> float:
    """ptofa's plain causal kernel (flash_attn_func's automatic config) on the same problem."""
    from ptofa.attention.core import auto_config
    from ptofa.launch.plan import plan_forward
    from ptofa.pipeline import ProblemShape

    batch, heads, s, d = q.shape
    shape = ProblemShape(batch, heads, s, s, window=(-1, 0))
    config = auto_config(d, "f16", s1=s, masked=True, shape=shape)
    plan = plan_forward(config, ProblemShape(batch, heads, s, s), "910B2", scale=d ** -0.5, bounds=(2 * s, 0))
    o = torch.empty(batch, s, heads, d, dtype=torch.float16)
    return _predict(plan, {"q": q.transpose(1, 2).contiguous(), "k": k.transpose(1, 2).contiguous(),
                           "v": v.transpose(1, 2).contiguous(), "o": o, "lse": None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--docs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--mods", action="store_true", help="also the cost of each kind of mod on a causal call")
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
    if not args.mods:
        return
    causal = create_block_mask(lambda b, h, qi, kv: qi >= kv, 1, heads, s, s)
    bias = torch.linspace(-1, 1, heads)
    print(f"S={s} heads={heads} causal, plain kernel: predicted {plain_causal_us(q, k, v):.1f} us")
    for what, score_mod, sinks in (
            ("mask_mod", None, None),
            ("mask_mod + relative bias", lambda sc, b, h, qi, kv: sc + (qi - kv) * 0.01, None),
            ("mask_mod + head bias (captured)", lambda sc, b, h, qi, kv: sc + bias[h], None),
            ("mask_mod + softcap (tanh)", lambda sc, b, h, qi, kv: torch.tanh(sc / 30.0) * 30.0, None),
            ("mask_mod + sinks", None, torch.zeros(heads))):
        us, _ = predicted_us(q, k, v, causal, score_mod, sinks)
        print(f"S={s} heads={heads} causal, {what}: predicted {us:.1f} us")


if __name__ == "__main__":
    main()
