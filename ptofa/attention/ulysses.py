"""Head-parallel attention over a sequence sharded across ranks (DeepSpeed-Ulysses, arXiv:2309.14509).

    out = ptofa.ulysses_flash_attn_func(q, k, v, causal=True)   # q/k/v: this rank's rows, in rank order

Each rank holds a contiguous shard of the sequence with every head. One all-to-all
(`torch.distributed.all_to_all_single`, which gloo and hccl both implement, uneven split sizes
included) hands every rank the whole sequence for N / W of the heads (and KVN / W of the K/V heads);
the rank runs ptofa's forward op on them (`ptofa.attention.ops.flash_attn_fwd`, the op
`flash_attn_func` calls: every mask and score modification of the kernel applies, the sequence being
whole), and a second all-to-all returns each rank its rows of O for every head. The backward is the
op's own backward between the all-to-alls' transposes. It needs heads and K/V heads that are
multiples of the group's size; ring attention (`ptofa.attention.ring`) has no such limit.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import ptofa.attention.backward  # noqa: F401 (registers the backward op's implementation)
from ptofa.attention.core import (check_alibi_slopes, check_qkv, check_window, flash_attn_returns,
                                  unsupported_arguments, window_to_bounds)
from ptofa.attention.ops import flash_attn_fwd
from ptofa.attention.group import agree, check_shards, gather_ints, group_ranks
from ptofa.launch.dispatch import resolve_backend


class _AllToAll(torch.autograd.Function):
    """`all_to_all_single` along dim 0 (rows `send` to each rank, `receive` from each); its gradient is the
    all-to-all back."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, send: list[int], receive: list[int], group):
        ctx.send, ctx.receive, ctx.group = send, receive, group
        out = x.new_empty((sum(receive), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), receive, send, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return _AllToAll.apply(grad.contiguous(), ctx.receive, ctx.send, ctx.group), None, None, None


def sequence_to_heads(x: torch.Tensor, lengths: list[int], rank: int, group) -> torch.Tensor:
    """[B, S_rank, H, D] sequence shard -> [B, S, H / W, D]: the whole sequence (the ranks' `lengths` in
    rank order) for this rank's group of H / W heads."""
    world = len(lengths)
    batch, rows, heads, dim = x.shape
    parts = x.reshape(batch, rows, world, heads // world, dim).permute(2, 1, 0, 3, 4).flatten(0, 1)
    whole = _AllToAll.apply(parts, [rows] * world, lengths, group)  # [S, B, H / W, D], rank order = sequence order
    return whole.permute(1, 0, 2, 3)


def heads_to_sequence(x: torch.Tensor, lengths: list[int], rank: int, group) -> torch.Tensor:
    """The inverse of `sequence_to_heads`: [B, S, H / W, D] -> [B, S_rank, H, D]."""
    world = len(lengths)
    batch, _, group_heads, dim = x.shape
    rows = lengths[rank]
    parts = _AllToAll.apply(x.permute(1, 0, 2, 3), lengths, [rows] * world, group)  # [W * S_rank, B, H / W, D]
    return parts.reshape(world, rows, batch, group_heads, dim).permute(2, 1, 0, 3, 4).reshape(
        batch, rows, world * group_heads, dim)


def ulysses_flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
    backend: str = "auto",
    group=None,
):
    """`flash_attn_func` over a sequence sharded contiguously across the ranks of `group`, heads exchanged
    by all-to-all (DeepSpeed-Ulysses).

    q [B, S_rank, N, D], k/v [B, S_rank, KVN, D / Dv]: this rank's rows (the ranks' shards in rank order
    make the sequence; their lengths may differ), N and KVN multiples of the group's size W, every rank
    with the same B, heads, head dims and dtype. The other arguments as `flash_attn_func` (window, causal,
    softcap and ALiBi act on the whole sequence; alibi_slopes [N] or [B, N] of all heads). Returns this
    rank's rows of O [B, S_rank, N, Dv] (and lse [B, N, S_rank]); differentiable in q, k, v.
    """
    rank, world = group_ranks(group)

    def check() -> tuple[int, int]:
        unsupported_arguments(dropout_p, softcap, alibi_slopes)
        check_window(window_size, "window_size")
        check_qkv(q, k, v)
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"seqlen: Ulysses shards Q and K/V alike; q has {q.shape[1]} rows, k/v {k.shape[1]}")
        for name, heads in (("q heads", q.shape[2]), ("k/v heads", k.shape[2])):
            if heads % world:
                raise ValueError(f"{name}: {heads} is no multiple of the group's {world} ranks, which Ulysses "
                                 f"splits the heads over (ring_flash_attn_func has no such limit)")
        if alibi_slopes is not None:
            check_alibi_slopes(alibi_slopes, q.shape[0], q.shape[2])
        return q.shape[1], resolve_backend(backend)

    rows, resolved = agree(check, group)
    check_shards(q, k, v, ("q", "k", "v"), group)
    lengths = [n for (n,) in gather_ints([rows], group, "seqlen")]
    length = sum(lengths)
    window = (window_size[0], 0) if causal else tuple(window_size)
    bounds = window_to_bounds(check_window(window), length, length)
    slopes = None
    if alibi_slopes is not None:
        per_rank = q.shape[2] // world
        slopes = alibi_slopes[..., rank * per_rank:(rank + 1) * per_rank].contiguous()
    left, right = bounds if bounds is not None else (0, 0)
    q_h, k_h, v_h = (sequence_to_heads(t, lengths, rank, group) for t in (q, k, v))
    out, lse = flash_attn_fwd(q_h, k_h, v_h, softmax_scale, bounds is not None, left, right, None, None, resolved,
                              None, bool(deterministic), float(softcap), slopes)
    out = heads_to_sequence(out, lengths, rank, group)
    lse = heads_to_sequence(lse.permute(0, 2, 1).unsqueeze(-1), lengths, rank, group).squeeze(-1).permute(0, 2, 1)
    return flash_attn_returns(out, lse.contiguous(), return_attn_probs, return_lse)


__all__ = ["heads_to_sequence", "sequence_to_heads", "ulysses_flash_attn_func"]
