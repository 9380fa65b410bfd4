"""Autograd through ptofa's attention calls: the forward kernel saves O and LSE, the backward
kernels (`ptofa.attention.backward`) give dq, dk, dv.

Each call is checked against its own library's gradients: `flash_attn_func` (bottom-right
windows) against fp64 autograd through the reference attention, the SDPA-shaped call
(top-left `is_causal`) against torch's own `scaled_dot_product_attention` in fp64, both with
the FlashAttention accuracy rule per gradient (error against fp64 <= 2 x the same
computation's error in the input dtype + 1e-5).
"""

from __future__ import annotations

import pytest
import torch

import ptofa
from ptofa.launch import npu
from ptofa.attention.backward import check_gradients, reference_backward
from ptofa.reference import check_accuracy

F = torch.nn.functional


@pytest.fixture(autouse=True)
def without_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu, "npu_available", lambda: (False, "no NPU in this test"))


def leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def random(shape, dtype, g) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize(
    ("s0", "s1", "heads", "kv_heads", "window", "dtype"),
    [
        (100, 130, 2, 1, (-1, -1), torch.float16),
        (100, 130, 2, 1, (-1, 0), torch.float16),
        (130, 70, 4, 1, (-1, 0), torch.bfloat16),
        (90, 90, 2, 2, (24, 8), torch.float16),
    ],
)
def test_flash_attn_func_gradients_match_fp64_autograd(s0, s1, heads, kv_heads, window, dtype) -> None:
    g = torch.Generator().manual_seed(s0 + s1)
    q, k, v = leaves(random((1, s0, heads, 64), dtype, g), random((1, s1, kv_heads, 64), dtype, g),
                     random((1, s1, kv_heads, 64), dtype, g))
    dout = random(q.shape, dtype, g)
    out = ptofa.flash_attn_func(q, k, v, window_size=window, backend="sim")
    out.backward(dout)
    ref = reference_backward(q.detach(), k.detach(), v.detach(), dout, None, window)
    accuracy = check_gradients(q.grad, k.grad, v.grad, ref)
    assert all(acc.passed for acc in accuracy.values()), accuracy


def test_a_loss_on_out_and_lse_trains_out_only() -> None:
    """LSE is returned but not differentiable: the gradient is that of the loss on out alone."""
    g = torch.Generator().manual_seed(3)
    q, k, v = leaves(*(random((1, 64, 2, 64), torch.float16, g) for _ in range(3)))
    out, lse = ptofa.flash_attn_func(q, k, v, causal=True, return_lse=True, backend="sim")
    (out.float().sum() + lse.sum()).backward()
    ref = reference_backward(q.detach(), k.detach(), v.detach(), torch.ones_like(out), None, (-1, 0))
    assert all(acc.passed for acc in check_gradients(q.grad, k.grad, v.grad, ref).values())


@pytest.mark.parametrize(("length_q", "length_kv"), [(70, 130), (130, 70)])
def test_sdpa_gradients_match_torch_sdpa_with_top_left_causal(length_q: int, length_kv: int) -> None:
    g = torch.Generator().manual_seed(length_q)
    query = random((1, 4, length_q, 64), torch.float16, g)
    key, value = (random((1, 2, length_kv, 64), torch.float16, g) for _ in range(2))
    dout = random(query.shape, torch.float16, g)

    def grads(fn, dtype):
        ts = leaves(*(t.to(dtype) for t in (query, key, value)))
        fn(*ts, is_causal=True, enable_gqa=True).backward(dout.to(dtype))
        return [t.grad for t in ts]

    exact = grads(F.scaled_dot_product_attention, torch.float64)
    low = grads(F.scaled_dot_product_attention, torch.float16)
    ours = grads(lambda *a, **kw: ptofa.scaled_dot_product_attention(*a, **kw, backend="sim"), torch.float16)
    for name, o, e, lo in zip(("dq", "dk", "dv"), ours, exact, low):
        acc = check_accuracy(o, e, lo)
        assert acc.passed, (name, acc)


def test_a_wrong_backward_fails_the_same_check() -> None:
    """The check above can fail: gradients of a different scale do not pass it."""
    g = torch.Generator().manual_seed(5)
    q, k, v = leaves(*(random((1, 64, 2, 64), torch.float16, g) for _ in range(3)))
    dout = random(q.shape, torch.float16, g)
    ptofa.flash_attn_func(q, k, v, softmax_scale=0.3, backend="sim").backward(dout)
    ref = reference_backward(q.detach(), k.detach(), v.detach(), dout, None, (-1, -1))
    assert not all(acc.passed for acc in check_gradients(q.grad, k.grad, v.grad, ref).values())


def test_compiled_module_trains_like_eager() -> None:
    """torch.compile (aot_eager) traces forward and backward of the op; same gradients as eager."""

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(64, 64, dtype=torch.float16)

        def forward(self, q, k, v):
            return ptofa.flash_attn_func(self.proj(q), k, v, causal=True, backend="sim").float().square().sum()

    g = torch.Generator().manual_seed(7)
    q, k, v = (random((1, 48, 2, 64), torch.float16, g) for _ in range(3))
    torch.manual_seed(0)
    model = Tiny()
    model(q, k, v).backward()
    eager = model.proj.weight.grad.clone()
    model.proj.weight.grad = None
    torch.compile(model, fullgraph=True, backend="aot_eager")(q, k, v).backward()
    assert torch.isfinite(eager).all() and eager.abs().sum() > 0
    assert torch.equal(model.proj.weight.grad, eager)


def test_backward_op_schema_and_fake() -> None:
    from ptofa.attention.ops import flash_attn_bwd

    g = torch.Generator().manual_seed(9)
    q, out, dout = (random((1, 40, 2, 64), torch.float16, g) for _ in range(3))
    k, v = (random((1, 56, 1, 64), torch.float16, g) for _ in range(2))
    lse = torch.randn(1, 2, 40, generator=g)
    torch.library.opcheck(flash_attn_bwd, (q, k, v, out, lse, dout, 0.125, True, 56 + 40, 0, "sim"),
                          test_utils=("test_schema", "test_faketensor"))


def test_flash_attn_func_deterministic_false_runs_the_atomic_backward(monkeypatch) -> None:
    """deterministic=False reaches the atomic-add dQ mode; both modes pass the rule."""
    from ptofa.attention import backward

    modes = []
    real = backward.run_backward
    monkeypatch.setattr(backward, "run_backward", lambda config, *a, **kw: modes.append(config.atomic_dq)
                        or real(config, *a, **kw))
    g = torch.Generator().manual_seed(11)
    q, k, v = leaves(random((1, 80, 2, 64), torch.float16, g), random((1, 100, 1, 64), torch.float16, g),
                     random((1, 100, 1, 64), torch.float16, g))
    dout = random(q.shape, torch.float16, g)
    ref = reference_backward(q.detach(), k.detach(), v.detach(), dout, None, (-1, 0))
    for deterministic in (True, False):
        for t in (q, k, v):
            t.grad = None
        ptofa.flash_attn_func(q, k, v, causal=True, backend="sim", deterministic=deterministic).backward(dout)
        assert all(acc.passed for acc in check_gradients(q.grad, k.grad, v.grad, ref).values()), deterministic
    assert modes == [False, True]
