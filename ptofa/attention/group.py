"""The torch.distributed group a context-parallel call runs on: its checks and the small collectives
that make every rank agree on the arguments before any data moves (`ptofa.attention.ring`,
`ptofa.attention.ulysses`).

A rank whose own arguments are wrong must not leave the others waiting in a collective it never
enters: `agree` gathers one flag per rank first, so every rank raises, the wrong ones their own
error and the others a ValueError naming them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

_DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1}


def group_ranks(group) -> tuple[int, int]:
    """(this rank in `group`, the group's size), or ValueError when torch.distributed has no
    process group to run on (not initialized, or a group this process is not part of)."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("group: torch.distributed is not initialized; call torch.distributed.init_process_group("
                         "backend='gloo') (CPU tensors, the simulator) or backend='hccl' (NPU) first")
    try:
        backend_name = dist.get_backend(group)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"group: {group!r} has no backend torch.distributed knows ({error})") from error
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"group: this process is not a member of the {backend_name} group it was given")
    return rank, dist.get_world_size(group)


def gather_ints(values: Sequence[int], group, what: str) -> list[list[int]]:
    """Every rank's `values` (one all_gather of an int64 tensor, on the group's device), in rank order;
    ValueError naming `what` when the ranks gave different counts."""
    count = torch.tensor([len(values)], dtype=torch.int64, device=comm_device(group))
    world = dist.get_world_size(group)
    counts = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts, count, group=group)
    found = [int(c) for c in counts]
    if len(set(found)) != 1:
        raise ValueError(f"{what}: the ranks give {found} values (rank order); every rank must give as many")
    mine = torch.tensor(list(values), dtype=torch.int64, device=count.device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    return [[int(x) for x in t.tolist()] for t in every]


def comm_device(group) -> torch.device:
    """Where the group's backend takes tensors: the NPU for hccl, the CPU for gloo."""
    return torch.device("npu") if dist.get_backend(group) == "hccl" else torch.device("cpu")


def peer(group, rank: int) -> int:
    """The global rank of `rank` of `group` (P2POp takes global ranks)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def check_shards(q, k, v, names, group) -> None:
    """ValueError on every rank when the ranks' heads, head dims or dtype differ."""
    header = [q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], _DTYPE_CODES[q.dtype]]
    every = gather_ints(header, group, "shards")
    if any(h != every[0] for h in every):
        raise ValueError(f"shards: every rank needs the same ({names[0]} heads, {names[1]}/{names[2]} heads, head_dim, "
                         f"head_dim_v, dtype); the ranks have {every} (dtype 0 = float16, 1 = bfloat16)")


def agree(check, group):
    """`check()`'s result when it passes on every rank of `group`; else the error on the ranks where it
    failed and a ValueError naming them on the others, so that no rank is left waiting in a collective
    the others never enter."""
    group_ranks(group)
    error: Exception | None = None
    try:
        result = check()
    except (ValueError, NotImplementedError) as found:
        error = found
    failed = [r for r, (flag,) in enumerate(gather_ints([int(error is not None)], group, "checks")) if flag]
    if error is not None:
        raise error
    if failed:
        raise ValueError(f"ranks {failed} refused their arguments (their own error says why); no rank ran")
    return result


__all__ = ["agree", "check_shards", "comm_device", "gather_ints", "group_ranks", "peer"]
