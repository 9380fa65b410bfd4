"""The backward at the tuned head dims (64, 96, 128, 192, 256; the other kernel widths: test_head_dims.py): gradients against fp64
autograd in both dtypes and both modes on odd shapes, determinism, key padding, the D chunks and
shared L0A / L0B operand tiles, budgets."""

from __future__ import annotations

import pytest
import torch

import ptofa
from ptofa.attention.backward import attention_backward, check_gradients, reference_backward
from ptofa.kernels.bwd_pipeline import (
    BWD_HEADS,
    DEFAULT_BLOCKS,
    TUNED_HEADS,
    BwdConfig,
    budget,
    default_config,
    operand_tiles,
    resident_roles,
    tile_plan,
)
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.pipeline import ConfigError
from ptofa.ir.textio import check_text
from ptofa.kernels.builtin_mods.window import window_mods
from test_backward import _inputs

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def _grads(q, k, v, dout, window, deterministic=True, mask=None, **kwargs):
    out, lse = ptofa.flash_attn_func(q, k, v, window_size=window, key_padding_mask=mask, return_lse=True, backend="sim")
    win = None if window == (-1, -1) else window
    return attention_backward(q, k, v, out, lse, dout, window=win, deterministic=deterministic, key_padding_mask=mask,
                              **kwargs)


def _assert_rule(grads, q, k, v, dout, window, mask=None):
    acc = check_gradients(*grads, reference_backward(q, k, v, dout, window=window, key_padding_mask=mask))
    failed = {name: str(a) for name, a in acc.items() if not a.passed}
    assert not failed, failed


CASES = [
    # d, dtype, deterministic, (b, n, kvn, s0, s1), window
    (96, "f16", True, (1, 2, 1, 77, 93), (-1, -1)),  # GQA 2, tails on both sides
    (96, "bf16", True, (1, 1, 1, 130, 70), (-1, 0)),  # causal S0 > S1: rows that see no key
    (96, "f16", False, (1, 3, 1, 70, 130), (-1, 0)),  # MQA, causal S0 < S1
    (96, "bf16", False, (2, 2, 2, 65, 97), (20, 5)),  # sliding window, batch 2
    (192, "f16", True, (1, 2, 1, 100, 70), (-1, 0)),  # causal S0 > S1, GQA 2
    (192, "bf16", True, (1, 1, 1, 77, 93), (30, 10)),  # sliding window
    (192, "f16", False, (1, 2, 2, 93, 77), (-1, -1)),  # S0 > S1, tails
    (192, "bf16", False, (1, 4, 1, 50, 120), (-1, 0)),  # MQA 4, causal S0 < S1
    (256, "f16", True, (1, 2, 1, 77, 93), (-1, 0)),  # GQA 2, causal S0 < S1
    (256, "bf16", True, (1, 1, 1, 150, 60), (-1, 0)),  # causal S0 > S1
    (256, "f16", False, (1, 2, 1, 70, 90), (16, 8)),  # sliding window, GQA 2
    (256, "bf16", False, (2, 1, 1, 45, 77), (-1, -1)),  # batch 2, tails
    (64, "bf16", False, (1, 2, 1, 50, 83), (-1, 0)),  # the two head dims that had the backward already,
    (128, "bf16", True, (1, 2, 2, 83, 50), (10, 0)),  # in the modes / dtypes their tests use least
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_gradients_match_fp64_autograd(case):
    d, dt, deterministic, (b, n, kvn, s0, s1), window = case
    q, k, v, dout = _inputs(b, n, kvn, s0, s1, d, DTYPES[dt], seed=d)
    grads = _grads(q, k, v, dout, window, deterministic)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    _assert_rule(grads, q, k, v, dout, window)


@pytest.mark.parametrize("d", [96, 192, 256])
def test_deterministic_mode_is_bit_identical_across_runs_and_block_counts(d):
    q, k, v, dout = _inputs(1, 2, 1, 70, 100, d, torch.float16, seed=3)
    out, lse = ptofa.flash_attn_func(q, k, v, causal=True, return_lse=True, backend="sim")
    runs = [attention_backward(q, k, v, out, lse, dout, window=(-1, 0), block_dim=blocks) for blocks in (None, None, 1, 3)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)


@pytest.mark.parametrize("d, deterministic", [(96, False), (192, True), (256, False)])
def test_key_padding_mask_at_new_head_dims(d, deterministic):
    """Padding keys get exactly zero dk, dv; the rest within the rule (GQA, a window, a hole in one batch)."""
    q, k, v, dout = _inputs(2, 2, 1, 45, 70, d, torch.bfloat16, seed=7)
    mask = torch.ones(2, 70, dtype=torch.bool)
    mask[0, 60:] = False
    mask[1, 5:30] = False
    grads = _grads(q, k, v, dout, (-1, 0), deterministic, mask)
    _assert_rule(grads, q, k, v, dout, (-1, 0), mask)
    dk, dv = grads[1], grads[2]
    assert (dk[~mask] == 0).all() and (dv[~mask] == 0).all() and dk[mask].abs().sum() > 0


def test_autograd_with_key_padding_mask_at_d256():
    """flash_attn_func's output is differentiable with a key-padding mask at a split head dim (the custom
    op saves the mask and passes it to the backward kernels)."""
    q, k, v, dout = _inputs(1, 2, 2, 40, 56, 256, torch.float16, seed=11)
    mask = torch.ones(56, dtype=torch.bool)
    mask[20:33] = False
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    ptofa.flash_attn_func(*leaves, causal=True, key_padding_mask=mask, backend="sim").backward(dout)
    _assert_rule([x.grad for x in leaves], q, k, v, dout, (-1, 0), mask)


@pytest.mark.slow
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("d", TUNED_HEADS)
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (48, 16)])
def test_gradient_grid(d, dt, deterministic, window):
    q, k, v, dout = _inputs(2, 4, 2, 201, 157, d, DTYPES[dt])
    _assert_rule(_grads(q, k, v, dout, window, deterministic), q, k, v, dout, window)


# ---- tile plans, budgets, IR -----------------------------------------------------------------


@pytest.mark.parametrize("atomic", [False, True])
@pytest.mark.parametrize("d", BWD_HEADS)
def test_default_configs_fit_and_verify(d, atomic):
    config = default_config(d, "bf16", mods=window_mods(), atomic_dq=atomic, key_padding=True)
    tuned = min(t for t in TUNED_HEADS if t >= d)  # a width between the tuned ones takes the next one's blocks
    assert (config.block_kv, config.block_q, config.dkdv_passes, config.dq_block_kv) == DEFAULT_BLOCKS[(tuned, atomic)]
    for kernel in config.kernels:
        assert all(row.used <= row.capacity for row in budget(config, kernel).rows)
        text = emit_bwd(config, kernel)
        check_text(text, f"{kernel}.pto")
        names = sorted(line.split("=")[0].strip().lstrip("%") for line in text.splitlines() if "pto.alloc_tile" in line)
        assert names == sorted(spec.name for spec in tile_plan(config, kernel))


def test_d_chunks_above_128_and_two_passes_at_256():
    """192 and 256 split every [*, D] operand in two D chunks (dK, dV, dQ accumulators per chunk);
    at 256 dV and dK take turns in one accumulator set (two passes over a unit's steps)."""
    expected = {96: ["dv_acc", "dk_acc"], 128: ["dv_acc", "dk_acc"], 192: ["dv_acc0", "dv_acc1", "dk_acc0", "dk_acc1"],
                256: ["dkv_acc0", "dkv_acc1"]}
    for d, chunk in ((96, 96), (128, 128), (192, 96), (256, 128)):
        config = default_config(d)
        assert config.d_chunk == chunk
        assert [t.name for t in tile_plan(config, "dkdv") if t.loc == "acc"] == ["st_acc", "dpt_acc", *expected[d]]
        dq_acc = [t.name for t in tile_plan(config, "dq") if t.loc == "acc"]
        assert dq_acc == (["s_acc", "dp_acc", "dq_acc"] if d <= 128 else ["s_acc", "dp_acc", "dq_acc0", "dq_acc1"])
    text = emit_bwd(default_config(256), "dkdv")
    assert text.count("%dkv_acc0") > 2 and "dk_acc" not in text


def test_operand_tiles_are_shared_only_when_they_do_not_fit():
    # D = 64: every operand has a tile of its own; K and V stay in L0A for the whole unit
    own = operand_tiles(default_config(64), "dkdv")
    assert len(set(own.values())) == len(own) and {"k", "v"} <= resident_roles(default_config(64), "dkdv")
    # D = 128 and 256 with 128-query steps: all right operands [128, 128], a ring of two L0B tiles in turn
    for d in (128, 256):
        right = {role: name for role, name in operand_tiles(default_config(d), "dkdv").items()
                 if role.startswith(("qt", "dot", "do", "q"))}
        assert set(right.values()) == {"r0_right", "r1_right"}
    assert [operand_tiles(default_config(256), "dkdv")[r] for r in ("qt0", "qt1", "dot0", "dot1")] == \
        ["r0_right", "r1_right", "r0_right", "r1_right"]
    # D = 96: [96, 128] and [128, 96] operands, four would take 96 KiB of L0B: one tile per shape
    tiles = operand_tiles(default_config(96), "dkdv")
    assert tiles["qt"] == tiles["dot"] != tiles["do"] == tiles["q"]
    right = next(row for row in budget(default_config(96), "dkdv").rows if row.space == "right")
    assert right.used == 2 * 96 * 128 * 2 <= right.capacity
    # D = 256 dq kernel: Q and dO chunks share a ring in L0A, moved in per use (not resident)
    dq = default_config(256)
    assert not {"q0", "q1", "do0", "do1"} & resident_roles(dq, "dq")


@pytest.mark.parametrize("kwargs, numbers", [
    # dV, dK of a 64-key block at D = 256: 2 x 2 x 32 KiB (per D chunk) + S^T, dP^T 2 x 32 KiB > 128 KiB
    (dict(head=256, block_kv=64, block_q=128), "L0C"),
    (dict(head=192, block_kv=64, block_q=128), "L0C"),
])
def test_accumulators_that_do_not_fit_name_the_budget(kwargs, numbers):
    with pytest.raises(ConfigError, match="memory budget") as err:
        BwdConfig(**kwargs)
    assert numbers in str(err.value) and "dv_acc0" in str(err.value)


def test_timing_model_counts_the_second_pass():
    """Two dkdv passes compute S^T twice: 5 GEMMs per score (6 with atomic dQ) instead of 4 (5)."""
    from ptofa.sim.bwd_timing import gemms

    assert gemms(default_config(128), "dkdv") == 4 and gemms(default_config(256), "dkdv") == 5
    assert gemms(default_config(192, atomic_dq=True), "dkdv") == 6


def test_unsupported_head_dims_name_the_rule():
    with pytest.raises(ConfigError, match=r"head dim: head=72 is not a kernel width"):
        default_config(72)
    with pytest.raises(ConfigError, match=r"head dim: head=72 is not a kernel width"):
        BwdConfig(head=72)
