"""The backward through FlexAttention mods and attention sinks: dq, dk, dv (and dsinks) of
`ptofa.flex_attention`, `flash_attn_func` and `flash_attn_varlen_func` with score_mod / mask_mod / sinks,
against torch autograd through a dense attention that applies the same mods, in fp64 and in the input
dtype, with the FlashAttention accuracy rule (torch has no CPU backward for its own FlexAttention)."""

from __future__ import annotations

import math

import pytest
import torch

import ptofa
from ptofa.reference import check_accuracy

# torch's create_block_mask warns on the CPU
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def _inputs(batch, heads, kv_heads, s0, s1, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, s0, d, generator=g).to(dtype)
    k = torch.randn(batch, kv_heads, s1, d, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, s1, d, generator=g).to(dtype)
    dout = torch.randn(batch, heads, s0, d, generator=g).to(dtype)
    return q, k, v, dout


def _dense(q, k, v, sinks, score_mod, mask_mod, scale, b0=0):
    """softmax(score_mod(scale Q K^T) masked, with the sinks' column) V on [B, H, S, D], in q's dtype."""
    batch, heads, s0, _ = q.shape
    group = heads // k.shape[1]
    kh, vh = (t.repeat_interleave(group, dim=1) for t in (k, v))
    s = (q @ kh.transpose(-1, -2)) * scale
    b = (torch.arange(batch) + b0).view(-1, 1, 1, 1)
    h = torch.arange(heads).view(1, -1, 1, 1)
    qi = torch.arange(s0).view(1, 1, -1, 1)
    ki = torch.arange(k.shape[2]).view(1, 1, 1, -1)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki).to(q.dtype)
    if mask_mod is not None:
        s = s.masked_fill(~torch.as_tensor(mask_mod(b, h, qi, ki)).bool().expand(s.shape), -math.inf)
    if sinks is not None:
        s = torch.cat([s, sinks.to(q.dtype).view(1, -1, 1, 1).expand(batch, heads, s0, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :k.shape[2]]
    return p @ vh


def _reference(q, k, v, dout, sinks, score_mod, mask_mod, scale, b0=0):
    """(exact fp64 grads, input-dtype grads): dq, dk, dv (, dsinks)."""
    out = []
    for dtype in (torch.float64, q.dtype):
        leaves = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
        sink = None if sinks is None else sinks.detach().to(dtype).requires_grad_(True)
        _dense(*leaves, sink, score_mod, mask_mod, scale, b0).backward(dout.to(dtype))
        out.append([t.grad for t in leaves] + ([] if sink is None else [sink.grad]))
    return out


def _check(ours, exact, low):
    for name, a, e, lo in zip(("dq", "dk", "dv", "dsinks"), ours, exact, low):
        acc = check_accuracy(a, e, lo)
        assert acc.passed, (name, acc)


BIAS = torch.tensor([0.5, -0.25, 1.0, 0.0])
SLOPES = torch.tensor([0.25, 0.125, 0.0625, 0.03125])
DOC = torch.tensor([0] * 37 + [1] * 50 + [2] * 41)


def rel_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.02


def softcap(score, b, h, q_idx, kv_idx):
    return torch.tanh(score / 5.0) * 5.0


def head_bias_alibi(score, b, h, q_idx, kv_idx):
    return score + BIAS[h] - SLOPES[h] * (q_idx - kv_idx).abs()


def smooth(score, b, h, q_idx, kv_idx):  # quotient, sigmoid, exp, reciprocal and a product of score terms
    return score / (2.0 + torch.sigmoid(score)) + torch.exp(score * 0.1) - 1.0 / (3.0 + score * score * 0.01)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 40)


def document(b, h, q_idx, kv_idx):
    return (DOC[q_idx] == DOC[kv_idx]) & (q_idx >= kv_idx)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < 24) | (q_idx >= kv_idx)


CASES = [  # (score_mod, mask_mod, dtype, heads, kv_heads, sinks, deterministic)
    (rel_bias, causal, torch.float16, 2, 2, False, True),
    (softcap, sliding, torch.bfloat16, 2, 1, False, True),
    (head_bias_alibi, prefix_lm, torch.float16, 4, 2, False, False),
    (None, document, torch.bfloat16, 2, 2, True, True),
    (smooth, None, torch.float16, 2, 2, True, False),
]


@pytest.mark.parametrize("score_mod, mask_mod, dtype, heads, kv_heads, with_sinks, deterministic", CASES,
                         ids=lambda x: getattr(x, "__name__", str(x)))
def test_flex_attention_backward(score_mod, mask_mod, dtype, heads, kv_heads, with_sinks, deterministic):
    s = len(DOC)
    q, k, v, dout = _inputs(1, heads, kv_heads, s, s, 64, dtype)
    sinks = torch.randn(heads, generator=torch.Generator().manual_seed(1)) if with_sinks else None
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)] + ([sinks.clone().requires_grad_(True)]
                                                                    if with_sinks else [])
    bm = None if mask_mod is None else ptofa.create_block_mask(mask_mod, 1, heads, s, s)
    out = ptofa.flex_attention(*leaves[:3], score_mod=score_mod, block_mask=bm, enable_gqa=heads != kv_heads,
                               sinks=leaves[3] if with_sinks else None, backend="sim", deterministic=deterministic)
    out.backward(dout)
    exact, low = _reference(q, k, v, dout, sinks, score_mod, mask_mod, 1 / math.sqrt(64))
    _check([t.grad for t in leaves], exact, low)


def test_flash_attn_func_backward_with_mods():
    """BSND layout, causal and-ed with the mask_mod, a captured per-head bias, sinks; a head dim that is
    no kernel width (zero-padded columns)."""
    q, k, v, dout = _inputs(2, 2, 2, 70, 90, 40, torch.float16, seed=3)
    sinks = torch.tensor([0.5, -1.0])
    to_bsnd = [t.transpose(1, 2).contiguous() for t in (q, k, v, dout)]
    leaves = [t.clone().requires_grad_(True) for t in to_bsnd[:3]] + [sinks.clone().requires_grad_(True)]
    out = ptofa.flash_attn_func(*leaves[:3], causal=True, score_mod=head_bias_alibi, mask_mod=prefix_lm,
                                sinks=leaves[3], backend="sim")
    out.backward(to_bsnd[3])

    def both(b, h, q_idx, kv_idx):  # causal, bottom-right: query i sees keys up to i + S1 - S0
        return (kv_idx <= q_idx + 20) & prefix_lm(b, h, q_idx, kv_idx)

    exact, low = _reference(q, k, v, dout, sinks, head_bias_alibi, both, 1 / math.sqrt(40))
    ours = [leaves[0].grad.transpose(1, 2), leaves[1].grad.transpose(1, 2), leaves[2].grad.transpose(1, 2),
            leaves[3].grad]
    _check(ours, exact, low)


def test_flash_attn_varlen_func_backward_with_mods():
    """Packed sequences: b is the sequence, q_idx / kv_idx positions in it; causal per sequence, sinks."""
    lens_q, lens_k = [33, 64, 7], [40, 64, 20]
    heads, d, dtype = 2, 64, torch.bfloat16
    g = torch.Generator().manual_seed(5)
    q, dout = (torch.randn(sum(lens_q), heads, d, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(sum(lens_k), heads, d, generator=g).to(dtype) for _ in range(2))
    sinks = torch.tensor([1.0, -0.5])
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
                  for lens in (lens_q, lens_k))
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, sinks)]
    out = ptofa.flash_attn_varlen_func(*leaves[:3], cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                       score_mod=rel_bias, sinks=leaves[3], backend="sim")
    out.backward(dout)
    exact = [torch.zeros(t.shape, dtype=torch.float64) for t in (q, k, v, sinks)]
    low = [torch.zeros_like(t, dtype=dtype) for t in (q, k, v, sinks)]
    for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        rows, keys = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        seq = [t[None].transpose(1, 2) for t in (q[rows], k[keys], v[keys], dout[rows])]

        def bottom_right(b, h, q_idx, kv_idx, diag=lk - lq):
            return kv_idx <= q_idx + diag

        for total, found in zip((exact, low), _reference(*seq, sinks, rel_bias, bottom_right, 1 / math.sqrt(d), b0=i)):
            total[0][rows] += found[0][0].transpose(0, 1).to(total[0].dtype)
            total[1][keys] += found[1][0].transpose(0, 1).to(total[1].dtype)
            total[2][keys] += found[2][0].transpose(0, 1).to(total[2].dtype)
            total[3] += found[3].to(total[3].dtype)
    _check([t.grad for t in leaves], exact, low)


def test_captured_tensor_requiring_grad_raises():
    table = torch.zeros(2, requires_grad=True)
    q, k, v, _ = _inputs(1, 2, 2, 32, 32, 64, torch.float16)

    def learnable(score, b, h, q_idx, kv_idx):
        return score + table[h]

    with pytest.raises(NotImplementedError, match=r"captured tensor 0 \[2\] requires grad"):
        ptofa.flex_attention(q.requires_grad_(True), k, v, score_mod=learnable, backend="sim")


def test_underivable_op_raises_naming_it():
    """clamp of the score lowers in the forward; its derivative needs a float comparison: the backward raises."""
    q, k, v, dout = _inputs(1, 2, 2, 32, 32, 64, torch.float16)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]

    def clamped(score, b, h, q_idx, kv_idx):
        return score.clamp(-1.0, 1.0)

    out = ptofa.flex_attention(*leaves, score_mod=clamped, backend="sim")
    with pytest.raises(NotImplementedError, match="clamp"):
        out.backward(dout)


def test_lse_gradient_raises():
    q, k, v, _ = _inputs(1, 2, 2, 32, 32, 64, torch.float16)
    out, lse = ptofa.flex_attention(q.requires_grad_(True), k, v, score_mod=rel_bias, return_lse=True, backend="sim")
    with pytest.raises(NotImplementedError, match="LSE"):
        lse.sum().backward()


@pytest.mark.slow
@pytest.mark.parametrize("head", [32, 96])
@pytest.mark.parametrize("deterministic", [True, False])
def test_flex_attention_backward_grid(head, deterministic):
    """Other head dims, longer sequences, two batches, GQA, a document mask and sinks (the forward's flex
    kernel fits these mods at D = 96, not at 128)."""
    s = len(DOC) * 2
    doc = torch.cat([DOC, DOC + 3])

    def docs(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    q, k, v, dout = _inputs(2, 4, 2, s, s, head, torch.bfloat16, seed=7)
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(2))
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, sinks)]
    bm = ptofa.create_block_mask(docs, 2, 4, s, s)
    out = ptofa.flex_attention(*leaves[:3], score_mod=softcap, block_mask=bm, enable_gqa=True, sinks=leaves[3],
                               backend="sim", deterministic=deterministic)
    out.backward(dout)
    exact, low = _reference(q, k, v, dout, sinks, softcap, docs, 1 / math.sqrt(head))
    _check([t.grad for t in leaves], exact, low)


@pytest.mark.parametrize("mask_mod, heads, kv_heads", [(document, 2, 2), (prefix_lm, 4, 2), (sliding, 4, 1)],
                         ids=lambda x: getattr(x, "__name__", str(x)))
def test_kv_block_ranges_cover_exactly_the_visible_blocks(mask_mod, heads, kv_heads):
    """Each dkdv unit's Q blocks [lo, hi) hold every block with a visible entry for some head of its group,
    and the blocks in [full_lo, full_hi) are visible entirely for every head of the group."""
    from ptofa.attention.flex import kv_block_ranges

    s0, s1, rows, cols = 128, 128, 32, 64
    table = kv_block_ranges(mask_mod, 1, heads, kv_heads, s0, s1, rows, cols).view(1, kv_heads, -1, 4)
    h = torch.arange(heads).view(1, -1, 1, 1)
    seen = torch.as_tensor(mask_mod(torch.zeros(1, 1, 1, 1, dtype=torch.long), h, torch.arange(s0).view(1, 1, -1, 1),
                                    torch.arange(s1).view(1, 1, 1, -1))).expand(1, heads, s0, s1)
    group = heads // kv_heads
    for g in range(kv_heads):
        vis = seen[0, g * group:(g + 1) * group]
        for kb in range(s1 // cols):
            lo, hi, full_lo, full_hi = table[0, g, kb].tolist()
            for qb in range(s0 // rows):
                block = vis[:, qb * rows:(qb + 1) * rows, kb * cols:(kb + 1) * cols]
                assert bool(block.any()) <= (lo <= qb < hi), (g, kb, qb)
                if full_lo <= qb < full_hi:
                    assert bool(block.all()), (g, kb, qb)
            assert full_lo == full_hi or lo <= full_lo <= full_hi <= hi
