"""Dropout in the kernels (`ptofa/kernels/dropout.py`): the generator's statistics on the host
replica, the forward kernel's mask equal to the replica's (the output against the reference built
from it), the 1 / (1 - p) scaling and keep rate measured on the kernel's own output,
torch.manual_seed reproducing a call, and the backward kernels regenerating the forward's mask
(gradients against torch autograd with the replica's mask)."""

from __future__ import annotations

import math

import pytest
import torch

import ptofa
from ptofa.attention.backward import check_gradients, reference_backward
from ptofa.attention.core import run_attention, window_to_bounds
from ptofa.kernels.dropout import cut, keep_mask, keep_probability
from ptofa.launch.dispatch import launch_on
from ptofa.launch.plan import plan_forward
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.reference import check_accuracy, check_lse, reference_fa
from ptofa.kernels.builtin_mods.window import window_mods


def _rand(*shape, seed: int, dtype=torch.float16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _sigmas(observed: float, p_keep: float, n: int) -> float:
    return abs(observed - p_keep) / math.sqrt(p_keep * (1 - p_keep) / n)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.83])
def test_generator_keep_rate_and_independence(p: float) -> None:
    """Keep rate 1 - p overall and per row and column, neighbours independent, and every input
    of the generator (seed, offset, sequence, head) giving an unrelated mask."""
    keep = keep_mask(seed=1234, offset=-77, batch=2, heads=3, s0=300, s1=257, p=p)
    q = keep_probability(p)
    assert abs(q - (1 - p)) < 2 ** -24
    assert _sigmas(keep.float().mean().item(), q, keep.numel()) < 5
    rows = keep.float().mean(-1).flatten()  # 1800 rows of 257: their spread is the binomial one
    assert abs(rows.std().item() / math.sqrt(q * (1 - q) / 257) - 1) < 0.1
    cols = keep.float().mean(-2).flatten()
    assert abs(cols.std().item() / math.sqrt(q * (1 - q) / 300) - 1) < 0.2
    both = (keep[..., 1:] & keep[..., :-1]).float().mean().item()  # neighbouring keys
    assert _sigmas(both, q * q, keep[..., 1:].numel()) < 5
    both = (keep[..., 1:, :] & keep[..., :-1, :]).float().mean().item()  # neighbouring queries
    assert _sigmas(both, q * q, keep[..., 1:, :].numel()) < 5
    same = q * q + (1 - q) * (1 - q)  # agreement of two independent masks
    for other in (keep_mask(1235, -77, 2, 3, 300, 257, p), keep_mask(1234, -76, 2, 3, 300, 257, p)):
        assert _sigmas((other == keep).float().mean().item(), same, keep.numel()) < 5
    assert _sigmas((keep[0, 0] == keep[0, 1]).float().mean().item(), same, keep[0, 0].numel()) < 5
    assert _sigmas((keep[0, 0] == keep[1, 0]).float().mean().item(), same, keep[0, 0].numel()) < 5


def test_threshold_edges() -> None:
    assert cut(0.0) == -(1 << 23)  # every 24-bit value is >= it: nothing dropped
    assert keep_probability(0.0) == 1.0 and keep_mask(3, 4, 1, 1, 64, 64, 0.0).all()


# (name, batch, s0, s1, heads, kv_heads, head, window): ragged tiles, GQA, causal, several Q blocks
CASES = {
    "ragged_gqa": (2, 150, 200, 4, 2, 64, (-1, -1)),
    "causal_blocks": (1, 260, 300, 2, 1, 128, (-1, 0)),
    "window_d256": (1, 70, 130, 2, 2, 256, (40, 8)),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_forward_equals_reference_of_the_replica_mask(name: str, dtype: torch.dtype) -> None:
    """The kernel's O (and LSE, the undropped one's) against the reference built from the host
    replica's mask at the same (seed, offset): any entry kept or dropped differently fails it."""
    b, s0, s1, heads, kv_heads, d, window = CASES[name]
    q, k, v = _rand(b, s0, heads, d, seed=1, dtype=dtype), _rand(b, s1, kv_heads, d, seed=2, dtype=dtype), \
        _rand(b, s1, kv_heads, d, seed=3, dtype=dtype)
    p, seed, offset = 0.25, -123456789, 987654321
    masked = window != (-1, -1)
    config = FAConfig(head=d, in_dtype=dtype_name(dtype), mods=window_mods(masked), lse=True, dropout=True)
    out, lse = run_attention(
        q, k, v, scale=1 / math.sqrt(d), bounds=window_to_bounds(window, s0, s1) if masked else None,
        return_lse=True, backend="sim", config=config, dropout=(p, seed, offset))
    keep = keep_mask(seed, offset, b, heads, s0, s1, p)
    ref = reference_fa(q, k, v, 1 / math.sqrt(d), window=window, dropout=(keep, p))
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
    assert check_lse(lse, ref).passed
    for other in (keep_mask(seed, offset + 1, b, heads, s0, s1, p), keep_mask(seed + 1, offset, b, heads, s0, s1, p)):
        wrong = reference_fa(q, k, v, 1 / math.sqrt(d), window=window, dropout=(other, p))
        assert not check_accuracy(out.float(), wrong.out32, wrong.out_low).passed  # another mask fails


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]


@pytest.mark.parametrize("p", [0.1, 0.6])
def test_keep_rate_and_scaling_from_the_kernel_output(p: float) -> None:
    """With Q = 0 every probability is 1 / S1, and with V = 1 the kernel's O of row i is
    (kept keys of row i) / S1 / (1 - p): its mean is 1 within the binomial spread (keep rate and
    scaling together), and each row equals the replica's count."""
    b, s0, s1, heads, d = 2, 128, 512, 2, 64
    q = torch.zeros(b, s0, heads, d, dtype=torch.float16)
    k = _rand(b, s1, heads, d, seed=4)
    v = torch.ones(b, s1, heads, d, dtype=torch.float16)
    config = FAConfig(head=d, dropout=True, out_dtype="f32")
    shape = ProblemShape(b, heads, s0, s1)
    out = torch.full((b, s0, heads, d), math.nan)
    launch_on("sim", plan_forward(config, shape, "910B2", scale=0.125, dropout=(p, 42, 7)),
              {"q": q, "k": k, "v": v, "o": out})
    rate = out[..., 0] * (1 - p)  # kept fraction per row
    n = b * s0 * heads * s1
    assert _sigmas(rate.mean().item(), keep_probability(p), n) < 5
    assert (out == out[..., :1]).all()  # every column of a row alike
    kept = keep_mask(42, 7, b, heads, s0, s1, p).sum(-1).transpose(1, 2).float()  # [b, s0, heads]
    torch.testing.assert_close(out[..., 0], kept / s1 / (1 - p), rtol=2e-6, atol=0)


def test_manual_seed_reproduces_a_call_and_calls_differ() -> None:
    q, k, v = _rand(1, 64, 2, 64, seed=5), _rand(1, 96, 2, 64, seed=6), _rand(1, 96, 2, 64, seed=7)
    torch.manual_seed(11)
    first = ptofa.flash_attn_func(q, k, v, 0.3, backend="sim")
    second = ptofa.flash_attn_func(q, k, v, 0.3, backend="sim")
    torch.manual_seed(11)
    again = ptofa.flash_attn_func(q, k, v, 0.3, backend="sim")
    assert torch.equal(first, again) and not torch.equal(first, second)


def test_dropout_arguments_are_checked() -> None:
    q = _rand(1, 16, 1, 64, seed=8)
    for bad in (1.0, -0.1, True, "0.1"):
        with pytest.raises(ValueError, match="dropout_p"):
            ptofa.flash_attn_func(q, q, q, bad, backend="sim")
    with pytest.raises(ConfigError, match="dropout"):
        FAConfig(dropout=True, softmax_dtype="f16")
    with pytest.raises(ConfigError, match="dropout"):
        FAConfig(dropout=True, cube_rowsum=True)


@pytest.mark.parametrize("dtype, causal, deterministic", [(torch.float16, True, True), (torch.bfloat16, False, False),
                                                         (torch.bfloat16, True, True)])
def test_backward_regenerates_the_forward_mask(dtype: torch.dtype, causal: bool, deterministic: bool) -> None:
    """Autograd through flash_attn_func with dropout: the backward kernels (dq + dkdv, or atomic dQ)
    regenerate the forward's mask, so dq, dk, dv match torch autograd through attention with the
    replica's mask (and fail against another mask)."""
    b, s0, s1, heads, kv_heads, d, p = 1, 100, 140, 2, 1, 64, 0.3
    q = _rand(b, s0, heads, d, seed=10, dtype=dtype).requires_grad_()
    k = _rand(b, s1, kv_heads, d, seed=11, dtype=dtype).requires_grad_()
    v = _rand(b, s1, kv_heads, d, seed=12, dtype=dtype).requires_grad_()
    dout = _rand(b, s0, heads, d, seed=13, dtype=dtype)
    torch.manual_seed(3)
    ptofa.flash_attn_func(q, k, v, p, causal=causal, deterministic=deterministic, backend="sim").backward(dout)
    torch.manual_seed(3)
    seed, offset = torch.randint(-2**31, 2**31, (2,), dtype=torch.int64).tolist()  # what the call drew
    window = (-1, 0) if causal else (-1, -1)
    keep = keep_mask(seed, offset, b, heads, s0, s1, p)
    acc = check_gradients(q.grad, k.grad, v.grad, reference_backward(q, k, v, dout, window=window, dropout=(keep, p)))
    assert all(a.passed for a in acc.values()), {n: a.summary() for n, a in acc.items()}
    other = keep_mask(seed, offset + 1, b, heads, s0, s1, p)
    wrong = check_gradients(q.grad, k.grad, v.grad, reference_backward(q, k, v, dout, window=window, dropout=(other, p)))
    assert not any(a.passed for a in wrong.values())
