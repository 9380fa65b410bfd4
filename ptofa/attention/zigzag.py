"""Zigzag sharding of a sequence over the W ranks of a context-parallel group.

    local = zigzag_shard(x, world, rank)            # [B, S, ...] -> this rank's rows
    x = zigzag_unshard([local_0, ..., local_W-1])   # back, from every rank's shard

The sequence is cut into 2W chunks (`zigzag_chunks`: lengths differ by at most one, so any length
works) and rank r holds chunks r and 2W-1-r. Under a causal mask every rank then has the same work in
each ring step after the first (`ptofa.attention.ring`), the layout of the ring-flash-attention
package's zigzag ring and of Megatron-Core's context parallelism. The varlen forms shard every
sequence of a packed batch the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch




def zigzag_chunks(length: int, world: int) -> list[int]:
    """The lengths of the 2W chunks a sequence of `length` rows is cut into (the first length % 2W
    chunks one row longer), in sequence order."""
    base, extra = divmod(length, 2 * world)
    return [base + (1 if c < extra else 0) for c in range(2 * world)]


def zigzag_rows(length: int, world: int, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((start, rows) of chunk `rank`, (start, rows) of chunk 2W-1-rank) of a sequence of `length` rows."""
    sizes = zigzag_chunks(length, world)
    starts = [sum(sizes[:c]) for c in range(2 * world)]
    lo, hi = rank, 2 * world - 1 - rank
    return (starts[lo], sizes[lo]), (starts[hi], sizes[hi])


def _check_world(world: int, rank: int) -> None:
    if isinstance(world, bool) or not isinstance(world, int) or world < 1 or not 0 <= rank < world:
        raise ValueError(f"world, rank: {world!r}, {rank!r} must be ints with world >= 1 and 0 <= rank < world")


def zigzag_shard(x: torch.Tensor, world: int, rank: int, dim: int = 1) -> torch.Tensor:
    """Rank `rank`'s shard of `x` along `dim` (the sequence, dim 1 of [B, S, N, D]): chunks rank and
    2W-1-rank of the 2W chunks of `zigzag_chunks`, concatenated (a contiguous copy)."""
    _check_world(world, rank)
    (lo, lo_n), (hi, hi_n) = zigzag_rows(x.shape[dim], world, rank)
    return torch.cat([x.narrow(dim, lo, lo_n), x.narrow(dim, hi, hi_n)], dim).contiguous()


def zigzag_unshard(shards: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
    """The whole tensor of every rank's `zigzag_shard` (in rank order); ValueError when the shards'
    lengths are not the zigzag split of their sum."""
    world = len(shards)
    length = sum(t.shape[dim] for t in shards)
    pieces: list[tuple[int, torch.Tensor]] = []
    for rank, shard in enumerate(shards):
        (lo, lo_n), (hi, hi_n) = zigzag_rows(length, world, rank)
        if shard.shape[dim] != lo_n + hi_n:
            raise ValueError(f"zigzag_unshard: rank {rank}'s shard has {shard.shape[dim]} rows along dim {dim}, but "
                             f"the zigzag split of {length} rows over {world} ranks gives it {lo_n} + {hi_n}")
        pieces += [(lo, shard.narrow(dim, 0, lo_n)), (hi, shard.narrow(dim, lo_n, hi_n))]
    return torch.cat([t for _, t in sorted(pieces, key=lambda p: p[0])], dim)


def seqlens_of_cu(cu_seqlens, total: int, name: str) -> list[int]:
    """The sequence lengths of `cu_seqlens` over `total` packed rows, or ValueError naming `name`."""
    cu = torch.as_tensor(cu_seqlens).reshape(-1).tolist()
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])) or cu[-1] != total:
        raise ValueError(f"{name}: must be [0, ..., {total}] non-decreasing with at least two entries, got {cu}")
    return [b - a for a, b in zip(cu, cu[1:])]


def cu_of(lengths: Sequence[int], device=None) -> torch.Tensor:
    """int32 cu_seqlens [len + 1] of sequence lengths."""
    return torch.tensor([0, *torch.tensor(list(lengths), dtype=torch.int64).cumsum(0).tolist()], dtype=torch.int32,
                        device=device)


def zigzag_shard_varlen(x: torch.Tensor, cu_seqlens, world: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s shard of packed sequences x [total, ...] (`cu_seqlens` int32 [B + 1]): every
    sequence zigzag-sharded (`zigzag_shard`), packed in sequence order; returns (rows, local cu_seqlens)."""
    _check_world(world, rank)
    lengths = seqlens_of_cu(cu_seqlens, x.shape[0], "cu_seqlens")
    starts = cu_of(lengths).tolist()
    rows, local = [], []
    for start, length in zip(starts, lengths):
        (lo, lo_n), (hi, hi_n) = zigzag_rows(length, world, rank)
        rows += [x[start + lo:start + lo + lo_n], x[start + hi:start + hi + hi_n]]
        local.append(lo_n + hi_n)
    return torch.cat(rows).contiguous(), cu_of(local, x.device)


def zigzag_unshard_varlen(shards: Sequence[torch.Tensor], cu_seqlens) -> torch.Tensor:
    """The packed batch [total, ...] of every rank's `zigzag_shard_varlen` (rank order); `cu_seqlens` the
    whole batch's."""
    world = len(shards)
    lengths = seqlens_of_cu(cu_seqlens, sum(t.shape[0] for t in shards), "cu_seqlens")
    offsets = [0] * world
    sequences = []
    for length in lengths:
        parts = []
        for rank, shard in enumerate(shards):
            (lo, lo_n), (hi, hi_n) = zigzag_rows(length, world, rank)
            parts += [(lo, shard[offsets[rank]:offsets[rank] + lo_n]),
                      (hi, shard[offsets[rank] + lo_n:offsets[rank] + lo_n + hi_n])]
            offsets[rank] += lo_n + hi_n
        sequences += [t for _, t in sorted(parts, key=lambda p: p[0])]
    return torch.cat(sequences)


__all__ = ["cu_of", "seqlens_of_cu", "zigzag_chunks", "zigzag_rows", "zigzag_shard", "zigzag_shard_varlen",
           "zigzag_unshard", "zigzag_unshard_varlen"]
