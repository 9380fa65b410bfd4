"""flash-attn's `S_dmask`: what `return_attn_probs=True` returns beside out and LSE when dropout_p > 0.

flash-attn's kernel writes, for its tests, the probabilities it multiplied V by with the dropout
pattern in their sign (flash_attn/flash_attn_interface.py, `flash_attn_func`'s docstring: "negative
means that location was dropped, nonnegative means it was kept"), unnormalized as its kernel has
them when it visits a block of keys: it walks the blocks from the last to the first, so the entries
of block J are exp(s - M_J), M_J the row's largest score in blocks J and after. Its tests undo that
(tests/test_flash_attn.py, commit 0251105a: `convert_flash_attn_S_to_softmax` crops the [B, H,
S0 rounded up to 128, S1 rounded up to 128] tensor and zeroes what the window hides,
`dropout_mask = S_dmask >= 0`, `normalize_flash_attn_S` multiplies block J by exp(M_J - LSE) with
the block width `_get_block_size_n` gives a dropout kernel) and build the reference output from
that mask.

ptofa's kernels keep no S or P (the mask comes from a generator, `ptofa.kernels.dropout`), so the
host builds S_dmask in this form from the inputs: the scores in f32 with the call's scale,
softcap, ALiBi bias and masks, the mask of the kernel's generator at the call's (seed, offset)
(`keep_mask`, the kernel's definition), flash-attn's block width for the call's head dim. It is a
debugging output of B x H x S0 x S1 entries, as flash-attn's: nothing of it is in the kernel.
Like flash-attn's, an entry whose probability is 0 (a masked key) reads as kept whether or not it
was dropped (-0.0 >= 0).
"""

from __future__ import annotations

import math

import torch

from ptofa.kernels.dropout import keep_mask, packed_keep_masks
from ptofa.reference import alibi_bias, modify_scores, visible_mask


def flash_block_n(head_dim: int) -> int:
    """The key block of flash-attn's dropout kernel for a head dim (`_get_block_size_n` with
    is_dropout=True, flash_attn/flash_attn_interface.py: the same on every GPU it distinguishes)."""
    if head_dim <= 32:
        return 128
    if head_dim <= 96:
        return 64
    return 32 if head_dim <= 128 else 64


def _round128(n: int) -> int:
    return -(-n // 128) * 128


def _batch_row(t: torch.Tensor | None, b: int) -> torch.Tensor | None:
    """Row b of a [B, X] tensor, or the [X] tensor the batch shares (None stays None)."""
    return t if t is None or t.dim() == 1 else t[b]


def _sequence_probs(q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor, scale: float, window: tuple[int, int],
                    softcap: float, slopes: torch.Tensor | None, key_mask: torch.Tensor | None) -> torch.Tensor:
    """[H, S0, S1] f32 of one sequence (q [S0, H, D], k [S1, KVH, D], keep [H, S0, S1]): exp(s - M_J)
    with the sign of the keep decision."""
    s0, heads, head_dim = q.shape
    s1, kv_heads = k.shape[0], k.shape[1]
    kh = k.float().permute(1, 2, 0).repeat_interleave(heads // kv_heads, dim=0)  # [H, D, S1]
    scores = torch.matmul(q.float().transpose(0, 1), kh) * scale  # [H, S0, S1]
    bias = None if slopes is None else alibi_bias(slopes, 1, heads, s0, s1)[0]
    scores = modify_scores(scores, softcap, bias)
    scores = scores.masked_fill(~visible_mask(s0, s1, window, key_mask), -math.inf)
    block = flash_block_n(head_dim)
    pad = -s1 % block
    blocks = torch.nn.functional.pad(scores, (0, pad), value=-math.inf).reshape(heads, s0, -1, block)
    suffix_max = blocks.amax(-1).flip(-1).cummax(-1).values.flip(-1)  # M_J: blocks J and after
    row_max = suffix_max.repeat_interleave(block, dim=-1)[..., :s1]
    probs = torch.exp(scores - row_max).nan_to_num(0.0)  # a row that sees no key: 0
    return torch.where(keep, probs, -probs)


def dense_probs(q: torch.Tensor, k: torch.Tensor, dropout: tuple[float, int, int], scale: float | None,
                window: tuple[int, int], softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """S_dmask [B, H, S0 rounded up to 128, S1 rounded up to 128] in q's dtype of a dense call: q
    [B, S0, H, D], k [B, S1, KVH, D], `dropout` (p, seed, offset), the bottom-right window (causal
    included), the call's softcap, ALiBi slopes ([H] or [B, H]) and key-padding mask ([B, S1] or [S1])."""
    batch, s0, heads, head_dim = q.shape
    s1 = k.shape[1]
    p, seed, offset = dropout
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    out = torch.zeros(batch, heads, _round128(s0), _round128(s1), dtype=q.dtype)
    mask = None if key_padding_mask is None else torch.as_tensor(key_padding_mask)
    for b in range(batch):
        keep = keep_mask(seed, offset, batch, heads, s0, s1, p, range(b, b + 1))[0]
        out[b, :, :s0, :s1] = _sequence_probs(q[b].detach(), k[b].detach(), keep, scale, window, softcap,
                                              _batch_row(alibi_slopes, b), _batch_row(mask, b))
    return out


def varlen_probs(q: torch.Tensor, k: torch.Tensor, q_lens: list[int], k_lens: list[int], max_seqlen_q: int,
                 max_seqlen_k: int, dropout: tuple[float, int, int], scale: float | None, window: tuple[int, int],
                 softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None) -> torch.Tensor:
    """S_dmask [B, H, max_seqlen_q rounded up to 128, max_seqlen_k rounded up to 128] of packed
    sequences (q [total_q, H, D], k [total_k, KVH, D]): sequence b's entries at [b, :, :q_len, :k_len],
    its positions from 0 (`ptofa.kernels.dropout.packed_keep_masks`)."""
    heads, head_dim = q.shape[1], q.shape[2]
    p, seed, offset = dropout
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    out = torch.zeros(len(q_lens), heads, _round128(max_seqlen_q), _round128(max_seqlen_k), dtype=q.dtype)
    keeps = packed_keep_masks(seed, offset, q_lens, k_lens, heads, p)
    q0 = k0 = 0
    for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        if q_len and k_len:
            out[b, :, :q_len, :k_len] = _sequence_probs(q[q0:q0 + q_len].detach(), k[k0:k0 + k_len].detach(), keeps[b],
                                                        scale, window, softcap, _batch_row(alibi_slopes, b), None)
        q0, k0 = q0 + q_len, k0 + k_len
    return out


__all__ = ["dense_probs", "flash_block_n", "varlen_probs"]
