"""flash_attn_varlen_func and flash_attn_with_kvcache on the simulator, against the per-sequence references."""

from __future__ import annotations

import math

import pytest
import torch

import ptofa
from ptofa.attention.kvcache import KVCache, reference_kvcache
from ptofa.reference import check_accuracy, check_lse
from ptofa.launch.varlen import reference_varlen


def _rand(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("causal, window, dtype", [(False, (-1, -1), torch.float16), (True, (-1, -1), torch.bfloat16),
                                                    (False, (40, 8), torch.float16)])
def test_varlen_func(causal, window, dtype) -> None:
    q_lens, k_lens = [0, 1, 127, 129, 300], [3, 1, 127, 129, 310]
    q = _rand(sum(q_lens), 4, 64, seed=1, dtype=dtype)
    k, v = _rand(sum(k_lens), 2, 64, seed=2, dtype=dtype), _rand(sum(k_lens), 2, 64, seed=3, dtype=dtype)
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(k_lens).cumsum(0).tolist()], dtype=torch.int32)
    out, lse = ptofa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 310, causal=causal, window_size=window,
                                            return_lse=True, backend="sim")
    win = (window[0], 0) if causal else window
    ref = reference_varlen(q, k, v, q_lens, k_lens, 1 / 8, win, dtype)
    assert out.dtype == dtype and out.shape == q.shape and lse.shape == (4, sum(q_lens))
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed
    assert check_lse(lse, ref).passed


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_func_appends_and_attends(paged) -> None:
    batch, heads, kv_heads, head, s0 = 2, 8, 2, 128, 1
    if paged:
        k_cache, v_cache = _rand(10, 256, kv_heads, head, seed=4), _rand(10, 256, kv_heads, head, seed=5)
        block_table = torch.tensor([[7, 2, 9, 0], [1, 5, 3, 8]], dtype=torch.int32)
    else:
        k_cache, v_cache = _rand(batch, 1024, kv_heads, head, seed=4), _rand(batch, 1024, kv_heads, head, seed=5)
        block_table = None
    cache_seqlens = torch.tensor([250, 700], dtype=torch.int32)
    k_new, v_new = _rand(batch, 10, kv_heads, head, seed=6), _rand(batch, 10, kv_heads, head, seed=7)
    q = _rand(batch, s0, heads, head, seed=8)
    out, lse = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cache_seqlens,
                                             block_table=block_table, causal=True, return_lse=True, backend="sim")
    cache = KVCache(k_cache, v_cache, block_table)
    for b, n in enumerate(cache_seqlens.tolist()):
        assert torch.equal(cache.gather(b, n + 10)[0][n:], k_new[b])  # appended in place, across a page boundary
    ref = reference_kvcache(q, cache, [260, 710], 1 / math.sqrt(head), (-1, 0), torch.float16)
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed
    assert lse.shape == (batch, heads, s0) and check_lse(lse, ref).passed


def test_serving_rules() -> None:
    q, k = _rand(5, 2, 64), _rand(5, 2, 64)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"num_splits: 17 must be an int in 0\.\.16"):
        ptofa.flash_attn_varlen_func(q, k, k, cu, cu, 5, 5, num_splits=17, backend="sim")
    with pytest.raises(ValueError, match=r"max_seqlen: the longest sequences \(5, 5\) exceed max_seqlen_q=4"):
        ptofa.flash_attn_varlen_func(q, k, k, cu, cu, 4, 5, backend="sim")
    with pytest.raises(Exception, match="cu_seqlens_k: must end at the packed length 5, ends at 4"):
        ptofa.flash_attn_varlen_func(q, k, k, cu, torch.tensor([0, 4], dtype=torch.int32), 5, 5, backend="sim")
    cache = _rand(1, 64, 2, 64)
    with pytest.raises(RuntimeError, match=r"k_cache: cache_seqlens\[0\] \+ S_new = 60 \+ 5 = 65 keys, more than the "
                       r"k_cache / v_cache row holds \(S_cache = 64 keys\)"):
        ptofa.flash_attn_with_kvcache(_rand(1, 1, 2, 64), cache, cache.clone(), cache_seqlens=torch.tensor([60], dtype=torch.int32),
                                      k=_rand(1, 5, 2, 64), v=_rand(1, 5, 2, 64), backend="sim")


@pytest.mark.parametrize("pages, page_size, table, message", [
    (4, 100, [[0, 1, 2]], "paged cache: page_size=100 must be a multiple of 128"),
    (4, 128, [[0, 7, 2]], "block_table: row 0 uses page 7 or 0, outside the cache's 4 pages (0..3)"),
    (4, 128, [[0, -1, 9]], "block_table: row 0 uses page 0 or -1, outside the cache's 4 pages (0..3)"),  # entry 2 unused
])
def test_kvcache_call_refuses_bad_paging_and_writes_nothing(pages, page_size, table, message) -> None:
    k_cache, v_cache = _rand(pages, page_size, 1, 64, seed=1), _rand(pages, page_size, 1, 64, seed=2)
    before = k_cache.clone(), v_cache.clone()
    with pytest.raises(ValueError) as info:
        ptofa.flash_attn_with_kvcache(_rand(1, 1, 2, 64), k_cache, v_cache, cache_seqlens=torch.tensor([250], dtype=torch.int32),
                                      block_table=torch.tensor(table, dtype=torch.int32), k=_rand(1, 3, 1, 64), v=_rand(1, 3, 1, 64),
                                      backend="sim")
    assert message in str(info.value)
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])


def test_varlen_call_refuses_decreasing_cu_seqlens() -> None:
    q = _rand(5, 2, 64)
    with pytest.raises(ValueError, match="cu_seqlens_q: must be non-decreasing, got 4 then 2 at index 1"):
        ptofa.flash_attn_varlen_func(q, q, q, torch.tensor([0, 4, 2, 5], dtype=torch.int32),
                                     torch.tensor([0, 1, 2, 5], dtype=torch.int32), 5, 5, backend="sim")
