"""`flash_attn_with_kvcache` as a grid: every combination of a paged or contiguous cache, rotary
embedding (interleaved or GPT-NeoX, none, half or the full head dim), cache_leftpad, cache_batch_idx,
no mask / causal / a local window, ALiBi, and MHA / GQA / MQA, appending new keys. After each call
the whole k and v caches (the pages or rows no sequence uses included) must equal, bit for bit, the
caches flash-attn leaves: the new keys rotated in fp32 at positions cache_seqlens[b] + i and rounded
to the cache dtype, the new values copied, at rows cache_seqlens[b] .. + S_new of each sequence's cache
row (through its block table when paged); and the output must pass the accuracy rule against attention
over those caches (the semantics of flash-attn's tests/test_flash_attn.py::test_flash_attn_kvcache,
Dao-AILab/flash-attention, flash_attn/layers/rotary.py for the rotation).

Out-of-range caches: a RuntimeError naming block_table (or the cache) with the numbers, nothing written.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

import ptofa
from ptofa.reference import Reference, check_accuracy, reference_fa

BATCH, HEADS, HEAD, PAGE, CAPACITY = 2, 4, 32, 256, 300
KV_HEADS = {"mha": 4, "gqa": 2, "mqa": 1}
WINDOWS = {"none": (False, (-1, -1)), "causal": (True, (-1, -1)), "local": (False, (24, 3))}
AXES = dict(paged=(False, True), interleaved=(False, True), rotary=(0.0, 0.5, 1.0), leftpad=(False, True),
            batch_idx=(False, True), window=tuple(WINDOWS), alibi=(False, True), heads=tuple(KV_HEADS))


def _grid() -> list[tuple]:
    """Every legal combination (flash-attn takes neither cache_leftpad nor cache_batch_idx with a block table)."""
    return [case for case in itertools.product(*AXES.values())
            if not (case[0] and (case[3] or case[4])) and not (case[2] == 0.0 and case[1])]


# The issue's case (paged, interleaved rotary over the full head dim, a local window, ALiBi, MHA) and a
# seeded sample of the grid that meets every value of every axis; the whole grid is `slow`.
ISSUE_CASE = (True, True, 1.0, False, False, "local", True, "mha")
FAST = [ISSUE_CASE] + random.Random(43).sample([c for c in _grid() if c != ISSUE_CASE], 23)


def _rand(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).half()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
            interleaved: bool) -> torch.Tensor:
    """flash-attn's rotation: x * cos + rotate_half(x) * sin over the first rotary_dim dims, cos and
    sin of each token's position widened to the rotary dim, computed in fp32, rounded to x's dtype."""
    rd = 2 * cos.shape[1]
    c, s = cos.float()[positions].unsqueeze(2), sin.float()[positions].unsqueeze(2)  # [B, S, 1, rd / 2]
    widen = (lambda t: t.repeat_interleave(2, -1)) if interleaved else (lambda t: torch.cat((t, t), -1))
    xr = x[..., :rd].float()
    if interleaved:
        half_turn = torch.stack((-xr[..., 1::2], xr[..., 0::2]), -1).flatten(-2)
    else:
        half_turn = torch.cat((-xr[..., rd // 2:], xr[..., :rd // 2]), -1)
    return torch.cat(((xr * widen(c) + half_turn * widen(s)).to(x.dtype), x[..., rd:]), -1)


def _positions(lens: torch.Tensor, count: int, per_row: bool) -> torch.Tensor:
    steps = torch.arange(count) if per_row else torch.zeros(count, dtype=torch.long)
    return lens.unsqueeze(1) + steps


def run_case(paged, interleaved, rotary, leftpad, batch_idx, window, alibi, heads, seed=0, s0=3, new=2) -> None:
    gen = torch.Generator().manual_seed(seed)
    kv_heads = KV_HEADS[heads]
    causal, window_size = WINDOWS[window]
    local = causal or window != "none"
    q = _rand(gen, BATCH, s0, HEADS, HEAD)
    k_new, v_new = _rand(gen, BATCH, new, kv_heads, HEAD), _rand(gen, BATCH, new, kv_heads, HEAD)
    lens = torch.randint(0, CAPACITY - max(s0, new) + 1, (BATCH,), generator=gen)
    rows = torch.arange(BATCH)
    if paged:  # sequence b's keys through row b of a shuffled block table; one page belongs to nobody
        per_seq = -(-CAPACITY // PAGE)
        k_cache, v_cache = (_rand(gen, BATCH * per_seq + 1, PAGE, kv_heads, HEAD) for _ in range(2))
        block_table = torch.randperm(BATCH * per_seq + 1, generator=gen)[: BATCH * per_seq].to(torch.int32)
        block_table = block_table.reshape(BATCH, per_seq)
        slots = [block_table[b].long().repeat_interleave(PAGE) * PAGE + torch.arange(per_seq * PAGE) % PAGE
                 for b in range(BATCH)]
    else:
        rows = torch.randperm(2 * BATCH, generator=gen)[:BATCH] if batch_idx else rows
        k_cache, v_cache = (_rand(gen, 2 * BATCH if batch_idx else BATCH, CAPACITY, kv_heads, HEAD) for _ in range(2))
        block_table = None
        slots = [int(r) * CAPACITY + torch.arange(CAPACITY) for r in rows]
    pads = torch.tensor([int(torch.randint(0, int(n) + 1, (1,), generator=gen)) for n in lens]) if leftpad else None
    slopes = torch.rand(BATCH, HEADS, generator=gen) * 0.3 if alibi else None
    rotary_dim = int(rotary * HEAD) // 16 * 16
    cos = sin = None
    if rotary_dim:
        angle = torch.rand(CAPACITY, rotary_dim // 2, generator=gen) * 2 * math.pi
        cos, sin = torch.cos(angle).half(), torch.sin(angle).half()

    # flash-attn's caches after the call: flat [slots, kv_heads, D] views, the new rows written.
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    k_written = _rotate(k_new, cos, sin, _positions(lens, new, True), interleaved) if rotary_dim else k_new
    flat_k, flat_v = k_ref.view(-1, kv_heads, HEAD), v_ref.view(-1, kv_heads, HEAD)
    for b in range(BATCH):
        at = slots[b][int(lens[b]):int(lens[b]) + new]
        flat_k[at], flat_v[at] = k_written[b], v_new[b]

    out = ptofa.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens.to(torch.int32),
        cache_batch_idx=rows.to(torch.int32) if batch_idx else None,
        cache_leftpad=pads.to(torch.int32) if leftpad else None, block_table=block_table, causal=causal,
        window_size=window_size, rotary_interleaved=interleaved, alibi_slopes=slopes, backend="sim")
    assert torch.equal(k_cache, k_ref), "the k cache differs from flash-attn's"
    assert torch.equal(v_cache, v_ref), "the v cache differs from flash-attn's"

    # The attention over the written caches: q rotated at cache_seqlens (+ its row under a mask), each
    # sequence's keys from its left padding to cache_seqlens + S_new, masks and ALiBi bottom-right.
    q_ro = _rotate(q, cos, sin, _positions(lens, s0, local), interleaved) if rotary_dim else q
    win = (window_size[0], 0) if causal else window_size
    parts = []
    for b in range(BATCH):
        keys = slots[b][0 if pads is None else int(pads[b]):int(lens[b]) + new]
        k_b, v_b = flat_k[keys].unsqueeze(0), flat_v[keys].unsqueeze(0)
        parts.append(reference_fa(q_ro[b:b + 1], k_b, v_b, 1 / math.sqrt(HEAD), win,
                                  alibi_slopes=None if slopes is None else slopes[b:b + 1]))
    ref = Reference(*(torch.cat([getattr(p, f) for p in parts]) for f in ("out32", "out_low", "lse32", "lse_low")))
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()


def test_fast_grid_meets_every_value() -> None:
    for axis, values in enumerate(AXES.values()):
        assert {case[axis] for case in FAST} == set(values)


@pytest.mark.parametrize("case", FAST, ids=lambda c: "-".join(map(str, c)))
def test_kvcache_writes_flash_attns_caches(case) -> None:
    run_case(*case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in _grid() if c not in FAST], ids=lambda c: "-".join(map(str, c)))
def test_kvcache_writes_flash_attns_caches_whole_grid(case) -> None:
    run_case(*case, seed=1, s0=4, new=4)


@pytest.mark.parametrize("paged, appending", [(True, True), (True, False), (False, True), (False, False)])
def test_out_of_range_cache_raises_runtime_error_and_writes_nothing(paged, appending) -> None:
    """cache_seqlens (+ S_new) one key past what the block table (or the cache row) addresses: a
    RuntimeError naming it with the numbers, both caches untouched; exactly at capacity runs."""
    gen = torch.Generator().manual_seed(7)
    size = 2 * PAGE
    k_cache, v_cache = (_rand(gen, 4, PAGE, 1, HEAD) for _ in range(2)) if paged else \
        (_rand(gen, 1, size, 1, HEAD) for _ in range(2))
    block_table = torch.tensor([[3, 1]], dtype=torch.int32) if paged else None
    new = 1 if appending else 0
    k_new, v_new = (_rand(gen, 1, 1, 1, HEAD) for _ in range(2)) if appending else (None, None)
    q = _rand(gen, 1, 1, 2, HEAD)
    before = k_cache.clone(), v_cache.clone()
    over = size - new + 1
    name = "block_table" if paged else "k_cache"
    where = f"max_pages=2 pages of page_size={PAGE} = {size} keys" if paged else f"S_cache = {size} keys"
    with pytest.raises(RuntimeError, match=rf"{name}: cache_seqlens\[0\] \+ S_new = {over} \+ {new} = {over + new} "
                                           rf"keys, more than .*\({where}\)"):
        ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=torch.tensor([over]),
                                      block_table=block_table, backend="sim")
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])
    out = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=torch.tensor([size - new]),
                                        block_table=block_table, backend="sim")
    assert torch.isfinite(out).all()
