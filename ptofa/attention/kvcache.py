"""KV-cache decoding: the cache layouts, appending new keys, the unit table and the reference.

flash-attn's `flash_attn_with_kvcache` meaning: q [B, S0, N, D] (S0 small, 1 for decode);
a contiguous cache [B, S_cache, KVN, D], or a paged cache [pages, page_size, KVN, D] with
`block_table` [B, max_pages] int32 (row b lists the pages of sequence b in order);
`cache_seqlens` [B] int32 keys already in the cache; optional new k/v [B, S_new, KVN, D]
appended at cache_seqlens first (in place; the attention then sees cache_seqlens + S_new
keys per sequence).

The kernel is the varlen forward kernel: one unit table entry per (sequence, head, Q
block) with the sequence's key count, its first cache row (contiguous caches: b * S_cache)
and its block-table row (paged caches: each KV tile is read from the page that holds it,
so `page_size` must be a multiple of the kernel's TILE_S1).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.reference import Reference, reference_fa
from ptofa.launch.varlen import table_of_sequences


class CacheCapacityError(ConfigError, RuntimeError):
    """A KV cache that cannot hold a sequence's keys (a block table too short or naming pages the cache
    lacks, a contiguous cache row too short): ptofa's rule, so a `ConfigError`, and a `RuntimeError` as
    flash-attn's `mha_fwd_kvcache` raises there (csrc/flash_attn/flash_api.cpp), which its callers catch.
    Raised before anything is written."""


@dataclass(frozen=True)
class KVCache:
    """A contiguous ([B_cache, S_cache, KVN, D]) or paged ([pages, page_size, KVN, D] + block_table) cache pair.

    Contiguous caches only: `batch_idx` (flash-attn's cache_batch_idx) names the cache row of each
    sequence (default: sequence b reads row b), `leftpad` (flash-attn's cache_leftpad) the first key
    of each sequence: keys before it take no part, and positions (the window's diagonal) count from it."""

    k: torch.Tensor
    v: torch.Tensor
    block_table: torch.Tensor | None = None
    batch_idx: tuple[int, ...] | None = None
    leftpad: tuple[int, ...] | None = None

    @property
    def paged(self) -> bool:
        return self.block_table is not None

    @property
    def page_size(self) -> int:
        return int(self.k.shape[1]) if self.paged else 0

    def capacity(self, b: int) -> int:
        """Keys sequence b can hold."""
        return int(self.block_table.shape[1]) * self.page_size if self.paged else int(self.k.shape[1])

    def first_key(self, b: int) -> int:
        """Sequence b's first key (its left padding)."""
        return 0 if self.leftpad is None else self.leftpad[b]

    def row_base(self, b: int) -> int:
        """Row of the flattened contiguous cache where sequence b's key 0 lies (0 for a paged cache,
        whose sequence b is row b of the block table)."""
        if self.paged:
            return 0
        return (b if self.batch_idx is None else self.batch_idx[b]) * int(self.k.shape[1])

    def check(self, batch: int, cache_seqlens: torch.Tensor, new: int = 0) -> list[int]:
        """The key counts after appending `new` keys, or `ConfigError` (`CacheCapacityError` for a cache too
        small); nothing is written."""
        if self.k.shape != self.v.shape or self.k.dim() != 4:
            raise ConfigError(f"kv cache: k {tuple(self.k.shape)} and v {tuple(self.v.shape)} must be equal 4-d tensors")
        lens = [int(x) for x in torch.as_tensor(cache_seqlens).reshape(-1)]
        if len(lens) != batch or any(n < 0 for n in lens):
            raise ConfigError(f"kv cache: cache_seqlens {lens} must hold {batch} non-negative lengths")
        if self.paged and self.batch_idx is not None:
            raise NotImplementedError("cache_batch_idx: not supported with a paged cache (block_table), as in "
                                      "flash-attn; the block table already maps each sequence to its pages")
        if self.paged and self.leftpad is not None:
            raise NotImplementedError("cache_leftpad: not supported with a paged cache (block_table), as in flash-attn")
        if self.paged:
            bt = self.block_table
            if bt.dim() != 2 or bt.shape[0] != batch or bt.dtype.is_floating_point:
                raise ConfigError(f"kv cache: block_table must be an int32 [B={batch}, max_pages] tensor, got "
                                  f"{bt.dtype} {tuple(bt.shape)}")
            pages = int(self.k.shape[0])
            for b, n in enumerate(lens):
                used = bt[b, : -(-(n + new) // self.page_size)]
                if used.numel() and (int(used.min()) < 0 or int(used.max()) >= pages):
                    raise CacheCapacityError(f"block_table: row {b} uses page {int(used.max())} or {int(used.min())}, "
                                             f"outside the cache's {pages} pages (0..{pages - 1})")
        elif self.batch_idx is None and int(self.k.shape[0]) < batch:
            raise ConfigError(f"kv cache: the cache holds {int(self.k.shape[0])} sequences, fewer than the batch of "
                              f"{batch} (pass cache_batch_idx to pick rows)")
        elif self.batch_idx is not None:
            rows = int(self.k.shape[0])
            if len(self.batch_idx) != batch or any(not 0 <= i < rows for i in self.batch_idx):
                raise ConfigError(f"cache_batch_idx: {list(self.batch_idx)} must hold {batch} rows of the cache's "
                                  f"{rows}, each in 0..{rows - 1}")
        for b, n in enumerate(lens):
            if n + new > self.capacity(b):
                where = (f"block_table addresses (max_pages={self.block_table.shape[1]} pages of page_size="
                         f"{self.page_size} = {self.capacity(b)} keys)") if self.paged else \
                    f"the k_cache / v_cache row holds (S_cache = {self.capacity(b)} keys)"
                raise CacheCapacityError(f"{'block_table' if self.paged else 'k_cache'}: cache_seqlens[{b}] + S_new = "
                                         f"{n} + {new} = {n + new} keys, more than {where}")
        if self.leftpad is not None:
            if len(self.leftpad) != batch or any(not 0 <= p <= n + new for p, n in zip(self.leftpad, lens)):
                raise ConfigError(f"cache_leftpad: {list(self.leftpad)} must hold {batch} values, each in "
                                  f"0..cache_seqlens[b] + S_new = {[n + new for n in lens]}")
        return [n + new for n in lens]

    def sequences(self, q_lens: list[int], k_lens: list[int]) -> list[tuple[int, int, int, int]]:
        """(q_start, q_len, k_start, k_len) of each sequence for `varlen.table_of_sequences`: packed
        query rows; keys from the sequence's first key (`first_key`) to its length `k_lens[b]`."""
        q_starts = [sum(q_lens[:b]) for b in range(len(q_lens))]
        return [(q_starts[b], q_lens[b], self.row_base(b) + self.first_key(b), k_lens[b] - self.first_key(b))
                for b in range(len(q_lens))]

    def rows(self, b: int, start: int, stop: int) -> list[tuple[int, int]]:
        """(row of the flattened [pages * page_size] or [B * S_cache] cache) for keys start..stop-1 of b."""
        if not self.paged:
            base = self.row_base(b)
            return [base + j for j in range(start, stop)]
        ps = self.page_size
        return [int(self.block_table[b, j // ps]) * ps + j % ps for j in range(start, stop)]

    def append(self, cache_seqlens, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Write k_new/v_new [B, S_new, KVN, D] at cache_seqlens, in place (checked first)."""
        batch, new = k_new.shape[0], k_new.shape[1]
        self.check(batch, cache_seqlens, new)
        flat_k, flat_v = self.k.view(-1, *self.k.shape[2:]), self.v.view(-1, *self.v.shape[2:])
        for b, n in enumerate(int(x) for x in torch.as_tensor(cache_seqlens).reshape(-1)):
            rows = torch.tensor(self.rows(b, n, n + new), dtype=torch.long)
            flat_k[rows] = k_new[b].to(self.k.dtype)
            flat_v[rows] = v_new[b].to(self.v.dtype)

    def gather(self, b: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values 0..n-1 of sequence b, as [n, KVN, D]."""
        rows = torch.tensor(self.rows(b, 0, n), dtype=torch.long)
        return self.k.view(-1, *self.k.shape[2:])[rows], self.v.view(-1, *self.v.shape[2:])[rows]


def decode_config(base: FAConfig, cache: KVCache) -> FAConfig:
    """The varlen kernel config that reads this cache."""
    import dataclasses

    return dataclasses.replace(base, varlen=True, page_size=cache.page_size)


def check_rotary(rotary_cos, rotary_sin, head: int, last_position: int) -> int:
    """The rotary dim of flash-attn's rotary_cos / rotary_sin ([seqlen_ro, rotary_dim / 2] each), or
    ValueError naming the rule and the numbers; `last_position` is the highest position rotated."""
    for name, table in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        if not isinstance(table, torch.Tensor) or table.dim() != 2 or not table.dtype.is_floating_point:
            got = f"{table.dtype} {tuple(table.shape)}" if isinstance(table, torch.Tensor) else type(table).__name__
            raise ValueError(f"{name}: must be a floating [seqlen_ro, rotary_dim / 2] tensor, got {got}")
    if rotary_cos.shape != rotary_sin.shape:
        raise ValueError(f"rotary_cos {tuple(rotary_cos.shape)} and rotary_sin {tuple(rotary_sin.shape)} must have "
                         f"the same shape")
    rotary_dim = 2 * int(rotary_cos.shape[1])
    if not 0 < rotary_dim <= head:
        raise ValueError(f"rotary_cos: rotary_dim = 2 * {rotary_cos.shape[1]} = {rotary_dim} must be in "
                         f"1..headdim={head}")
    if last_position >= rotary_cos.shape[0]:
        raise ValueError(f"rotary_cos: {rotary_cos.shape[0]} positions, but position {last_position} is rotated "
                         f"(cache_seqlens + the new tokens)")
    return rotary_dim


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                 interleaved: bool) -> torch.Tensor:
    """Rotary embedding of x [B, S, H, D] at `positions` [B, S], as flash-attn applies it in the KV-cache
    call: the first rotary_dim = 2 * cos.shape[1] dims of each head are rotated by the angle whose
    cos / sin are row `positions[b, s]` of the tables, in fp32, then rounded to x's dtype; the other
    dims are kept. interleaved pairs dims (0, 1), (2, 3), ...; otherwise (GPT-NeoX) dims i and
    i + rotary_dim / 2."""
    half = int(cos.shape[1])
    c = cos.float()[positions].unsqueeze(2)  # [B, S, 1, half]
    s = sin.float()[positions].unsqueeze(2)
    xf = x.float()
    if interleaved:
        x1, x2 = xf[..., 0:2 * half:2], xf[..., 1:2 * half:2]
        rotated = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = xf[..., :half], xf[..., half:2 * half]
        rotated = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half:]), dim=-1)


def rotary_positions(cache_seqlens: list[int], count: int, per_row: bool) -> torch.Tensor:
    """Positions [B, count] of the rotated tokens: cache_seqlens[b] + i (per_row), else cache_seqlens[b]
    for every row (flash-attn's q without a causal or local mask: all its rows at one position)."""
    offsets = torch.arange(count) if per_row else torch.zeros(count, dtype=torch.long)
    return torch.tensor(cache_seqlens, dtype=torch.long).unsqueeze(1) + offsets


def cache_shape(cache: KVCache, q_lens: list[int], k_lens: list[int], heads: int,
                window: tuple[int, int]) -> ProblemShape:
    """The launch shape of attention against a cache: packed Q rows, the whole cache as K rows,
    each sequence's keys from its first key on."""
    seqlens = tuple((q_len, k_len - cache.first_key(b)) for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)))
    return ProblemShape(len(q_lens), heads, max(1, sum(q_lens)), max(1, int(cache.k.shape[0] * cache.k.shape[1])),
                        kv_heads=int(cache.k.shape[2]), window=window, seqlens=seqlens)


def decode_shape(cache: KVCache, batch: int, s0: int, k_lens: list[int], heads: int,
                 window: tuple[int, int]) -> ProblemShape:
    """The launch shape of a decode step: packed Q rows b*S0 + s, the whole cache as K rows."""
    return cache_shape(cache, [s0] * batch, k_lens, heads, window)


def decode_units(c: FAConfig, cache: KVCache, batch: int, s0: int, k_lens: list[int], heads: int,
                 window: tuple[int, int], num_splits: int = 1) -> torch.Tensor:
    """The unit table of a decode step (`varlen.table_of_sequences`)."""
    return table_of_sequences(c, cache.sequences([s0] * batch, k_lens), heads, window, num_splits,
                              heads // int(cache.k.shape[2]))


def reference_kvcache(q: torch.Tensor, cache: KVCache, k_lens: list[int], scale: float,
                      window: tuple[int, int] = (-1, -1), out_dtype: torch.dtype | None = None) -> Reference:
    """Per sequence `reference_fa` on the gathered (unpaged) keys; O [B, S0, N, D], LSE [B, N, S0]."""
    batch, s0, heads, head_dim = q.shape
    out32 = torch.zeros(batch, s0, heads, head_dim)
    out_low = torch.zeros_like(out32)
    lse32 = torch.full((batch, heads, s0), math.inf)
    lse_low = torch.full_like(lse32, math.inf)
    for b, n in enumerate(k_lens):
        if n == 0:
            continue
        k, v = cache.gather(b, n)
        ref = reference_fa(q[b:b + 1], k.unsqueeze(0), v.unsqueeze(0), scale, window, None, out_dtype)
        out32[b], out_low[b], lse32[b], lse_low[b] = ref.out32[0], ref.out_low[0], ref.lse32[0], ref.lse_low[0]
    return Reference(out32, out_low, lse32, lse_low)


def paged_tiles(base: FAConfig, page_size: int) -> FAConfig:
    """`base`, with 128-key tiles (and QK_PRELOAD 2) when its KV tile does not divide the page size."""
    if page_size and page_size % base.tile_s1 != 0:
        preload = min(base.qk_preload, 2)
        return dataclasses.replace(base, tile_s1=128, qk_preload=preload, exp_ring=preload, cube_s1=None)
    return base


def pack_allowed(s0: int, heads: int, kv_heads: int, window: tuple[int, int]) -> bool:
    """GQA packing's rule: one query row, 2..128 q heads per KV head, no window hiding a key from the row."""
    return s0 == 1 and 1 < heads // kv_heads <= 128 and window == (-1, -1)


def decode_lse(lse: torch.Tensor, batch: int, s0: int, packed: bool) -> torch.Tensor:
    """The kernel's LSE ([heads, B*S0], or [B*S0, heads] after GQA packing) as [B, heads, S0]."""
    if packed:
        return lse.reshape(batch, s0, -1).permute(0, 2, 1).contiguous()
    return lse.reshape(-1, batch, s0).permute(1, 0, 2).contiguous()
