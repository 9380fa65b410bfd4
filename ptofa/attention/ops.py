"""`torch.ops.ptofa.flash_attn_fwd`: the kernel as a torch custom op.

    out, lse = torch.ops.ptofa.flash_attn_fwd(q, k, v, scale, masked, win_left, win_right,
                                              key_padding_mask, out_dtype, backend, config)

`ptofa.flash_attn_func` and `ptofa.scaled_dot_product_attention` call through it, so
`torch.compile(fullgraph=True)` traces a model that calls ptofa as one opaque node: the
fake implementation gives the output shapes (out [B, S0, N, D] in the out dtype, lse
[B, N, S0] fp32) without running anything. The op always runs the kernel with LSE on
and returns both, the pair a backward pass needs; its arguments are checked by the
callers (`ptofa.attention.core.check_qkv`) before they reach it.

Autograd: q, k, v, out and lse are saved (no S or P); the backward is the custom op
`ptofa::flash_attn_bwd` (its own fake implementation, so torch.compile traces the
backward graph too), which runs the backward kernels (`ptofa.attention.backward.attention_backward`)
on the same window and key-padding mask.

This module declares the two ops (their schemas from the signatures below, their fake
implementations and the autograd formula); the implementations are registered by the modules
that run them, `ptofa.attention.core` (forward: `run_attention`) and `ptofa.attention.backward`
(backward: `attention_backward`), so that neither sits above the other and this module sits
below both. `ptofa.attention.functional` imports all three.
"""

from __future__ import annotations

import dataclasses
import json

import torch

from ptofa.kernels.builtin_mods.registry import revive
from ptofa.pipeline import ConfigError, FAConfig


def _unregistered(op: str, home: str) -> RuntimeError:
    return RuntimeError(f"ptofa::{op} has no implementation in this process: {home} registers it "
                        f"(import it, or call ptofa.flash_attn_func, which does)")

def config_to_json(config: FAConfig | None) -> str | None:
    """The op's `config` argument: an `FAConfig` as JSON (custom ops take no dataclasses; a
    config is fixed while a graph runs, so torch.compile takes the string as a constant). The
    text is the one the config made on creation (`FAConfig.json_text`): torch.compile traces
    this as an attribute read and calls nothing on the config."""
    return None if config is None else config.json_text


def config_from_json(text: str | None) -> FAConfig | None:
    """The `FAConfig` of `config_to_json`, with LSE on (the op always returns it)."""
    if text is None:
        return None
    fields = json.loads(text)
    config = FAConfig(**{**fields, "mods": revive(fields["mods"])})
    if config.softmax_dtype != "f32":
        raise ConfigError(f"config: softmax_dtype={config.softmax_dtype!r} computes no LSE, and this op always "
                          f"returns one (autograd needs it); ptofa.attention.core.attend runs it without LSE")
    return dataclasses.replace(config, lse=True)


@torch.library.custom_op("ptofa::flash_attn_fwd", mutates_args=())
def flash_attn_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    masked: bool,
    win_left: int,
    win_right: int,
    key_padding_mask: torch.Tensor | None,
    out_dtype: torch.dtype | None,
    backend: str,
    config: str | None,
    deterministic: bool = True,
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    dropout_seed: int = 0,
    dropout_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B, S0, N, Dv], lse [B, N, S0] fp32) of BSND q/k/v (v's head dim Dv); window bounds in the kernel's
    convention (`ptofa.attention.core.window_to_bounds`), used when `masked`. `deterministic`
    only chooses the backward's mode (False: atomic-add dQ). `softcap`, `alibi_slopes` as flash-attn's;
    `dropout_p` > 0 drops P with the kernel's generator at (`dropout_seed`, `dropout_offset`).
    Implemented by `ptofa.attention.core.run_attention` (registered there)."""
    raise _unregistered("flash_attn_fwd", "ptofa.attention.core")


@flash_attn_fwd.register_fake
def _(q, k, v, scale, masked, win_left, win_right, key_padding_mask, out_dtype, backend, config, deterministic=True,
      softcap=0.0, alibi_slopes=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0):
    batch, s0, heads, _ = q.shape
    out = q.new_empty((batch, s0, heads, v.shape[3]), dtype=out_dtype or q.dtype)
    return out, q.new_empty((batch, heads, s0), dtype=torch.float32)


def _setup_context(ctx, inputs, output) -> None:
    (q, k, v, scale, masked, win_left, win_right, key_padding_mask, _out_dtype, backend, _config, deterministic,
     softcap, alibi_slopes, dropout_p, dropout_seed, dropout_offset) = inputs
    ctx.dropout = (dropout_p, dropout_seed, dropout_offset)
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, key_padding_mask, alibi_slopes)
    ctx.softcap = softcap
    ctx.mark_non_differentiable(lse)
    ctx.scale = scale
    ctx.bounds = (win_left, win_right) if masked else None
    ctx.backend = backend
    ctx.deterministic = deterministic


@torch.library.custom_op("ptofa::flash_attn_bwd", mutates_args=())
def flash_attn_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    scale: float | None,
    masked: bool,
    win_left: int,
    win_right: int,
    backend: str,
    deterministic: bool = True,
    key_padding_mask: torch.Tensor | None = None,
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    dropout_seed: int = 0,
    dropout_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of `flash_attn_fwd` from its saved q, k, v, out, lse (and key mask) and the
    output's gradient, by the backward kernels (`ptofa.attention.backward.attention_backward`, registered
    there). An op of its own so that torch.compile traces the backward graph through the fake implementation."""
    raise _unregistered("flash_attn_bwd", "ptofa.attention.backward")


@flash_attn_bwd.register_fake
def _(q, k, v, out, lse, dout, scale, masked, win_left, win_right, backend, deterministic=True, key_padding_mask=None,
      softcap=0.0, alibi_slopes=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _backward(ctx, grad_out, grad_lse):
    """dq, dk, dv by `flash_attn_bwd`; out and dO go in q's dtype (an fp32 `out_dtype` output
    is rounded to it, as the kernel's D = rowsum(dO * O) reads them)."""
    q, k, v, out, lse, key_padding_mask, alibi_slopes = ctx.saved_tensors
    left, right = ctx.bounds if ctx.bounds is not None else (0, 0)
    dq, dk, dv = flash_attn_bwd(q, k, v, out, lse, grad_out.contiguous(), ctx.scale, ctx.bounds is not None, left,
                                right, ctx.backend, ctx.deterministic, key_padding_mask, ctx.softcap, alibi_slopes,
                                *ctx.dropout)
    return (dq, dk, dv) + (None,) * 14


flash_attn_fwd.register_autograd(_backward, setup_context=_setup_context)

__all__ = ["config_from_json", "config_to_json", "flash_attn_bwd", "flash_attn_fwd"]
