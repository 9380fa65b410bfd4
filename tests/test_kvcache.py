"""KV-cache decoding on the simulator: contiguous and paged caches (shuffled block tables,
lengths ending mid-page), in-place append across a page boundary, and the input rules."""

from __future__ import annotations

import math

import pytest
import torch
from test_variants import Guarded, config, parsed

from ptofa.launch.base import TORCH_DTYPES
from ptofa.attention.kvcache import KVCache, decode_config, decode_shape, decode_units, reference_kvcache
from ptofa.pipeline import ConfigError
from ptofa.reference import check_accuracy, check_lse
from ptofa.sim import simulate
from ptofa.launch.sim import sim_kernel_args
from ptofa.kernels.builtin_mods.window import window_mods


def make_cache(paged: bool, batch: int, capacity: int, kv_heads: int, head: int, page_size: int = 256, seed: int = 0,
               dtype=torch.float16) -> KVCache:
    g = torch.Generator().manual_seed(seed)
    if not paged:
        shape = (batch, capacity, kv_heads, head)
        return KVCache(torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype))
    pages_per_seq = -(-capacity // page_size)
    pages = batch * pages_per_seq + 2
    perm = torch.randperm(pages, generator=g)[: batch * pages_per_seq].to(torch.int32)
    shape = (pages, page_size, kv_heads, head)
    return KVCache(torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype),
                   perm.reshape(batch, pages_per_seq).contiguous())


def run_decode(base, cache: KVCache, cache_seqlens: list[int], s0: int = 1, heads: int = 4, window=(-1, -1),
               block_dim: int = 3, seed: int = 1):
    cfg = decode_config(base, cache)
    batch, head = len(cache_seqlens), cfg.head
    shape = decode_shape(cache, batch, s0, cache_seqlens, heads, window)
    table = decode_units(cfg, cache, batch, s0, cache_seqlens, heads, window)
    shape.check(cfg)
    q = torch.randn(batch, s0, heads, head, generator=torch.Generator().manual_seed(seed)).to(TORCH_DTYPES[cfg.in_dtype])
    scale = 1 / math.sqrt(head)
    o = Guarded.like(torch.full((batch, s0, heads, head), math.nan, dtype=TORCH_DTYPES[cfg.out_dtype]))
    lse = Guarded.like(torch.full((heads, batch * s0), math.nan)) if cfg.lse else None
    guarded = [Guarded.like(t) for t in (q, cache.k, cache.v, table)] + ([Guarded.like(cache.block_table)] if cache.paged else [])
    args = sim_kernel_args(cfg, shape, *[x.pointer() for x in guarded[:3]], o.pointer(), block_dim, scale,
                           lse=None if lse is None else lse.pointer(), units=table, block_table=cache.block_table)
    args["units"] = guarded[3].pointer()
    if cache.paged:
        args["block_table"] = guarded[4].pointer()
    simulate(parsed(cfg), args, block_dim)
    for x in guarded + [o] + ([lse] if lse else []):
        assert x.guards_intact(), "a guard region around a GM tensor was written"
    ref = reference_kvcache(q, cache, cache_seqlens, scale, window, TORCH_DTYPES[cfg.out_dtype])
    acc = check_accuracy(o.inner.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
    if cfg.lse:
        lse_bhs = lse.inner.reshape(heads, batch, s0).permute(1, 0, 2)
        result = check_lse(lse_bhs, ref)
        assert result.passed, result.message
    return o.inner


@pytest.mark.parametrize("paged, lens, s0, window, knobs", [
    (False, [0, 5, 300], 1, (-1, -1), dict(lse=True)),
    (False, [700, 129], 3, (-1, 0), dict(mods=window_mods(), lse=True, tile_s1=128, qk_preload=2)),
    (True, [300, 513, 1], 1, (-1, -1), dict(lse=True)),
    (True, [600, 257], 4, (-1, 0), dict(mods=window_mods(), lse=True, in_dtype="bf16", out_dtype="f32")),
    (True, [1000, 0], 2, (64, 0), dict(mods=window_mods(), tile_s1=128, qk_preload=3)),
])
def test_decode_matches_gathered_reference(paged, lens, s0, window, knobs) -> None:
    dtype = TORCH_DTYPES[knobs.get("in_dtype", "f16")]
    cache = make_cache(paged, len(lens), 1024, 2, 128, page_size=256, dtype=dtype)
    run_decode(config(**knobs), cache, lens, s0=s0, heads=8, window=window)


def test_append_across_a_page_boundary_then_attend() -> None:
    cache = make_cache(True, 2, 1024, 1, 64, page_size=256)
    before_k = cache.k.clone()
    lens = [250, 10]
    g = torch.Generator().manual_seed(5)
    k_new = torch.randn(2, 12, 1, 64, generator=g).to(torch.float16)
    v_new = torch.randn(2, 12, 1, 64, generator=g).to(torch.float16)
    cache.append(torch.tensor(lens, dtype=torch.int32), k_new, v_new)
    for b, n in enumerate(lens):
        k, v = cache.gather(b, n + 12)
        assert torch.equal(k[n:], k_new[b]) and torch.equal(v[n:], v_new[b])
        assert torch.equal(k[:n], KVCache(before_k, cache.v, cache.block_table).gather(b, n)[0])
    touched = {r for b, n in enumerate(lens) for r in cache.rows(b, n, n + 12)}
    flat_before, flat_after = before_k.view(-1, 1, 64), cache.k.view(-1, 1, 64)
    untouched = [r for r in range(flat_before.shape[0]) if r not in touched]
    assert torch.equal(flat_before[untouched], flat_after[untouched])  # nothing else written
    run_decode(config(head=64, lse=True), cache, [n + 12 for n in lens], heads=2)


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.block_table.__setitem__((0, 0), 99), "block_table: row 0 uses page 99"),
    (lambda c: None, "block_table: cache_seqlens[1] + S_new = 1020 + 12 = 1032 keys, more than block_table addresses "
                     "(max_pages=4 pages of page_size=256 = 1024 keys)"),
])
def test_bad_cache_input_is_refused_and_nothing_written(mutate, message) -> None:
    cache = make_cache(True, 2, 1024, 1, 64, page_size=256)
    mutate(cache)
    snapshot = cache.k.clone()
    with pytest.raises(RuntimeError) as info:  # flash-attn's exception type, and ptofa's ConfigError
        cache.append(torch.tensor([10, 1020], dtype=torch.int32), torch.zeros(2, 12, 1, 64, dtype=torch.float16),
                     torch.zeros(2, 12, 1, 64, dtype=torch.float16))
    assert message in str(info.value) and isinstance(info.value, ConfigError)
    assert torch.equal(snapshot, cache.k)


def test_page_size_rule() -> None:
    with pytest.raises(ConfigError, match=r"paged cache: page_size=128 must be a multiple of tile_s1=256"):
        config(varlen=True, page_size=128, tile_s1=256)
