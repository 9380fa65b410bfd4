"""The serving calls: `flash_attn_varlen_func` (packed prefill) and `flash_attn_with_kvcache`
(decode against a contiguous or paged KV cache), with flash-attn's meaning.

Both run the varlen forward kernel (`ptofa.launch.varlen`, `ptofa.attention.kvcache`) on the simulator
(`backend="sim"`) or, built with ptoas and bisheng, on an NPU (`backend="npu"`, and "auto"
where torch_npu sees one), through the one launch layer: `plan_serving` makes the call's
`LaunchPlan` for the backend's chip and `dispatch.launch_on` runs it. `num_splits` > 1 splits every unit's KV
tiles over that many entries and combines the partials with the reduce kernel
(`ptofa.launch.splitkv`); 0 picks a count per unit from the timing model (`splitkv.plan_splits`),
1 does not split.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from ptofa.attention.core import auto_config, check_window, dtype_name, resolve_backend
from ptofa.attention.kvcache import KVCache, decode_config, decode_shape, decode_units
from ptofa.launch import dispatch
from ptofa.launch.base import TORCH_DTYPES
from ptofa.launch.plan import LaunchPlan, plan_split
from ptofa.launch.splitkv import plan_varlen
from ptofa.launch.varlen import seqlens_of, unit_table, varlen_shape
from ptofa.pipeline import MAX_SPLITS, ConfigError, FAConfig, ProblemShape
from ptofa.sim.socspec import SocSpec


def _splits(num_splits: int) -> None:
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits: {num_splits!r} must be an int in 0..{MAX_SPLITS} (0: chosen by the timing model)")


def paged_tiles(base: FAConfig, page_size: int) -> FAConfig:
    """`base`, with 128-key tiles (and QK_PRELOAD 2) when its KV tile does not divide the page size."""
    if page_size and page_size % base.tile_s1 != 0:
        preload = min(base.qk_preload, 2)
        return dataclasses.replace(base, tile_s1=128, qk_preload=preload, exp_ring=preload, cube_s1=None)
    return base


def plan_serving(config: FAConfig, shape: ProblemShape, table_of, num_splits: int | Sequence[int], soc: SocSpec, *,
                 scale: float, block_table=None) -> LaunchPlan | None:
    """The launch of a serving call on `soc`: split counts (`splitkv.plan_varlen`: `num_splits` 0 chosen
    by the timing model, or per unit), the varlen kernel and the reduce; None for an empty unit table."""
    split = plan_varlen(config, shape, table_of, num_splits, soc.cube_cores)
    if split is None:
        return None
    max_pages = 0 if block_table is None else int(block_table.shape[-1])
    return plan_split(split, shape, soc, scale=scale, max_pages=max_pages)


def _launch(backend: str, config: FAConfig, shape: ProblemShape, table_of, q, k, v, out, scale: float,
            num_splits: int | Sequence[int], *, lse=None, block_table=None) -> None:
    """Plan the serving call for `backend`'s chip ("sim" or "npu", resolved) and launch it."""
    plan = plan_serving(config, shape, table_of, num_splits, dispatch.backend_soc(backend), scale=scale,
                        block_table=block_table)
    if plan is not None:
        dispatch.launch_on(backend, plan, {"q": q, "k": k, "v": v, "o": out, "lse": lse, "block_table": block_table})


def _window(causal: bool, window_size) -> tuple[int, int]:
    left, right = check_window(window_size, "window_size")
    return (left, 0) if causal else (left, right)


def _scale(softmax_scale, head: int) -> float:
    return 1.0 / math.sqrt(head) if softmax_scale is None else float(softmax_scale)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                           softmax_scale=None, causal: bool = False, window_size=(-1, -1), return_lse: bool = False,
                           num_splits: int = 0, backend: str = "auto"):
    """Packed Q [total_q, heads, D], K/V [total_k, kv_heads, D]; returns out [total_q, heads, D]
    (and lse [heads, total_q] fp32). Zero-length sequences are allowed."""
    backend = resolve_backend(backend)
    _splits(num_splits)
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or q.shape[2] != k.shape[2]:
        raise ValueError(f"shapes: q [total_q, heads, D] and k, v [total_k, kv_heads, D] with one D, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"grouped heads: heads={q.shape[1]} must be a multiple of kv_heads={k.shape[1]}")
    in_dtype = dtype_name(q.dtype, "q")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"dtypes: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    q_lens = seqlens_of(cu_seqlens_q, q.shape[0], "cu_seqlens_q")
    k_lens = seqlens_of(cu_seqlens_k, k.shape[0], "cu_seqlens_k")
    if len(q_lens) != len(k_lens):
        raise ValueError(f"cu_seqlens: {len(q_lens)} query sequences but {len(k_lens)} key sequences")
    if max(q_lens) > max_seqlen_q or max(k_lens) > max_seqlen_k:
        raise ValueError(f"max_seqlen: the longest sequences ({max(q_lens)}, {max(k_lens)}) exceed max_seqlen_q="
                         f"{max_seqlen_q}, max_seqlen_k={max_seqlen_k}")
    heads, head = q.shape[1], q.shape[2]
    window = _window(causal, window_size)
    config = auto_config(head, in_dtype, s1=max(1, max_seqlen_k), masked=window != (-1, -1), lse=return_lse)
    config = dataclasses.replace(config, varlen=True)
    shape = varlen_shape(q_lens, k_lens, heads, k.shape[1], window)
    shape.check(config)
    out = torch.empty(q.shape, dtype=TORCH_DTYPES[config.out_dtype], device=q.device)
    lse = torch.full((heads, q.shape[0]), math.inf, device=q.device) if return_lse else None
    _launch(backend, config, shape, lambda c, n: unit_table(c, q_lens, k_lens, heads, window, n), q.contiguous(),
            k.contiguous(), v.contiguous(), out, _scale(softmax_scale, head), num_splits, lse=lse)
    return (out, lse) if return_lse else out


def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=None, k=None, v=None, softmax_scale=None,
                            causal: bool = False, window_size=(-1, -1), return_lse: bool = False, num_splits: int = 0,
                            pack_gqa: bool | None = None, backend: str = "auto"):
    """q [B, S0, heads, D]; caches [B, S_cache, kv_heads, D] or paged [pages, page_size, kv_heads, D] with
    block_table [B, max_pages] int32; cache_seqlens [B]; optional k/v [B, S_new, kv_heads, D] appended at
    cache_seqlens first (in place). Returns out [B, S0, heads, D] (and lse [B, heads, S0] fp32).
    A paged cache's page_size must be a multiple of 128.

    `pack_gqa` (None: whenever it applies) puts the heads / kv_heads q heads of one KV head in the rows
    of one work unit, so K and V are read once per KV head: one query row per sequence (S0 = 1) and a
    window that hides no key from it (none, or causal)."""
    backend = resolve_backend(backend)
    _splits(num_splits)
    cache = KVCache(k_cache, v_cache, block_table)
    if q.dim() != 4 or k_cache.dim() != 4 or q.shape[3] != k_cache.shape[3]:
        raise ValueError(f"shapes: q [B, S0, heads, D] and caches [.., .., kv_heads, D] with one D, got "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}")
    if q.shape[2] % k_cache.shape[2] != 0:
        raise ValueError(f"grouped heads: heads={q.shape[2]} must be a multiple of kv_heads={k_cache.shape[2]}")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"dtypes: q and the caches must share one dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    batch, s0, heads, head = q.shape
    new = 0 if k is None else int(k.shape[1])
    if (k is None) != (v is None):
        raise ValueError("k, v: give both new keys and new values, or neither")
    k_lens = cache.check(batch, cache_seqlens, new)  # every rule before anything is written
    if cache.paged and cache.page_size % 128 != 0:
        raise ConfigError(f"paged cache: page_size={cache.page_size} must be a multiple of 128 (a KV tile lies in one page)")
    window = _window(causal, window_size)
    if s0 == 1 and window[0] == -1 and window[1] >= 0:
        window = (-1, -1)  # the one query row (bottom-right aligned) sees every key
    pack = _pack_gqa(pack_gqa, s0, heads, int(k_cache.shape[2]), window)
    if k is not None:
        cache.append(cache_seqlens, k, v)
    base = auto_config(head, dtype_name(q.dtype, "q"), s1=max(1, max(k_lens)), masked=window != (-1, -1),
                       lse=return_lse)
    config = dataclasses.replace(decode_config(paged_tiles(base, cache.page_size), cache), gqa_pack=pack)
    shape = decode_shape(cache, batch, s0, k_lens, heads, window)
    shape.check(config)
    out = torch.empty(q.shape, dtype=TORCH_DTYPES[config.out_dtype], device=q.device)
    lse_shape = (batch * s0, heads) if pack else (heads, batch * s0)
    lse = torch.full(lse_shape, math.inf, device=q.device) if return_lse else None
    _launch(backend, config, shape, lambda c, n: decode_units(c, cache, batch, s0, k_lens, heads, window, n),
            q.contiguous(), cache.k, cache.v, out, _scale(softmax_scale, head), num_splits, lse=lse,
            block_table=cache.block_table)
    if return_lse:
        return out, decode_lse(lse, batch, s0, pack)
    return out


def decode_lse(lse: torch.Tensor, batch: int, s0: int, packed: bool) -> torch.Tensor:
    """The kernel's LSE ([heads, B*S0], or [B*S0, heads] after GQA packing) as [B, heads, S0]."""
    if packed:
        return lse.reshape(batch, s0, -1).permute(0, 2, 1).contiguous()
    return lse.reshape(-1, batch, s0).permute(1, 0, 2).contiguous()


def pack_allowed(s0: int, heads: int, kv_heads: int, window: tuple[int, int]) -> bool:
    """GQA packing's rule: one query row, 2..128 q heads per KV head, no window hiding a key from the row."""
    return s0 == 1 and 1 < heads // kv_heads <= 128 and window == (-1, -1)


def _pack_gqa(pack_gqa: bool | None, s0: int, heads: int, kv_heads: int, window: tuple[int, int]) -> bool:
    """Whether to pack the q heads of a KV head into one unit (None: whenever the rule allows it)."""
    group = heads // kv_heads
    allowed = pack_allowed(s0, heads, kv_heads, window)
    if pack_gqa and not allowed:
        raise ValueError(f"pack_gqa: needs one query row (S0={s0}), 2..128 q heads per KV head (group={group}) "
                         f"and a window that hides no key from it (window={window})")
    return allowed if pack_gqa is None else bool(pack_gqa)
