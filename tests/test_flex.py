"""ptofa.flex_attention against torch's own FlexAttention (eager on the CPU, forward only), with the
FlashAttention accuracy rule: score mods, masks and captured tensors traced into the kernel."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention as torch_flex

import ptofa
from ptofa.attention.flex import tile_ranges
from ptofa.reference import check_accuracy

H = 2
# torch's eager FlexAttention warns that it is not compiled and that return_lse is deprecated
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def _inputs(batch, s0, s1, dtype, heads=H, kv_heads=H, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, s0, d, generator=g).to(dtype)
    k = torch.randn(batch, kv_heads, s1, d, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, s1, d, generator=g).to(dtype)
    return q, k, v


def _check(q, k, v, score_mod=None, mask_mod=None, gqa=False):
    batch, s0, s1 = q.shape[0], q.shape[2], k.shape[2]
    bm = None if mask_mod is None else ptofa.create_block_mask(mask_mod, batch, q.shape[1], s0, s1)
    out, lse = ptofa.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=gqa, return_lse=True,
                                    backend="sim")
    ref32, lse32 = torch_flex(q.float(), k.float(), v.float(), score_mod=score_mod, block_mask=bm, enable_gqa=gqa,
                              return_lse=True)
    ref16 = torch_flex(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=gqa)
    acc = check_accuracy(out, ref32, ref16)
    assert acc.passed, acc
    finite = torch.isfinite(lse32)
    assert torch.equal(torch.isfinite(lse), finite)
    # LSE within the input dtype's epsilon: P is rounded to it before its row sums
    assert (lse[finite] - lse32[finite]).abs().max() <= torch.finfo(q.dtype).eps


def causal(b, h, q, kv):
    return q >= kv


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_relative_bias_causal(dtype):
    q, k, v = _inputs(1, 200, 200, dtype)
    _check(q, k, v, score_mod=lambda s, b, h, qi, kv: s + (qi - kv) * 0.01, mask_mod=causal)


def test_softcap_tanh_bf16():
    q, k, v = _inputs(1, 130, 300, torch.bfloat16)
    _check(q, k, v, score_mod=lambda s, b, h, qi, kv: torch.tanh(s / 5.0) * 5.0)


def test_alibi_captured_slopes_sliding_window():
    slopes = torch.tensor([0.5, 0.125])
    q, k, v = _inputs(1, 260, 260, torch.float16, seed=1)
    _check(q, k, v, score_mod=lambda s, b, h, qi, kv: s - slopes[h] * (qi - kv).abs(),
           mask_mod=lambda b, h, qi, kv: (qi >= kv) & (qi - kv <= 64))


def test_one_element_tables_are_indexed():
    """A captured table of one element (`bias[h]` with one head) is read as a table, not taken for a
    constant; a one-element tensor that is not indexed is a constant of the mod."""
    bias, scale = torch.tensor([0.75]), torch.tensor(1.5)
    q, k, v = _inputs(1, 96, 160, torch.float16, heads=1, kv_heads=1, seed=2)
    _check(q, k, v, score_mod=lambda s, b, h, qi, kv: s * scale + bias[h] * (qi - kv) * 0.01)


def test_document_mask_captured_ids():
    doc = torch.tensor([0] * 70 + [1] * 150 + [2] * 100)
    q, k, v = _inputs(2, 320, 320, torch.bfloat16, seed=2)
    _check(q, k, v, mask_mod=lambda b, h, qi, kv: (doc[qi] == doc[kv]) & (qi >= kv))


def test_prefix_lm_gqa_where_mod():
    bias = torch.tensor([0.3, -0.2, 0.1, 0.0])
    q, k, v = _inputs(1, 200, 200, torch.float16, heads=4, kv_heads=2, seed=3)
    _check(q, k, v, score_mod=lambda s, b, h, qi, kv: torch.where(qi >= kv, s + bias[h], s),
           mask_mod=lambda b, h, qi, kv: (kv < 40) | (qi >= kv), gqa=True)


def test_unsupported_op_names_it():
    q, k, v = _inputs(1, 64, 64, torch.float16)
    with pytest.raises(NotImplementedError, match="sin"):
        ptofa.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: torch.sin(s), backend="sim")
    with pytest.raises(NotImplementedError, match="floor_divide"):
        ptofa.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + (qi - kv) // 2, backend="sim")
    with pytest.raises(NotImplementedError, match="rounding_mode"):
        ptofa.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + torch.div(qi, 2, rounding_mode="trunc"),
                             backend="sim")
    with pytest.raises(NotImplementedError, match="computed"):
        table = torch.randn(128)
        ptofa.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + table[qi - kv + 64], backend="sim")


def test_document_mask_visits_fewer_tiles():
    """Block sparsity: a document mask's units visit only the tiles of their document."""
    doc = torch.arange(1024) // 256
    ranges = tile_ranges(lambda b, h, qi, kv: doc[qi] == doc[kv], 1, 1, 1024, 1024, 128, 128)
    visited = int((ranges[:, 1] - ranges[:, 0]).sum())
    assert visited == 8 * 2 and int((ranges[:, 3] - ranges[:, 2]).sum()) == visited
    assert math.isclose(visited / (8 * 8), 0.25)


def _dense_reference(q, k, v, score_mod=None, mask_mod=None, sinks=None):
    """fp32 attention on [B, H, S, D] with the mods applied densely and the sinks in the denominator."""
    q, k, v = q.float(), k.float(), v.float()
    batch, heads, s0, d = q.shape
    s1 = k.shape[2]
    k, v = (t.repeat_interleave(heads // t.shape[1], dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    b, h, qi, kv = torch.meshgrid(torch.arange(batch), torch.arange(heads), torch.arange(s0), torch.arange(s1),
                                  indexing="ij")
    if score_mod is not None:
        s = score_mod(s, b, h, qi, kv)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, qi, kv), -math.inf)
    if sinks is not None:
        s = torch.cat([s, sinks.float().view(1, -1, 1, 1).expand(batch, heads, s0, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))[..., :s1].nan_to_num(0.0)  # a row without keys: 0
    return p @ v, lse


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sinks_forward(dtype):
    sinks = torch.tensor([0.5, 3.0])
    q, k, v = _inputs(1, 150, 220, dtype, seed=4)
    out, lse = ptofa.flex_attention(q, k, v, block_mask=ptofa.create_block_mask(causal, 1, H, 150, 220),
                                    sinks=sinks, return_lse=True, backend="sim")
    ref32, lse32 = _dense_reference(q, k, v, mask_mod=causal, sinks=sinks)
    ref_low, _ = _dense_reference(q.float().to(dtype), k.to(dtype), v.to(dtype), mask_mod=causal, sinks=sinks)
    acc = check_accuracy(out, ref32, ref_low.to(dtype))
    assert acc.passed, acc
    assert (lse - lse32).abs().max() <= torch.finfo(dtype).eps
    # without the sinks the output differs: the sinks took part
    plain = ptofa.flex_attention(q, k, v, block_mask=ptofa.create_block_mask(causal, 1, H, 150, 220), backend="sim")
    assert (plain.float() - out.float()).abs().max() > 10 * acc.err


def test_flash_attn_func_score_mod_mask_mod_sinks():
    """flash_attn_func's BSND call with a score_mod, a mask_mod and-ed with causal (bottom-right) and sinks."""
    doc = torch.tensor([0] * 90 + [1] * 110)
    sinks = torch.tensor([1.0, -0.5])
    q, k, v = (t.transpose(1, 2) for t in _inputs(1, 200, 200, torch.bfloat16, seed=5))

    def score_mod(s, b, h, qi, kv):
        return s + (kv - qi) * 0.02

    def same_doc(b, h, qi, kv):
        return doc[qi] == doc[kv]

    out, lse = ptofa.flash_attn_func(q, k, v, causal=True, score_mod=score_mod, mask_mod=same_doc, sinks=sinks,
                                     return_lse=True, backend="sim")

    def both(b, h, qi, kv):
        return same_doc(b, h, qi, kv) & (qi >= kv)

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    ref32, lse32 = _dense_reference(qt, kt, vt, score_mod, both, sinks)
    ref_low, _ = _dense_reference(qt.to(torch.bfloat16), kt, vt, score_mod, both, sinks)
    acc = check_accuracy(out, ref32.transpose(1, 2), ref_low.to(torch.bfloat16).transpose(1, 2))
    assert acc.passed, acc
    assert (lse - lse32).abs().max() <= torch.finfo(torch.bfloat16).eps


def test_varlen_mods_per_sequence():
    """flash_attn_varlen_func with a score_mod reading b (a per-sequence table), a mask_mod and causal: each
    sequence against the dense reference of its own [1, H, len, D] problem."""
    lens_q, lens_k = [70, 1, 150], [90, 40, 150]
    seq_bias = torch.tensor([0.5, -1.0, 0.25])
    g = torch.Generator().manual_seed(6)
    q = torch.randn(sum(lens_q), H, 64, generator=g).half()
    k = torch.randn(sum(lens_k), H, 64, generator=g).half()
    v = torch.randn(sum(lens_k), H, 64, generator=g).half()
    cu_q = torch.tensor([0, 70, 71, 221], dtype=torch.int32)
    cu_k = torch.tensor([0, 90, 130, 280], dtype=torch.int32)

    def score_mod(s, b, h, qi, kv):
        return s + seq_bias[b] * (qi - kv) * 0.01

    def not_first(b, h, qi, kv):
        return kv > 0

    out, lse = ptofa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 150, 150, causal=True, score_mod=score_mod,
                                            mask_mod=not_first, return_lse=True, backend="sim")
    for b in range(3):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        diag = lens_k[b] - lens_q[b]

        def mod(s, bb, h, qi, kv, b=b):
            return score_mod(s, torch.full_like(bb, b), h, qi, kv)

        def mask(bb, h, qi, kv, diag=diag):
            return (kv <= qi + diag) & (kv > 0)

        qt, kt, vt = (t[sl].unsqueeze(0).transpose(1, 2) for t, sl in ((q, qs), (k, ks), (v, ks)))
        ref32, lse32 = _dense_reference(qt, kt, vt, mod, mask)
        ref_low, _ = _dense_reference(qt.float().half(), kt, vt, mod, mask)
        acc = check_accuracy(out[qs], ref32[0].transpose(0, 1), ref_low[0].half().transpose(0, 1))
        assert acc.passed, (b, acc)
        finite = torch.isfinite(lse32[0])
        assert torch.equal(lse[:, qs][~finite], torch.full_like(lse32[0][~finite], math.inf))  # flash-attn's +inf
        assert (lse[:, qs][finite] - lse32[0][finite]).abs().max() <= torch.finfo(torch.float16).eps


def test_catalog_flex_kernels_verify():
    """The catalog's flex kernels (traced score / mask mods, block ranges, sinks) pass the checker
    (`tests/test_toolchain.py` compiles every catalog kernel with ptoas where it is installed)."""
    from ptofa.ir.textio import check_text
    from ptofa.kernels import catalog
    from ptofa.kernels.fa_fwd import emit_fa
    from ptofa.kernels.scoremods import Sinks

    flex = catalog.flex_configs()
    assert len(flex) == 3 and all(c.block_ranges for c in flex)
    assert any(isinstance(m, Sinks) for c in flex for m in c.mods)
    assert set(flex) <= set(catalog.forward_configs())
    for c in flex:
        check_text(emit_fa(c), "flex.pto")


def test_docs_example_runs_and_matches_torch():
    """docs/writing-a-mod.md's example runs as written and agrees with torch's flex_attention."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "writing-a-mod.md").read_text()
    code = text.split("```python\n")[1].split("```")[0]
    space: dict = {}
    exec(compile(code, "writing-a-mod.md", "exec"), space)  # noqa: S102 (the page's own example)
    q, k, v, mask = (space[n] for n in ("q", "k", "v", "mask"))
    ref32 = torch_flex(q.float(), k.float(), v.float(), score_mod=space["alibi"], block_mask=mask)
    ref16 = torch_flex(q, k, v, score_mod=space["alibi"], block_mask=mask)
    acc = check_accuracy(space["out"], ref32, ref16)
    assert acc.passed, acc


def test_block_mask_sparser_than_its_mask_mod_is_refused():
    """A hand-made BlockMask that leaves out a block its mask_mod keeps would run differently: refused."""
    from torch.nn.attention.flex_attention import BlockMask

    q, k, v = _inputs(1, 256, 256, torch.float16)
    only_diagonal = BlockMask.from_kv_blocks(torch.ones(1, 1, 2, dtype=torch.int32),
                                             torch.tensor([[[[0, 1], [1, 0]]]], dtype=torch.int32), mask_mod=causal)
    with pytest.raises(NotImplementedError, match="block_mask: 2 block"):
        ptofa.flex_attention(q, k, v, block_mask=only_diagonal, backend="sim")


# The lowering table's other forms: where with finite branches, sigmoid / exp / relu / reciprocal, maximum and
# minimum against q- and kv-dependent values, division by them, and the boolean ops.
DOC = torch.tensor([0] * 60 + [1] * 90)
TABLE_MODS = {
    "where": (lambda s, b, h, q, kv: torch.where(q >= kv, s * 2.0, s - 1.0), None),
    "unary": (lambda s, b, h, q, kv: torch.sigmoid(s) + torch.exp(-s.abs()) + torch.relu(s), None),
    "max_min": (lambda s, b, h, q, kv: torch.minimum(torch.maximum(s, q * 0.01), kv * 0.5), None),
    "div": (lambda s, b, h, q, kv: s / (q + 1.0) + (kv + 1.0) / s.abs().clamp(min=1.0) - 2.0 / (kv + 1.0), None),
    "logic": (None, lambda b, h, q, kv: ((q - kv < 64) ^ (kv > 9)) | ~(q != kv) & (DOC[kv] <= DOC[q])),
}


@pytest.mark.parametrize("name", sorted(TABLE_MODS))
def test_lowering_table_against_torch(name):
    score_mod, mask_mod = TABLE_MODS[name]
    q, k, v = _inputs(1, 150, 150, torch.float16, seed=7)
    _check(q, k, v, score_mod=score_mod, mask_mod=mask_mod)


@pytest.mark.ptoas
@pytest.mark.parametrize("name", sorted(TABLE_MODS))
def test_lowering_table_compiles_with_ptoas(name, tmp_path):
    import subprocess

    from ptofa.attention.flex import flex_config
    from ptofa.kernels.fa_fwd import emit_fa
    from ptofa.kernels.flexmods import trace_mod
    from ptofa.launch.toolchain import PTOAS_FLAGS, locate_tools

    score_mod, mask_mod = TABLE_MODS[name]
    mods = tuple(trace_mod(fn, mask)[0] for fn, mask in ((score_mod, False), (mask_mod, True)) if fn)
    path = tmp_path / f"{name}.pto"
    path.write_text(emit_fa(flex_config(64, "f16", 1024, mods, mask_mod is not None)))
    done = subprocess.run([locate_tools()[0].ptoas, *PTOAS_FLAGS, str(path), "-o", str(tmp_path / "k.cpp")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def test_return_aux_lse():
    """torch's newer LSE request, return_aux=AuxRequest(lse=True), gives the same LSE as return_lse=True."""
    from torch.nn.attention.flex_attention import AuxRequest

    q, k, v = _inputs(1, 100, 100, torch.float16, seed=8)
    bm = ptofa.create_block_mask(causal, 1, H, 100, 100)
    out, aux = ptofa.flex_attention(q, k, v, block_mask=bm, return_aux=AuxRequest(lse=True), backend="sim")
    out2, lse = ptofa.flex_attention(q, k, v, block_mask=bm, return_lse=True, backend="sim")
    assert torch.equal(out, out2) and torch.equal(aux.lse, lse)
    with pytest.raises(NotImplementedError, match="max_scores"):
        ptofa.flex_attention(q, k, v, return_aux=AuxRequest(max_scores=True), backend="sim")
