"""ptofa as a drop-in for flash-attn 2.x: its seven signatures exactly, positional calls binding as
flash-attn's do, the arguments ptofa refuses, and the KV-cache and varlen features flash-attn's callers
pass (rotary embedding, cache_batch_idx, cache_leftpad, a paged cache in varlen prefill), each against
a torch reference with the FlashAttention accuracy rule."""

from __future__ import annotations

import inspect
import math
import sys

import pytest
import torch

import ptofa
from ptofa.attention.backward import GradReference, check_gradients, reference_backward
from ptofa.attention.core import auto_config
from ptofa.launch.varlen import reference_varlen
from ptofa.reference import Reference, check_accuracy, check_lse, reference_fa

# flash-attn 2.x's parameter lists (flash_attn/flash_attn_interface.py, 2.6 to 2.8), as data: ptofa
# must take these names in this order with these defaults; its own extras are keyword-only after them.
_DENSE_TAIL = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
               ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False), ("return_attn_probs", False)]
_REQUIRED = inspect.Parameter.empty
FLASH_ATTN_SIGNATURES = {
    "flash_attn_func": [("q", _REQUIRED), ("k", _REQUIRED), ("v", _REQUIRED), *_DENSE_TAIL],
    "flash_attn_qkvpacked_func": [("qkv", _REQUIRED), *_DENSE_TAIL],
    "flash_attn_kvpacked_func": [("q", _REQUIRED), ("kv", _REQUIRED), *_DENSE_TAIL],
    "flash_attn_varlen_func": [("q", _REQUIRED), ("k", _REQUIRED), ("v", _REQUIRED), ("cu_seqlens_q", _REQUIRED),
                               ("cu_seqlens_k", _REQUIRED), ("max_seqlen_q", _REQUIRED), ("max_seqlen_k", _REQUIRED),
                               *_DENSE_TAIL, ("block_table", None)],
    "flash_attn_varlen_qkvpacked_func": [("qkv", _REQUIRED), ("cu_seqlens", _REQUIRED), ("max_seqlen", _REQUIRED),
                                         *_DENSE_TAIL],
    "flash_attn_varlen_kvpacked_func": [("q", _REQUIRED), ("kv", _REQUIRED), ("cu_seqlens_q", _REQUIRED),
                                        ("cu_seqlens_k", _REQUIRED), ("max_seqlen_q", _REQUIRED),
                                        ("max_seqlen_k", _REQUIRED), *_DENSE_TAIL],
    "flash_attn_with_kvcache": [("q", _REQUIRED), ("k_cache", _REQUIRED), ("v_cache", _REQUIRED), ("k", None),
                                ("v", None), ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
                                ("cache_batch_idx", None), ("cache_leftpad", None), ("block_table", None),
                                ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)), ("softcap", 0.0),
                                ("rotary_interleaved", True), ("alibi_slopes", None), ("num_splits", 0),
                                ("return_softmax_lse", False)],
}
# A fixed config for the dense calls: the automatic one would rank configs with the timing model first.
DENSE = auto_config(64, s1=96, masked=True, lse=True)


def _rand(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _accurate(out: torch.Tensor, ref: Reference) -> None:
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()


@pytest.mark.parametrize("name", sorted(FLASH_ATTN_SIGNATURES))
def test_signature_is_flash_attns(name) -> None:
    params = list(inspect.signature(getattr(ptofa, name)).parameters.values())
    positional = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert [(p.name, p.default) for p in positional] == FLASH_ATTN_SIGNATURES[name]
    extras = params[len(positional):]
    assert all(p.kind == p.KEYWORD_ONLY for p in extras), [(p.name, p.kind) for p in extras]
    assert "backend" in [p.name for p in extras]


def test_flash_attn_names_import_from_ptofa_as_flash_attn(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", ptofa)
    from flash_attn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                            flash_attn_varlen_func, flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
                            flash_attn_with_kvcache)

    from ptofa.attention import functional, serving

    imported = (flash_attn_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func, flash_attn_varlen_func,
                flash_attn_varlen_qkvpacked_func, flash_attn_varlen_kvpacked_func, flash_attn_with_kvcache)
    defined = (functional.flash_attn_func, functional.flash_attn_qkvpacked_func, functional.flash_attn_kvpacked_func,
               serving.flash_attn_varlen_func, serving.flash_attn_varlen_qkvpacked_func,
               serving.flash_attn_varlen_kvpacked_func, serving.flash_attn_with_kvcache)
    assert all(a is b for a, b in zip(imported, defined))
    assert set(FLASH_ATTN_SIGNATURES) <= set(dir(ptofa))


# --------------------------------------------------------------------------------------
# Positional calls bind as flash-attn's: each compared with the keyword call, numerically
# --------------------------------------------------------------------------------------


def _dense_inputs():
    return _rand(1, 64, 2, 64, seed=1), _rand(1, 96, 2, 64, seed=2), _rand(1, 96, 2, 64, seed=3)


def test_flash_attn_func_positional_dropout_is_not_the_scale() -> None:
    q, k, v = _dense_inputs()
    positional = ptofa.flash_attn_func(q, k, v, 0.0, backend="sim", config=DENSE)  # the call
    assert torch.equal(positional, ptofa.flash_attn_func(q, k, v, backend="sim", config=DENSE))
    _accurate(positional, reference_fa(q, k, v, 1 / 8))


@pytest.mark.parametrize("name", ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func"])
def test_dense_positional_binding(name) -> None:
    q, k, v = _dense_inputs()
    if name == "flash_attn_qkvpacked_func":
        k, v = k[:, :64], v[:, :64]
        tensors = (torch.stack((q, k, v), dim=2),)
    elif name == "flash_attn_kvpacked_func":
        tensors = (q, torch.stack((k, v), dim=2))
    else:
        tensors = (q, k, v)
    call = getattr(ptofa, name)
    out, lse, probs = call(*tensors, 0.0, 0.3, True, (-1, -1), 0.0, None, True, True, backend="sim", config=DENSE)
    keyword = call(*tensors, softmax_scale=0.3, causal=True, deterministic=True, return_attn_probs=True,
                   backend="sim", config=DENSE)
    assert probs is None and keyword[2] is None
    assert torch.equal(out, keyword[0]) and torch.equal(lse, keyword[1])
    ref = reference_fa(q, k, v, 0.3, (-1, 0))
    _accurate(out, ref)
    assert check_lse(lse, ref).passed


def _varlen_inputs():
    q_lens, k_lens = [30, 0, 34], [50, 7, 39]
    q = _rand(sum(q_lens), 2, 64, seed=4)
    k, v = _rand(sum(k_lens), 2, 64, seed=5), _rand(sum(k_lens), 2, 64, seed=6)
    return q, k, v, q_lens, k_lens


@pytest.mark.parametrize("name", ["flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
                                  "flash_attn_varlen_kvpacked_func"])
def test_varlen_positional_binding(name) -> None:
    q, k, v, q_lens, k_lens = _varlen_inputs()
    if name == "flash_attn_varlen_qkvpacked_func":
        k_lens = q_lens
        k, v = k[: sum(q_lens)], v[: sum(q_lens)]
        head = (torch.stack((q, k, v), dim=1), _cu(q_lens), max(q_lens))
    elif name == "flash_attn_varlen_kvpacked_func":
        head = (q, torch.stack((k, v), dim=1), _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens))
    else:
        head = (q, k, v, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens))
    tail = (None,) if name == "flash_attn_varlen_func" else ()  # block_table
    call = getattr(ptofa, name)
    out, lse, probs = call(*head, 0.0, 0.3, True, (-1, -1), 0.0, None, False, True, *tail, backend="sim")
    keyword = call(*head, softmax_scale=0.3, causal=True, return_attn_probs=True, backend="sim")
    assert probs is None and keyword[2] is None
    assert torch.equal(out, keyword[0]) and torch.equal(lse, keyword[1])
    ref = reference_varlen(q, k, v, q_lens, k_lens, 0.3, (-1, 0))
    _accurate(out, ref)
    assert check_lse(lse, ref).passed


def test_kvcache_positional_binding() -> None:
    """flash-attn's order: k, v right after the caches, then rotary_cos/sin, then cache_seqlens."""
    q, k_new, v_new = _rand(2, 3, 2, 64, seed=7), _rand(2, 3, 1, 64, seed=8), _rand(2, 3, 1, 64, seed=9)
    k_cache, v_cache = _rand(2, 256, 1, 64, seed=10), _rand(2, 256, 1, 64, seed=11)
    cos, sin = _rotary_tables(256, 16, seed=12)
    lens = torch.tensor([40, 200], dtype=torch.int32)
    caches = [(k_cache.clone(), v_cache.clone()) for _ in range(2)]
    out, lse = ptofa.flash_attn_with_kvcache(q, *caches[0], k_new, v_new, cos, sin, lens, None, None, None, 0.3, True,
                                             (-1, -1), 0.0, False, None, 1, True, backend="sim")
    keyword = ptofa.flash_attn_with_kvcache(q, *caches[1], k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin,
                                            cache_seqlens=lens, softmax_scale=0.3, causal=True,
                                            rotary_interleaved=False, num_splits=1, return_softmax_lse=True,
                                            backend="sim")
    assert torch.equal(out, keyword[0]) and torch.equal(lse, keyword[1])
    assert torch.equal(caches[0][0], caches[1][0]) and torch.equal(caches[0][1], caches[1][1])
    q_ro, k_rows, v_rows = _cache_reference_inputs(q, k_cache, v_cache, k_new, v_new, [40, 200], None, cos, sin,
                                                   interleaved=False, q_per_row=True)
    ref = _cache_reference(q_ro, k_rows, v_rows, [0, 0], [43, 203], 0.3, (-1, 0))
    _accurate(out, ref)
    assert check_lse(lse, ref).passed


# --------------------------------------------------------------------------------------
# What ptofa refuses: NotImplementedError naming the argument, in every call
# --------------------------------------------------------------------------------------


def _calls():
    q, k, v = _dense_inputs()
    vq, vk, vv, q_lens, k_lens = _varlen_inputs()
    varlen = (vq, vk, vv, _cu(q_lens), _cu(k_lens), 40, 50)
    cache = (q[:, :1], k[:, :64], v[:, :64])
    return {
        "flash_attn_func": lambda **kw: ptofa.flash_attn_func(q, k, v, backend="sim", **kw),
        "flash_attn_qkvpacked_func": lambda **kw: ptofa.flash_attn_qkvpacked_func(
            torch.stack((q, q, q), 2), backend="sim", **kw),
        "flash_attn_kvpacked_func": lambda **kw: ptofa.flash_attn_kvpacked_func(
            q, torch.stack((k, v), 2), backend="sim", **kw),
        "flash_attn_varlen_func": lambda **kw: ptofa.flash_attn_varlen_func(*varlen, backend="sim", **kw),
        "flash_attn_varlen_qkvpacked_func": lambda **kw: ptofa.flash_attn_varlen_qkvpacked_func(
            torch.stack((vq, vq, vq), 1), _cu(q_lens), 40, backend="sim", **kw),
        "flash_attn_varlen_kvpacked_func": lambda **kw: ptofa.flash_attn_varlen_kvpacked_func(
            vq, torch.stack((vk, vv), 1), _cu(q_lens), _cu(k_lens), 40, 50, backend="sim", **kw),
        "flash_attn_with_kvcache": lambda **kw: ptofa.flash_attn_with_kvcache(*cache, cache_seqlens=10, backend="sim",
                                                                              **kw),
    }


def test_dropout_with_splits_raises_not_implemented() -> None:
    for name, call in _calls().items():
        if not name.startswith("flash_attn_varlen"):
            continue  # every call runs dropout (tests/test_dropout*.py); a varlen one unsplit only
        with pytest.raises(NotImplementedError, match="^num_splits: 2 with dropout_p > 0"):
            call(dropout_p=0.1, num_splits=2)


@pytest.mark.parametrize("argument, value", [("softcap", -1.0), ("softcap", math.inf), ("softcap", "30"),
                                             ("alibi_slopes", torch.full((2,), 0.5, dtype=torch.float16)),
                                             ("alibi_slopes", torch.full((3,), 0.5)),
                                             ("alibi_slopes", torch.full((2, 2, 2), 0.5))])
def test_bad_softcap_and_alibi_slopes_name_the_argument(argument, value) -> None:
    """softcap and ALiBi run in the kernels (tests/test_scoremods.py); bad values are a ValueError naming them."""
    for call in _calls().values():
        with pytest.raises(ValueError, match=f"^{argument}: "):
            call(**{argument: value})


def test_kvcache_refusals_name_the_argument() -> None:
    q, cache = _rand(1, 1, 2, 64), _rand(4, 128, 1, 64)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    one = torch.tensor([1], dtype=torch.int32)
    cases = [
        (dict(block_table=table, cache_batch_idx=one), NotImplementedError, "^cache_batch_idx: "),
        (dict(block_table=table, cache_leftpad=one), NotImplementedError, "^cache_leftpad: "),
        (dict(cache_batch_idx=torch.tensor([4], dtype=torch.int32)), ValueError, r"cache_batch_idx: \[4\] must hold 1"),
        (dict(cache_leftpad=torch.tensor([11], dtype=torch.int32)), ValueError, r"cache_leftpad: \[11\] must hold"),
        (dict(rotary_cos=torch.ones(128, 16), rotary_sin=torch.ones(128, 16)), ValueError, "rotary_cos, rotary_sin: "),
        (dict(k=_rand(1, 1, 1, 64), v=_rand(1, 1, 1, 64), rotary_cos=torch.ones(10, 16), rotary_sin=torch.ones(10, 16)),
         ValueError, r"rotary_cos: 10 positions, but position 10 is rotated"),
        (dict(k=_rand(1, 1, 1, 64), v=_rand(1, 1, 1, 64), rotary_cos=torch.ones(128, 40),
              rotary_sin=torch.ones(128, 40)), ValueError, r"rotary_dim = 2 \* 40 = 80 must be in 1..headdim=64"),
        (dict(k=_rand(1, 1, 1, 64), v=_rand(1, 1, 1, 64), cache_seqlens=None), ValueError, "cache_seqlens: needed"),
    ]
    for kwargs, error, message in cases:
        before = cache.clone()
        kwargs.setdefault("cache_seqlens", 10)
        with pytest.raises(error, match=message):
            ptofa.flash_attn_with_kvcache(q, cache, cache, backend="sim", **kwargs)
        assert torch.equal(cache, before)


# --------------------------------------------------------------------------------------
# Packed calls: forward and (dense) backward against torch
# --------------------------------------------------------------------------------------


def test_qkvpacked_backward_matches_torch() -> None:
    q, k, v = (_rand(1, 64, 2, 64, seed=s) for s in (13, 14, 15))
    qkv = torch.stack((q, k, v), dim=2).requires_grad_(True)
    dout = _rand(1, 64, 2, 64, seed=16)
    out = ptofa.flash_attn_qkvpacked_func(qkv, causal=True, backend="sim", config=DENSE)
    out.backward(dout)
    _accurate(out.detach(), reference_fa(q, k, v, 1 / 8, (-1, 0)))
    dq, dk, dv = qkv.grad.unbind(2)
    for name, acc in check_gradients(dq, dk, dv, reference_backward(q, k, v, dout, 1 / 8, (-1, 0))).items():
        assert acc.passed, f"{name}: {acc.summary()}"


def test_kvpacked_gqa_backward_matches_torch() -> None:
    q, k, v = _rand(1, 64, 4, 64, seed=17), _rand(1, 96, 2, 64, seed=18), _rand(1, 96, 2, 64, seed=19)
    q.requires_grad_(True)
    kv = torch.stack((k, v), dim=2).requires_grad_(True)
    dout = _rand(1, 64, 4, 64, seed=20)
    out = ptofa.flash_attn_kvpacked_func(q, kv, 0.0, None, False, (16, 8), deterministic=True, backend="sim",
                                         config=DENSE)
    out.backward(dout)
    _accurate(out.detach(), reference_fa(q.detach(), k, v, 1 / 8, (16, 8)))
    dk, dv = kv.grad.unbind(2)
    grads = check_gradients(q.grad, dk, dv, reference_backward(q.detach(), k, v, dout, 1 / 8, (16, 8)))
    for name, acc in grads.items():
        assert acc.passed, f"{name}: {acc.summary()}"


def _varlen_grad_reference(q, k, v, dout, q_lens, k_lens, scale, window) -> GradReference:
    """`reference_backward` per sequence, packed like the inputs (zero where a sequence has no rows or keys)."""
    exact = [torch.zeros(t.shape, dtype=torch.float64) for t in (q, k, v)]
    low = [torch.zeros_like(t) for t in (q, k, v)]
    q0 = k0 = 0
    for q_len, k_len in zip(q_lens, k_lens):
        rows, keys = slice(q0, q0 + q_len), slice(k0, k0 + k_len)
        q0, k0 = q0 + q_len, k0 + k_len
        if q_len and k_len:
            ref = reference_backward(q[rows][None], k[keys][None], v[keys][None], dout[rows][None], scale, window)
            for grads, part in ((exact, ref.exact), (low, ref.low)):
                grads[0][rows], grads[1][keys], grads[2][keys] = (g[0] for g in part)
    return GradReference(tuple(exact), tuple(low))


@pytest.mark.parametrize("name", ["flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
                                  "flash_attn_varlen_kvpacked_func"])
def test_varlen_backward_matches_torch_per_sequence(name) -> None:
    q, k, v, q_lens, k_lens = _varlen_inputs()
    if name == "flash_attn_varlen_qkvpacked_func":
        k_lens, k, v = q_lens, k[: sum(q_lens)], v[: sum(q_lens)]
        leaves = [torch.stack((q, k, v), dim=1).requires_grad_(True)]
        out = ptofa.flash_attn_varlen_qkvpacked_func(leaves[0], _cu(q_lens), max(q_lens), causal=True, backend="sim")
        grads = lambda: leaves[0].grad.unbind(1)  # noqa: E731
    elif name == "flash_attn_varlen_kvpacked_func":
        leaves = [q.clone().requires_grad_(True), torch.stack((k, v), dim=1).requires_grad_(True)]
        out = ptofa.flash_attn_varlen_kvpacked_func(leaves[0], leaves[1], _cu(q_lens), _cu(k_lens), max(q_lens),
                                                    max(k_lens), causal=True, deterministic=True, backend="sim")
        grads = lambda: (leaves[0].grad, *leaves[1].grad.unbind(1))  # noqa: E731
    else:
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = ptofa.flash_attn_varlen_func(*leaves, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens), causal=True,
                                           backend="sim")
        grads = lambda: tuple(t.grad for t in leaves)  # noqa: E731
    dout = _rand(*q.shape, seed=22)
    out.backward(dout)
    _accurate(out.detach(), reference_varlen(q, k, v, q_lens, k_lens, 1 / 8, (-1, 0)))
    ref = _varlen_grad_reference(q, k, v, dout, q_lens, k_lens, 1 / 8, (-1, 0))
    for grad_name, acc in check_gradients(*grads(), ref).items():
        assert acc.passed, f"{grad_name}: {acc.summary()}"


def test_paged_varlen_and_kvcache_backward_raise_not_implemented() -> None:
    q = _rand(4, 2, 64, seed=23).requires_grad_(True)
    pages = _rand(2, 128, 2, 64, seed=24)
    out = ptofa.flash_attn_varlen_func(q, pages, pages, _cu([4]), _cu([200]), 4, 200,
                                       block_table=torch.tensor([[1, 0]], dtype=torch.int32), backend="sim")
    with pytest.raises(NotImplementedError, match="flash_attn_varlen_func with block_table: no backward"):
        out.float().sum().backward()
    out = ptofa.flash_attn_with_kvcache(q[None], pages, pages.clone(), cache_seqlens=100, backend="sim")
    with pytest.raises(NotImplementedError, match="flash_attn_with_kvcache: no backward"):
        out.float().sum().backward()


# --------------------------------------------------------------------------------------
# KV cache: rotary embedding, cache_batch_idx, cache_leftpad
# --------------------------------------------------------------------------------------


def _rotary_tables(positions: int, half: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    angle = torch.rand(positions, half, generator=torch.Generator().manual_seed(seed)) * 2 * math.pi
    return torch.cos(angle).half(), torch.sin(angle).half()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
            interleaved: bool) -> torch.Tensor:
    """Reference rotary embedding, written as x * cos + rotate_half(x) * sin with cos and sin widened to
    the rotary dim (the other dims pass through); fp32, rounded to x's dtype."""
    rd = 2 * cos.shape[1]
    c, s = cos.float()[positions], sin.float()[positions]  # [B, S, rd / 2]
    if interleaved:
        c, s = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
    else:
        c, s = torch.cat((c, c), -1), torch.cat((s, s), -1)
    xr = x[..., :rd].float()
    if interleaved:
        pairs = xr.unflatten(-1, (rd // 2, 2))
        half_turn = torch.stack((-pairs[..., 1], pairs[..., 0]), -1).flatten(-2)
    else:
        half_turn = torch.cat((-xr[..., rd // 2:], xr[..., :rd // 2]), -1)
    rotated = xr * c.unsqueeze(2) + half_turn * s.unsqueeze(2)
    return torch.cat((rotated.to(x.dtype), x[..., rd:]), -1)


def _cache_reference_inputs(q, k_cache, v_cache, k_new, v_new, lens, batch_idx, cos, sin, interleaved, q_per_row):
    """q as attended (rotated) and each sequence's cache row after the append (k rotated), as flash-attn's
    test builds them."""
    rows = list(range(q.shape[0])) if batch_idx is None else batch_idx
    k_rows, v_rows = k_cache[rows].clone(), v_cache[rows].clone()
    if cos is not None:
        starts = torch.tensor(lens).unsqueeze(1)
        k_new = _rotate(k_new, cos, sin, starts + torch.arange(k_new.shape[1]), interleaved)
        q_pos = starts + (torch.arange(q.shape[1]) if q_per_row else torch.zeros(q.shape[1], dtype=torch.long))
        q = _rotate(q, cos, sin, q_pos, interleaved)
    for b, n in enumerate(lens):
        k_rows[b, n:n + k_new.shape[1]], v_rows[b, n:n + v_new.shape[1]] = k_new[b], v_new[b]
    return q, k_rows, v_rows


def _cache_reference(q, k_rows, v_rows, firsts, ends, scale, window) -> Reference:
    """Per sequence `reference_fa` over its keys firsts[b]..ends[b]-1 (left padding dropped); O
    [B, S0, N, D], LSE [B, N, S0]."""
    parts = [reference_fa(q[b:b + 1], k_rows[b:b + 1, first:end], v_rows[b:b + 1, first:end], scale, window)
             for b, (first, end) in enumerate(zip(firsts, ends))]
    return Reference(*(torch.cat([getattr(p, f) for p in parts]) for f in ("out32", "out_low", "lse32", "lse_low")))


@pytest.mark.parametrize("interleaved, half, causal, window, leftpad, batch_idx", [
    (True, 32, True, (-1, -1), None, None),         # full rotary dim, causal: q rows at their own positions
    (False, 16, False, (-1, -1), None, None),       # GPT-NeoX, half the dims: every q row at cache_seqlens
    (True, 8, False, (20, 3), [17, 0], [2, 0]),     # local window with left padding and picked cache rows
    (False, 32, True, (-1, -1), [5, 60], [1, 3]),
])
def test_kvcache_rotary_leftpad_batch_idx(interleaved, half, causal, window, leftpad, batch_idx) -> None:
    batch, s0, new, heads, kv_heads, head = 2, 3, 3, 4, 2, 64
    lens = [40, 100]
    q, k_new, v_new = (_rand(batch, s, h, head, seed=30 + i) for i, (s, h) in
                       enumerate([(s0, heads), (new, kv_heads), (new, kv_heads)]))
    cache_batch = 4 if batch_idx else batch
    k_cache, v_cache = (_rand(cache_batch, 192, kv_heads, head, seed=s) for s in (33, 34))
    cos, sin = _rotary_tables(192, half, seed=35)
    local = causal or window != (-1, -1)
    q_ro, k_rows, v_rows = _cache_reference_inputs(q, k_cache, v_cache, k_new, v_new, lens, batch_idx, cos, sin,
                                                   interleaved, local)
    out, lse = ptofa.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=torch.tensor(lens),
        cache_batch_idx=None if batch_idx is None else torch.tensor(batch_idx, dtype=torch.int32),
        cache_leftpad=None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32), causal=causal,
        window_size=window, rotary_interleaved=interleaved, return_softmax_lse=True, backend="sim")
    rows = list(range(batch)) if batch_idx is None else batch_idx
    assert torch.equal(k_cache[rows], k_rows) and torch.equal(v_cache[rows], v_rows)  # rotated k appended in place
    firsts = leftpad or [0] * batch
    ref = _cache_reference(q_ro, k_rows, v_rows, firsts, [n + new for n in lens], 1 / 8,
                           (window[0], 0) if causal else window)
    _accurate(out, ref)
    result = check_lse(lse, ref)
    assert result.passed, result.message


def test_kvcache_leftpad_without_new_keys_masks_the_padding() -> None:
    """No append, no rotary: the keys left of cache_leftpad take no part (their values are huge)."""
    q, k_cache, v_cache = _rand(2, 1, 2, 64, seed=40), _rand(2, 256, 2, 64, seed=41), _rand(2, 256, 2, 64, seed=42)
    v_cache[0, :30] = 1000.0
    out = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor([200, 256]),
                                        cache_leftpad=torch.tensor([30, 0], dtype=torch.int32), backend="sim")
    _accurate(out, _cache_reference(q, k_cache, v_cache, [30, 0], [200, 256], 1 / 8, (-1, -1)))


# --------------------------------------------------------------------------------------
# Paged KV cache in varlen prefill
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal, page_size", [(True, 128), (False, 256)])
def test_varlen_paged_prefill(causal, page_size) -> None:
    q_lens, k_lens, heads, kv_heads, head = [3, 130, 0, 20], [300, 130, 5, 0], 4, 2, 64
    pages_per_seq = -(-max(k_lens) // page_size)
    pages = len(q_lens) * pages_per_seq + 1
    g = torch.Generator().manual_seed(50)
    block_table = torch.randperm(pages, generator=g)[: len(q_lens) * pages_per_seq].to(torch.int32)
    block_table = block_table.reshape(len(q_lens), pages_per_seq).contiguous()
    k_pages, v_pages = (_rand(pages, page_size, kv_heads, head, seed=s) for s in (51, 52))
    q = _rand(sum(q_lens), heads, head, seed=53)
    out, lse, probs = ptofa.flash_attn_varlen_func(q, k_pages, v_pages, _cu(q_lens), _cu(k_lens), max(q_lens),
                                                   max(k_lens), causal=causal, return_attn_probs=True,
                                                   block_table=block_table, backend="sim")
    # The reference reads each sequence's keys through its block-table row into one packed tensor.
    k_seq = [k_pages[block_table[b].long()].flatten(0, 1)[:n] for b, n in enumerate(k_lens)]
    v_seq = [v_pages[block_table[b].long()].flatten(0, 1)[:n] for b, n in enumerate(k_lens)]
    ref = reference_varlen(q, torch.cat(k_seq), torch.cat(v_seq), q_lens, k_lens, 1 / 8,
                           (-1, 0) if causal else (-1, -1))
    assert probs is None and out.shape == q.shape and lse.shape == (heads, sum(q_lens))
    _accurate(out, ref)
    assert check_lse(lse, ref).passed


def test_varlen_paged_prefill_rules() -> None:
    q, pages = _rand(4, 2, 64), _rand(3, 128, 2, 64)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seqlens_k: sequence 0 has 300 keys, .* \(2 pages of 128 = 256 keys\)"):
        ptofa.flash_attn_varlen_func(q, pages, pages, _cu([4]), _cu([300]), 4, 300, block_table=table, backend="sim")
    with pytest.raises(ValueError, match=r"block_table: row 0 uses page 5"):
        ptofa.flash_attn_varlen_func(q, pages, pages, _cu([4]), _cu([200]), 4, 200,
                                     block_table=torch.tensor([[0, 5]], dtype=torch.int32), backend="sim")
    with pytest.raises(ValueError, match=r"k, v \[pages, page_size, kv_heads, D\] with block_table"):
        ptofa.flash_attn_varlen_func(q, q, q, _cu([4]), _cu([4]), 4, 4, block_table=table, backend="sim")
