"""The torch reference against a naive float64 computation, and the accuracy rule's numbers."""

from __future__ import annotations

import math

import pytest
import torch

from ptofa import reference
from ptofa.pipeline import ProblemShape
from ptofa.reference import Accuracy, check_accuracy, make_inputs, reference_attention


def naive_attention_f64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale * q k^T) v per (batch, head), row by row, in float64."""
    batch, s0, heads, head_dim = q.shape
    out = torch.empty(batch, s0, heads, head_dim, dtype=torch.float64)
    for b in range(batch):
        for n in range(heads):
            keys = k[b, :, n].double()
            values = v[b, :, n].double()
            for row in range(s0):
                scores = keys @ q[b, row, n].double() * scale
                weights = torch.exp(scores - scores.max())
                out[b, row, n] = weights @ values / weights.sum()
    return out


SHAPE = ProblemShape(batch=2, heads=3, s0=16, s1=40)
HEAD = 8


@pytest.fixture(scope="module")
def small_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    q, k, v = make_inputs(SHAPE, HEAD, seed=1)
    return q, k, v, SHAPE.default_scale(HEAD)


def test_make_inputs_shapes_dtype_and_determinism() -> None:
    q, k, v = make_inputs(SHAPE, HEAD, seed=7)
    assert q.shape == (2, 16, 3, 8) and k.shape == (2, 40, 3, 8) and v.shape == (2, 40, 3, 8)
    assert q.dtype == k.dtype == v.dtype == torch.float16
    again = make_inputs(SHAPE, HEAD, seed=7)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), again))
    other = make_inputs(SHAPE, HEAD, seed=8)
    assert not torch.equal(q, other[0])
    assert not torch.equal(k, v)


def test_reference_matches_float64(small_case) -> None:
    q, k, v, scale = small_case
    ref32, ref16 = reference_attention(q, k, v, scale)
    exact = naive_attention_f64(q, k, v, scale)
    assert ref32.dtype == ref16.dtype == torch.float32
    assert ref32.shape == ref16.shape == q.shape
    err32 = (ref32.double() - exact).abs().max().item()
    err16 = (ref16.double() - exact).abs().max().item()
    assert err32 < 1e-6
    # fp16 rounding of P and O (unit roundoff 2^-11) dominates the fp16 path's error.
    assert 1e-5 < err16 < 5e-3
    assert err16 > 10 * err32


def test_reference_chunks_over_s0_give_the_same_result(small_case, monkeypatch) -> None:
    q, k, v, scale = small_case
    whole32, whole16 = reference_attention(q, k, v, scale)
    # 5 rows per chunk: 16 rows split 5 + 5 + 5 + 1.
    monkeypatch.setattr(reference, "SCORE_BLOCK_ELEMENTS", SHAPE.batch * SHAPE.heads * SHAPE.s1 * 5)
    chunked32, chunked16 = reference_attention(q, k, v, scale)
    torch.testing.assert_close(chunked32, whole32, rtol=0, atol=1e-7)
    torch.testing.assert_close(chunked16, whole16, rtol=0, atol=0)


def test_fp16_matmul_rounds_like_torch_half_matmul() -> None:
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(32, 64, generator=generator).half()
    b = torch.randn(64, 48, generator=generator).half()
    emulated = reference._matmul_low(a, b)
    native = torch.matmul(a, b)
    assert emulated.dtype == torch.float16
    # The two differ at most by the rounding of differently ordered fp32 sums: one or two fp16 ulps.
    ulp = torch.finfo(torch.float16).eps * native.float().abs().clamp(min=1.0)
    assert ((emulated.float() - native.float()).abs() <= 2 * ulp).all()


def test_reference_rejects_bad_inputs(small_case) -> None:
    q, k, v, scale = small_case
    with pytest.raises(ValueError, match="inputs must be fp16"):
        reference_attention(q.float(), k, v, scale)
    with pytest.raises(ValueError, match=r"got q \(2, 16, 3, 8\), k \(2, 40, 3, 8\), v \(2, 39, 3, 8\)"):
        reference_attention(q, k, v[:, :39], scale)


@pytest.fixture(scope="module")
def refs(small_case) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v, scale = small_case
    return reference_attention(q, k, v, scale)


def test_rule_numbers_are_the_documented_ones(refs) -> None:
    ref32, ref16 = refs
    generator = torch.Generator().manual_seed(5)
    o = ref32 + 1e-5 * torch.randn(ref32.shape, generator=generator)
    acc = check_accuracy(o, ref32, ref16)
    ref16_err = (ref16.double() - ref32.double()).abs().max().item()
    diff = (o.double() - ref32.double()).abs()
    assert acc.ref16_err == pytest.approx(ref16_err, rel=1e-12)
    assert acc.tolerance == pytest.approx(2 * ref16_err + 1e-5, rel=1e-12)
    assert acc.err == pytest.approx(diff.max().item(), rel=1e-12)
    assert acc.max_abs_err == acc.err
    assert acc.max_rel_err == pytest.approx((diff / (1e-6 + ref32.double().abs())).max().item(), rel=1e-12)
    assert acc.passed


def test_rel_err_uses_the_documented_floor() -> None:
    ref32 = torch.tensor([0.0, 2.0])
    acc = check_accuracy(torch.tensor([1e-6, 2.5]), ref32, ref32)
    # entry 0: 1e-6 / (1e-6 + 0) = 1; entry 1: 0.5 / (1e-6 + 2) ~ 0.25
    assert acc.max_rel_err == pytest.approx(1.0, rel=1e-6)
    assert acc.ref16_err == 0.0
    assert acc.tolerance == pytest.approx(1e-5)
    assert acc.err == pytest.approx(0.5)
    assert not acc.passed


def test_rule_passes_a_correct_result_and_accepts_numpy(refs) -> None:
    ref32, ref16 = refs
    acc = check_accuracy(ref32.numpy(), ref32, ref16)
    assert acc == Accuracy(err=0.0, ref16_err=acc.ref16_err, tolerance=acc.tolerance, passed=True, max_rel_err=0.0)
    assert acc.summary().startswith("pass: err=0")


def test_rule_fails_a_perturbed_result(refs) -> None:
    ref32, ref16 = refs
    tolerance = check_accuracy(ref32, ref32, ref16).tolerance
    o = ref32.clone()
    o[1, 7, 2, 3] += 1.5 * tolerance
    acc = check_accuracy(o, ref32, ref16)
    assert not acc.passed
    assert acc.err == pytest.approx(1.5 * tolerance, rel=1e-3)
    assert acc.summary().startswith("FAIL")
    o[1, 7, 2, 3] = ref32[1, 7, 2, 3] + 0.9 * tolerance
    assert check_accuracy(o, ref32, ref16).passed


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_rule_fails_nan_and_inf(refs, bad: float) -> None:
    ref32, ref16 = refs
    o = ref32.clone()
    o[0, 0, 0, 0] = bad
    acc = check_accuracy(o, ref32, ref16)
    assert not acc.passed
    assert acc.err == math.inf and acc.max_rel_err == math.inf


def test_rule_rejects_mismatched_shapes(refs) -> None:
    ref32, ref16 = refs
    with pytest.raises(ValueError, match=r"o \(2, 16, 3, 7\), ref32 \(2, 16, 3, 8\)"):
        check_accuracy(ref32[..., :7], ref32, ref16)


def naive_masked_f64(q, k, v, scale, window, kpm):
    """Row by row in float64 with an explicit visibility test, GQA by index arithmetic."""
    batch, s0, heads, head_dim = q.shape
    s1, kv_heads = k.shape[1], k.shape[2]
    left, right = window
    out = torch.zeros(batch, s0, heads, head_dim, dtype=torch.float64)
    lse = torch.full((batch, heads, s0), math.inf, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // kv_heads)
            for i in range(s0):
                keys = [j for j in range(s1)
                        if (left < 0 or j >= i + s1 - s0 - left) and (right < 0 or j <= i + s1 - s0 + right)
                        and (kpm is None or kpm[b, j])]
                if not keys:
                    continue
                scores = k[b, keys, g].double() @ q[b, i, h].double() * scale
                lse[b, h, i] = torch.logsumexp(scores, 0)
                out[b, i, h] = torch.softmax(scores, 0) @ v[b, keys, g].double()
    return out, lse


@pytest.mark.parametrize("window, with_mask, dtype", [
    ((-1, 0), False, torch.float16), ((3, 2), True, torch.bfloat16), ((-1, -1), True, torch.float16), ((0, -1), False, torch.bfloat16),
])
def test_masked_gqa_reference_matches_float64(window, with_mask, dtype) -> None:
    from ptofa.reference import reference_fa

    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 11, 4, 8, generator=g).to(dtype)
    k = torch.randn(2, 7, 2, 8, generator=g).to(dtype)
    v = torch.randn(2, 7, 2, 8, generator=g).to(dtype)
    kpm = torch.tensor([[1, 0, 1, 1, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]], dtype=torch.int32) if with_mask else None
    ref = reference_fa(q, k, v, 0.35, window, kpm)
    exact, lse = naive_masked_f64(q, k, v, 0.35, window, kpm)
    assert (ref.out32.double() - exact).abs().max().item() < 1e-6
    finite = torch.isfinite(lse)
    assert torch.equal(torch.isinf(ref.lse32), ~finite) and torch.equal(torch.isinf(ref.lse_low), ~finite)
    assert (ref.lse32.double()[finite] - lse[finite]).abs().max().item() < 1e-5
    assert ref.out_low.dtype == torch.float32 and torch.isfinite(ref.out_low).all()
    empty = ~finite.transpose(1, 2)  # [B, S0, H]
    assert ref.out32[empty].abs().max().item() == 0.0 if empty.any() else True
    if with_mask:
        assert empty[1].all()  # the batch with no valid key
