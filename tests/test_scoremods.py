"""Softcapping and ALiBi computed in the kernels (`kernels/scoremods.py`), forward and backward,
against the independent torch reference (`reference.modify_scores`, `reference.alibi_bias`) with
the FlashAttention accuracy rule; the tanh composed from exp against torch.tanh; the switches'
legality, arguments and catalog entries."""

from __future__ import annotations

import math

import pytest
import torch

import ptofa
from ptofa.attention.backward import attention_backward, check_gradients, reference_backward
from ptofa.attention.core import run_attention
from ptofa.kernels import argspec
from ptofa.kernels.bwd_pipeline import BwdConfig, entry_args as bwd_entry_args
from ptofa.kernels.builtin_mods.alibi import Alibi
from ptofa.kernels.builtin_mods.softcap import Softcap
from ptofa.kernels.catalog import kernels
from ptofa.pipeline import ConfigError, FAConfig
from ptofa.reference import alibi_bias, check_accuracy, check_lse, modify_scores, reference_fa
from ptofa.kernels.builtin_mods.window import window_mods

SOFTCAP, ALIBI = (Softcap(),), (Alibi(),)  # the built-in mods of a call (softcap first)


def _rand(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _slopes(*shape, seed=9):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 0.5 + 0.05


def _config(dtype: torch.dtype = torch.float16, **switches) -> FAConfig:
    """A fixed small kernel (no timing-model ranking or split probes: the tests stay short)."""
    return FAConfig(head=64, tile_s1=128, qk_preload=2, in_dtype="f16" if dtype == torch.float16 else "bf16", lse=True,
                    **switches)


def _cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


# --------------------------------------------------------------------------------------
# The tanh composed from exp
# --------------------------------------------------------------------------------------

TANH_ABS_BOUND = 2.4e-7  # 2 ulp of 1.0 in f32 (2^-22); the measured maximum is 1.8e-7


def test_kernel_tanh_error_bound_over_a_dense_grid() -> None:
    """The forward kernel's softcapped score, read back as LSE: one key of K = e_0 and Q rows
    (x, 0, ..., 0) give the score x (scale 1), and with one key LSE = the capped score exactly
    (m + ln 1). softcap = 1 makes it tanh(x), computed by the kernel's op sequence on the
    simulator; compared with torch.tanh in fp64 over 4096 fp16 points in [-12, 12] (1024 of them
    in [-0.01, 0.01]; the tails where tanh saturates included)."""
    rows, heads, d = 1024, 4, 64
    grid = torch.cat([torch.linspace(-12, 12, rows * heads - 1024), torch.linspace(-0.01, 0.01, 1024)]).half()
    q = torch.zeros(1, rows, heads, d, dtype=torch.float16)
    q[0, :, :, 0] = grid.reshape(rows, heads)
    k = torch.zeros(1, 1, 1, d, dtype=torch.float16)
    k[0, 0, 0, 0] = 1.0
    v = _rand(1, 1, 1, d)
    _, lse = run_attention(q, k, v, scale=1.0, return_lse=True, backend="sim", softcap=1.0,
                           config=_config(mods=SOFTCAP))
    x = q[0, :, :, 0].double().T  # [heads, rows], as LSE is [B, N, S0]
    err = (lse[0].double() - torch.tanh(x)).abs()
    assert err.max().item() <= TANH_ABS_BOUND, f"max |tanh error| = {err.max().item():.3g} at x = {x.flatten()[err.argmax()]}"
    assert torch.equal(lse[0][x.abs() > 9.1], torch.sign(x[x.abs() > 9.1]).float())  # saturated exactly


# --------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------

FWD_CASES = {
    "softcap": dict(softcap=2.0),
    "softcap_causal": dict(softcap=5.0, causal=True),
    "alibi_heads": dict(alibi=(4,)),
    "alibi_batch_heads_causal": dict(alibi=(2, 4), causal=True),
    "alibi_window": dict(alibi=(4,), window=(40, 7)),
    "both_window": dict(softcap=3.0, alibi=(2, 4), window=(60, 0)),
}


@pytest.mark.parametrize("name", FWD_CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_forward_against_reference(name: str, dtype: torch.dtype) -> None:
    case = FWD_CASES[name]
    b, s0, s1, heads, kv_heads, d = 2, 150, 200, 4, 2, 64  # GQA, ragged tiles
    q, k, v = _rand(b, s0, heads, d, seed=1, dtype=dtype), _rand(b, s1, kv_heads, d, seed=2, dtype=dtype), \
        _rand(b, s1, kv_heads, d, seed=3, dtype=dtype)
    slopes = _slopes(*case["alibi"]) if "alibi" in case else None
    softcap = case.get("softcap", 0.0)
    window = (-1, 0) if case.get("causal") else case.get("window", (-1, -1))
    config = _config(dtype, mods=SOFTCAP * (softcap > 0) + ALIBI * (slopes is not None) + window_mods(window != (-1, -1)))
    out, lse = ptofa.flash_attn_func(q, k, v, softcap=softcap, alibi_slopes=slopes, causal=case.get("causal", False),
                                     window_size=case.get("window", (-1, -1)), return_lse=True, backend="sim",
                                     config=config)
    ref = reference_fa(q, k, v, 1 / math.sqrt(d), window=window, softcap=softcap, alibi_slopes=slopes)
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
    assert check_lse(lse, ref).passed, check_lse(lse, ref).message
    plain = reference_fa(q, k, v, 1 / math.sqrt(d), window=window)  # the modification changes the result
    assert not check_accuracy(out.float(), plain.out32, plain.out_low).passed


def test_alibi_batch_slopes_differ_per_sequence() -> None:
    """[B, N] slopes: each sequence its own; the result is not the one of sequence 0's slopes for all."""
    q, k, v = _rand(2, 64, 2, 64, seed=4), _rand(2, 96, 2, 64, seed=5), _rand(2, 96, 2, 64, seed=6)
    slopes = torch.tensor([[0.5, 0.25], [0.03, 0.9]])
    out = ptofa.flash_attn_func(q, k, v, alibi_slopes=slopes, backend="sim", config=_config(mods=ALIBI))
    ref = reference_fa(q, k, v, 1 / 8, alibi_slopes=slopes)
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed
    shared = reference_fa(q, k, v, 1 / 8, alibi_slopes=slopes[0])
    assert not check_accuracy(out.float(), shared.out32, shared.out_low).passed


def test_alibi_bias_reference_is_flash_attn_s_definition() -> None:
    """-slope * |i + S1 - S0 - j|, written out for a 3 x 5 case."""
    bias = alibi_bias(torch.tensor([0.5]), 1, 1, 3, 5)[0, 0]
    expect = torch.tensor([[-1.0, -0.5, 0.0, -0.5, -1.0], [-1.5, -1.0, -0.5, 0.0, -0.5], [-2.0, -1.5, -1.0, -0.5, 0.0]])
    assert torch.equal(bias, expect)


def test_varlen_each_sequence_with_its_own_lengths() -> None:
    """Varlen prefill with softcap and [B, N] slopes: bottom-right ALiBi per sequence (S1 - S0 of its own)."""
    q_lens, k_lens = [30, 0, 70], [50, 7, 90]
    q, k, v = _rand(sum(q_lens), 4, 64, seed=7), _rand(sum(k_lens), 2, 64, seed=8), _rand(sum(k_lens), 2, 64, seed=9)
    slopes = _slopes(3, 4)
    out = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), 70, 90, causal=True, softcap=4.0,
                                       alibi_slopes=slopes, backend="sim")
    q0 = k0 = 0
    for b, (ql, kl) in enumerate(zip(q_lens, k_lens)):
        if ql:
            ref = reference_fa(q[q0:q0 + ql][None], k[k0:k0 + kl][None], v[k0:k0 + kl][None], 1 / 8, window=(-1, 0),
                               softcap=4.0, alibi_slopes=slopes[b])
            acc = check_accuracy(out[q0:q0 + ql][None].float(), ref.out32, ref.out_low)
            assert acc.passed, f"sequence {b}: {acc.summary()}"
        q0, k0 = q0 + ql, k0 + kl


def test_kvcache_with_alibi_and_softcap() -> None:
    """Decode against a contiguous cache (GQA: packing turns off for ALiBi), with new keys appended."""
    b, heads, kv_heads, d, cache_len = 2, 4, 2, 64, 192
    q = _rand(b, 1, heads, d, seed=10)
    k_cache, v_cache = _rand(b, cache_len, kv_heads, d, seed=11), _rand(b, cache_len, kv_heads, d, seed=12)
    k_new, v_new = _rand(b, 1, kv_heads, d, seed=13), _rand(b, 1, kv_heads, d, seed=14)
    lens = torch.tensor([100, 37])
    slopes = _slopes(b, heads)
    out = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens, causal=True,
                                        softcap=10.0, alibi_slopes=slopes, backend="sim")
    for i, n in enumerate((lens + 1).tolist()):
        ref = reference_fa(q[i:i + 1], k_cache[i:i + 1, :n], v_cache[i:i + 1, :n], 1 / 8, window=(-1, 0),
                           softcap=10.0, alibi_slopes=slopes[i])
        acc = check_accuracy(out[i:i + 1].float(), ref.out32, ref.out_low)
        assert acc.passed, f"sequence {i}: {acc.summary()}"
    with pytest.raises(NotImplementedError, match="^alibi_slopes: "):
        ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, alibi_slopes=slopes, pack_gqa=True,
                                      backend="sim")


# --------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------

BWD_CASES = {
    "softcap": dict(softcap=2.0),
    "softcap_causal_atomic": dict(softcap=5.0, window=(-1, 0), deterministic=False),
    "alibi_heads_causal": dict(alibi=(4,), window=(-1, 0)),
    "alibi_batch_heads_atomic": dict(alibi=(1, 4), deterministic=False),
    "both_window": dict(softcap=3.0, alibi=(4,), window=(50, 10)),
}


@pytest.mark.parametrize("name", BWD_CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_backward_against_reference(name: str, dtype: torch.dtype) -> None:
    case = BWD_CASES[name]
    b, s0, s1, heads, kv_heads, d = 1, 100, 130, 4, 2, 64
    q, k, v = _rand(b, s0, heads, d, seed=1, dtype=dtype), _rand(b, s1, kv_heads, d, seed=2, dtype=dtype), \
        _rand(b, s1, kv_heads, d, seed=3, dtype=dtype)
    dout = _rand(b, s0, heads, d, seed=4, dtype=dtype)
    slopes = _slopes(*case["alibi"]) if "alibi" in case else None
    softcap, window = case.get("softcap", 0.0), case.get("window", (-1, -1))
    mods = dict(softcap=softcap, alibi_slopes=slopes)
    masked = window != (-1, -1)
    config = _config(dtype, mods=SOFTCAP * (softcap > 0) + ALIBI * (slopes is not None) + window_mods(masked))
    out, lse = ptofa.flash_attn_func(q, k, v, window_size=window, return_lse=True, backend="sim", config=config, **mods)
    grads = attention_backward(q, k, v, out, lse, dout, window=window if masked else None, backend="sim",
                               deterministic=case.get("deterministic", True), **mods)
    ref = reference_backward(q, k, v, dout, window=window, **mods)
    for grad, acc in check_gradients(*grads, ref).items():
        assert acc.passed, f"{grad}: {acc.summary()}"
    plain = reference_backward(q, k, v, dout, window=window)
    assert not all(acc.passed for acc in check_gradients(*grads, plain).values())


def test_autograd_through_flash_attn_func() -> None:
    """The custom op saves the slopes and softcap for its backward (torch autograd); the automatic
    config (timing-model ranking, split decision) with the switches added."""
    q, k, v = (_rand(1, 64, 2, 64, seed=s).requires_grad_(True) for s in (20, 21, 22))
    slopes = _slopes(2)
    out = ptofa.flash_attn_func(q, k, v, causal=True, softcap=3.0, alibi_slopes=slopes, backend="sim")
    dout = _rand(1, 64, 2, 64, seed=23)
    out.backward(dout)
    ref = reference_backward(q.detach(), k.detach(), v.detach(), dout, window=(-1, 0), softcap=3.0, alibi_slopes=slopes)
    for grad, acc in check_gradients(q.grad, k.grad, v.grad, ref).items():
        assert acc.passed, f"{grad}: {acc.summary()}"


def test_varlen_backward_per_sequence_slopes() -> None:
    q_lens, k_lens = [40, 70], [60, 70]
    q = _rand(sum(q_lens), 2, 64, seed=30).requires_grad_(True)
    k, v = (_rand(sum(k_lens), 2, 64, seed=s).requires_grad_(True) for s in (31, 32))
    slopes = _slopes(2, 2)
    out = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), 70, 70, causal=True, softcap=6.0,
                                       alibi_slopes=slopes, backend="sim")
    dout = _rand(sum(q_lens), 2, 64, seed=33)
    out.backward(dout)
    q0 = k0 = 0
    for i, (ql, kl) in enumerate(zip(q_lens, k_lens)):
        rows, keys = slice(q0, q0 + ql), slice(k0, k0 + kl)
        ref = reference_backward(q.detach()[rows][None], k.detach()[keys][None], v.detach()[keys][None],
                                 dout[rows][None], window=(-1, 0), softcap=6.0, alibi_slopes=slopes[i])
        for grad, acc in check_gradients(q.grad[rows][None], k.grad[keys][None], v.grad[keys][None], ref).items():
            assert acc.passed, f"sequence {i} {grad}: {acc.summary()}"
        q0, k0 = q0 + ql, k0 + kl


# --------------------------------------------------------------------------------------
# Switches: legality, arguments, catalog
# --------------------------------------------------------------------------------------


def test_switch_legality() -> None:
    with pytest.raises(ConfigError, match="^score modification: "):
        FAConfig(mods=SOFTCAP, softmax_dtype="f16")
    with pytest.raises(ConfigError, match="^modification objects: mods=alibi read a row's head"):
        FAConfig(mods=ALIBI, varlen=True, gqa_pack=True)
    FAConfig(mods=SOFTCAP, varlen=True, gqa_pack=True)  # softcap is per score: packing is fine
    with pytest.raises(ConfigError, match="holds a built-in mod twice"):
        FAConfig(mods=SOFTCAP + SOFTCAP)


def test_arguments_come_from_argspec() -> None:
    names = [p.name for p in argspec.host_params(FAConfig(mods=SOFTCAP + ALIBI))]
    assert names[-4:] == ["softcap", "softcap_rcp2", "alibi_slopes", "alibi_stride"]  # (the mods' order)
    assert "softcap" not in [p.name for p in argspec.host_params(FAConfig())]
    args = dict(bwd_entry_args(BwdConfig(mods=SOFTCAP + ALIBI), "dkdv"))
    assert args["alibi_slopes"] == "!pto.ptr<f32>" and args["softcap_rcp2"] == "f32" and args["alibi_stride"] == "i64"


def test_catalog_has_the_switches_forward_and_backward() -> None:
    names = [k.name for k in kernels()]
    for word in ("softcap", "alibi"):
        assert any(n.startswith("fa_d") and word in n for n in names), word
        assert any(n.startswith("fa_bwd_dq") and word in n for n in names), word
        assert any(n.startswith("fa_bwd_dkdv") and word in n for n in names), word
    assert len(names) == len(set(names))


def test_builtin_mods_come_back_from_json_and_leave_the_others_names() -> None:
    """A config's JSON (the custom op's `config` argument, the kernel cache's key) brings the built-in mods
    back as objects; their names are unprefixed and the other mods keep `mod<i>_` counting only themselves."""
    from ptofa.attention.ops import config_from_json
    from ptofa.kernels.builtin_mods.registry import revive
    from ptofa.kernels.scoremods import Sinks
    from ptofa.pipeline import mod_prefixes

    config = FAConfig(mods=SOFTCAP + ALIBI + window_mods(), lse=True, in_dtype="bf16")
    assert config_from_json(config.json_text) == config and config_from_json(config.json_text).mods == SOFTCAP + ALIBI + window_mods()
    assert mod_prefixes((Softcap(), Sinks(), Alibi(), Sinks())) == ["", "mod0_", "", "mod1_"]
    with pytest.raises(NotImplementedError, match="do not come back from JSON"):
        revive([{"name": "score_mod"}])


def test_builtin_mods_reference_is_flash_attn_s_definition() -> None:
    """Each built-in mod's torch reference (`Mod.reference`, broadcast index tensors) is the dense
    reference's flash-attn definition (`reference.modify_scores`, `reference.alibi_bias`)."""
    g = torch.Generator().manual_seed(3)
    batch, heads, s0, s1 = 2, 3, 5, 7
    scores = torch.randn(batch, heads, s0, s1, generator=g, dtype=torch.float64) * 4
    b, h = torch.arange(batch)[:, None, None, None], torch.arange(heads)[None, :, None, None]
    q_idx, kv_idx = torch.arange(s0)[None, None, :, None], torch.arange(s1)[None, None, None, :]
    capped = Softcap().reference(scores, b, h, q_idx, kv_idx, {"softcap": 2.5})
    assert torch.allclose(capped, modify_scores(scores, 2.5))
    for slopes in (_slopes(heads).double(), _slopes(batch, heads).double()):
        biased = Alibi().reference(scores, b, h, q_idx, kv_idx, {"alibi_slopes": slopes, "s0": s0, "s1": s1})
        assert torch.allclose(biased, scores + alibi_bias(slopes, batch, heads, s0, s1, torch.float64))
