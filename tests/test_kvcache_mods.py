"""`flash_attn_with_kvcache` with attention sinks, score_mod and mask_mod (FlexAttention's callables
compiled into the varlen kernel), against a dense reference per sequence, with the FlashAttention
accuracy rule (`reference.check_accuracy`): fp32 math as the reference, the same math with S and P
rounded to the input dtype as the bound, fp16 and bf16. The cases combine what the call takes besides
the mods: a contiguous or paged cache, appended k / v with rotary embedding, cache_seqlens,
cache_leftpad and cache_batch_idx, causal and local windows, GQA / MQA, softcap, ALiBi and split-KV.

Semantics of the reference (the call's docstring): per sequence b, the keys from cache_leftpad to
cache_seqlens + S_new; s = softcap(scale * q k), then score_mod(s, b, h, q_idx, kv_idx) with q_idx
the row of q and kv_idx the key's position from cache_leftpad, then ALiBi, then the window (bottom-right)
and the mask_mod; the sink of head h joins each row's softmax denominator (and LSE)."""

from __future__ import annotations

import math

import pytest
import torch
from test_kvcache_grid import _positions, _rotate

import ptofa
from ptofa.reference import _matmul_low, check_accuracy

HEAD, PAGE = 64, 256


def _rand(gen, dtype, *shape):
    return torch.randn(*shape, generator=gen).to(dtype)


def _attend(q, k, v, scale, window, softcap, slopes, score_mod, mask_mod, sinks, b, low):
    """(out [S0, H, D] f32, lse [H, S0]) of one sequence: q [S0, H, D], k / v [n, KVH, D]; `low` rounds S
    and P to the input dtype (the accuracy rule's bound), else fp32 math."""
    s0, heads, n = q.shape[0], q.shape[1], k.shape[0]
    k, v = (t.repeat_interleave(heads // t.shape[1], dim=1).transpose(0, 1) for t in (k, v))  # [H, n, D]
    qh = q.transpose(0, 1)
    if low:
        s = _matmul_low(qh, k.transpose(1, 2)).float() * scale
    else:
        s = qh.float() @ k.float().transpose(1, 2) * scale  # [H, S0, n]
    h, i, j = torch.meshgrid(torch.arange(heads), torch.arange(s0), torch.arange(n), indexing="ij")
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if score_mod is not None:
        s = score_mod(s, torch.full_like(h, b), h, i, j)
    diag = j - i - (n - s0)  # key minus the row's diagonal key
    if slopes is not None:
        s = s - slopes[b].view(-1, 1, 1) * diag.abs()
    seen = torch.ones_like(s, dtype=torch.bool)
    if window[0] >= 0:
        seen &= diag >= -window[0]
    if window[1] >= 0:
        seen &= diag <= window[1]
    if mask_mod is not None:
        seen &= mask_mod(torch.full_like(h, b), h, i, j)
    s = s.masked_fill(~seen, -math.inf)
    if sinks is not None:
        s = torch.cat([s, sinks.float().view(-1, 1, 1).expand(heads, s0, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))[..., :n].nan_to_num(0.0)
    out = _matmul_low(p.to(q.dtype), v).float() if low else p @ v.float()
    return out.transpose(0, 1), lse


def run(dtype, *, paged=False, heads=4, kv_heads=2, s0=1, new=0, rotary=False, causal=False, window=(-1, -1),
        softcap=0.0, alibi=False, leftpad=False, batch_idx=False, score_mod=None, mask_mod=None, sinks=None,
        num_splits=0, seed=0, capacity=400, lse=True):
    """One call and its check; returns (out, lse or None, reference fp32 out) for further asserts."""
    gen = torch.Generator().manual_seed(seed)
    batch = 2
    q = _rand(gen, dtype, batch, s0, heads, HEAD)
    lens = torch.tensor([capacity // 3, capacity - new - 5])
    rows = torch.tensor([2, 0]) if batch_idx else torch.arange(batch)
    if paged:
        per_seq = -(-capacity // PAGE)
        k_cache, v_cache = (_rand(gen, dtype, batch * per_seq + 1, PAGE, kv_heads, HEAD) for _ in range(2))
        block_table = torch.randperm(batch * per_seq + 1, generator=gen)[: batch * per_seq].to(torch.int32)
        block_table = block_table.reshape(batch, per_seq)
        slots = [block_table[b].long().repeat_interleave(PAGE) * PAGE + torch.arange(per_seq * PAGE) % PAGE
                 for b in range(batch)]
    else:
        k_cache, v_cache = (_rand(gen, dtype, 3 if batch_idx else batch, capacity, kv_heads, HEAD) for _ in range(2))
        block_table = None
        slots = [int(r) * capacity + torch.arange(capacity) for r in rows]
    k_new = v_new = cos = sin = None
    if new:
        k_new, v_new = (_rand(gen, dtype, batch, new, kv_heads, HEAD) for _ in range(2))
    if rotary:
        angle = torch.rand(capacity, HEAD // 4, generator=gen) * 2 * math.pi
        cos, sin = torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)
    pads = torch.tensor([7, 30]) if leftpad else None
    slopes = torch.rand(batch, heads, generator=gen) * 0.3 if alibi else None
    scale = 1 / math.sqrt(HEAD)
    result = ptofa.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens.to(torch.int32),
        cache_batch_idx=rows.to(torch.int32) if batch_idx else None,
        cache_leftpad=None if pads is None else pads.to(torch.int32), block_table=block_table, causal=causal,
        window_size=window, softcap=softcap, alibi_slopes=slopes, num_splits=num_splits, return_softmax_lse=lse,
        score_mod=score_mod, mask_mod=mask_mod, sinks=sinks, backend="sim")
    out, lse = result if lse else (result, None)
    # the caches after the call hold the (rotated) new keys; q rotated as flash-attn does (tests/test_kvcache_grid.py)
    local = causal or tuple(window) != (-1, -1)
    q_ro = _rotate(q, cos, sin, _positions(lens, s0, local), True) if rotary else q
    flat_k, flat_v = k_cache.view(-1, kv_heads, HEAD), v_cache.view(-1, kv_heads, HEAD)
    win = (window[0], 0) if causal else tuple(window)
    ref32, ref_low, lse32 = [], [], []
    for b in range(batch):
        keys = slots[b][0 if pads is None else int(pads[b]):int(lens[b]) + new]
        args = (q_ro[b], flat_k[keys], flat_v[keys], scale, win, softcap, slopes, score_mod, mask_mod, sinks, b)
        o32, l32 = _attend(*args, low=False)
        o_low, _ = _attend(*args, low=True)
        ref32.append(o32)
        ref_low.append(o_low.to(dtype).float())
        lse32.append(l32)
    ref32, ref_low, lse32 = torch.stack(ref32), torch.stack(ref_low), torch.stack(lse32)
    acc = check_accuracy(out.float(), ref32, ref_low)
    assert acc.passed, acc.summary()
    if lse is None:
        return out, None, ref32
    finite = torch.isfinite(lse32)
    # LSE within the input dtype's epsilon: P is rounded to it before its row sums (tests/test_flex.py)
    assert (lse[finite] - lse32[finite]).abs().max() <= torch.finfo(dtype).eps
    return out, lse, ref32


DTYPES = [torch.float16, torch.bfloat16]
SINKS = torch.tensor([0.5, 3.0, -1.0, 2.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinks_contiguous_append_rotary_causal_gqa_softcap(dtype):
    out, _, ref32 = run(dtype, s0=3, new=2, rotary=True, causal=True, softcap=8.0, sinks=SINKS)
    no_sinks = run(dtype, s0=3, new=2, rotary=True, causal=True, softcap=8.0)[2]
    # the sinks took part: without them the result is further off than the rule's tolerance
    assert (no_sinks - out.float()).abs().max() > 10 * (ref32 - out.float()).abs().max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinks_paged_local_window_alibi_mqa(dtype):
    run(dtype, paged=True, kv_heads=1, s0=2, new=1, window=(24, 3), alibi=True, sinks=SINKS, seed=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinks_without_lse_scores_in_the_input_dtype(dtype):
    """Without LSE the sinks keep the plain kernel's QK slot in the input dtype (`Sinks.scores` is False)."""
    run(dtype, s0=2, new=1, causal=True, sinks=SINKS, lse=False, seed=8)


def test_sinks_leftpad_batch_idx_decode_gqa():
    """One query row and GQA: packing would apply, and turns off for the sinks (a packed unit is several heads)."""
    run(torch.float16, leftpad=True, batch_idx=True, sinks=SINKS, seed=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_score_mod_mask_mod_sinks_paged_causal(dtype):
    """A per-sequence table read by b, a per-head bias by h, a relative bias, a mask hiding the first keys."""
    seq_bias = torch.tensor([0.5, -1.0])
    head_bias = torch.tensor([0.3, -0.2, 0.1, 0.0])

    def score_mod(s, b, h, qi, kv):
        return s + seq_bias[b] * (kv - qi) * 0.002 + head_bias[h]

    def not_first(b, h, qi, kv):
        return kv >= 16

    run(dtype, paged=True, s0=2, new=3, causal=True, score_mod=score_mod, mask_mod=not_first, sinks=SINKS, seed=3)


def test_score_mod_split_kv_alibi_window():
    """score_mod with split-KV (each split's partial carries the mod) beside ALiBi and a local window."""
    run(torch.bfloat16, s0=2, window=(100, 0), alibi=True, num_splits=3, capacity=900, seed=4,
        score_mod=lambda s, b, h, qi, kv: torch.tanh(s / 4.0) * 4.0)


def test_sinks_split_kv():
    """Split-KV with sinks: split 0 of each unit takes the sink, the reduce weighs it in once."""
    run(torch.float16, s0=2, causal=True, num_splits=3, capacity=900, sinks=SINKS, seed=7)


def test_mask_mod_hides_whole_rows():
    """A mask_mod that hides every key from some rows: those rows give 0 and LSE +inf (flash-attn's), the
    others attend; with sinks such a row gives 0 and LSE = the sink (the formula's limit), also split."""
    out, lse, _ = run(torch.float16, s0=3, mask_mod=lambda b, h, qi, kv: qi != 1, seed=5)
    assert torch.equal(out[:, 1], torch.zeros_like(out[:, 1])) and torch.isinf(lse[:, :, 1]).all()
    for splits in (1, 2):
        out, lse, _ = run(torch.float16, s0=3, mask_mod=lambda b, h, qi, kv: qi != 1, sinks=SINKS, seed=5,
                          num_splits=splits)
        assert torch.equal(out[:, 1], torch.zeros_like(out[:, 1]))
        assert torch.equal(lse[:, :, 1], SINKS.expand(2, 4))


def _small():
    gen = torch.Generator().manual_seed(6)
    q = _rand(gen, torch.float16, 1, 1, 4, HEAD)
    cache = _rand(gen, torch.float16, 1, 200, 2, HEAD)
    return q, cache, cache.clone()


@pytest.mark.parametrize("kwargs, match", [
    (dict(sinks=SINKS, pack_gqa=True), "^pack_gqa: not with sinks"),
    (dict(score_mod=lambda s, b, h, qi, kv: s, pack_gqa=True), "^pack_gqa: not with score_mod"),
    (dict(score_mod=lambda s, b, h, qi, kv: torch.sin(s)), "sin"),
])
def test_refused_by_name(kwargs, match):
    q, k_cache, v_cache = _small()
    with pytest.raises(NotImplementedError, match=match):
        ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=100, backend="sim", **kwargs)


def test_bad_sinks_shape_and_backward():
    q, k_cache, v_cache = _small()
    with pytest.raises(ValueError, match=r"sinks: must be a float tensor of shape \[4\]"):
        ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=100, sinks=torch.zeros(2), backend="sim")
    sinks = SINKS.clone().requires_grad_(True)
    out = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=100, sinks=sinks, backend="sim")
    with pytest.raises(NotImplementedError, match="flash_attn_with_kvcache: no backward"):
        out.float().sum().backward()


def test_config_rules_of_the_sinks():
    from ptofa.kernels.scoremods import Sinks
    from ptofa.pipeline import ConfigError, FAConfig

    with pytest.raises(ConfigError, match="gqa_pack=True"):
        FAConfig(head=64, varlen=True, gqa_pack=True, lse=True, mods=(Sinks(),))
    # the sinks change no score: S stays in the input dtype as in the plain kernel (not with LSE)
    assert FAConfig(head=64, varlen=True, mods=(Sinks(),)).qk_dtype == "f16"
    assert FAConfig(head=64, varlen=True, lse=True, mods=(Sinks(),)).qk_dtype == "f32"


def test_num_splits_zero_splits_with_mods(monkeypatch):
    """num_splits=0 with sinks and a score_mod: the split planner (pricing the kernel without its mods) splits
    the 4 long units over the cores, and split 0 of each takes the sink."""
    from ptofa.launch import splitkv

    chosen = []
    plan_varlen = splitkv.plan_varlen

    def spy(*args, **kwargs):
        split = plan_varlen(*args, **kwargs)
        chosen.append(split.num_splits)
        return split

    monkeypatch.setattr(splitkv, "plan_varlen", spy)
    run(torch.float16, heads=2, kv_heads=1, capacity=2000, causal=True, sinks=SINKS[:2], seed=9,
        score_mod=lambda s, b, h, qi, kv: s + (kv - qi) * 0.001)
    assert chosen and chosen[0] > 1
