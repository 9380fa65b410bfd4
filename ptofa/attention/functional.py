"""The attention calls people already write, on ptofa's kernel: flash-attn's and torch's.

    out = ptofa.flash_attn_func(q, k, v, causal=True)                  # BSND, bottom-right causal
    out = ptofa.scaled_dot_product_attention(q, k, v, is_causal=True)  # BNSD, top-left causal

The flash-attn calls (`flash_attn_func`, `flash_attn_qkvpacked_func`, `flash_attn_kvpacked_func`)
take flash-attn 2.x's parameters in its order with its defaults, ptofa's extras keyword-only after
them; softcap, ALiBi and dropout run in the kernels, forward and backward (`ptofa.kernels.dropout`; with
return_attn_probs, flash-attn's S_dmask, `ptofa.attention.attn_probs`). All of them check their arguments, then call the custom op `torch.ops.ptofa.flash_attn_fwd`
(`ptofa.attention.ops`), which runs `ptofa.attention.core.run_attention` (the simulator on CPU tensors,
or an Ascend NPU) and which `torch.compile` traces without a graph break. When an input
requires grad, the backward runs the backward kernels (`torch.ops.ptofa.flash_attn_bwd`,
`ptofa.attention.backward.attention_backward`) on the saved O and LSE.
"""

from __future__ import annotations

import torch

from ptofa.attention.attn_probs import dense_probs
from ptofa.attention.core import (check_alibi_slopes, check_dropout, check_qkv, check_softcap,  # noqa: F401
                                  check_window, dropout_seed_offset, flash_attn_returns, out_dtype_name, unsupported_arguments,  # (re-exported)
                                  window_to_bounds)
from ptofa.launch.base import TORCH_DTYPES
from ptofa.attention import backward  # noqa: F401 (registers the backward op's implementation)
from ptofa.attention.ops import config_to_json, flash_attn_fwd
from ptofa.pipeline import FAConfig


def _call_op(q, k, v, scale, bounds, key_padding_mask, out_dtype, backend: str, config: FAConfig | None,
             name: str = "q", deterministic: bool = True, softcap: float = 0.0, alibi_slopes=None,
             dropout: tuple[float, int, int] | None = None):
    """(out, lse) of the custom op on checked BSND q/k/v (`dropout`: (p, seed, offset) of the kernel's
    generator, `dropout_seed_offset`). A device other than CPU or NPU is
    refused here: the op would hand it (a meta tensor, say) to its fake implementation."""
    if q.device.type not in ("cpu", "npu"):
        raise ValueError(f"device: {name} is on {q.device}; ptofa runs CPU tensors on the simulator and NPU "
                         f"tensors on an Ascend NPU")
    wanted = out_dtype_name(out_dtype)
    mask = None if key_padding_mask is None else torch.as_tensor(key_padding_mask)
    left, right = bounds if bounds is not None else (0, 0)
    return flash_attn_fwd(q, k, v, scale, bounds is not None, left, right, mask,
                          None if wanted is None else TORCH_DTYPES[wanted], backend, config_to_json(config),
                          deterministic, float(softcap), alibi_slopes, *(dropout or (0.0, 0, 0)))


def _flash_attn(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                return_attn_probs, key_padding_mask, return_lse, out_dtype, backend, config, names=("q", "k", "v")):
    """The dense flash-attn calls after their tensors are split: checks, then the custom op."""
    unsupported_arguments(dropout_p, softcap, alibi_slopes, dropout=True)
    window = check_window(window_size, "window_size")
    if causal:
        window = (window[0], 0)
    check_qkv(q, k, v, names)
    bounds = window_to_bounds(window, q.shape[1], k.shape[1])
    if alibi_slopes is not None:
        check_alibi_slopes(alibi_slopes, q.shape[0], q.shape[2])
    dropout = (float(dropout_p), *dropout_seed_offset()) if dropout_p else None
    out, lse = _call_op(q, k, v, softmax_scale, bounds, key_padding_mask, out_dtype, backend, config, names[0],
                        deterministic=bool(deterministic), softcap=softcap, alibi_slopes=alibi_slopes,
                        dropout=dropout)
    s_dmask = None
    if dropout is not None and return_attn_probs:
        s_dmask = dense_probs(q, k, dropout, softmax_scale, window, softcap, alibi_slopes, key_padding_mask)
    return flash_attn_returns(out, lse, return_attn_probs, return_lse, s_dmask)


def flash_attn_func(
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
    key_padding_mask: torch.Tensor | None = None,
    return_lse: bool = False,
    out_dtype: torch.dtype | None = None,
    backend: str = "auto",
    config: FAConfig | None = None,
    score_mod=None,
    mask_mod=None,
    sinks: torch.Tensor | None = None,
):
    """FlashAttention forward with flash-attn 2.x's signature and conventions.

    The positional arguments are flash-attn's, in its order and with its defaults, so a call
    written for flash-attn binds the same way (`flash_attn_func(q, k, v, 0.0)` is dropout_p=0.0).
    ptofa's own arguments come after them and are keyword-only.

    q:            [batch, seqlen_q, nheads, headdim], torch.float16 or torch.bfloat16.
    k, v:         k [batch, seqlen_k, nheads_k, headdim], v [batch, seqlen_k, nheads_k, headdim_v], q's
                  dtype; nheads % nheads_k == 0 (grouped-query / multi-query attention: q head h reads kv
                  head h // (nheads / nheads_k)). 1 <= headdim, headdim_v <= 256 (a head dim that is no
                  kernel width runs on `ptofa.pipeline.kernel_head(headdim, headdim_v)` with zero-padded
                  columns). The last dim must be contiguous
                  (stride 1, else ValueError); other strides are free (e.g. q = qkv[:, :, 0] of
                  a packed [batch, seqlen, 3, nheads, headdim] tensor): the kernel takes dense
                  BSND tensors, so such an input is copied once to a contiguous one.
    dropout_p:    in [0, 1): P's entries are dropped with probability dropout_p and the kept ones
                  scaled by 1 / (1 - dropout_p), in the kernel, by a counter-based generator whose
                  seed and offset are drawn from torch's default generator (torch.manual_seed
                  reproduces a call; `ptofa.kernels.dropout.keep_mask` is its mask); the backward
                  kernels regenerate the same mask.
    softmax_scale: scale of Q K^T before the softmax; default 1 / sqrt(headdim).
    causal:       causal mask aligned to the bottom-right corner of the attention matrix (as
                  flash-attn >= 2.1): query i sees key j iff j <= i + seqlen_k - seqlen_q.
                  Same as window_size=(window_size[0], 0).
    window_size:  (left, right) sliding window, bottom-right aligned: query i sees key j iff
                  i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right;
                  -1 = unbounded on that side.
    softcap:      > 0: scores = softcap * tanh(scores / softcap) before the mask, in the kernel (tanh
                  composed from exp: absolute error of tanh < 1e-6); 0.0 = off.
    alibi_slopes: fp32 [nheads] or [batch, nheads]: the bias -slope * |i + S1 - S0 - j| added to the
                  scores before the mask, in the kernel; None = off. The slopes get no gradient.
    deterministic: the backward's mode, as flash-attn's argument (default False, as flash-attn):
                  False accumulates dQ with atomic-add stores (one kernel fewer; dQ's last bits may
                  vary on an NPU); True runs dQ without atomics, bit-identical across runs.
    return_attn_probs: return (out, softmax_lse, S_dmask) as flash-attn does; S_dmask is None
                  without dropout; with dropout_p > 0 flash-attn's S_dmask [batch, nheads, seqlen_q
                  rounded up to 128, seqlen_k rounded up to 128] in q's dtype: the probabilities,
                  unnormalized as flash-attn's kernel has them, negative where the entry was dropped
                  (`ptofa.attention.attn_probs`; built on the host from the kernel's mask).
    key_padding_mask: (keyword) optional [batch, seqlen_k] (or [seqlen_k], shared by the batch) bool
                  or integer mask, True / nonzero = the key takes part (padding keys are False).
                  A query row that sees no key gets 0 in out and +inf in lse.
    return_lse:   (keyword) return (out, lse), lse the softmax log-sum-exp [batch, nheads, seqlen_q] fp32.
    out_dtype:    (keyword) dtype of out: torch.float16, torch.bfloat16 or torch.float32 (default q's).
    backend:      (keyword) "auto" (an Ascend NPU where torch_npu sees one, else the simulator), "sim"
                  (the CPU simulator: CPU tensors) or "npu".
    config:       (keyword) a `ptofa.pipeline.FAConfig` to run instead of the automatic choice (tile
                  sizes, preload depth); ConfigError when it cannot run this call.

    score_mod, mask_mod: (keyword) FlexAttention's callables, score_mod(score, b, h, q_idx, kv_idx) and
                  mask_mod(b, h, q_idx, kv_idx) on sequence positions, compiled into the kernel
                  (`ptofa.flex_attention`); the mask is and-ed with causal / window_size.
                  Differentiable (not in the tensors they capture).
    sinks:        (keyword) float [nheads]: gpt-oss's attention sinks, one logit per head joining each row's
                  softmax denominator. Differentiable: dsinks too.

    Returns out [batch, seqlen_q, nheads, headdim_v], (out, lse, S_dmask) with return_attn_probs=True,
    or (out, lse) with return_lse=True. Bad arguments raise ValueError / ConfigError with one
    line naming the rule and the numbers; backend="npu" without an NPU raises BackendUnavailable.
    Differentiable in q, k, v (the backward kernels, on the same backend, with the same mask);
    lse is not. Runs as the custom op torch.ops.ptofa.flash_attn_fwd (torch.compile traces it).
    """
    if score_mod is not None or mask_mod is not None or sinks is not None:
        from ptofa.attention.flex import flash_attn_with_mods

        unsupported_arguments(dropout_p, softcap, alibi_slopes)
        out, lse = flash_attn_with_mods(q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                        score_mod=score_mod, mask_mod=mask_mod, sinks=sinks, softcap=softcap,
                                        alibi_slopes=alibi_slopes, key_padding_mask=key_padding_mask,
                                        out_dtype=out_dtype, config=config, backend=backend,
                                        deterministic=deterministic)
        return flash_attn_returns(out, lse, return_attn_probs, return_lse)
    return _flash_attn(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                       return_attn_probs, key_padding_mask, return_lse, out_dtype, backend, config)


def _unpack(packed, count: int, dim: int, name: str, layout: str) -> tuple[torch.Tensor, ...]:
    """The `count` views packed along `dim` of a q/k/v-stacked tensor, or ValueError with its layout."""
    if not isinstance(packed, torch.Tensor) or packed.dim() != dim + 3 or packed.shape[dim] != count:
        got = tuple(packed.shape) if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise ValueError(f"{name}: must be {layout}, got {got}")
    return packed.unbind(dim)


def flash_attn_qkvpacked_func(
    qkv: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    key_padding_mask: torch.Tensor | None = None,
    return_lse: bool = False,
    out_dtype: torch.dtype | None = None,
    backend: str = "auto",
    config: FAConfig | None = None,
):
    """`flash_attn_func` on Q, K and V stacked in one tensor, flash-attn's signature.

    qkv: [batch, seqlen, 3, nheads, headdim]. Every other argument and the return value as
    `flash_attn_func`. Differentiable in qkv (its gradient is dq, dk, dv stacked the same way)."""
    q, k, v = _unpack(qkv, 3, 2, "qkv", "[batch, seqlen, 3, nheads, headdim]")
    return _flash_attn(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                       return_attn_probs, key_padding_mask, return_lse, out_dtype, backend, config,
                       ("qkv[:, :, 0]", "qkv[:, :, 1]", "qkv[:, :, 2]"))


def flash_attn_kvpacked_func(
    q: torch.Tensor,
    kv: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    key_padding_mask: torch.Tensor | None = None,
    return_lse: bool = False,
    out_dtype: torch.dtype | None = None,
    backend: str = "auto",
    config: FAConfig | None = None,
):
    """`flash_attn_func` with K and V stacked in one tensor, flash-attn's signature.

    q: [batch, seqlen_q, nheads, headdim]; kv: [batch, seqlen_k, 2, nheads_k, headdim] (GQA/MQA
    when nheads_k < nheads). Every other argument and the return value as `flash_attn_func`.
    Differentiable in q and kv."""
    k, v = _unpack(kv, 2, 2, "kv", "[batch, seqlen_k, 2, nheads_k, headdim]")
    return _flash_attn(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                       return_attn_probs, key_padding_mask, return_lse, out_dtype, backend, config,
                       ("q", "kv[:, :, 0]", "kv[:, :, 1]"))


def _sdpa_key_mask(attn_mask, batch: int, heads: int, s0: int, s1: int) -> torch.Tensor | None:
    """torch's bool attn_mask as a key-padding mask ([B, S1] or [S1], True = take part), or ValueError."""
    if attn_mask is None:
        return None
    supported = (f"attn_mask: only a bool key-padding mask broadcastable as [B, 1, 1, S1] = [{batch}, 1, 1, {s1}] "
                 f"is supported (True = the key takes part)")
    if not isinstance(attn_mask, torch.Tensor):
        raise ValueError(f"{supported}; got {type(attn_mask).__name__}")
    shape = tuple(attn_mask.shape)
    if attn_mask.dtype != torch.bool:
        raise ValueError(f"{supported}; got a {attn_mask.dtype} mask of shape {shape} (additive float masks are not)")
    padded = (1,) * (4 - len(shape)) + shape if len(shape) <= 4 else shape
    if len(shape) > 4 or padded[1:3] != (1, 1) or padded[3] != s1 or padded[0] not in (1, batch):
        raise ValueError(f"{supported}; got shape {shape} for query [{batch}, {heads}, {s0}, S] and key S1={s1}")
    mask = attn_mask.reshape(padded[0], s1)
    return mask[0] if padded[0] == 1 else mask


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """`torch.nn.functional.scaled_dot_product_attention` on ptofa's kernel: same layout and names.

    query:     [B, Hq, L, E], torch.float16 or torch.bfloat16; 1 <= E <= 256.
    key, value: key [B, H, S, E], value [B, H, S, Ev] (1 <= Ev <= 256), query's dtype; H == Hq, or
               Hq % H == 0 with enable_gqa=True.
    attn_mask: None, or a bool key-padding mask broadcastable as [B, 1, 1, S] (True = the key
               takes part, torch's bool convention); other masks (per query row, per head,
               additive float) raise ValueError saying so. A query row that sees no key
               gives 0 (torch gives 0 too for a fully masked bool row).
    dropout_p: in [0, 1): torch's dropout on the attention weights (kept ones scaled by 1 / (1 -
               dropout_p)), in the kernel as `flash_attn_func`'s (`ptofa.kernels.dropout`: seed and
               offset from torch's default generator; batch b, head h, positions i, j).
    is_causal: torch's causal mask, aligned to the TOP-LEFT corner: query i sees key j iff
               j <= i (flash_attn_func's causal is bottom-right). It runs as the window
               right bound S - L of the kernel's bottom-right convention (negative when
               S > L). Not together with attn_mask (as torch documents).
    scale:     default 1 / sqrt(E).
    enable_gqa: allow fewer key/value heads than query heads (grouped-query attention).
    backend:   "auto", "sim" or "npu" (see `flash_attn_func`).

    Returns [B, Hq, L, Ev] in query's dtype. Differentiable in query, key, value (the
    backward kernels, on the same backend, with the same mask).
    """
    tensors = (query, key, value)
    names = ("query", "key", "value")
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"rank: query, key and value must be 4-D [B, H, S, E]; got {name} {got}")
    check_dropout(dropout_p)
    batch, heads, s0, _ = query.shape
    kv_heads, s1 = key.shape[1], key.shape[2]
    if key.shape[:3] != value.shape[:3]:
        raise ValueError(f"shape: key {tuple(key.shape)} and value {tuple(value.shape)} must have the same [B, H, S]")
    if key.shape[0] != batch or key.shape[3] != query.shape[3]:
        raise ValueError(f"shape: query {tuple(query.shape)} and key/value {tuple(key.shape)} must share B and E")
    if heads != kv_heads and not enable_gqa:
        raise ValueError(f"enable_gqa: query has {heads} heads and key/value {kv_heads}; "
                         f"pass enable_gqa=True for grouped-query attention")
    if attn_mask is not None and is_causal:
        raise ValueError("attn_mask and is_causal: torch's scaled_dot_product_attention takes one or the other "
                         "(its math backend raises); flash_attn_func(causal=True, key_padding_mask=...) combines a "
                         "bottom-right causal mask with key padding")
    key_mask = _sdpa_key_mask(attn_mask, batch, heads, s0, s1)
    bounds = (s0 + s1, s0 - s1) if is_causal else None  # top-left causal: j <= i = i + (S1 - S0) + (S0 - S1)

    q, k, v = (t.transpose(1, 2) for t in tensors)  # BNSD -> BSND views
    check_qkv(q, k, v, names)
    dropout = (float(dropout_p), *dropout_seed_offset()) if dropout_p else None
    out, _ = _call_op(q, k, v, scale, bounds, key_mask, None, backend, None, names[0], dropout=dropout)
    return out.transpose(1, 2)


__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "scaled_dot_product_attention",
    "unsupported_arguments",
]
