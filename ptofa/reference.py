"""Torch reference attention and the accuracy rule (docs/sources.md §4.4).

Tensors are BSND: Q [B,S0,N,D], K/V [B,S1,N,D], all fp16; O is [B,S0,N,D] fp32.

The accuracy rule is the FlashAttention one (FA4 tests): the kernel's max
absolute error against an fp32 reference must stay within twice the error that
torch makes when it does the same computation in fp16, plus a small absolute
term. `reference_attention` returns both references; `check_accuracy` applies
the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ptofa.pipeline import ProblemShape

TOLERANCE_FACTOR = 2.0
TOLERANCE_ABS = 1e-5
REL_ERR_FLOOR = 1e-6
# Upper bound on the elements of one [B, N, rows, S1] score block; each S0 chunk
# holds a few blocks of this size (fp32 scores, probabilities, their fp16 twins),
# so peak memory stays near 1 GiB whatever S0 and S1 are.
SCORE_BLOCK_ELEMENTS = 1 << 25


def make_inputs(shape: ProblemShape, head: int, seed: int, dtype: torch.dtype = torch.float16,
                kv_heads: int | None = None, head_v: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deterministic Q [B,S0,N,D], K [B,S1,KVN,D] and V [B,S1,KVN,Dv] (Dv = `head_v`, default D) in
    `dtype`: plain `randn` from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    kv_heads = kv_heads or shape.heads

    def randn(seq: int, heads: int, width: int = head) -> torch.Tensor:
        return torch.randn(shape.batch, seq, heads, width, generator=generator).to(dtype)

    q = randn(shape.s0, shape.heads)
    k = randn(shape.s1, kv_heads)
    v = randn(shape.s1, kv_heads, head if head_v is None else head_v)
    return q, k, v


def make_key_mask(batch: int, s1: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """A key-padding mask [B, S1] int8 (1 = the key takes part): batch b keeps its first
    lengths[b] keys, lengths drawn uniformly from 0..S1 (zero-key batches included)."""
    generator = torch.Generator().manual_seed(seed + 7919)
    lengths = [int(x) for x in torch.randint(0, s1 + 1, (batch,), generator=generator)]
    mask = (torch.arange(s1).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(torch.int8)
    return mask, lengths


def _matmul_low(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A low-precision GEMM as GPUs and torch_npu run it: fp16/bf16 operands, fp32 accumulation,
    result rounded to the operands' dtype.

    CPU torch's native half matmul rounds the same way (up to summation order)
    but is about fifty times slower, too slow for S0 = S1 = 8192.
    """
    return torch.matmul(a.float(), b.float()).to(a.dtype)


def visible_mask(s0: int, s1: int, window: tuple[int, int] = (-1, -1),
                 key_padding_mask: torch.Tensor | None = None, batch: int = 1) -> torch.Tensor:
    """[B, S0, S1] bool: query row i sees key j (FlashAttention >= 2.1, bottom-right aligned).

    j is visible iff i + S1 - S0 - left <= j <= i + S1 - S0 + right (a bound of -1 is
    unbounded; causal is (-1, 0)) and key_padding_mask[b, j] is nonzero.
    """
    left, right = window
    i = torch.arange(s0).unsqueeze(1) + (s1 - s0)
    j = torch.arange(s1).unsqueeze(0)
    vis = torch.ones(s0, s1, dtype=torch.bool)
    if left >= 0:
        vis &= j >= i - left
    if right >= 0:
        vis &= j <= i + right
    vis = vis.unsqueeze(0).expand(batch, s0, s1)
    if key_padding_mask is not None:
        kpm = torch.as_tensor(key_padding_mask).reshape(-1, s1) != 0
        vis = vis & kpm.unsqueeze(1)
    return vis


def alibi_bias(slopes: torch.Tensor, batch: int, heads: int, s0: int, s1: int,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ALiBi's bias [B, H, S0, S1] as flash-attn defines it: -slope * |i + S1 - S0 - j| for query i
    and key j (bottom-right aligned), slopes [H] (shared by the batch) or [B, H]; computed in
    float64, returned in `dtype`."""
    slopes = torch.as_tensor(slopes, dtype=torch.float64)
    if slopes.dim() == 1:
        slopes = slopes.unsqueeze(0).expand(batch, heads)
    if tuple(slopes.shape) != (batch, heads):
        raise ValueError(f"alibi_slopes: shape {tuple(slopes.shape)} must be [{heads}] or [{batch}, {heads}]")
    i = torch.arange(s0, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(s1, dtype=torch.float64).unsqueeze(0)
    distance = (i + (s1 - s0) - j).abs()  # [S0, S1]
    return (-slopes[:, :, None, None] * distance).to(dtype)


def default_alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi's usual slopes for `heads` heads (Press et al.): 2^(-8 (h + 1) / heads), fp32 [heads]."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], dtype=torch.float32)


def modify_scores(scores: torch.Tensor, softcap: float = 0.0, bias: torch.Tensor | None = None) -> torch.Tensor:
    """flash-attn's score modifications before the mask, in the scores' dtype: softcap * tanh(scores /
    softcap) when softcap > 0, then + bias (ALiBi, [B, H, S0, S1] or broadcastable to the scores)."""
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    return scores


@dataclass(frozen=True)
class Reference:
    """What a kernel output is compared with (BSND out, [B, N, S0] lse; all fp32).

    out32 / lse32   the math in fp32 on the (exact) input values;
    out_low / lse_low  torch in the input dtype: Q K^T, the scaling, softmax and P V
                    each rounded to it (fp32 accumulation), O rounded to the output dtype.
    Rows with no visible key have O = 0 and LSE = +inf in both.
    """

    out32: torch.Tensor
    out_low: torch.Tensor
    lse32: torch.Tensor
    lse_low: torch.Tensor


def reference_fa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, window: tuple[int, int] = (-1, -1),
    key_padding_mask: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
    softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None,
    dropout: tuple[torch.Tensor, float] | None = None,
) -> Reference:
    """Masked, grouped-query attention on BSND inputs: q [B,S0,H,D], k [B,S1,KVH,D], v [B,S1,KVH,Dv],
    H % KVH == 0; O is [B,S0,H,Dv].

    q head h reads kv head h // (H / KVH). S0 is processed in chunks so that memory stays
    bounded for long sequences. `softcap` > 0 caps the scaled scores (softcap * tanh(s / softcap)),
    `alibi_slopes` ([H] or [B, H]) adds ALiBi's bias (`alibi_bias`), both before the mask.
    `dropout` = (keep [B, H, S0, S1] bool, p): flash-attn's dropout, P's dropped entries zeroed and
    the kept ones scaled by 1 / (1 - p) after the softmax (LSE is the undropped one's).
    """
    if (q.dim() != 4 or k.dim() != 4 or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0]
            or q.shape[3] != k.shape[3]):
        raise ValueError(
            f"reference_fa: expected q [B,S0,H,D], k [B,S1,KVH,D] and v [B,S1,KVH,Dv] with equal B and D; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    low = q.dtype
    if low not in (torch.float16, torch.bfloat16) or k.dtype != low or v.dtype != low:
        raise ValueError(f"reference_fa: inputs must share fp16 or bf16, got {q.dtype}, {k.dtype}, {v.dtype}")
    batch, s0, heads, head_dim = q.shape
    s1, kv_heads = k.shape[1], k.shape[2]
    if heads % kv_heads != 0:
        raise ValueError(f"reference_fa: heads={heads} must be a multiple of kv_heads={kv_heads}")
    out_dtype = out_dtype or low
    group = heads // kv_heads
    q_bnsd = q.transpose(1, 2)  # [B, H, S0, D]
    k_t = k.permute(0, 2, 3, 1).repeat_interleave(group, dim=1)  # [B, H, D, S1]
    v_bnsd = v.transpose(1, 2).repeat_interleave(group, dim=1)  # [B, H, S1, D]
    k_t32, v32 = k_t.float(), v_bnsd.float()
    scale_low = torch.tensor(scale, dtype=low)
    vis_all = visible_mask(s0, s1, window, key_padding_mask, batch)  # [B, S0, S1]
    bias_all = None if alibi_slopes is None else alibi_bias(alibi_slopes, batch, heads, s0, s1)

    rows_per_chunk = max(1, SCORE_BLOCK_ELEMENTS // max(1, batch * heads * s1))
    out32 = torch.zeros(batch, heads, s0, v.shape[3], dtype=torch.float32)
    out_low = torch.zeros_like(out32)
    lse32 = torch.full((batch, heads, s0), math.inf, dtype=torch.float32)
    lse_low = torch.full_like(lse32, math.inf)
    for start in range(0, s0, rows_per_chunk):
        rows = slice(start, min(start + rows_per_chunk, s0))
        vis = vis_all[:, rows].unsqueeze(1)  # [B, 1, r, S1]
        q_chunk = q_bnsd[:, :, rows]
        for scores, out, lse, matmul in (
            (torch.matmul(q_chunk.float(), k_t32) * scale, out32, lse32, None),
            (_matmul_low(q_chunk, k_t) * scale_low, out_low, lse_low, _matmul_low),
        ):
            bias = None if bias_all is None else bias_all[:, :, rows]
            scores = modify_scores(scores, softcap, bias)
            scores = scores.masked_fill(~vis, -math.inf)
            row_lse = torch.logsumexp(scores.float(), dim=-1)
            p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no visible key: all zero
            if dropout is not None:
                p = p * dropout[0][:, :, rows].to(p.dtype) * torch.tensor(1.0 / (1.0 - dropout[1]), dtype=p.dtype)
            o = torch.matmul(p, v32) if matmul is None else matmul(p, v_bnsd).float()
            out[:, :, rows] = o
            lse[:, :, rows] = torch.where(torch.isneginf(row_lse), math.inf, row_lse)
    out_low = out_low.to(out_dtype).float()
    return Reference(out32.transpose(1, 2).contiguous(), out_low.transpose(1, 2).contiguous(), lse32, lse_low)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale * Q K^T) V for BSND fp16 inputs, twice (no mask, one KV head per Q head).

    Returns `(ref32, ref16)`, both [B,S0,N,D] fp32:
      ref32  the math in fp32 on the (exact) fp16 input values;
      ref16  torch in fp16 throughout: Q K^T, the scaling, softmax and P V each
             rounded to fp16 (matmuls accumulate in fp32, see `_matmul_low`).
    """
    if q.dim() != 4 or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:]:
        raise ValueError(
            f"reference_attention: expected q [B,S0,N,D] and k, v [B,S1,N,D] with equal B, N, D; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.dtype != torch.float16 or k.dtype != torch.float16 or v.dtype != torch.float16:
        raise ValueError(f"reference_attention: inputs must be fp16, got {q.dtype}, {k.dtype}, {v.dtype}")
    ref = reference_fa(q, k, v, scale, out_dtype=torch.float32)
    return ref.out32, ref.out_low


@dataclass(frozen=True)
class Accuracy:
    """The accuracy rule's numbers for one kernel output.

    err         max |o - ref32|, the kernel's error against the fp32 reference
                (inf when o holds NaN or Inf);
    ref16_err   max |ref16 - ref32|, the error torch makes computing in fp16;
    tolerance   2 * ref16_err + 1e-5;
    passed      err <= tolerance, and o is finite everywhere;
    max_rel_err max |o - ref32| / (1e-6 + |ref32|), the 1e-6 floor keeping
                near-zero reference entries from dividing by zero.
    """

    err: float
    ref16_err: float
    tolerance: float
    passed: bool
    max_rel_err: float

    @property
    def max_abs_err(self) -> float:
        """The same number as `err`, under the name the result tables use."""
        return self.err

    def summary(self) -> str:
        verdict = "pass" if self.passed else "FAIL"
        return (
            f"{verdict}: err={self.err:.3g} vs tolerance=2*ref16_err+{TOLERANCE_ABS:g}={self.tolerance:.3g} "
            f"(ref16_err={self.ref16_err:.3g}), max_rel_err={self.max_rel_err:.3g}"
        )


def check_accuracy(
    o: torch.Tensor | np.ndarray, ref32: torch.Tensor, ref16: torch.Tensor
) -> Accuracy:
    """Apply the accuracy rule to a kernel output `o` (any float dtype, same shape as the references)."""
    out = torch.as_tensor(o).to(torch.float64)
    ref = ref32.to(torch.float64)
    if out.shape != ref.shape or ref16.shape != ref.shape:
        raise ValueError(
            f"check_accuracy: shapes differ: o {tuple(out.shape)}, ref32 {tuple(ref.shape)}, ref16 {tuple(ref16.shape)}"
        )
    ref16_err = (ref16.to(torch.float64) - ref).abs().max().item()
    tolerance = TOLERANCE_FACTOR * ref16_err + TOLERANCE_ABS
    if not torch.isfinite(out).all():
        return Accuracy(err=math.inf, ref16_err=ref16_err, tolerance=tolerance, passed=False, max_rel_err=math.inf)
    abs_diff = (out - ref).abs()
    err = abs_diff.max().item()
    max_rel_err = (abs_diff / (REL_ERR_FLOOR + ref.abs())).max().item()
    return Accuracy(err=err, ref16_err=ref16_err, tolerance=tolerance, passed=err <= tolerance, max_rel_err=max_rel_err)


@dataclass(frozen=True)
class LseAccuracy:
    """The accuracy rule applied to LSE: rows with no visible key must be +inf in both,
    finite rows within 2 * (error of the input-dtype computation) + 1e-5."""

    err: float
    low_err: float
    tolerance: float
    passed: bool
    message: str


def check_lse(lse: torch.Tensor | np.ndarray, ref: Reference) -> LseAccuracy:
    out = torch.as_tensor(lse).to(torch.float64)
    ref32, low = ref.lse32.to(torch.float64), ref.lse_low.to(torch.float64)
    if out.shape != ref32.shape:
        raise ValueError(f"check_lse: lse {tuple(out.shape)} != reference {tuple(ref32.shape)}")
    empty = torch.isinf(ref32)
    finite = ~empty
    low_err = (low[finite] - ref32[finite]).abs().max().item() if finite.any() else 0.0
    tolerance = TOLERANCE_FACTOR * low_err + TOLERANCE_ABS
    bad_empty = int((out[empty] != math.inf).sum())
    if torch.isnan(out).any() or bad_empty or not torch.isfinite(out[finite]).all():
        msg = f"lse FAIL: {bad_empty} row(s) without a visible key are not +inf, or NaN/inf in other rows"
        return LseAccuracy(math.inf, low_err, tolerance, False, msg)
    err = (out[finite] - ref32[finite]).abs().max().item() if finite.any() else 0.0
    passed = err <= tolerance
    verdict = "pass" if passed else "FAIL"
    return LseAccuracy(err, low_err, tolerance, passed,
                       f"lse {verdict}: err={err:.3g} vs tolerance={tolerance:.3g}, {int(empty.sum())} row(s) +inf")

