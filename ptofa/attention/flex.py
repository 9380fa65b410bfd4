"""FlexAttention on ptofa's kernel: torch's `flex_attention` signature, the mods compiled into the kernel.

    out = ptofa.flex_attention(q, k, v, score_mod=rel_bias, block_mask=ptofa.create_block_mask(causal, B, H, S, S))

q [B, H, S0, D], k / v [B, KVH, S1, D] (fp16 / bf16; KVH < H with enable_gqa=True), as torch's
`torch.nn.attention.flex_attention.flex_attention`. The score_mod and the block mask's mask_mod are
traced (`kernels/flexmods.py`) into `mods.Mod` objects of the forward kernel's config; the tensors
they capture are kernel arguments. The mask_mod also decides which KV tiles each work unit visits
(`tile_ranges`): a Q block's tiles [lo, hi) span the ones where some entry is visible, and the tiles
where every entry is visible skip the mask's IR. Rows that see no key give 0 and LSE -inf, as torch's.

The calls are differentiable in query, key, value and sinks (`_FlexFunction`): the backward kernels
(`kernels/fa_bwd.py` with `BwdConfig.mods`) recompute the modified scores, multiply dP - D by the score
mod's derivative and visit only the tiles the mask_mod leaves visible (`tile_ranges` at the dq kernel's
blocks, `kv_block_ranges` for the dkdv kernel's KV blocks), skipping the mask's IR on full ones. The sinks' gradient is taken on the
host from the kernels' LSE and D = rowsum(dO * O): with P_ij = exp(s_ij - LSE_i), LSE_i = log(sum_j
exp(s_ij) + exp(sink_h)), dP_ij / dsink_h = -P_ij exp(sink_h - LSE_i), so
dL / dsink_h = -sum_{b, i} exp(sink_h - LSE_{b,h,i}) sum_j P_ij dO_i . v_j
             = -sum_{b, i} exp(sink_h - LSE_{b,h,i}) D_{b,h,i}.
A captured tensor that requires grad (a learnable bias table) raises NotImplementedError naming it, as
does a backward through the returned LSE.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ptofa.attention.inputs import check_qkv, check_window, dtype_name, fixed_config
from ptofa.launch.base import TORCH_DTYPES, pad_heads
from ptofa.launch.dispatch import backend_soc, launch_on, resolve_backend
from ptofa.launch.plan import plan_backward, plan_forward
from ptofa.kernels.builtin_mods.registry import with_builtin_mods
from ptofa.kernels.bwd_pipeline import default_config as backward_config
from ptofa.kernels.flexmods import captured_args, trace_mod
from ptofa.kernels.mods import has_mod
from ptofa.kernels.scoremods import Sinks
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, kernel_head


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu", BLOCK_SIZE=128, _compile=False):
    """torch's `create_block_mask` (a torch `BlockMask`, which `flex_attention` takes); B / H None broadcast."""
    from torch.nn.attention.flex_attention import create_block_mask as torch_create_block_mask

    return torch_create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=device, BLOCK_SIZE=BLOCK_SIZE)


def _mask_of(block_mask):
    """The mask_mod of a BlockMask (None for torch's no-op mask, which hides nothing)."""
    if block_mask is None:
        return None
    from torch.nn.attention.flex_attention import noop_mask

    mask_mod = block_mask.mask_mod
    return None if mask_mod is None or mask_mod is noop_mask else mask_mod


def block_maps(mask_mod, batch: int, heads: int, s0: int, s1: int, rows: int, cols: int):
    """([B, H, ceil(S0 / rows), ceil(S1 / cols)] bool) x 2: whether some / every real entry of each block is
    visible (the mask_mod evaluated on the host, one block row at a time)."""
    b = torch.arange(batch, dtype=torch.int32).view(-1, 1, 1, 1)
    h = torch.arange(heads, dtype=torch.int32).view(1, -1, 1, 1)
    kv = torch.arange(s1, dtype=torch.int32).view(1, 1, 1, -1)
    k_blocks = -(-s1 // cols)
    some, every = [], []
    for r0 in range(0, s0, rows):
        q = torch.arange(r0, min(s0, r0 + rows), dtype=torch.int32).view(1, 1, -1, 1)
        seen = torch.as_tensor(mask_mod(b, h, q, kv)).bool().expand(batch, heads, q.shape[2], s1)
        for out, pad in ((some, False), (every, True)):  # padding keys: neither visible nor hidden
            blocks = torch.nn.functional.pad(seen, (0, k_blocks * cols - s1), value=pad).view(
                batch, heads, -1, k_blocks, cols)
            out.append(blocks.any(-1).any(2) if pad is False else blocks.all(-1).all(2))
    return torch.stack(some, dim=2), torch.stack(every, dim=2)


def check_block_mask(block_mask, mask_mod, batch: int, heads: int, s0: int, s1: int) -> None:
    """NotImplementedError unless the BlockMask's blocks are its mask_mod's: ptofa derives the visited tiles
    from the mask_mod, so a BlockMask that drops a block where the mask_mod keeps an entry, or calls a block
    full where the mask_mod hides one (torch then skips the mask_mod there), would give another result."""
    rows, cols = block_mask.BLOCK_SIZE
    dense = block_mask.to_dense().bool().expand(batch, heads, -1, -1)
    wanted, every = block_maps(mask_mod, batch, heads, s0, s1, rows, cols)
    dropped = int((wanted & ~dense).sum())
    full = 0
    if block_mask.full_kv_num_blocks is not None:
        from torch.nn.attention.flex_attention import BlockMask

        full_map = BlockMask.from_kv_blocks(block_mask.full_kv_num_blocks, block_mask.full_kv_indices,
                                            BLOCK_SIZE=block_mask.BLOCK_SIZE, seq_lengths=(s0, s1)).to_dense().bool()
        full = int((full_map.expand(batch, heads, -1, -1) & ~every).sum())
    if dropped or full:
        raise NotImplementedError(f"block_mask: {dropped} block(s) left out where its mask_mod keeps entries and "
                                  f"{full} full block(s) where it hides some; ptofa runs the mask_mod itself, so "
                                  f"block_mask must be its mask_mod's (as create_block_mask makes it)")


def tile_ranges(mask_mod, batch: int, heads: int, s0: int, s1: int, rows: int, cols: int) -> torch.Tensor:
    """[B * H * ceil(S0 / rows), 4] i32 (`mods.RANGE_FIELDS`): per unit (b, h, Q block of `rows`), the
    KV tiles of `cols` keys [lo, hi) spanning the visible entries and [full_lo, full_hi), the first run
    of tiles whose entries are all visible within it."""
    q_blocks, k_tiles = -(-s0 // rows), -(-s1 // cols)
    table = torch.zeros(batch, heads, q_blocks, 4, dtype=torch.int32)
    if mask_mod is None:
        table[..., 1] = table[..., 3] = k_tiles
        return table.reshape(-1, 4)
    return _ranges(*block_maps(mask_mod, batch, heads, s0, s1, rows, cols))  # [B, H, q_blocks, k_tiles]


def kv_block_ranges(mask_mod, batch: int, heads: int, kv_heads: int, s0: int, s1: int, rows: int,
                    cols: int) -> torch.Tensor:
    """[B * KVH * ceil(S1 / cols), 4] i32 (`mods.RANGE_FIELDS`): per backward dkdv unit (b, kv head, KV block
    of `cols` keys), the Q blocks of `rows` queries [lo, hi) where some q head of the group sees a key of
    the block, and [full_lo, full_hi), the first run of Q blocks every head of the group sees entirely."""
    some, every = block_maps(mask_mod, batch, heads, s0, s1, rows, cols)  # [B, H, q_blocks, k_tiles]
    group = heads // kv_heads
    some, every = (m.view(batch, kv_heads, group, *m.shape[2:]) for m in (some, every))
    return _ranges(some.any(2).transpose(-1, -2), every.all(2).transpose(-1, -2))


def _ranges(some: torch.Tensor, every: torch.Tensor) -> torch.Tensor:
    """The `tile_ranges` rows of [..., n] maps of blocks where some / every entry is visible."""
    k_tiles = some.shape[-1]
    table = torch.zeros(*some.shape[:-1], 4, dtype=torch.int32)
    index = torch.arange(k_tiles)
    hi = torch.where(some, index + 1, 0).max(-1).values
    lo = torch.where(some, index, k_tiles).min(-1).values.minimum(hi)  # (an empty unit: lo = hi = 0)
    full_lo = torch.where(every & some, index, k_tiles).min(-1).values
    after = (~every) & (index >= full_lo.unsqueeze(-1))  # the first tile past full_lo that is not full
    full_hi = torch.where(after, index, k_tiles).min(-1).values.minimum(hi)
    has_full = full_lo < full_hi
    table[..., 0], table[..., 1] = lo, hi
    table[..., 2], table[..., 3] = torch.where(has_full, full_lo, 0), torch.where(has_full, full_hi, 0)
    return table.reshape(-1, 4)


def flex_config(head: int, in_dtype: str, s1: int, mods: tuple, block_ranges: bool) -> FAConfig:
    """The automatic config with the mods: an f32 softmax; when the mods' scratch does not fit the UB,
    128-key tiles, then two row-slice buffers (half-height slices), then the per-tile scaling pass instead of
    the scaled Q's tiles (`prescale_q=False`)."""
    base = fixed_config(head, in_dtype, s1=s1, lse=True)
    first = None
    tuned, small = dict(tile_s1=base.tile_s1, qk_preload=base.qk_preload), dict(tile_s1=128, qk_preload=2)
    for changes in (tuned, small, dict(small, slice_buffers=2), dict(small, prescale_q=False),
                    dict(small, slice_buffers=2, prescale_q=False)):
        try:  # a new config (not dataclasses.replace, which would keep the automatic fields of the old one)
            return FAConfig(head=head, in_dtype=in_dtype, lse=True, mods=mods, block_ranges=block_ranges, **changes)
        except ConfigError as error:
            first = first or error
    raise first


def call_mods(score_mod, mask_mod, sinks, heads: int) -> tuple[tuple, list]:
    """The mods of a call in the order they apply (the traced score_mod, the traced mask_mod, `Sinks` for
    `sinks`) and the traced ones with the tensors they capture; ValueError for sinks that are not [heads]."""
    traced = [trace_mod(fn, mask) for fn, mask in ((score_mod, False), (mask_mod, True)) if fn is not None]
    mods = tuple(m for m, _ in traced)
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or tuple(sinks.shape) != (heads,) or not sinks.dtype.is_floating_point:
            raise ValueError(f"sinks: must be a float tensor of shape [{heads}] (one logit per query head), got "
                             f"{getattr(sinks, 'shape', type(sinks).__name__)}")
        mods += (Sinks(),)
    return mods, traced


def mod_arguments(config: FAConfig, traced: list, sinks) -> dict[str, torch.Tensor]:
    """The kernel arguments of `call_mods`' mods by name: the captured tensors, the sinks in f32."""
    tensors = {}
    for i, (mod, captured) in enumerate(traced):
        tensors.update(captured_args(mod, captured, f"mod{i}_"))
    if sinks is not None:
        tensors[f"mod{len(traced)}_sinks"] = sinks.detach().float().contiguous()
    return tensors


def with_mods(config: FAConfig, mods: tuple) -> FAConfig:
    """`config` (any kernel: varlen, paged, windowed) with the mods among its built-in ones and an f32 softmax; when their scratch
    does not fit the UB, the fallbacks of `flex_config` (128-key tiles, half-height slices, no prescaled Q)."""
    small = dict(tile_s1=128, qk_preload=min(2, config.qk_preload), exp_ring=None, cube_s1=None)
    mods = with_builtin_mods(mods, softcap=has_mod(config.mods, "softcap"), alibi=has_mod(config.mods, "alibi"),
                             window=config.narrowing is not None)
    first = None
    for changes in ({}, small, dict(small, slice_buffers=2), dict(small, prescale_q=False),
                    dict(small, slice_buffers=2, prescale_q=False)):
        try:  # (replace re-resolves the automatic fields for the f32 softmax: FAConfig.auto)
            return dataclasses.replace(config, mods=mods, softmax_dtype="f32", **changes)
        except ConfigError as error:
            first = first or error
    raise first


@dataclasses.dataclass
class FlexLaunch:
    """One flex_attention call, planned: the launch plan and its tensors (O and LSE in BSND / [B, H, S0])."""

    plan: object
    tensors: dict
    head_v: int
    config: FAConfig
    shape: ProblemShape
    scale: float
    mask_mod: object  # (its block ranges for the backward's blocks)


def plan_flex(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
              kernel_options=None, backend: str = "auto", sinks=None, mask_mod=None, grad_enabled=False) -> FlexLaunch:
    """Check a flex_attention call, trace its mods, choose the config and plan the launch (`mask_mod`:
    a mask without a BlockMask, as the flash-attn calls give it; `grad_enabled`: the caller's grad mode,
    under which a captured tensor that requires grad raises)."""
    if kernel_options:
        raise NotImplementedError(f"kernel_options: {kernel_options!r} are torch's Triton options; ptofa takes none")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: must be a 4-D [B, H, S, D] tensor, got {getattr(t, 'shape', type(t).__name__)}")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"heads: query has {query.shape[1]} heads and key {key.shape[1]}; grouped heads need "
                         f"enable_gqa=True")
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    batch, s0, heads, head, s1, kv_heads = check_qkv(q, k, v, ("query", "key", "value"))
    mask_mod = _mask_of(block_mask) if mask_mod is None else mask_mod
    if block_mask is not None and tuple(block_mask.seq_lengths) != (s0, s1):
        raise ValueError(f"block_mask: made for (Q_LEN, KV_LEN) = {tuple(block_mask.seq_lengths)}, but the call has "
                         f"({s0}, {s1})")
    if block_mask is not None and mask_mod is not None:
        check_block_mask(block_mask, mask_mod, batch, heads, s0, s1)
    width = kernel_head(head, v.shape[3])
    q, k, v = pad_heads(width, *(t.detach() for t in (q, k, v)))
    scale = 1.0 / math.sqrt(head) if scale is None else float(scale)
    mods, traced = call_mods(score_mod, mask_mod, sinks, heads)
    for mod, captured in traced:
        for j, t in enumerate(captured):
            if t.requires_grad and grad_enabled:
                raise NotImplementedError(f"{mod.name}: captured tensor {j} {list(t.shape)} requires grad; its "
                                          f"gradient is not implemented (detach it, or pass it without requires_grad)")
    config = flex_config(width, dtype_name(q.dtype, "query"), s1, mods, mask_mod is not None)
    tensors = mod_arguments(config, traced, sinks)
    shape = ProblemShape(batch, heads, s0, s1, kv_heads=kv_heads)
    shape.check(config)
    plan = plan_forward(config, shape, backend_soc(backend), scale=scale)
    o = torch.full((batch, s0, heads, config.head), math.nan, dtype=TORCH_DTYPES[config.out_dtype])
    lse = torch.full((batch, heads, s0), math.nan)
    ranges = tile_ranges(mask_mod, batch, heads, s0, s1, config.cube_s0, config.tile_s1)
    tensors.update(q=q.contiguous(), k=k.contiguous(), v=v.contiguous(), o=o, lse=lse, tile_ranges=ranges)
    return FlexLaunch(plan, tensors, value.shape[-1], config, shape, scale, mask_mod)


class _FlexFunction(torch.autograd.Function):
    """One flex call as an autograd node: (query, key, value [B, H, S, D], sinks [H] or None) ->
    (out [B, S0, H, Dv], the kernel's LSE [B, H, S0], +inf for a row without keys)."""

    @staticmethod
    def forward(ctx, query, key, value, sinks, call_args: dict):
        args = dict(call_args)
        ctx.deterministic = args.pop("deterministic")
        call = plan_flex(query, key, value, sinks=sinks, **args)
        launch_on(args["backend"], call.plan, call.tensors)
        ctx.call, ctx.backend, ctx.head = call, args["backend"], query.shape[-1]
        ctx.sinks_dtype = None if sinks is None else sinks.dtype
        return call.tensors["o"][..., :call.head_v].contiguous(), call.tensors["lse"]

    @staticmethod
    def backward(ctx, dout, dlse):
        if dlse is not None and bool(torch.any(dlse != 0)):
            raise NotImplementedError("flex_attention: a gradient through the returned LSE is not implemented")
        call = ctx.call
        dq, dk, dv, dsinks = flex_backward(call, dout, ctx.backend, ctx.deterministic)
        d = ctx.head
        dsinks = None if dsinks is None else dsinks.to(ctx.sinks_dtype)
        return (dq[..., :d].transpose(1, 2), dk[..., :d].transpose(1, 2), dv[..., :call.head_v].transpose(1, 2),
                dsinks, None)


def _flex_call(query, key, value, sinks, deterministic: bool = True, **call_args):
    """(out [B, S0, H, Dv], LSE [B, H, S0] f32, +inf for a row without keys) of a flex call on
    [B, H, S, D] tensors, differentiable (`_FlexFunction`)."""
    call_args.update(deterministic=deterministic, grad_enabled=torch.is_grad_enabled())
    return _FlexFunction.apply(query, key, value, sinks, call_args)


def flex_backward(call: FlexLaunch, dout: torch.Tensor, backend: str, deterministic: bool = True):
    """(dq [B, S0, H, W], dk, dv [B, S1, KVH, W], dsinks [H] or None) of a launched flex call, at the
    kernel width W (zero-padded columns), for dO [B, S0, H, Dv]: the backward kernels with the call's mods
    that have IR on the scores (Sinks has none: the LSE includes the sink), the sinks' gradient from the
    kernels' LSE and D (module docstring)."""
    cfg, t = call.config, call.tensors
    q, k, v, o, lse = (t[n] for n in ("q", "k", "v", "o", "lse"))
    do = pad_heads(cfg.head, dout.detach().to(q.dtype))[0].contiguous()
    mods = tuple(m for m in cfg.mods if not isinstance(m, Sinks))
    ranged = call.mask_mod is not None
    bcfg = backward_config(cfg.head, cfg.in_dtype, atomic_dq=not deterministic, mods=mods, block_ranges=ranged)
    grads = dict(dq=torch.zeros_like(q), dk=torch.zeros_like(k), dv=torch.zeros_like(v),
                 dsum=torch.full(lse.shape, math.nan),
                 dq_acc=None if deterministic else torch.full(q.shape, math.nan))
    tensors = dict(q=q, k=k, v=v, o=o.to(q.dtype), do=do, lse=lse, **grads)
    tensors.update({name: value for name, value in t.items() if name.startswith("mod")})
    if ranged:  # the tiles the backward's units visit, and those they need not mask
        sh = call.shape
        tensors["q_tile_ranges"] = tile_ranges(call.mask_mod, sh.batch, sh.heads, sh.s0, sh.s1, bcfg.dq_block_q,
                                               bcfg.dq_block_kv)
        tensors["kv_tile_ranges"] = kv_block_ranges(call.mask_mod, sh.batch, sh.heads, sh.kv_heads, sh.s0, sh.s1,
                                                    bcfg.block_q, bcfg.block_kv)
    plan = plan_backward(bcfg, call.shape, backend_soc(backend), scale=call.scale)
    launch_on(backend, plan, tensors)
    dsinks = None
    sink_name = f"mod{len(mods)}_sinks"
    if sink_name in t:
        p_sink = torch.exp(t[sink_name].view(1, -1, 1) - lse)  # exp(sink_h - LSE_{b,h,i})
        dsinks = -(p_sink * grads["dsum"]).sum(dim=(0, 2))
    return grads["dq"], grads["dk"], grads["dv"], dsinks


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None, sinks=None, backend: str = "auto",
                   deterministic: bool = True):
    """torch's `flex_attention` on ptofa's kernel; returns out [B, H, S0, Dv], and LSE
    [B, H, S0] f32 (natural log) with return_lse=True, or torch's `AuxOutput` with return_aux=AuxRequest(lse=True)
    (max_scores=True raises NotImplementedError). `sinks` (ptofa's, gpt-oss's attention sinks): a float [H]
    logit per head that joins each row's softmax denominator (and the LSE). Differentiable in query, key,
    value and sinks (`deterministic=False`: the backward's atomic-dQ mode)."""
    if return_aux is not None and getattr(return_aux, "max_scores", False):
        raise NotImplementedError("return_aux: max_scores=True (the kernel returns no row maxima)")
    if return_aux is not None and return_lse:
        raise ValueError("return_lse and return_aux: pass one (torch's rule)")
    backend = resolve_backend(backend)
    out, lse = _flex_call(query, key, value, sinks, deterministic, score_mod=score_mod, block_mask=block_mask,
                          scale=scale, enable_gqa=enable_gqa, kernel_options=kernel_options, backend=backend)
    out = out.transpose(1, 2)
    lse = lse.masked_fill(torch.isinf(lse), -math.inf)  # torch's LSE of a row without keys is -inf
    if return_aux is not None:
        from torch.nn.attention.flex_attention import AuxOutput

        return out, AuxOutput(lse=lse if return_aux.lse else None)
    return (out, lse) if return_lse else out


def window_mask_mod(window: tuple[int, int], s0: int, s1: int, mask_mod=None):
    """flash-attn's bottom-right window (left, right; -1 unbounded) as a mask_mod, and-ed with `mask_mod`;
    None for no window and no mask_mod."""
    if tuple(window) == (-1, -1):
        return mask_mod
    left, right = (s0 + s1 if w < 0 else w for w in window)
    lo, hi = s1 - s0 - left, s1 - s0 + right  # query i sees keys i + lo .. i + hi

    def windowed(b, h, q_idx, kv_idx):
        seen = (kv_idx >= q_idx + lo) & (kv_idx <= q_idx + hi)
        return seen if mask_mod is None else seen & mask_mod(b, h, q_idx, kv_idx)

    return windowed


def flash_attn_with_mods(q, k, v, *, softmax_scale, causal, window_size, score_mod, mask_mod, sinks, softcap,
                         alibi_slopes, key_padding_mask, out_dtype, config, backend, deterministic=True):
    """flash_attn_func's (out [B, S0, H, Dv], lse [B, H, S0], +inf for a row without keys) with a
    score_mod / mask_mod (FlexAttention's callables on sequence positions) or sinks [H]: the flex kernel."""
    for name, given in (("softcap", softcap), ("alibi_slopes", alibi_slopes is not None),
                        ("key_padding_mask", key_padding_mask is not None), ("out_dtype", out_dtype is not None),
                        ("config", config is not None)):
        if given:
            raise NotImplementedError(f"{name}: not with score_mod / mask_mod / sinks (write it as a mod instead)")
    window = check_window(window_size, "window_size")
    if causal:
        window = (window[0], 0)
    mask = window_mask_mod(window, q.shape[1], k.shape[1], mask_mod)
    backend = resolve_backend(backend)
    return _flex_call(*(t.transpose(1, 2) for t in (q, k, v)), sinks, deterministic, score_mod=score_mod,
                      scale=softmax_scale, enable_gqa=True, backend=backend, mask_mod=mask)


def flash_attn_varlen_with_mods(q, k, v, cu_seqlens_q, cu_seqlens_k, *, softmax_scale, causal, window_size, score_mod,
                                mask_mod, sinks, backend, deterministic=True):
    """flash_attn_varlen_func's (out [total_q, H, Dv], lse [H, total_q]) with mods: the packed sequences
    zero-padded to a [B, max_len] batch whose mask hides the padding and applies each sequence's own
    bottom-right window (the lengths are captured tensors read per b), so b is the sequence and q_idx /
    kv_idx are positions in it; the block ranges skip the padding's tiles."""
    cu_q, cu_k = (torch.as_tensor(c).long().cpu() for c in (cu_seqlens_q, cu_seqlens_k))
    len_q, len_k = cu_q.diff(), cu_k.diff()
    batch, max_q, max_k = len(len_q), int(len_q.max()), int(len_k.max())
    window = check_window(window_size, "window_size")
    if causal:
        window = (window[0], 0)
    left, right = window

    def padded(b, h, q_idx, kv_idx):
        seen = (q_idx < len_q[b]) & (kv_idx < len_k[b])
        shift = kv_idx - q_idx - len_k[b] + len_q[b]  # key minus the query's diagonal key
        if left >= 0:
            seen = seen & (shift >= -left)
        if right >= 0:
            seen = seen & (shift <= right)
        return seen if mask_mod is None else seen & mask_mod(b, h, q_idx, kv_idx)

    def dense(t, cu, lens, length):
        out = t.new_zeros(batch, length, *t.shape[1:])
        for b in range(batch):
            out[b, :int(lens[b])] = t[int(cu[b]):int(cu[b + 1])]
        return out.transpose(1, 2)

    backend = resolve_backend(backend)
    o, lse = _flex_call(dense(q, cu_q, len_q, max_q), dense(k, cu_k, len_k, max_k), dense(v, cu_k, len_k, max_k),
                        sinks, deterministic, score_mod=score_mod, scale=softmax_scale, enable_gqa=True,
                        backend=backend, mask_mod=padded)
    out = torch.cat([o[b, :int(len_q[b])] for b in range(batch)])
    return out, torch.cat([lse[b, :, :int(len_q[b])] for b in range(batch)], dim=1)
