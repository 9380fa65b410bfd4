"""Gradients where the rounding is exact: rows that see one key (P = 1, so dV is a plain sum of dO rows),
one query row, rows that see no key, sequences without keys. There the fp64 reference rounded to the
input dtype and the input-dtype reference agree, and ptofa must give the same bits: f32 accumulation
across all Q blocks (and the GQA group's heads) and one rounding, in every backward mode (deterministic
and atomic dQ, dense and varlen, fp16 and bf16). The forward that feeds the backward must then write an
LSE from f32 scores of the unscaled inputs (`pipeline.lse_prescale`): a Q prescaled in the input dtype
shifted it by ~0.005 in bf16, so P = exp(scale S - LSE) was 0.995 and dV off by 1-2 ulps (flash-attn's
test_flash_attn_varlen_output, bf16, seqlen_q 239, seqlen_k 1, causal, local, D = 96).

dQ and dK are sums of scale P (dP - D) terms. With one visible key both references give exactly 0
(torch's softmax backward subtracts sum_j P dP = dP from dP itself), and so must ptofa: its D = rowsum(dO * O)
is the diagonal of the cube's dO O^T, summed in the order of the cube's dP = dO V^T (O = V there), so
dP - D is exactly 0 (`kernels/fa_bwd.py`). A D summed on the vectors in another order left f32 noise of
1e-6 (bf16) to 1e-5 (fp16), which flash-attn's test_flash_attn_varlen_output rejects where the input-dtype
reference's error is 0 (tests/test_flash_attn.py: dq error <= 3 x the reference's, no additive term).
"""

from __future__ import annotations

import math

import pytest
import torch

import ptofa
from ptofa.attention.backward import (BackwardBuffers, attention_backward, reference_backward,
                                      reference_varlen_backward, run_backward)
from ptofa.kernels.bwd_pipeline import BwdConfig, default_config
from ptofa.pipeline import ProblemShape
from ptofa.kernels.builtin_mods.window import window_mods

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def _rand(gen: torch.Generator, dtype: torch.dtype, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype).requires_grad_(True)


def _cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _check(out: torch.Tensor, ours: tuple[torch.Tensor, ...], exact: tuple[torch.Tensor, ...],
           low: tuple[torch.Tensor, ...], dtype: torch.dtype) -> None:
    """dQ, dK and dV bit for bit where the references agree (the fp64 gradient rounded to the input dtype
    equals the input-dtype one: dQ and dK are 0 there); exact zeros where nothing is seen."""
    for name, ours_g, exact_g, low_g in zip(("dQ", "dK", "dV"), ours, exact, low):
        rounded = exact_g.to(dtype)
        agree = rounded == low_g
        assert agree.float().mean() > 0.5, f"{name}: the shape was meant to make the references agree"
        wrong = (ours_g != rounded) & agree
        assert not wrong.any(), (f"{name} differs from the exactly rounded reference at {int(wrong.sum())} of "
                                 f"{int(agree.sum())} elements, by up to {(ours_g.double() - exact_g)[wrong].abs().max():.3g}")
    dq, dk, dv = ours
    assert not exact[0].any() and not exact[1].any(), "one visible key per row: the reference dQ and dK are 0"
    # Query rows that see no key (O = 0) and keys no row sees (dV = 0) get exact zeros.
    assert not dq[(out.detach() == 0).all(-1)].any()
    unseen = (exact[2] == 0).all(-1)
    assert not dk[unseen].any() and not dv[unseen].any()


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("window", [(-1, -1), (5, 0)], ids=["every_row_sees_the_key", "local_causal"])
def test_varlen_one_key_sequences(dt, deterministic, window) -> None:
    """The issue's shape: 239 query rows against one key (every row sees it, or causal with a local
    window: the last row only), beside a one-row sequence and a sequence without keys; GQA."""
    dtype, gen = DTYPES[dt], torch.Generator().manual_seed(43)
    q_lens, k_lens, heads, kv_heads, d = [239, 1, 3], [1, 1, 0], 4, 2, 96
    q = _rand(gen, dtype, sum(q_lens), heads, d)
    k, v = _rand(gen, dtype, sum(k_lens), kv_heads, d), _rand(gen, dtype, sum(k_lens), kv_heads, d)
    dout = torch.randn(sum(q_lens), heads, d, generator=gen).to(dtype)
    out = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens),
                                       causal=window[1] == 0, window_size=window, deterministic=deterministic,
                                       backend="sim")
    out.backward(dout)
    ref = reference_varlen_backward(q.detach(), k.detach(), v.detach(), dout, q_lens, k_lens, window=window)
    _check(out, (q.grad, k.grad, v.grad), ref.exact, ref.low, dtype)


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("s0, s1, window", [(130, 1, (-1, -1)), (70, 70, (0, 0)), (1, 1, (-1, -1))],
                         ids=["one_key", "diagonal", "one_query_one_key"])
def test_dense_one_visible_key(dt, deterministic, s0, s1, window) -> None:
    """flash_attn_func: one key for 130 rows (two Q blocks), the diagonal window (0, 0) (each row its
    own key, each key its own row), one query and one key."""
    dtype, gen = DTYPES[dt], torch.Generator().manual_seed(44)
    batch, heads, kv_heads, d = 2, 2, 1, 64
    q = _rand(gen, dtype, batch, s0, heads, d)
    k, v = _rand(gen, dtype, batch, s1, kv_heads, d), _rand(gen, dtype, batch, s1, kv_heads, d)
    dout = torch.randn(batch, s0, heads, d, generator=gen).to(dtype)
    out = ptofa.flash_attn_func(q, k, v, window_size=window, deterministic=deterministic, backend="sim")
    out.backward(dout)
    ref = reference_backward(q.detach(), k.detach(), v.detach(), dout, 1 / math.sqrt(d), window)
    _check(out, (q.grad, k.grad, v.grad), ref.exact, ref.low, dtype)


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
def test_two_d_chunks(deterministic) -> None:
    """D = 256: the cube splits K in two chunks, G and dP alike (chunk 0 rounded to f32, chunk 1 added), and
    dQ, dK stay exactly 0 with one visible key."""
    dtype, gen = torch.float16, torch.Generator().manual_seed(47)
    q = _rand(gen, dtype, 1, 70, 2, 256)
    k, v = _rand(gen, dtype, 1, 1, 1, 256), _rand(gen, dtype, 1, 1, 1, 256)
    dout = torch.randn(1, 70, 2, 256, generator=gen).to(dtype)
    out = ptofa.flash_attn_func(q, k, v, deterministic=deterministic, backend="sim")
    out.backward(dout)
    ref = reference_backward(q.detach(), k.detach(), v.detach(), dout, 1 / 16, (-1, -1))
    _check(out, (q.grad, k.grad, v.grad), ref.exact, ref.low, dtype)


@pytest.mark.parametrize("dq_block_q, dq_block_kv", [(128, 64), (64, 32), (32, 128)])
def test_dq_blocks_wider_or_narrower_than_the_key_tiles(dq_block_q, dq_block_kv) -> None:
    """G = dO O^T goes to the vectors in column bands of dq_block_kv (two where the Q block is twice as
    wide, the second one ragged here: 130 rows = 128 + 2) and D stays exact; D = 96 over two key tiles."""
    dtype, gen = torch.bfloat16, torch.Generator().manual_seed(46)
    batch, heads, kv_heads, s0, s1, d = 1, 2, 1, 130, 1, 96
    q = torch.randn(batch, s0, heads, d, generator=gen).to(dtype)
    k, v = (torch.randn(batch, s1, kv_heads, d, generator=gen).to(dtype) for _ in range(2))
    dout = torch.randn(batch, s0, heads, d, generator=gen).to(dtype)
    out, lse = ptofa.flash_attn_func(q, k, v, return_lse=True, backend="sim")
    config = BwdConfig(head=d, in_dtype="bf16", dq_block_q=dq_block_q, dq_block_kv=dq_block_kv)
    grads = BackwardBuffers.zeros(q, k)
    run_backward(config, ProblemShape(batch, heads, s0, s1, kv_heads), q, k, v, out, lse, dout, grads, d ** -0.5)
    ref = reference_backward(q, k, v, dout, d ** -0.5, (-1, -1))
    _check(out, (grads.dq, grads.dk, grads.dv), ref.exact, ref.low, dtype)


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
def test_f32_gradients_are_the_unrounded_accumulators(deterministic) -> None:
    """`grads_f32` (ring attention's steps) stores dQ, dK, dV as their f32 accumulators: rounded to the
    input dtype they are the default outputs bit for bit (the store's rounding is the only one), and
    they hold bits the input dtype does not (a caller adding them rounds the sum once). The atomic mode
    runs no post kernel: its f32 dQ accumulator is the output."""
    dtype, gen = torch.bfloat16, torch.Generator().manual_seed(45)
    q = _rand(gen, dtype, 1, 70, 4, 64)
    k, v = _rand(gen, dtype, 1, 50, 2, 64), _rand(gen, dtype, 1, 50, 2, 64)
    dout = torch.randn(1, 70, 4, 64, generator=gen).to(dtype)
    out, lse = ptofa.flash_attn_func(q, k, v, causal=True, return_lse=True, backend="sim")
    args = (q.detach(), k.detach(), v.detach(), out.detach(), lse, dout)
    rounded = attention_backward(*args, window=(-1, 0), deterministic=deterministic, backend="sim")
    wide = attention_backward(*args, window=(-1, 0), deterministic=deterministic, backend="sim", grads_f32=True)
    for name, low, f32 in zip(("dq", "dk", "dv"), rounded, wide):
        assert f32.dtype == torch.float32, name
        assert torch.equal(f32.to(dtype), low), f"{name}: the f32 output rounds to other values than the default's"
        assert (f32 != low.float()).any(), f"{name}: the f32 output was rounded already"
    kernels = default_config(64, "bf16", mods=window_mods(), atomic_dq=not deterministic, grads_f32=True).kernels
    assert kernels == (("dq", "dkdv") if deterministic else ("prep", "dkdv"))
