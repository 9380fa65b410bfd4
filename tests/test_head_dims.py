"""Every head dim 1..256 and a v head dim of its own (issue 32): the kernel widths and their rules,
`kernel_head`, forward and backward through `flash_attn_func` against the torch reference with the
accuracy rule at flash-attn's test head dims and the (Dv != D) pairs, packed varlen, a padded KV cache,
and `run_fa run --head-dim-v`."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

import ptofa
from ptofa.attention.backward import check_gradients, reference_backward
from ptofa.cli.main import main
from ptofa.kernels.bwd_pipeline import BwdConfig, default_config
from ptofa.launch.base import pad_heads
from ptofa.pipeline import SUPPORTED_HEAD, ConfigError, FAConfig, kernel_head
from ptofa.reference import check_accuracy, check_lse, reference_fa
from ptofa.kernels.builtin_mods.window import window_mods

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


# ---- widths and rules ---------------------------------------------------------------------


def test_kernel_widths():
    assert SUPPORTED_HEAD == (16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256)


@pytest.mark.parametrize("head, head_v, width", [
    (1, None, 16), (16, None, 16), (17, None, 32), (40, None, 48), (59, None, 64), (80, None, 80),
    (111, None, 112), (129, None, 160), (161, None, 192), (225, None, 256), (256, None, 256),
    (192, 128, 192), (128, 64, 128), (64, 200, 224), (59, 40, 64),
])
def test_kernel_head(head, head_v, width):
    assert kernel_head(head, head_v) == width


@pytest.mark.parametrize("head, head_v, message", [
    (0, None, "head dim: head_dim=0 must be an int in 1..256"),
    (257, None, "head dim: head_dim=257 must be an int in 1..256"),
    (64, 300, "head dim: head_dim_v=300 must be an int in 1..256"),
])
def test_kernel_head_range(head, head_v, message):
    with pytest.raises(ConfigError) as error:
        kernel_head(head, head_v)
    assert str(error.value) == message


@pytest.mark.parametrize("head", [72, 144, 200])  # not a multiple of 16; above 128 not a multiple of 32
def test_width_rule_names_the_numbers(head):
    with pytest.raises(ConfigError) as error:
        FAConfig(head=head)
    assert str(error.value).startswith(
        f"head dim: head={head} is not a kernel width: a multiple of 16 up to 128 (one D chunk) or of 32 up to 256 "
        f"(two D chunks of whole cube fractals), {SUPPORTED_HEAD}")
    with pytest.raises(ConfigError, match=rf"head dim: head={head} is not a kernel width; the backward supports"):
        BwdConfig(head=head)


@pytest.mark.parametrize("head", [d for d in SUPPORTED_HEAD if d not in (64, 96, 128, 192, 256)])
def test_new_widths_fit(head):
    """The widths off the tuned grid build forward (both dtypes, masked + LSE) and backward (both modes)."""
    for dtype in ("f16", "bf16"):
        config = FAConfig(head=head, in_dtype=dtype, mods=window_mods(), lse=True)
        assert config.d_chunk % 16 == 0 and config.d_split == (1 if head <= 128 else 2)
        for atomic in (False, True):
            assert default_config(head, dtype, mods=window_mods(), atomic_dq=atomic).head == head


def test_pad_heads_zero_columns():
    x = torch.randn(1, 3, 2, 59).half()
    (padded,) = pad_heads(64, x)
    assert padded.shape == (1, 3, 2, 64) and torch.equal(padded[..., :59], x)
    assert not padded[..., 59:].any()
    assert pad_heads(59, x)[0] is x


# ---- forward and backward against the reference ---------------------------------------------


def _inputs(d, dv, dtype, heads, kv_heads, s0=97, s1=150, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, s0, heads, d, generator=g).to(dtype)
    k = torch.randn(1, s1, kv_heads, d, generator=g).to(dtype)
    v = torch.randn(1, s1, kv_heads, dv, generator=g).to(dtype)
    dout = torch.randn(1, s0, heads, dv, generator=g).to(dtype)
    return q, k, v, dout


CASES = [
    # d, dv, dtype, causal, (heads, kv_heads), deterministic
    (32, 32, "f16", True, (2, 1), True),  # a new width, GQA
    (40, 40, "bf16", False, (2, 1), False),  # padded to 48
    (59, 59, "f16", False, (1, 1), False),  # padded to 64
    (80, 80, "bf16", True, (2, 1), True),
    (111, 111, "f16", True, (1, 1), True),  # padded to 112
    (160, 160, "bf16", False, (2, 1), True),  # two D chunks of 80
    (224, 224, "f16", True, (2, 1), False),
    (192, 128, "bf16", True, (2, 1), True),  # MLA's pair: V padded to 192
    (128, 64, "f16", False, (2, 1), False),
    (48, 72, "f16", True, (1, 1), True),  # Dv > D: Q and K padded to 80
]


@pytest.mark.parametrize("d, dv, dt, causal, heads, deterministic", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{'causal' if c[3] else 'full'}" for c in CASES])
def test_forward_backward(d, dv, dt, causal, heads, deterministic):
    q, k, v, dout = _inputs(d, dv, DTYPES[dt], *heads)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    # a config at the kernel width (the automatic one would rank tile sizes on the simulator first: slow)
    config = FAConfig(head=kernel_head(d, dv), tile_s1=128, qk_preload=2, in_dtype=dt, mods=window_mods(causal), lse=True)
    out, lse = ptofa.flash_attn_func(*leaves, causal=causal, deterministic=deterministic, return_lse=True,
                                     backend="sim", config=config)
    assert out.shape == (1, q.shape[1], heads[0], dv) and out.is_contiguous()
    window = (-1, 0) if causal else (-1, -1)
    ref = reference_fa(q, k, v, d ** -0.5, window)  # the default scale is 1 / sqrt(true D)
    acc = check_accuracy(out.detach().float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
    lse_acc = check_lse(lse, ref)
    assert lse_acc.passed, lse_acc.message
    out.backward(dout)
    grads = [x.grad for x in leaves]
    assert [tuple(g.shape) for g in grads] == [tuple(x.shape) for x in (q, k, v)]
    failed = {name: a.summary() for name, a in check_gradients(*grads, reference_backward(q, k, v, dout, None, window)
                                                               ).items() if not a.passed}
    assert not failed, failed


@pytest.mark.slow
def test_auto_config_padded():
    """The automatic config (the timing model's ranking at the kernel width) for a padded head dim."""
    q, k, v, _ = _inputs(59, 40, torch.float16, 2, 1, s0=70, s1=90)
    out = ptofa.flash_attn_func(q, k, v, causal=True, backend="sim")
    ref = reference_fa(q, k, v, 59 ** -0.5, (-1, 0))
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert out.shape == (1, 70, 2, 40) and acc.passed, acc.summary()


def test_varlen_packed_pair():
    """Packed varlen with (D, Dv) = (59, 40): forward and the per-sequence backward."""
    q, k, v, dout = _inputs(59, 40, torch.float16, 2, 1, s0=90, s1=90)
    q, k, v, dout = (x[0] for x in (q, k, v, dout))
    cu = torch.tensor([0, 33, 90], dtype=torch.int32)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = ptofa.flash_attn_varlen_func(*leaves, cu, cu, 57, 57, causal=True, backend="sim")
    assert out.shape == (90, 2, 40)
    out.backward(dout)
    for lo, hi in ((0, 33), (33, 90)):
        rows = slice(lo, hi)
        ref = reference_fa(q[None, rows], k[None, rows], v[None, rows], 59 ** -0.5, (-1, 0))
        acc = check_accuracy(out.detach()[None, rows].float(), ref.out32, ref.out_low)
        assert acc.passed, acc.summary()
        grads = [x.grad[None, rows] for x in leaves]
        accs = check_gradients(*grads, reference_backward(q[None, rows], k[None, rows], v[None, rows],
                                                          dout[None, rows], None, (-1, 0)))
        assert all(a.passed for a in accs.values()), {n: a.summary() for n, a in accs.items()}


def test_kvcache_padded_head_dim():
    """A KV cache of a head dim that is no kernel width (59): the append goes into the caller's cache,
    the kernel reads a zero-padded copy; Dv != D in a cache is refused."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 1, 2, 59, generator=g).half()
    k_cache, v_cache = (torch.randn(2, 200, 1, 59, generator=g).half() for _ in range(2))
    k_new, v_new = (torch.randn(2, 1, 1, 59, generator=g).half() for _ in range(2))
    lens = torch.tensor([37, 150], dtype=torch.int32)
    out = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens, causal=True,
                                        backend="sim")
    assert out.shape == (2, 1, 2, 59)
    for b, n in enumerate((38, 151)):
        assert torch.equal(k_cache[b, n - 1], k_new[b, 0])  # appended in place
        ref = reference_fa(q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n], 59 ** -0.5)
        acc = check_accuracy(out[b:b + 1].float(), ref.out32, ref.out_low)
        assert acc.passed, acc.summary()
    with pytest.raises(NotImplementedError, match=r"k_cache, v_cache: head dims D=59, Dv=40; a KV cache takes one"):
        ptofa.flash_attn_with_kvcache(q, k_cache, v_cache[..., :40], cache_seqlens=5, backend="sim")


def test_cli_run_head_dim_v():
    result = CliRunner().invoke(main, ["run", "--backend", "sim", "--head-dim", "59", "--head-dim-v", "40", "--s0",
                                       "70", "--s1", "90", "--heads", "2", "--kv-heads", "1", "--causal",
                                       "--backward", "--tile-s1", "128", "--qk-preload", "2"])
    assert result.exit_code == 0, result.output
    assert "head dims D=59, Dv=40: run on the kernel width 64" in result.output
    assert " pass " in result.output
    for name in ("dq", "dk", "dv"):
        assert f"{name}: pass" in result.output
