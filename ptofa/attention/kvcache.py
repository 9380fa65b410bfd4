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

import math
from dataclasses import dataclass

import torch

from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.reference import Reference, reference_fa
from ptofa.launch.varlen import table_of_sequences


@dataclass(frozen=True)
class KVCache:
    """A contiguous ([B, S_cache, KVN, D]) or paged ([pages, page_size, KVN, D] + block_table) cache pair."""

    k: torch.Tensor
    v: torch.Tensor
    block_table: torch.Tensor | None = None

    @property
    def paged(self) -> bool:
        return self.block_table is not None

    @property
    def page_size(self) -> int:
        return int(self.k.shape[1]) if self.paged else 0

    def capacity(self, b: int) -> int:
        """Keys sequence b can hold."""
        return int(self.block_table.shape[1]) * self.page_size if self.paged else int(self.k.shape[1])

    def check(self, batch: int, cache_seqlens: torch.Tensor, new: int = 0) -> list[int]:
        """The key counts after appending `new` keys, or `ConfigError` (nothing is written)."""
        if self.k.shape != self.v.shape or self.k.dim() != 4:
            raise ConfigError(f"kv cache: k {tuple(self.k.shape)} and v {tuple(self.v.shape)} must be equal 4-d tensors")
        lens = [int(x) for x in torch.as_tensor(cache_seqlens).reshape(-1)]
        if len(lens) != batch or any(n < 0 for n in lens):
            raise ConfigError(f"kv cache: cache_seqlens {lens} must hold {batch} non-negative lengths")
        if self.paged:
            bt = self.block_table
            if bt.dim() != 2 or bt.shape[0] != batch or bt.dtype.is_floating_point:
                raise ConfigError(f"kv cache: block_table must be an int32 [B={batch}, max_pages] tensor, got "
                                  f"{bt.dtype} {tuple(bt.shape)}")
            pages = int(self.k.shape[0])
            for b, n in enumerate(lens):
                used = bt[b, : -(-(n + new) // self.page_size)]
                if used.numel() and (int(used.min()) < 0 or int(used.max()) >= pages):
                    raise ConfigError(f"kv cache: block_table[{b}] uses page {int(used.max())} or "
                                      f"{int(used.min())}, outside the cache's {pages} pages")
        for b, n in enumerate(lens):
            if n + new > self.capacity(b):
                raise ConfigError(f"kv cache: cache_seqlens[{b}] + S_new = {n} + {new} = {n + new} exceeds the "
                                  f"capacity of {self.capacity(b)} keys")
        return [n + new for n in lens]

    def rows(self, b: int, start: int, stop: int) -> list[tuple[int, int]]:
        """(row of the flattened [pages * page_size] or [B * S_cache] cache) for keys start..stop-1 of b."""
        if not self.paged:
            base = b * int(self.k.shape[1])
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


def decode_shape(cache: KVCache, batch: int, s0: int, k_lens: list[int], heads: int,
                 window: tuple[int, int]) -> ProblemShape:
    """The launch shape of a decode step: packed Q rows b*S0 + s, the whole cache as K rows."""
    return ProblemShape(batch, heads, max(1, batch * s0), max(1, int(cache.k.shape[0] * cache.k.shape[1])),
                        kv_heads=int(cache.k.shape[2]), window=window, seqlens=tuple((s0, n) for n in k_lens))


def decode_units(c: FAConfig, cache: KVCache, batch: int, s0: int, k_lens: list[int], heads: int,
                 window: tuple[int, int], num_splits: int = 1) -> torch.Tensor:
    """The unit table of a decode step (`varlen.table_of_sequences`)."""
    s_cache = 0 if cache.paged else int(cache.k.shape[1])
    seqs = [(b * s0, s0, b * s_cache, k_lens[b]) for b in range(batch)]
    return table_of_sequences(c, seqs, heads, window, num_splits, heads // int(cache.k.shape[2]))


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
