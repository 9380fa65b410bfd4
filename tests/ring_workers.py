"""Cases that run on every rank of a gloo process group (tests/test_ring.py spawns the ranks).

A case makes the whole inputs from a seed on every rank, runs a context-parallel call on this rank's
shard (forward, then backward with a seeded dO) and saves this rank's outputs and gradients; the test
process puts the shards back together and checks them. Error cases save the message every rank got.
"""

from __future__ import annotations

import datetime
import traceback
import zlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Case:
    """One call: `kind` "ring", "ring_varlen" or "ulysses"; the whole problem's sizes (`seqlens`: the
    packed sequences of a varlen case); `bad` a way to make the call wrong ("lengths": a rank drops
    its last row; "window": a sliding window; "group": no process group)."""

    name: str
    kind: str
    dtype: torch.dtype
    causal: bool
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 32
    batch: int = 1
    seqlen: int = 16
    seqlens: tuple[int, ...] = ()
    bad: str = ""
    extra: dict = field(default_factory=dict)


def inputs(case: Case) -> tuple[torch.Tensor, ...]:
    """The whole q, k, v, dout of `case` (BSND, or packed [total, N, D] for varlen)."""
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    lead = (sum(case.seqlens),) if case.kind == "ring_varlen" else (case.batch, case.seqlen)
    shapes = [(*lead, case.heads, case.head_dim), (*lead, case.kv_heads, case.head_dim),
              (*lead, case.kv_heads, case.head_dim), (*lead, case.heads, case.head_dim)]
    return tuple(torch.randn(s, generator=g).to(case.dtype) for s in shapes)


def cu_seqlens(lengths) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def contiguous_shard(x: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """Ulysses' shard: rows [rank * S / W, (rank + 1) * S / W) of dim 1, the first S % W ranks one longer."""
    return torch.tensor_split(x, world, dim=1)[rank].contiguous()


def run_case(case: Case, world: int, rank: int) -> dict:
    import ptofa
    from ptofa.attention.zigzag import zigzag_shard, zigzag_shard_varlen

    q, k, v, dout = inputs(case)
    if case.kind == "ring_varlen":
        cu = cu_seqlens(case.seqlens)
        (ql, local_cu), (kl, _), (vl, _), (dl, _) = (zigzag_shard_varlen(t, cu, world, rank) for t in (q, k, v, dout))
        lengths = (local_cu[1:] - local_cu[:-1]).tolist()
    elif case.kind == "ring":
        ql, kl, vl, dl = (zigzag_shard(t, world, rank) for t in (q, k, v, dout))
    else:
        ql, kl, vl, dl = (contiguous_shard(t, world, rank) for t in (q, k, v, dout))
    if case.bad == "lengths" and rank == world - 1:  # a dense shard one row short of its zigzag length
        ql, kl, vl, dl = (t[:, :-1] for t in (ql, kl, vl, dl))
    leaves = [t.clone().requires_grad_(True) for t in (ql, kl, vl)]
    if case.bad == "group":  # something that is no process group
        return ptofa.ring_flash_attn_func(*leaves, causal=case.causal, backend="sim", group="not a group")
    window = (2, 0) if case.bad == "window" else (-1, -1)
    if case.kind == "ring_varlen":
        local = cu_seqlens(lengths)
        out, lse = ptofa.ring_flash_attn_varlen_func(*leaves, local, local, max(lengths), max(lengths),
                                                      causal=case.causal, window_size=window, return_lse=True,
                                                      backend="sim")
    elif case.kind == "ring":
        out, lse = ptofa.ring_flash_attn_func(*leaves, causal=case.causal, window_size=window, return_lse=True,
                                              backend="sim")
    else:
        out, lse = ptofa.ulysses_flash_attn_func(*leaves, causal=case.causal, window_size=window, return_lse=True,
                                                 backend="sim", **case.extra)
    out.backward(dl)
    return {"out": out.detach(), "lse": lse, "dq": leaves[0].grad, "dk": leaves[1].grad, "dv": leaves[2].grad}


def worker(rank: int, world: int, store_path: str, cases: list[Case], out_dir: str) -> None:
    torch.set_num_threads(1)  # W ranks share the machine's cores: intra-op threads would only contend
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    results = {}
    for case in cases:
        try:
            results[case.name] = run_case(case, world, rank)
        except (ValueError, NotImplementedError) as error:
            results[case.name] = {"error": f"{type(error).__name__}: {error}"}
        except Exception:  # noqa: BLE001 (anything else is a failure the test reports with its traceback)
            results[case.name] = {"error": "unexpected: " + traceback.format_exc()}
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()
