"""Torch reference attention and the accuracy rule (fa-pipeline.md 14).

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


def make_inputs(shape: ProblemShape, head: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deterministic fp16 Q [B,S0,N,D], K and V [B,S1,N,D]: plain `randn` from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)

    def randn(seq: int) -> torch.Tensor:
        return torch.randn(shape.batch, seq, shape.heads, head, generator=generator).to(torch.float16)

    q = randn(shape.s0)
    k = randn(shape.s1)
    v = randn(shape.s1)
    return q, k, v


def _matmul_fp16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An fp16 GEMM as GPUs and torch_npu run it: fp16 operands, fp32 accumulation, fp16 result.

    CPU torch's native half matmul rounds the same way (up to summation order)
    but is about fifty times slower, too slow for S0 = S1 = 8192.
    """
    return torch.matmul(a.float(), b.float()).to(torch.float16)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale * Q K^T) V for BSND fp16 inputs, twice.

    Returns `(ref32, ref16)`, both [B,S0,N,D] fp32:
      ref32  the math in fp32 on the (exact) fp16 input values;
      ref16  torch in fp16 throughout: Q K^T, the scaling, softmax and P V each
             rounded to fp16 (matmuls accumulate in fp32, see `_matmul_fp16`).
    S0 is processed in chunks so that memory stays bounded for long sequences.
    """
    if q.dim() != 4 or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:]:
        raise ValueError(
            f"reference_attention: expected q [B,S0,N,D] and k, v [B,S1,N,D] with equal B, N, D; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.dtype != torch.float16 or k.dtype != torch.float16 or v.dtype != torch.float16:
        raise ValueError(f"reference_attention: inputs must be fp16, got {q.dtype}, {k.dtype}, {v.dtype}")
    batch, s0, heads, _ = q.shape
    s1 = k.shape[1]
    # BSND -> BNSD so that matmul batches over (B, N).
    q_bnsd = q.transpose(1, 2)
    k_t = k.permute(0, 2, 3, 1)  # [B, N, D, S1]
    v_bnsd = v.transpose(1, 2)
    k_t32, v32 = k_t.float(), v_bnsd.float()
    scale16 = torch.tensor(scale, dtype=torch.float16)

    rows_per_chunk = max(1, SCORE_BLOCK_ELEMENTS // (batch * heads * s1))
    out32 = torch.empty(batch, heads, s0, v.shape[3], dtype=torch.float32)
    out16 = torch.empty_like(out32)
    for start in range(0, s0, rows_per_chunk):
        rows = slice(start, min(start + rows_per_chunk, s0))
        q_chunk = q_bnsd[:, :, rows]

        p32 = torch.softmax(torch.matmul(q_chunk.float(), k_t32) * scale, dim=-1)
        out32[:, :, rows] = torch.matmul(p32, v32)
        del p32

        p16 = torch.softmax(_matmul_fp16(q_chunk, k_t) * scale16, dim=-1)
        out16[:, :, rows] = _matmul_fp16(p16, v_bnsd).float()
    return out32.transpose(1, 2).contiguous(), out16.transpose(1, 2).contiguous()


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
