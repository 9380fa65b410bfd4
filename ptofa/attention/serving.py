"""The serving calls: `flash_attn_varlen_func` (packed prefill, K/V packed or paged through a
block table; `flash_attn_varlen_qkvpacked_func` / `_kvpacked_func` stack them) and
`flash_attn_with_kvcache` (decode against a contiguous or paged KV cache, with rotary embedding,
cache_batch_idx and cache_leftpad), with flash-attn 2.x's signatures and meaning. The packed varlen
calls are differentiable (the varlen backward kernels, one launch for the batch); the paged one and the
KV-cache call are not: a backward through their output raises NotImplementedError.

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

from ptofa.attention.attn_probs import varlen_probs
from ptofa.attention.core import (auto_config, check_alibi_slopes, check_softcap, check_window, dropout_seed_offset,
                                  dtype_name, flash_attn_returns, resolve_backend, unsupported_arguments,
                                  with_score_mods)
from ptofa.attention.kvcache import (CacheCapacityError, KVCache, apply_rotary, cache_shape,  # noqa: F401
                                    check_rotary, decode_config, decode_lse, decode_shape, decode_units,  # (re-exported)
                                    pack_allowed, paged_tiles, rotary_positions)
from ptofa.launch import dispatch
from ptofa.launch.base import TORCH_DTYPES, pad_heads
from ptofa.launch.splitkv import plan_serving  # noqa: F401 (re-exported)
from ptofa.launch.varlen import seqlens_of, table_of_sequences, unit_table, varlen_shape
from ptofa.pipeline import MAX_SPLITS, ConfigError, FAConfig, ProblemShape, kernel_head


def _splits(num_splits: int) -> None:
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits: {num_splits!r} must be an int in 0..{MAX_SPLITS} (0: chosen by the timing model)")


def _launch(backend: str, config: FAConfig, shape: ProblemShape, table_of, q, k, v, out, scale: float,
            num_splits: int | Sequence[int], *, lse=None, block_table=None, softcap: float = 0.0, alibi=None,
            mod_args=None, dropout: tuple[float, int, int] | None = None) -> None:
    """Plan the serving call for `backend`'s chip ("sim" or "npu", resolved) and launch it (`mod_args`: the
    config's mods' kernel arguments by name)."""
    plan = plan_serving(config, shape, table_of, num_splits, dispatch.backend_soc(backend), scale=scale,
                        block_table=block_table, softcap=softcap, alibi=alibi, dropout=dropout)
    if plan is not None:
        dispatch.launch_on(backend, plan, {"q": q, "k": k, "v": v, "o": out, "lse": lse, "block_table": block_table,
                                           "alibi_slopes": alibi, **(mod_args or {})})


def _window(causal: bool, window_size) -> tuple[int, int]:
    left, right = check_window(window_size, "window_size")
    return (left, 0) if causal else (left, right)


def _scale(softmax_scale, head: int) -> float:
    return 1.0 / math.sqrt(head) if softmax_scale is None else float(softmax_scale)


class _NoBackward(torch.autograd.Function):
    """Puts a forward-only result on the autograd graph, so that a backward through it raises
    `NotImplementedError` instead of leaving q, k, v without gradients."""

    @staticmethod
    def forward(ctx, what: str, out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        ctx.what = what
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad_out):
        raise NotImplementedError(f"{ctx.what}: no backward; ptofa's backward kernels read dense or packed "
                                  f"K/V, not K/V through a block table or a KV cache")


def _forward_only(what: str, out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return _NoBackward.apply(what, out, *inputs)
    return out


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_size,
            block_table, lse_wanted: bool, num_splits: int, backend: str, names=("q", "k", "v"), softcap: float = 0.0,
            alibi_slopes=None, dropout: tuple[float, int, int] | None = None):
    """(out, lse or None) of packed sequences: K/V packed like Q, or paged ([pages, page_size, KVN, D]
    with `block_table` [B, max_pages]: sequence b's keys 0..cu_seqlens_k[b+1]-cu_seqlens_k[b]-1 are
    read through row b of the block table); softcap and ALiBi slopes ([heads] or [B, heads]) as flash-attn's,
    each sequence with its own lengths; `dropout` (p, seed, offset) of the kernel's generator, sequence b
    at its own positions (`ptofa.kernels.dropout.packed_keep_masks`)."""
    backend = resolve_backend(backend)
    _splits(num_splits)
    if dropout is not None:  # the split kernel has no dropout (its partials would need the mask's rescaling)
        if num_splits > 1:
            raise NotImplementedError(f"num_splits: {num_splits} with dropout_p > 0; a dropout call runs unsplit "
                                      f"(pass num_splits=0 or 1)")
        num_splits = 1
    qn, kn, vn = names
    paged = block_table is not None
    kv_dims = 4 if paged else 3
    kv_layout = "[pages, page_size, kv_heads, D] with block_table" if paged else "[total_k, kv_heads, D]"
    if (q.dim() != 3 or k.dim() != kv_dims or v.dim() != kv_dims or k.shape[:-1] != v.shape[:-1]
            or q.shape[-1] != k.shape[-1]):
        raise ValueError(f"shapes: {qn} [total_q, heads, D] and {kn}, {vn} {kv_layout} with one D (v may have "
                         f"its own Dv), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    kv_heads = int(k.shape[-2])
    if q.shape[1] % kv_heads != 0:
        raise ValueError(f"grouped heads: heads={q.shape[1]} must be a multiple of kv_heads={kv_heads}")
    in_dtype = dtype_name(q.dtype, qn)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"dtypes: {qn}, {kn}, {vn} must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    q_lens = seqlens_of(cu_seqlens_q, q.shape[0], "cu_seqlens_q")
    cu_k = torch.as_tensor(cu_seqlens_k)
    k_total = int(cu_k.reshape(-1)[-1]) if paged and cu_k.numel() else (k.shape[0] if not paged else 0)
    k_lens = seqlens_of(cu_seqlens_k, k_total, "cu_seqlens_k")
    if len(q_lens) != len(k_lens):
        raise ValueError(f"cu_seqlens: {len(q_lens)} query sequences but {len(k_lens)} key sequences")
    if max(q_lens) > max_seqlen_q or max(k_lens) > max_seqlen_k:
        raise ValueError(f"max_seqlen: the longest sequences ({max(q_lens)}, {max(k_lens)}) exceed max_seqlen_q="
                         f"{max_seqlen_q}, max_seqlen_k={max_seqlen_k}")
    heads, head, head_v = q.shape[1], q.shape[2], v.shape[-1]
    width = kernel_head(head, head_v)
    if paged:
        native_cache(width, head, head_v, kn, vn)
    q, k, v = pad_heads(width, q, k, v)  # zero-padded to the kernel width, O sliced back (a copy of a paged cache)
    window = _window(causal, window_size)
    softcap = check_softcap(softcap)
    alibi = check_alibi_slopes(alibi_slopes, len(q_lens), heads)
    base = with_score_mods(auto_config(width, in_dtype, s1=max(1, max_seqlen_k), masked=window != (-1, -1),
                                       lse=lse_wanted), softcap=softcap > 0, alibi=alibi is not None,
                           dropout=dropout is not None)
    lse = torch.full((heads, q.shape[0]), math.inf, device=q.device) if lse_wanted else None
    if paged:
        cache = KVCache(k, v, block_table)
        if block_table.dim() == 2:
            for b, n in enumerate(k_lens):
                if n > cache.capacity(b):
                    raise CacheCapacityError(f"cu_seqlens_k: sequence {b} has {n} keys, more than its block_table row "
                                             f"holds ({block_table.shape[1]} pages of {cache.page_size} = "
                                             f"{cache.capacity(b)} keys)")
        cache.check(len(k_lens), torch.tensor(k_lens), 0)
        if cache.page_size % 128 != 0:
            raise ConfigError(f"paged cache: page_size={cache.page_size} must be a multiple of 128 (a KV tile lies "
                              f"in one page)")
        config = decode_config(paged_tiles(base, cache.page_size), cache)
        shape = cache_shape(cache, q_lens, k_lens, heads, window)
        table_of = lambda c, n: table_of_sequences(c, cache.sequences(q_lens, k_lens), heads, window, n)  # noqa: E731
        k, v = cache.k, cache.v
    else:
        config = dataclasses.replace(base, varlen=True)
        shape = varlen_shape(q_lens, k_lens, heads, kv_heads, window)
        table_of = lambda c, n: unit_table(c, q_lens, k_lens, heads, window, n)  # noqa: E731
        k, v = k.contiguous(), v.contiguous()
    shape.check(config)
    out = torch.empty(q.shape, dtype=TORCH_DTYPES[config.out_dtype], device=q.device)
    _launch(backend, config, shape, table_of, q.detach().contiguous(), k.detach(), v.detach(), out,
            _scale(softmax_scale, head), num_splits, lse=lse, block_table=block_table, softcap=softcap, alibi=alibi,
            dropout=dropout)
    return (out if width == head_v else out[..., :head_v].contiguous()), lse


def native_cache(width: int, head: int, head_v: int, k_name: str = "k_cache", v_name: str = "v_cache") -> None:
    """NotImplementedError for a KV cache whose v head dim differs from q/k's. (One head dim that is no
    kernel width runs on a zero-padded copy of the whole cache each call: correct, but a copy of the
    cache; a cache allocated at `kernel_head(D)` columns, zero beyond D, is read in place.)"""
    if head != head_v:
        raise NotImplementedError(
            f"{k_name}, {v_name}: head dims D={head}, Dv={head_v}; a KV cache takes one head dim for k and v (the "
            f"dense and packed varlen calls take Dv != D)")


class _VarlenAttention(torch.autograd.Function):
    """Packed (unpaged) varlen attention on the autograd graph: the forward is `_varlen` with LSE on;
    the backward is `attention.backward.varlen_backward`, one launch of each backward kernel over the
    whole batch (the unit tables of `varlen.backward_tables`), with the forward's window, scale and dropout mask."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                window_size, num_splits, backend, deterministic, names, softcap, alibi_slopes, dropout):
        out, lse = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                           window_size, None, True, num_splits, backend, names, softcap, alibi_slopes, dropout)
        ctx.softcap, ctx.alibi, ctx.dropout = softcap, alibi_slopes, dropout
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        ctx.q_lens = seqlens_of(cu_seqlens_q, q.shape[0], "cu_seqlens_q")
        ctx.k_lens = seqlens_of(cu_seqlens_k, k.shape[0], "cu_seqlens_k")
        ctx.scale = _scale(softmax_scale, q.shape[-1])
        ctx.window = _window(causal, window_size)
        ctx.backend, ctx.deterministic = backend, bool(deterministic)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        from ptofa.attention.backward import varlen_backward

        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = varlen_backward(q, k, v, out.to(q.dtype), lse, grad_out.to(q.dtype), ctx.q_lens, ctx.k_lens,
                                     softmax_scale=ctx.scale, window=ctx.window, deterministic=ctx.deterministic,
                                     backend=ctx.backend, softcap=ctx.softcap, alibi_slopes=ctx.alibi,
                                     dropout=ctx.dropout)
        return (dq, dk, dv) + (None,) * 14


def _varlen_call(what, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                 causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, block_table, return_lse,
                 num_splits, backend, names=("q", "k", "v")):
    """A flash-attn varlen call: its arguments checked, the launch (on the autograd graph when an input
    requires grad), flash-attn's returns (S_dmask: `ptofa.attention.attn_probs`)."""
    unsupported_arguments(dropout_p, softcap, alibi_slopes, dropout=True)
    dropout = (float(dropout_p), *dropout_seed_offset()) if dropout_p else None
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        if block_table is not None:
            out, lse = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                               window_size, block_table, return_attn_probs or return_lse, num_splits, backend, names,
                               softcap, alibi_slopes, dropout)
            out = _forward_only(f"{what} with block_table", out, q, k, v)
        else:
            out, lse = _VarlenAttention.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                              softmax_scale, causal, window_size, num_splits, resolve_backend(backend),
                                              deterministic, names, float(softcap), alibi_slopes, dropout)
    else:
        out, lse = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                           window_size, block_table, return_attn_probs or return_lse, num_splits, backend, names,
                           softcap, alibi_slopes, dropout)
    s_dmask = None
    if dropout is not None and return_attn_probs:
        q_lens, k_lens = (torch.as_tensor(cu).diff().tolist() for cu in (cu_seqlens_q, cu_seqlens_k))
        s_dmask = varlen_probs(q, _packed_keys(k, block_table, k_lens), q_lens, k_lens, max_seqlen_q, max_seqlen_k,
                               dropout, softmax_scale, _window(causal, window_size), float(softcap), alibi_slopes)
    return flash_attn_returns(out, lse, return_attn_probs, return_lse, s_dmask)


def _packed_keys(k: torch.Tensor, block_table: torch.Tensor | None, k_lens: list[int]) -> torch.Tensor:
    """K packed [total_k, KVN, D]: `k` itself, or each sequence's keys gathered from a paged cache
    through its block table row."""
    if block_table is None:
        return k
    page = k.shape[1]
    return torch.cat([k[block_table[b, :-(-n // page)].long()].reshape(-1, *k.shape[2:])[:n]
                      for b, n in enumerate(k_lens)])


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: torch.Tensor | None = None,
    *,
    return_lse: bool = False,
    num_splits: int = 0,
    backend: str = "auto",
    score_mod=None,
    mask_mod=None,
    sinks: torch.Tensor | None = None,
):
    """Packed variable-length attention with flash-attn 2.x's signature.

    q:            [total_q, nheads, headdim]; k, v [total_k, nheads_k, headdim] (GQA/MQA when
                  nheads_k < nheads), or with `block_table` a paged cache [pages, page_size, nheads_k,
                  headdim] (page_size a multiple of 128) whose block_table [batch, max_pages] int32 row b
                  lists sequence b's pages in order.
    cu_seqlens_q, cu_seqlens_k: int32 [batch + 1], from 0, non-decreasing; zero-length sequences are
                  allowed (a sequence with queries but no keys gives 0 and LSE +inf). With block_table
                  cu_seqlens_k only gives the key counts (sequence b has cu_seqlens_k[b+1] - cu_seqlens_k[b]).
    max_seqlen_q, max_seqlen_k: at least the longest sequences.
    dropout_p:   in [0, 1): as `flash_attn_func` (forward and backward), each sequence's mask that of
                 batch b = its index at its own query and key positions (`ptofa.kernels.dropout`);
                 the call runs unsplit (num_splits > 1: NotImplementedError).
    softcap, alibi_slopes: as `flash_attn_func`; ALiBi positions from each sequence's own lengths
                 (bottom-right aligned), slopes [nheads] or [batch, nheads].
    softmax_scale, causal, window_size: as `flash_attn_func`, per sequence (bottom-right aligned).
    deterministic: the backward's mode, as `flash_attn_func` (default False: atomic-add dQ).
    return_attn_probs: return (out, softmax_lse [nheads, total_q] fp32, S_dmask): S_dmask None without
                  dropout, else flash-attn's [batch, nheads, max_seqlen_q, max_seqlen_k] (each rounded up to
                  128) of `flash_attn_func`, sequence b at [b, :, :its queries, :its keys].
    return_lse:   (keyword) return (out, softmax_lse).
    num_splits:   (keyword) split-KV: 0 chosen per unit by the timing model, 1 none, up to 16.
    backend:      (keyword) "auto", "sim" or "npu".
    score_mod, mask_mod, sinks: (keyword) as `flash_attn_func`, b the sequence and q_idx / kv_idx positions in
                  it (the batch runs zero-padded to the longest sequence, the padding's tiles skipped);
                  differentiable in q, k, v and sinks, not with block_table, num_splits, softcap or alibi_slopes.

    Returns out [total_q, nheads, headdim] in q's dtype. Differentiable in q, k, v (not paged): the
    backward runs the varlen backward kernels once for the whole batch (`attention.backward.varlen_backward`,
    every head dim of the forward, `deterministic` choosing the mode); with block_table a backward
    through out raises NotImplementedError."""
    if score_mod is not None or mask_mod is not None or sinks is not None:
        from ptofa.attention.flex import flash_attn_varlen_with_mods

        unsupported_arguments(dropout_p, softcap, alibi_slopes)
        for name, given in (("softcap", softcap), ("alibi_slopes", alibi_slopes is not None),
                            ("block_table", block_table is not None), ("num_splits", num_splits not in (0, 1))):
            if given:
                raise NotImplementedError(f"{name}: not with score_mod / mask_mod / sinks")
        out, lse = flash_attn_varlen_with_mods(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=softmax_scale,
                                               causal=causal, window_size=window_size, score_mod=score_mod,
                                               mask_mod=mask_mod, sinks=sinks, backend=backend,
                                               deterministic=deterministic)
        return flash_attn_returns(out, lse, return_attn_probs, return_lse)
    return _varlen_call("flash_attn_varlen_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                        return_attn_probs, block_table, return_lse, num_splits, backend)


def flash_attn_varlen_qkvpacked_func(
    qkv: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
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
    num_splits: int = 0,
    backend: str = "auto",
):
    """`flash_attn_varlen_func` on Q, K, V stacked in one tensor qkv [total, 3, nheads, headdim] with one
    cu_seqlens / max_seqlen for queries and keys (flash-attn's signature). Returns as
    `flash_attn_varlen_func`; differentiable in qkv."""
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 4 or qkv.shape[1] != 3:
        got = tuple(qkv.shape) if isinstance(qkv, torch.Tensor) else type(qkv).__name__
        raise ValueError(f"qkv: must be [total, 3, nheads, headdim], got {got}")
    q, k, v = qkv.unbind(1)
    return _varlen_call("flash_attn_varlen_qkvpacked_func", q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                        return_attn_probs, None, return_lse, num_splits, backend, ("qkv[:, 0]", "qkv[:, 1]", "qkv[:, 2]"))


def flash_attn_varlen_kvpacked_func(
    q: torch.Tensor,
    kv: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
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
    num_splits: int = 0,
    backend: str = "auto",
):
    """`flash_attn_varlen_func` with K and V stacked in one tensor kv [total_k, 2, nheads_k, headdim]
    (flash-attn's signature). Returns as `flash_attn_varlen_func`; differentiable in q and kv."""
    if not isinstance(kv, torch.Tensor) or kv.dim() != 4 or kv.shape[1] != 2:
        got = tuple(kv.shape) if isinstance(kv, torch.Tensor) else type(kv).__name__
        raise ValueError(f"kv: must be [total_k, 2, nheads_k, headdim], got {got}")
    k, v = kv.unbind(1)
    return _varlen_call("flash_attn_varlen_kvpacked_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                        deterministic, return_attn_probs, None, return_lse, num_splits, backend,
                        ("q", "kv[:, 0]", "kv[:, 1]"))


def _cache_seqlens(cache_seqlens, batch: int, full: int, appending: bool) -> torch.Tensor:
    """flash-attn's cache_seqlens as [B] int64: a tensor, an int for every sequence, or None (the
    whole cache, `full` keys; not with new keys)."""
    if cache_seqlens is None:
        if appending:
            raise ValueError("cache_seqlens: needed when k and v are appended (where would they go?)")
        return torch.full((batch,), full, dtype=torch.long)
    if isinstance(cache_seqlens, bool):
        raise ValueError(f"cache_seqlens: {cache_seqlens!r} must be an int or an integer [B] tensor")
    if isinstance(cache_seqlens, int):
        return torch.full((batch,), cache_seqlens, dtype=torch.long)
    lens = torch.as_tensor(cache_seqlens)
    if lens.dtype.is_floating_point or lens.dim() != 1 or lens.shape[0] != batch:
        raise ValueError(f"cache_seqlens: must be an int or an integer [B={batch}] tensor, got {lens.dtype} "
                         f"{tuple(lens.shape)}")
    return lens.to(torch.long).cpu()


def _per_sequence(values, batch: int, name: str) -> tuple[int, ...] | None:
    """An integer [B] tensor as a tuple of ints (None stays None), or ValueError naming `name`."""
    if values is None:
        return None
    t = torch.as_tensor(values)
    if t.dtype.is_floating_point or t.dim() != 1 or t.shape[0] != batch:
        raise ValueError(f"{name}: must be an integer [B={batch}] tensor, got {t.dtype} {tuple(t.shape)}")
    return tuple(int(x) for x in t)


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    rotary_cos: torch.Tensor | None = None,
    rotary_sin: torch.Tensor | None = None,
    cache_seqlens: int | torch.Tensor | None = None,
    cache_batch_idx: torch.Tensor | None = None,
    cache_leftpad: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: torch.Tensor | None = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
    *,
    return_lse: bool = False,
    pack_gqa: bool | None = None,
    backend: str = "auto",
    score_mod=None,
    mask_mod=None,
    sinks: torch.Tensor | None = None,
):
    """Attention against a KV cache, with flash-attn 2.x's signature (positional order included).

    q:           [B, S0, heads, D].
    k_cache, v_cache: [B_cache, S_cache, kv_heads, D] (contiguous), or paged [pages, page_size, kv_heads, D]
                 with block_table [B, max_pages] int32 (page_size a multiple of 128).
    k, v:        optional new keys / values [B, S_new, kv_heads, D], written into the cache in place at
                 cache_seqlens (after every check) before the attention, which then sees
                 cache_seqlens + S_new keys per sequence.
    rotary_cos, rotary_sin: optional [seqlen_ro, rotary_dim / 2] (rotary_dim <= D; with k and v only):
                 k is rotated at positions cache_seqlens[b] + i before it is written, q at
                 cache_seqlens[b] + s with causal or a local window, otherwise every row of q at
                 cache_seqlens[b] (flash-attn's convention). rotary_interleaved: pairs (0, 1), (2, 3), ...
                 (True, default) or (i, i + rotary_dim / 2) (GPT-NeoX). Applied with torch before the kernel.
    cache_seqlens: int or [B] int: keys already in the cache; None = the whole cache (not with k, v).
    cache_batch_idx: [B] int: the cache row of each sequence (contiguous caches; default b).
    cache_leftpad: [B] int: where each sequence's keys start in its cache row (contiguous caches): the keys
                 before it take no part, and positions for causal / window masks count from it.
    softmax_scale, causal, window_size: as `flash_attn_func` (bottom-right aligned to each sequence's keys).
    softcap, alibi_slopes: as `flash_attn_func` (ALiBi positions bottom-right aligned to each sequence's
                 visible keys, from cache_leftpad); ALiBi turns GQA packing off (each packed row is another head).
    num_splits:  split-KV: 0 chosen per unit by the timing model, 1 none, up to 16.
    return_softmax_lse: return (out, softmax_lse [B, heads, S0] fp32); ptofa's return_lse is the same.
    pack_gqa:    (keyword) None: whenever it applies, put the heads / kv_heads q heads of one KV head in the
                 rows of one work unit, so K and V are read once per KV head: one query row per sequence
                 (S0 = 1) and a window that hides no key from it (none, or causal).
    backend:     (keyword) "auto", "sim" or "npu".
    score_mod, mask_mod: (keyword) FlexAttention's callables (`flash_attn_func`'s), compiled into the kernel:
                 b is the sequence, h the q head, q_idx the row of q (0 .. S0 - 1), kv_idx the key's position
                 in its sequence's cache (from cache_leftpad); after softcap, before ALiBi; the mask and-ed
                 with causal / window_size. They turn GQA packing off.
    sinks:       (keyword) gpt-oss's attention sinks, a float [heads] logit per q head that joins each row's
                 softmax denominator (and softmax_lse; a row that sees no key gives 0 and the sink).
                 With any of the three GQA packing is off, and num_splits=0 prices the kernel without
                 them (`splitkv.split_costs`).

    Returns out [B, S0, heads, D] (and softmax_lse). No backward (as flash-attn): a backward through
    out raises NotImplementedError."""
    unsupported_arguments(0.0, softcap, alibi_slopes)
    softcap = check_softcap(softcap)
    backend = resolve_backend(backend)
    _splits(num_splits)
    if q.dim() != 4 or k_cache.dim() != 4 or q.shape[3] != k_cache.shape[3]:
        raise ValueError(f"shapes: q [B, S0, heads, D] and caches [.., .., kv_heads, D] with one D, got "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}")
    if q.shape[2] % k_cache.shape[2] != 0:
        raise ValueError(f"grouped heads: heads={q.shape[2]} must be a multiple of kv_heads={k_cache.shape[2]}")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"dtypes: q and the caches must share one dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    batch, s0, heads, head = q.shape
    alibi = check_alibi_slopes(alibi_slopes, batch, heads)
    width = kernel_head(head, v_cache.shape[-1])
    native_cache(width, head, v_cache.shape[-1])
    if (k is None) != (v is None):
        raise ValueError("k, v: give both new keys and new values, or neither")
    if k is not None and (k.dim() != 4 or k.shape != v.shape or k.shape[0] != batch
                          or tuple(k.shape[2:]) != tuple(k_cache.shape[2:])):
        raise ValueError(f"k, v: new keys and values must be [B={batch}, S_new, kv_heads={k_cache.shape[2]}, "
                         f"D={head}], got {tuple(k.shape)}, {tuple(v.shape)}")
    new = 0 if k is None else int(k.shape[1])
    paged = block_table is not None
    full = int(block_table.shape[1]) * int(k_cache.shape[1]) if paged else int(k_cache.shape[1])
    lens = _cache_seqlens(cache_seqlens, batch, full, k is not None)
    cache = KVCache(k_cache, v_cache, block_table, _per_sequence(cache_batch_idx, batch, "cache_batch_idx"),
                    _per_sequence(cache_leftpad, batch, "cache_leftpad"))
    k_lens = cache.check(batch, lens, new)  # every rule before anything is written
    if cache.paged and cache.page_size % 128 != 0:
        raise ConfigError(f"paged cache: page_size={cache.page_size} must be a multiple of 128 (a KV tile lies in one page)")
    window = _window(causal, window_size)
    rotary = rotary_cos is not None or rotary_sin is not None
    if rotary:
        if k is None:
            raise ValueError("rotary_cos, rotary_sin: rotary embedding is applied with new keys only; pass k and v "
                             "(as flash-attn requires)")
        # flash-attn: a window bound reaching past the cache (S_cache or max_pages * page_size) is no bound,
        # and q's rows take one position each only under a causal or local mask.
        local = tuple(-1 if w >= full else w for w in window) != (-1, -1)
        q_steps = s0 if local else 1
        check_rotary(rotary_cos, rotary_sin, head, int(lens.max()) + max(new, q_steps) - 1)
        lens_list = lens.tolist()
        k = apply_rotary(k, rotary_cos, rotary_sin, rotary_positions(lens_list, new, True), bool(rotary_interleaved))
        q = apply_rotary(q, rotary_cos, rotary_sin, rotary_positions(lens_list, s0, local), bool(rotary_interleaved))
    if s0 == 1 and window[0] == -1 and window[1] >= 0:
        window = (-1, -1)  # the one query row (bottom-right aligned) sees every key
    if pack_gqa and alibi is not None:
        raise NotImplementedError("alibi_slopes: not supported with pack_gqa=True (a packed unit's rows are different "
                                  "heads, each with its own slope); pass pack_gqa=None or False")
    mods, traced = (), []
    if score_mod is not None or mask_mod is not None or sinks is not None:
        from ptofa.attention.flex import call_mods

        modded = ", ".join(n for n, f in (("score_mod", score_mod), ("mask_mod", mask_mod), ("sinks", sinks))
                           if f is not None)
        if pack_gqa:
            raise NotImplementedError(f"pack_gqa: not with {modded} (a packed unit's rows are different heads at one "
                                      f"position); pass pack_gqa=None or False")
        mods, traced = call_mods(score_mod, mask_mod, sinks, heads)
    pack = _pack_gqa(pack_gqa, s0, heads, int(k_cache.shape[2]), window) and alibi is None and not mods
    if k is not None:
        cache.append(lens, k.detach(), v.detach())
    lse_wanted = return_softmax_lse or return_lse
    visible = [n - cache.first_key(b) for b, n in enumerate(k_lens)]
    if width != head:  # the kernel reads a zero-padded copy of the cache (after the append into the caller's)
        cache = dataclasses.replace(cache, k=pad_heads(width, cache.k)[0], v=pad_heads(width, cache.v)[0])
    q_in, q = q, pad_heads(width, q)[0]
    base = with_score_mods(auto_config(width, dtype_name(q.dtype, "q"), s1=max(1, max(visible)),
                                       masked=window != (-1, -1), lse=lse_wanted), softcap=softcap > 0,
                           alibi=alibi is not None)
    config = dataclasses.replace(decode_config(paged_tiles(base, cache.page_size), cache), gqa_pack=pack)
    mod_args = None
    if mods:
        from ptofa.attention.flex import mod_arguments, with_mods

        config = with_mods(config, mods)
        mod_args = mod_arguments(config, traced, sinks)
    shape = decode_shape(cache, batch, s0, k_lens, heads, window)
    shape.check(config)
    out = torch.empty(q.shape, dtype=TORCH_DTYPES[config.out_dtype], device=q.device)
    lse_shape = (batch * s0, heads) if pack else (heads, batch * s0)
    lse = torch.full(lse_shape, math.inf, device=q.device) if lse_wanted else None
    _launch(backend, config, shape, lambda c, n: decode_units(c, cache, batch, s0, k_lens, heads, window, n),
            q.detach().contiguous(), cache.k, cache.v, out, _scale(softmax_scale, head), num_splits, lse=lse,
            block_table=cache.block_table, softcap=softcap, alibi=alibi, mod_args=mod_args)
    out = _forward_only("flash_attn_with_kvcache", out if width == head else out[..., :head].contiguous(), q_in,
                        k_cache, v_cache, *(t for t in (k, v, sinks) if t is not None))
    if lse_wanted:
        return out, decode_lse(lse, batch, s0, pack)
    return out


def _pack_gqa(pack_gqa: bool | None, s0: int, heads: int, kv_heads: int, window: tuple[int, int]) -> bool:
    """Whether to pack the q heads of a KV head into one unit (None: whenever the rule allows it)."""
    group = heads // kv_heads
    allowed = pack_allowed(s0, heads, kv_heads, window)
    if pack_gqa and not allowed:
        raise ValueError(f"pack_gqa: needs one query row (S0={s0}), 2..128 q heads per KV head (group={group}) "
                         f"and a window that hides no key from it (window={window})")
    return allowed if pack_gqa is None else bool(pack_gqa)
