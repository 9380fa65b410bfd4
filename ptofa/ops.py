"""`torch.ops.ptofa.flash_attn_fwd`: the kernel as a torch custom op.

    out, lse = torch.ops.ptofa.flash_attn_fwd(q, k, v, scale, masked, win_left, win_right,
                                              key_padding_mask, out_dtype, backend, config)

`ptofa.flash_attn_func` and `ptofa.scaled_dot_product_attention` call through it, so
`torch.compile(fullgraph=True)` traces a model that calls ptofa as one opaque node: the
fake implementation gives the output shapes (out [B, S0, N, D] in the out dtype, lse
[B, N, S0] fp32) without running anything. The op always runs the kernel with LSE on
and returns both, the pair a backward pass needs; its arguments are checked by the
callers (`ptofa.attention.check_qkv`) before they reach it.

Autograd: q, k, v, out and lse are saved; the backward raises `NotImplementedError`
(`BACKWARD_MISSING`) until the backward kernels (issue 16) are wired in.
"""

from __future__ import annotations

import dataclasses
import json

import torch

from ptofa.attention import run_attention
from ptofa.pipeline import FAConfig

BACKWARD_MISSING = (
    "ptofa: no backward pass yet (issue 16, \"Backward pass\"); the FlashAttention kernel is forward-only, "
    "call it under torch.no_grad() or on tensors that do not require grad"
)


@torch.compiler.assume_constant_result
def config_to_json(config: FAConfig | None) -> str | None:
    """The op's `config` argument: an `FAConfig` as JSON (custom ops take no dataclasses; a
    config is fixed while a graph runs, so torch.compile takes the string as a constant)."""
    return None if config is None else json.dumps(dataclasses.asdict(config), sort_keys=True)


def config_from_json(text: str | None) -> FAConfig | None:
    """The `FAConfig` of `config_to_json`, with LSE on (the op always returns it)."""
    if text is None:
        return None
    return dataclasses.replace(FAConfig(**json.loads(text)), lse=True)


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B, S0, N, D], lse [B, N, S0] fp32) of BSND q/k/v; window bounds in the kernel's
    convention (`ptofa.attention.window_to_bounds`), used when `masked`."""
    bounds = (win_left, win_right) if masked else None
    out, lse = run_attention(q, k, v, scale=scale, bounds=bounds, key_padding_mask=key_padding_mask, return_lse=True,
                             out_dtype=out_dtype, backend=backend, config=config_from_json(config))
    return out, lse


@flash_attn_fwd.register_fake
def _(q, k, v, scale, masked, win_left, win_right, key_padding_mask, out_dtype, backend, config):
    batch, s0, heads, head = q.shape
    out = q.new_empty((batch, s0, heads, head), dtype=out_dtype or q.dtype)
    return out, q.new_empty((batch, heads, s0), dtype=torch.float32)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v = inputs[:3]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(BACKWARD_MISSING)


flash_attn_fwd.register_autograd(_backward, setup_context=_setup_context)

__all__ = ["BACKWARD_MISSING", "config_from_json", "config_to_json", "flash_attn_fwd"]
