"""Ring attention on a local process group: W processes, one sequence sharded across them.

    python examples/ring_attention.py --world 2 --seqlen 64 --heads 4 --kv-heads 2 --causal
    python examples/ring_attention.py --world 4 --mode ulysses --seqlen 64 --heads 4 --kv-heads 4
    python examples/ring_attention.py --predict --world 8 --seqlen 131072 --heads 8 --kv-heads 1 --head-dim 128

Without `--predict` it starts `--world` processes on a gloo group (localhost, a file store), runs
`ptofa.ring_flash_attn_func` (or `ulysses_flash_attn_func`) forward and backward on each rank's
zigzag shard (contiguous for Ulysses) with the simulator, gathers the shards and checks out and the
gradients against the torch reference with the FlashAttention accuracy rule. On NPUs the same
calls run on an hccl group with NPU tensors (backend="npu").

It then prints the predicted time of each ring step for the same problem (`--predict` prints only
that): the step's kernel (the timing model) against the transfer of one K/V shard over the link
(`--link hccs` or `roce`, public figures in `ptofa.attention.ring_timing`, or `--link-gbps`), and
whether the transfer hides behind the kernel.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def inputs(args) -> tuple[torch.Tensor, ...]:
    """The whole q, k, v and dout, the same on every rank (one seed)."""
    g = torch.Generator().manual_seed(0)
    dtype = DTYPES[args.dtype]
    shapes = [(args.batch, args.seqlen, heads, args.head_dim) for heads in (args.heads, args.kv_heads, args.kv_heads,
                                                                             args.heads)]
    return tuple(torch.randn(shape, generator=g).to(dtype) for shape in shapes)


def shard(x: torch.Tensor, args, rank: int) -> torch.Tensor:
    from ptofa.attention.zigzag import zigzag_shard

    if args.mode == "ulysses":
        return torch.tensor_split(x, args.world, dim=1)[rank].contiguous()
    return zigzag_shard(x, args.world, rank)


def unshard(shards: list[torch.Tensor], args, dim: int = 1) -> torch.Tensor:
    from ptofa.attention.zigzag import zigzag_unshard

    return torch.cat(shards, dim) if args.mode == "ulysses" else zigzag_unshard(shards, dim)


def rank_main(rank: int, args, store: str, out_dir: str) -> None:
    import ptofa

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=600))
    q, k, v, dout = (shard(t, args, rank) for t in inputs(args))
    leaves = [t.requires_grad_(True) for t in (q, k, v)]
    call = ptofa.ulysses_flash_attn_func if args.mode == "ulysses" else ptofa.ring_flash_attn_func
    out = call(*leaves, causal=args.causal, backend="sim")
    out.backward(dout)
    torch.save({"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def run_and_check(args) -> bool:
    from ptofa.attention.backward import check_gradients, reference_backward
    from ptofa.reference import check_accuracy, reference_fa

    with tempfile.TemporaryDirectory() as out_dir:
        store = tempfile.NamedTemporaryFile(delete=False).name
        mp.spawn(rank_main, args=(args, store, out_dir), nprocs=args.world, join=True)
        ranks = [torch.load(f"{out_dir}/rank{r}.pt") for r in range(args.world)]
    got = {name: unshard([r[name] for r in ranks], args) for name in ("out", "dq", "dk", "dv")}
    q, k, v, dout = inputs(args)
    window = (-1, 0) if args.causal else (-1, -1)
    ref = reference_fa(q, k, v, 1.0 / math.sqrt(args.head_dim), window)
    checks = {"out": check_accuracy(got["out"], ref.out32, ref.out_low),
              **check_gradients(got["dq"], got["dk"], got["dv"], reference_backward(q, k, v, dout, None, window))}
    for name, acc in checks.items():
        print(f"{name}: max err {acc.err:.3g} (tolerance {acc.tolerance:.3g}) {'PASS' if acc.passed else 'FAIL'}")
    return all(acc.passed for acc in checks.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--mode", choices=("ring", "ulysses"), default="ring")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seqlen", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--predict", action="store_true", help="only print the predicted ring steps")
    parser.add_argument("--link", choices=("hccs", "roce"), default="hccs")
    parser.add_argument("--link-gbps", type=float, default=None, help="the link's Gbit/s instead of --link's")
    args = parser.parse_args(argv)
    passed = True
    if not args.predict:
        passed = run_and_check(args)
    from ptofa.attention.ring_timing import describe, predict_ring_steps

    print(describe(predict_ring_steps(batch=args.batch, heads=args.heads, kv_heads=args.kv_heads, seqlen=args.seqlen,
                                      head_dim=args.head_dim, world=args.world, causal=args.causal, dtype=args.dtype,
                                      link=args.link, link_gbps=args.link_gbps)))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
