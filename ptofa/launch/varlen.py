"""Variable-length (packed) prefill: cu_seqlens checks, the host-built unit table, the reference.

A varlen batch packs B sequences of different lengths: Q [total_q, heads, D] and
K, V [total_k, kv_heads, D], with `cu_seqlens_q` / `cu_seqlens_k` (int32 [B + 1],
non-decreasing, from 0 to the total) marking where each sequence starts, as
flash-attn's `flash_attn_varlen_func` takes them.

Work units are (sequence, head, Q block). The host lists them in a table of
`UNIT_FIELDS` int32 per unit (`pipeline.UNIT_TABLE`: q_start, q_len, k_start, k_len,
head, q_block) that both kernels read with `pto.load_scalar`; the units are ordered
longest first (by visible KV tiles), so the persistent loop's snake
(`kernels.units.schedule`) hands the long prompts out first and blocks finish together. Sequences with no query
rows have no units; a sequence with queries but no keys gives O = 0, LSE = +inf.

The backward's dq and dkdv kernels read tables of the same fields (`backward_tables`):
(sequence, q head, Q block) and (sequence, KV head, KV block) units, longest first
(`units.longest_first`), handed out in the forward's snake (`units.schedule`).

Why a host table rather than decoding cu_seqlens in the kernel: finding the
sequence of unit u from cu_seqlens needs a search over B entries per unit on the
scalar unit (or a prefix sum of Q blocks per sequence), while the table costs six
scalar loads per unit and lets the host order units by their work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ptofa.kernels.bwd_pipeline import BwdConfig
from ptofa.kernels.units import (dkdv_unit_steps, dq_unit_tiles, kernel_bounds, longest_first, split_tiles,
                                 visible_tiles)
from ptofa.pipeline import MAX_SPLITS, REDUCE_TABLE, UNIT_TABLE, ConfigError, FAConfig, ProblemShape
from ptofa.reference import Reference, reference_fa


def seqlens_of(cu_seqlens, total: int, name: str) -> list[int]:
    """Sequence lengths from cu_seqlens, or `ConfigError` naming the rule and the numbers."""
    cu = torch.as_tensor(cu_seqlens)
    if cu.dim() != 1 or cu.numel() < 2 or cu.dtype.is_floating_point:
        raise ConfigError(f"{name}: must be an integer tensor [B + 1] with B >= 1, got {cu.dtype} {tuple(cu.shape)}")
    values = [int(x) for x in cu]
    if values[0] != 0:
        raise ConfigError(f"{name}: must start at 0, got {values[0]}")
    steps = [b - a for a, b in zip(values, values[1:])]
    if any(step < 0 for step in steps):
        i = next(i for i, step in enumerate(steps) if step < 0)
        raise ConfigError(f"{name}: must be non-decreasing, got {values[i]} then {values[i + 1]} at index {i}")
    if values[-1] != total:
        raise ConfigError(f"{name}: must end at the packed length {total}, ends at {values[-1]}")
    return steps


def varlen_shape(q_lens: list[int], k_lens: list[int], heads: int, kv_heads: int,
                 window: tuple[int, int] = (-1, -1)) -> ProblemShape:
    """The launch's runtime sizes: B sequences packed into S0 = total_q and S1 = total_k rows."""
    if len(q_lens) != len(k_lens):
        raise ConfigError(f"varlen: {len(q_lens)} query sequences but {len(k_lens)} key sequences")
    return ProblemShape(len(q_lens), heads, max(1, sum(q_lens)), max(1, sum(k_lens)), kv_heads=kv_heads, window=window,
                        seqlens=tuple(zip(q_lens, k_lens)))


def _visible_tiles(c: FAConfig, q0: int, q_rows: int, q_len: int, k_len: int, window: tuple[int, int]) -> int:
    """KV tiles the kernel visits for one unit (`units.visible_tiles`; no window without a mask)."""
    bounds = kernel_bounds(window, q_len, k_len) if c.narrowing else None
    return visible_tiles(q0, q_rows, q_len, k_len, bounds, c.tile_s1)


def unit_visible_tiles(c: FAConfig, table: torch.Tensor, window: tuple[int, int] = (-1, -1)) -> list[int]:
    """Visible KV tiles of each entry of a unit table (before any split)."""
    f = {name: i for i, name in enumerate(UNIT_TABLE)}
    tiles = []
    for row in table.tolist():
        q0 = row[f["q_block"]] * c.cube_s0
        q_len, k_len = row[f["q_len"]], row[f["k_len"]]
        tiles.append(_visible_tiles(c, q0, min(c.cube_s0, q_len - q0), q_len, k_len, window))
    return tiles


def unit_table(c: FAConfig, q_lens: list[int], k_lens: list[int], heads: int,
               window: tuple[int, int] = (-1, -1), num_splits: int | Sequence[int] = 1) -> torch.Tensor:
    """The unit table of packed sequences (cumulative starts); see `table_of_sequences`."""
    q_starts = [sum(q_lens[:i]) for i in range(len(q_lens))]
    k_starts = [sum(k_lens[:i]) for i in range(len(k_lens))]
    return table_of_sequences(c, list(zip(q_starts, q_lens, k_starts, k_lens)), heads, window, num_splits)


def _check_splits(c: FAConfig, num_splits: int | Sequence[int], units: int) -> list[int]:
    """One split count per unit of the unsplit table, or `ConfigError` naming the rule and the numbers."""
    counts = [num_splits] * units if isinstance(num_splits, int) else [int(n) for n in num_splits]
    if len(counts) != units:
        raise ConfigError(f"split-KV: {len(counts)} per-unit split counts for a table of {units} units")
    low = num_splits if isinstance(num_splits, int) else min(counts, default=1)
    high = num_splits if isinstance(num_splits, int) else max(counts, default=1)
    if low < 1 or (high > 1 and not c.split_kv):
        raise ConfigError(f"split-KV: num_splits={num_splits} needs num_splits >= 1, and > 1 needs a split_kv kernel "
                          f"(split_kv={c.split_kv})")
    if high > MAX_SPLITS:
        raise ConfigError(f"split-KV: {high} splits of one unit; at most MAX_SPLITS={MAX_SPLITS}")
    return counts


def table_of_sequences(c: FAConfig, seqs: list[tuple[int, int, int, int]], heads: int,
                       window: tuple[int, int] = (-1, -1), num_splits: int | Sequence[int] = 1,
                       group: int = 1) -> torch.Tensor:
    """int32 [units, len(UNIT_TABLE)] for sequences (q_start, q_len, k_start, k_len); sequence i is
    row i of a paged cache's block table. Longest units first (stable within equal work).

    `num_splits` > 1 (a `split_kv` kernel) gives every (sequence, head, Q block) one entry per
    split, even a split with no visible tile: each split writes its partial rows. A list gives
    each unit its own count, in the order of the num_splits=1 table (`splitkv.balanced_splits`);
    a unit of count 1 in a split_kv kernel writes O (and LSE) itself, with no partials.
    A `gqa_pack` kernel gets one unit per (sequence, KV head): its rows are the `group` q heads
    from `head` on, of the sequence's one query row."""
    if c.gqa_pack and (not 1 <= group <= c.cube_s0 or any(q_len > 1 for _, q_len, _, _ in seqs)):
        raise ConfigError(f"GQA packing: needs one query row per sequence and 1 <= group <= {c.cube_s0} q heads per KV "
                          f"head, got group={group}, q_lens={[q_len for _, q_len, _, _ in seqs]}")
    head_step = group if c.gqa_pack else 1
    whole = []
    for seq, (q_start, q_len, k_start, k_len) in enumerate(seqs):
        for q_block in range(-(-q_len // c.cube_s0)):
            q0 = q_block * c.cube_s0
            visible = _visible_tiles(c, q0, min(c.cube_s0, q_len - q0), q_len, k_len, window)
            whole += [(visible, (q_start, q_len, k_start, k_len, h, q_block, seq)) for h in range(0, heads, head_step)]
    whole.sort(key=lambda unit: -unit[0])
    counts = _check_splits(c, num_splits, len(whole))
    units = [(split_tiles(visible, split, n), (*fields, split, n))
             for (visible, fields), n in zip(whole, counts) for split in range(n)]
    units.sort(key=lambda unit: -unit[0])
    table = torch.tensor([fields for _, fields in units], dtype=torch.int32).reshape(-1, len(UNIT_TABLE))
    return table.contiguous()


def backward_tables(c: BwdConfig, q_lens: list[int], k_lens: list[int], heads: int, kv_heads: int,
                    window: tuple[int, int] = (-1, -1)) -> dict[str, torch.Tensor]:
    """The unit tables of the varlen backward's dq and dkdv kernels (`UNIT_TABLE` rows, longest first,
    stable within equal work; split 0 of 1). dq: one unit per (sequence, q head, Q block of
    `dq_block_q` rows), also those that see no key (the unit writes D of its rows, which the dkdv
    kernel reads); its work is the KV tiles of `dq_block_kv` keys its rows see. dkdv: one unit per
    (sequence, KV head, KV block of `block_kv` keys) that some query sees, `head` the KV head and
    `q_block` the KV block; its work is the group's q heads x the Q blocks of `block_q` rows that see
    the block. A unit not listed writes nothing: the host's dq, dk, dv are zeroed."""
    group = heads // kv_heads
    dq, dkdv = [], []
    q_start = k_start = 0
    for seq, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        bounds = kernel_bounds(window, q_len, k_len) if c.narrowing else None
        for block in range(-(-q_len // c.dq_block_q)):
            tiles = dq_unit_tiles(block, q_len, k_len, bounds, c.dq_block_q, c.dq_block_kv)
            dq += [(tiles, (q_start, q_len, k_start, k_len, h, block, seq, 0, 1)) for h in range(heads)]
        for block in range(-(-k_len // c.block_kv) if q_len else 0):
            steps = dkdv_unit_steps(block, q_len, k_len, bounds, c.block_kv, c.block_q, group)
            if steps:
                dkdv += [(steps, (q_start, q_len, k_start, k_len, g, block, seq, 0, 1)) for g in range(kv_heads)]
        q_start, k_start = q_start + q_len, k_start + k_len

    def table(units: list) -> torch.Tensor:
        rows = [units[i][1] for i in longest_first([work for work, _ in units])]
        return torch.tensor(rows, dtype=torch.int32).reshape(-1, len(UNIT_TABLE)).contiguous()

    return {"dq": table(dq), "dkdv": table(dkdv)}


def reduce_table(c: FAConfig, table: torch.Tensor, heads: int, group: int = 1) -> torch.Tensor:
    """int32 [split units, len(REDUCE_TABLE)]: the units of a forward table with more than one split,
    in the reduce kernel's (head, packed row) coordinates (`sim_backend.reduce_rows`): the head, the
    first row, the rows (<= cube_s0) and the split count whose partials it combines; `group` is the
    q heads per KV head of a `gqa_pack` kernel."""
    f = {name: i for i, name in enumerate(UNIT_TABLE)}
    rows = []
    for row in table.tolist():
        if row[f["split"]] != 0 or row[f["splits"]] < 2:
            continue
        q_row = row[f["q_start"]] + row[f["q_block"]] * c.cube_s0
        if c.gqa_pack:  # rows are the group's heads of one query row: packed row q_row * N + head
            rows.append((0, q_row * heads + row[f["head"]], group, row[f["splits"]]))
        else:
            rows.append((row[f["head"]], q_row, min(c.cube_s0, row[f["q_len"]] - row[f["q_block"]] * c.cube_s0),
                         row[f["splits"]]))
    return torch.tensor(rows, dtype=torch.int32).reshape(-1, len(REDUCE_TABLE)).contiguous()


def make_varlen_inputs(shape: ProblemShape, c: FAConfig, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deterministic packed Q [total_q, N, D], K and V [total_k, KVN, D] in the config's input dtype."""
    generator = torch.Generator().manual_seed(seed)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[c.in_dtype]
    total_q = sum(q for q, _ in shape.seqlens)
    total_k = sum(k for _, k in shape.seqlens)
    q = torch.randn(total_q, shape.heads, c.head, generator=generator).to(dtype)
    k = torch.randn(total_k, shape.kv_heads, c.head, generator=generator).to(dtype)
    v = torch.randn(total_k, shape.kv_heads, c.head, generator=generator).to(dtype)
    return q, k, v


def reference_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_lens: list[int], k_lens: list[int],
                     scale: float, window: tuple[int, int] = (-1, -1), out_dtype: torch.dtype | None = None,
                     softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None,
                     dropout: tuple[list[torch.Tensor], float] | None = None) -> Reference:
    """Per sequence `reference_fa` on the gathered sequence; O packed [total_q, N, D], LSE [N, total_q]
    (ALiBi slopes [N], or [B, N]: row b for sequence b; `dropout` = (keep masks, one [N, q_len, k_len]
    per sequence, p))."""
    heads, head_dim = q.shape[1], q.shape[2]
    out32 = torch.zeros(q.shape[0], heads, head_dim)
    out_low = torch.zeros_like(out32)
    lse32 = torch.full((heads, q.shape[0]), math.inf)
    lse_low = torch.full_like(lse32, math.inf)
    q_start = k_start = 0
    for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        rows = slice(q_start, q_start + q_len)
        if q_len and k_len:
            slopes = None if alibi_slopes is None else (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b])
            ref = reference_fa(q[rows].unsqueeze(0), k[k_start:k_start + k_len].unsqueeze(0),
                               v[k_start:k_start + k_len].unsqueeze(0), scale, window, None, out_dtype, softcap, slopes,
                               None if dropout is None else (dropout[0][b][None], dropout[1]))
            out32[rows], out_low[rows] = ref.out32[0], ref.out_low[0]
            lse32[:, rows], lse_low[:, rows] = ref.lse32[0], ref.lse_low[0]
        q_start += q_len
        k_start += k_len
    return Reference(out32, out_low, lse32, lse_low)
