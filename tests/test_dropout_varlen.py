"""Dropout in the packed and varlen calls and flash-attn's S_dmask (`ptofa/kernels/dropout.py`,
`ptofa/attention/attn_probs.py`): each packed sequence's mask is batch b's at its own positions
(`packed_keep_masks`), forward and backward in both modes against torch references built from the
host replica's masks; the keep rate and 1 / (1 - p) scaling measured on a varlen call's output;
torch.manual_seed reproducing a varlen call; and S_dmask as flash-attn's tests read it: its sign
the kernel's mask (the reference built from `S_dmask >= 0` is the kernel's output), its blocks
normalized by exp(M_J - LSE) the probabilities."""

from __future__ import annotations

import math

import pytest
import torch

import ptofa
from ptofa.attention.attn_probs import flash_block_n
from ptofa.attention.backward import check_gradients, reference_backward, reference_varlen_backward
from ptofa.kernels.dropout import keep_mask, keep_probability, packed_keep_masks
from ptofa.launch.varlen import reference_varlen
from ptofa.reference import alibi_bias, check_accuracy, reference_fa, visible_mask


def _rand(*shape, seed: int, dtype=torch.float16) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _drawn(seed: int) -> tuple[int, int]:
    """The (seed, offset) a call draws right after torch.manual_seed(seed) (`core.dropout_seed_offset`)."""
    torch.manual_seed(seed)
    return tuple(torch.randint(-2**31, 2**31, (2,), dtype=torch.int64).tolist())


def _accurate(out: torch.Tensor, ref) -> bool:
    return check_accuracy(out.detach().float(), ref.out32, ref.out_low).passed


def test_packed_masks_are_the_dense_batches() -> None:
    """Sequence b's mask is batch b's of a dense call at its own positions, wherever it lies in the packing."""
    q_lens, k_lens = [5, 0, 70, 33], [9, 12, 0, 140]
    masks = packed_keep_masks(17, -4, q_lens, k_lens, 3, 0.4)
    dense = keep_mask(17, -4, 4, 3, 70, 140, 0.4)
    for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        assert masks[b].shape == (3, q_len, k_len)
        assert torch.equal(masks[b], dense[b, :, :q_len, :k_len])
    assert torch.equal(keep_mask(17, -4, 4, 3, 70, 140, 0.4, range(2, 4)), dense[2:])


# (q_lens, k_lens, heads, kv_heads, head, window): empty sequences, ragged tiles, GQA, several Q blocks
VARLEN = {
    "causal_gqa": ([70, 0, 130], [90, 40, 150], 2, 1, 64, (-1, 0)),
    "window_d128": ([200, 17], [180, 60], 2, 2, 128, (30, 5)),
    "full_d96": ([33, 129], [257, 20], 3, 1, 96, (-1, -1)),
}


@pytest.mark.parametrize("name", VARLEN)
@pytest.mark.parametrize("dtype, deterministic", [(torch.float16, True), (torch.bfloat16, False)])
def test_varlen_forward_and_backward_equal_the_replica_masks(name: str, dtype: torch.dtype, deterministic: bool) -> None:
    """flash_attn_varlen_func with dropout: O against the per-sequence reference with the replica's masks
    (and not with another seed's), then dq, dk, dv of the backward kernels (deterministic or atomic dQ)
    against torch autograd through the same masks."""
    q_lens, k_lens, heads, kv_heads, d, window = VARLEN[name]
    q = _rand(sum(q_lens), heads, d, seed=1, dtype=dtype).requires_grad_()
    k = _rand(sum(k_lens), kv_heads, d, seed=2, dtype=dtype).requires_grad_()
    v = _rand(sum(k_lens), kv_heads, d, seed=3, dtype=dtype).requires_grad_()
    dout = _rand(sum(q_lens), heads, d, seed=4, dtype=dtype)
    p = 0.2
    torch.manual_seed(21)
    out = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens), p,
                                       window_size=window, deterministic=deterministic, backend="sim")
    seed, offset = _drawn(21)
    masks = packed_keep_masks(seed, offset, q_lens, k_lens, heads, p)
    scale = 1 / math.sqrt(d)
    ref = reference_varlen(q.detach(), k.detach(), v.detach(), q_lens, k_lens, scale, window, dropout=(masks, p))
    assert _accurate(out, ref)
    other = packed_keep_masks(seed + 1, offset, q_lens, k_lens, heads, p)
    assert not _accurate(out, reference_varlen(q.detach(), k.detach(), v.detach(), q_lens, k_lens, scale, window,
                                               dropout=(other, p)))
    out.backward(dout)
    grads = reference_varlen_backward(q, k, v, dout, q_lens, k_lens, window=window, dropout=(masks, p))
    acc = check_gradients(q.grad, k.grad, v.grad, grads)
    assert all(a.passed for a in acc.values()), {n: a.summary() for n, a in acc.items()}
    wrong = check_gradients(q.grad, k.grad, v.grad, reference_varlen_backward(q, k, v, dout, q_lens, k_lens,
                                                                              window=window, dropout=(other, p)))
    assert not any(a.passed for a in wrong.values())


@pytest.mark.parametrize("packing", ["qkv", "kv"])
def test_varlen_packed_calls_drop_the_same_entries(packing: str) -> None:
    """flash_attn_varlen_qkvpacked_func / _kvpacked_func draw and apply the mask of flash_attn_varlen_func."""
    lens = [40, 90]
    qkv = _rand(sum(lens), 3, 2, 64, seed=5, dtype=torch.bfloat16)
    q, k, v = qkv.unbind(1)
    torch.manual_seed(8)
    if packing == "qkv":
        packed = ptofa.flash_attn_varlen_qkvpacked_func(qkv, _cu(lens), max(lens), 0.5, causal=True, backend="sim")
    else:
        packed = ptofa.flash_attn_varlen_kvpacked_func(q, qkv[:, 1:], _cu(lens), _cu(lens), max(lens), max(lens), 0.5,
                                                       causal=True, backend="sim")
    torch.manual_seed(8)
    plain = ptofa.flash_attn_varlen_func(q, k, v, _cu(lens), _cu(lens), max(lens), max(lens), 0.5, causal=True,
                                         backend="sim")
    assert torch.equal(packed, plain)


@pytest.mark.parametrize("p", [0.1, 0.6])
def test_varlen_keep_rate_and_scaling_from_the_kernel_output(p: float) -> None:
    """Q = 0 gives every visible key the probability 1 / k_len; with V = 1 a row's O is its kept keys
    / k_len / (1 - p): the mean over rows is 1 within the binomial spread, each row the replica's count."""
    q_lens, k_lens, heads, d = [128, 64, 100], [512, 300, 1], 2, 64
    q = torch.zeros(sum(q_lens), heads, d, dtype=torch.float16)
    k = _rand(sum(k_lens), heads, d, seed=6)
    v = torch.ones(sum(k_lens), heads, d, dtype=torch.float16)
    torch.manual_seed(9)
    out = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens), p,
                                       backend="sim").float()
    masks = packed_keep_masks(*_drawn(9), q_lens, k_lens, heads, p)
    expected = torch.cat([m.sum(-1).t().float() / k_len / (1 - p) for m, k_len in zip(masks, k_lens)])  # [rows, heads]
    torch.testing.assert_close(out[..., 0], expected, rtol=2e-3, atol=0)  # O in fp16
    kept = sum(m.sum().item() for m in masks)
    n = sum(q_len * k_len for q_len, k_len in zip(q_lens, k_lens)) * heads
    q_keep = keep_probability(p)
    assert abs(kept / n - q_keep) / math.sqrt(q_keep * (1 - q_keep) / n) < 5


def test_manual_seed_reproduces_a_varlen_call_and_its_gradients() -> None:
    lens = [50, 77]
    q, k, v = (_rand(sum(lens), 2, 64, seed=s).requires_grad_() for s in (10, 11, 12))
    dout = _rand(sum(lens), 2, 64, seed=13)

    def run(seed: int | None):
        if seed is not None:
            torch.manual_seed(seed)
        out = ptofa.flash_attn_varlen_func(q, k, v, _cu(lens), _cu(lens), 77, 77, 0.3, causal=True, backend="sim")
        grads = torch.autograd.grad(out, (q, k, v), dout)
        return out, grads

    first, second, again = run(4), run(None), run(4)
    assert torch.equal(first[0], again[0]) and all(torch.equal(a, b) for a, b in zip(first[1], again[1]))
    assert not torch.equal(first[0], second[0])


def test_sdpa_dropout_is_the_kernels() -> None:
    """scaled_dot_product_attention(dropout_p=p): BNSD, the generator's mask at (b, h, i, j), forward and backward."""
    q, k, v = (_rand(1, 2, 80, 64, seed=s).requires_grad_() for s in (14, 15, 16))
    torch.manual_seed(2)
    out = ptofa.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=True, backend="sim")
    keep = keep_mask(*_drawn(2), 1, 2, 80, 80, 0.25)
    bsnd = [t.detach().transpose(1, 2) for t in (q, k, v)]
    assert _accurate(out.transpose(1, 2), reference_fa(*bsnd, 1 / 8, window=(-1, 0), dropout=(keep, 0.25)))
    dout = _rand(1, 2, 80, 64, seed=17)
    out.backward(dout)
    grads = reference_backward(*bsnd, dout.transpose(1, 2), window=(-1, 0), dropout=(keep, 0.25))
    acc = check_gradients(*(t.grad.transpose(1, 2) for t in (q, k, v)), grads)
    assert all(a.passed for a in acc.values()), {n: a.summary() for n, a in acc.items()}


# ---------------------------------------------------------------------------------------------------- S_dmask


def test_flash_block_n_is_flash_attns() -> None:
    """flash-attn's `_get_block_size_n(device, d, is_dropout=True, causal)` (flash_attn_interface.py)."""
    assert [flash_block_n(d) for d in (16, 32, 40, 64, 80, 96, 111, 128, 160, 256)] == \
        [128, 128, 64, 64, 64, 64, 32, 32, 64, 64]


def _normalized(s_dmask: torch.Tensor, scores: torch.Tensor, lse: torch.Tensor, head_dim: int) -> torch.Tensor:
    """|S_dmask| times exp(M_J - LSE) block by block, M_J the row's largest score in key blocks J and
    after (flash-attn's tests' `normalize_flash_attn_S`, with the kernel's LSE): the probabilities."""
    block = flash_block_n(head_dim)
    s1 = scores.shape[-1]
    blocks = torch.nn.functional.pad(scores, (0, -s1 % block), value=-math.inf).unflatten(-1, (-1, block))
    suffix = blocks.amax(-1).flip(-1).cummax(-1).values.flip(-1).repeat_interleave(block, -1)[..., :s1]
    return (s_dmask.float().abs() * torch.exp(suffix - lse.unsqueeze(-1))).nan_to_num(0.0)


def _scores(q, k, scale, window, slopes=None) -> torch.Tensor:
    """Scaled scores [B, H, S0, S1] in f32 with the window as -inf (q, k BSND)."""
    group = q.shape[2] // k.shape[2]
    s = torch.einsum("bihd,bjhd->bhij", q.float(), k.float().repeat_interleave(group, 2)) * scale
    if slopes is not None:
        s = s + alibi_bias(slopes, q.shape[0], q.shape[2], q.shape[1], k.shape[1])
    return s.masked_fill(~visible_mask(q.shape[1], k.shape[1], window)[:, None], -math.inf)


@pytest.mark.parametrize("dtype, causal, d, alibi", [(torch.float16, True, 64, False), (torch.bfloat16, False, 128, True),
                                                     (torch.float16, False, 40, False)])
def test_dense_s_dmask_is_the_kernels_mask_and_probabilities(dtype, causal: bool, d: int, alibi: bool) -> None:
    """flash_attn_qkvpacked_func(return_attn_probs=True) with dropout, read as flash-attn's tests read it:
    shape rounded up to 128; `S_dmask >= 0` the replica's mask on every visible entry; the reference built
    from that mask the kernel's O; the normalized blocks the softmax; the dropped fraction p."""
    b, s, heads, p = 2, 150, 2, 0.17
    qkv = _rand(b, s, 3, heads, d, seed=20, dtype=dtype)
    slopes = torch.rand(b, heads, generator=torch.Generator().manual_seed(3)) * 0.3 if alibi else None
    torch.manual_seed(0)
    out, lse, s_dmask = ptofa.flash_attn_qkvpacked_func(qkv, p, causal=causal, alibi_slopes=slopes,
                                                        return_attn_probs=True, backend="sim")
    assert s_dmask.shape == (b, heads, 256, 256) and s_dmask.dtype == dtype
    assert not s_dmask[:, :, s:].any() and not s_dmask[..., s:].any()
    s_dmask = s_dmask[:, :, :s, :s]
    window = (-1, 0) if causal else (-1, -1)
    vis = visible_mask(s, s, window)[:, None].expand(b, heads, s, s)
    kept = s_dmask >= 0
    keep = keep_mask(*_drawn(0), b, heads, s, s, p)
    assert torch.equal(kept[vis], keep[vis])
    q, k, v = qkv.unbind(2)
    scale = 1 / math.sqrt(d)
    ref = reference_fa(q, k, v, scale, window=window, alibi_slopes=slopes, dropout=(kept, p))
    assert _accurate(out, ref)
    probs = _normalized(s_dmask, _scores(q, k, scale, window, slopes), lse, d)
    softmax = torch.softmax(_scores(q, k, scale, window, slopes), -1).nan_to_num(0.0)
    torch.testing.assert_close(probs, softmax, atol=2e-3 if dtype == torch.bfloat16 else 3e-4, rtol=0)
    dropped = (~kept[vis]).float().mean().item()
    assert abs(dropped - p) < 0.01


def test_varlen_s_dmask_paged_and_packed() -> None:
    """flash_attn_varlen_func(return_attn_probs=True) with dropout, K/V packed and through a paged
    cache: sequence b's entries at [b, :, :q_len, :k_len], its sign the sequence's mask, the reference
    built from it the kernel's O; both layouts give the same S_dmask and O."""
    q_lens, k_lens, heads, d, p = [60, 130], [200, 90], 2, 64, 0.3
    q = _rand(sum(q_lens), heads, d, seed=30)
    k, v = _rand(sum(k_lens), 1, d, seed=31), _rand(sum(k_lens), 1, d, seed=32)
    torch.manual_seed(6)
    out, lse, s_dmask = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), 130, 200, p, causal=True,
                                                     return_attn_probs=True, backend="sim")
    assert s_dmask.shape == (2, heads, 256, 256)
    masks = packed_keep_masks(*_drawn(6), q_lens, k_lens, heads, p)
    kept = []
    for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        vis = visible_mask(q_len, k_len, (-1, 0))[0].expand(heads, q_len, k_len)
        mine = s_dmask[b, :, :q_len, :k_len] >= 0
        assert torch.equal(mine[vis], masks[b][vis])
        kept.append(mine)
    ref = reference_varlen(q, k, v, q_lens, k_lens, 1 / math.sqrt(d), (-1, 0), dropout=(kept, p))
    assert _accurate(out, ref)
    pages = torch.zeros(4, 256, 1, d, dtype=torch.float16)  # sequence 0 in page 2, sequence 1 in page 0
    pages[2, :200], pages[0, :90] = k[:200], k[200:]
    vpages = torch.zeros_like(pages)
    vpages[2, :200], vpages[0, :90] = v[:200], v[200:]
    table = torch.tensor([[2], [0]], dtype=torch.int32)
    torch.manual_seed(6)
    paged = ptofa.flash_attn_varlen_func(q, pages, vpages, _cu(q_lens), _cu(k_lens), 130, 200, p, causal=True,
                                         return_attn_probs=True, block_table=table, backend="sim")
    assert torch.equal(paged[0], out) and torch.equal(paged[2], s_dmask)
