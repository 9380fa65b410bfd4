"""Varlen (packed) prefill on the simulator: ragged sequences, zero lengths, causal/window, GQA, LSE.

Every case runs the emitted varlen `.pto` with guard regions around every GM tensor and
checks O and LSE per sequence against `reference_fa` on the gathered sequence.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_variants import Guarded, config, parsed

from ptofa.launch.base import TORCH_DTYPES
from ptofa.pipeline import UNIT_FIELDS, ConfigError
from ptofa.reference import check_accuracy, check_lse
from ptofa.sim import simulate
from ptofa.launch.sim import sim_kernel_args
from ptofa.launch.varlen import reference_varlen, seqlens_of, unit_table, varlen_shape
from ptofa.kernels.builtin_mods.window import window_mods


def run_varlen(cfg, q_lens, k_lens, heads=2, kv_heads=1, window=(-1, -1), block_dim=3, seed=0):
    shape = varlen_shape(q_lens, k_lens, heads, kv_heads, window)
    shape.check(cfg)
    g = torch.Generator().manual_seed(seed)
    dt = TORCH_DTYPES[cfg.in_dtype]
    total_q, total_k = sum(q_lens), sum(k_lens)
    q = torch.randn(max(total_q, 1), heads, cfg.head, generator=g).to(dt)[:total_q]
    k = torch.randn(max(total_k, 1), kv_heads, cfg.head, generator=g).to(dt)[:total_k]
    v = torch.randn(max(total_k, 1), kv_heads, cfg.head, generator=g).to(dt)[:total_k]
    scale = 1 / math.sqrt(cfg.head)
    table = unit_table(cfg, q_lens, k_lens, heads, window)
    o = Guarded.like(torch.full((total_q, heads, cfg.head), math.nan, dtype=TORCH_DTYPES[cfg.out_dtype]))
    lse = Guarded.like(torch.full((heads, total_q), math.nan)) if cfg.lse else None
    inputs = [Guarded.like(t.contiguous()) for t in (q, k, v)]
    units = Guarded.like(table)
    args = sim_kernel_args(cfg, shape, *[x.pointer() for x in inputs], o.pointer(), block_dim, scale,
                           lse=None if lse is None else lse.pointer(), units=table)
    args["units"] = units.pointer()
    simulate(parsed(cfg), args, block_dim)
    for x in [*inputs, o, units] + ([lse] if lse else []):
        assert x.guards_intact(), "a guard region around a GM tensor was written"
    ref = reference_varlen(q, k, v, q_lens, k_lens, scale, window, TORCH_DTYPES[cfg.out_dtype])
    if total_q:
        acc = check_accuracy(o.inner.float(), ref.out32, ref.out_low)
        assert acc.passed, acc.summary()
        if cfg.lse:
            lse_acc = check_lse(lse.inner, ref)
            assert lse_acc.passed, lse_acc.message
    return o.inner, None if lse is None else lse.inner, table


@pytest.mark.parametrize("knobs, q_lens, k_lens, window, heads", [
    (dict(lse=True), [0, 1, 127, 129, 300], [5, 1, 127, 129, 300], (-1, -1), (4, 2)),
    (dict(mods=window_mods(), lse=True), [0, 1, 127, 129, 300], [0, 1, 127, 129, 300], (-1, 0), (4, 1)),
    (dict(mods=window_mods(), lse=True, tile_s1=128, qk_preload=2), [200, 17, 140], [260, 300, 10], (30, 5), (2, 2)),
    (dict(mods=window_mods(), in_dtype="bf16", out_dtype="f32"), [64, 300], [500, 100], (-1, 0), (8, 2)),
    (dict(lse=True, head=64, tile_s1=512, qk_preload=2), [129, 0, 3], [1000, 7, 0], (-1, -1), (2, 1)),
])
def test_varlen_matches_per_sequence_reference(knobs, q_lens, k_lens, window, heads) -> None:
    run_varlen(config(varlen=True, **knobs), q_lens, k_lens, heads[0], heads[1], window)


def test_sequence_without_keys_gives_zero_and_inf() -> None:
    out, lse, _ = run_varlen(config(varlen=True, lse=True, out_dtype="f32"), [5, 9], [0, 40])
    assert torch.all(out[:5] == 0) and torch.all(torch.isinf(lse[:, :5]))
    assert torch.isfinite(lse[:, 5:]).all()


def test_unit_table_is_longest_first_and_complete() -> None:
    cfg = config(varlen=True, mods=window_mods(), tile_s1=128, qk_preload=2)
    table = unit_table(cfg, [300, 0, 20], [300, 5, 2000], heads=2, window=(-1, 0))
    assert table.dtype == torch.int32 and table.shape == (2 * (3 + 1), UNIT_FIELDS)
    rows = {tuple(r) for r in table.tolist()}
    assert (300, 20, 305, 2000, 1, 0, 2, 0, 1) in rows  # the short prompt against 2000 keys: 16 tiles, first
    assert tuple(table[0].tolist())[1] == 20


@pytest.mark.parametrize("cu, total, message", [
    ([0, 5, 3], 3, "cu_seqlens_q: must be non-decreasing, got 5 then 3 at index 1"),
    ([0, 5, 9], 10, "cu_seqlens_q: must end at the packed length 10, ends at 9"),
    ([1, 5], 5, "cu_seqlens_q: must start at 0, got 1"),
    ([0.0, 5.0], 5, "cu_seqlens_q: must be an integer tensor [B + 1]"),
])
def test_bad_cu_seqlens_name_the_rule(cu, total, message) -> None:
    with pytest.raises(ConfigError) as info:
        seqlens_of(torch.tensor(cu), total, "cu_seqlens_q")
    assert message in str(info.value)


def test_varlen_with_key_padding_is_rejected() -> None:
    with pytest.raises(ConfigError, match="varlen: varlen kernels take their key lengths from cu_seqlens"):
        config(varlen=True, key_padding=True)


def test_cli_run_varlen() -> None:
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, ["run", "--backend", "sim", "--seqlens", "100,0,37", "--kv-seqlens", "90,5,300",
                                       "--heads", "2", "--kv-heads", "1", "--causal", "--lse"])
    assert result.exit_code == 0, result.output
    assert " pass " in result.output


def _predicted(cfg, shape) -> float:
    from ptofa.runner import run_case

    result = run_case(cfg, shape, backend="sim", timing=True)
    assert result.status == "pass", result.message
    return result.predicted_us


def test_varlen_is_predicted_faster_than_padding() -> None:
    """A packed batch costs what its sequences cost, not B times the longest (smaller analog of the slow test)."""
    from ptofa.pipeline import ProblemShape

    lens = [2048, 128, 128, 32]
    packed = _predicted(config(varlen=True), varlen_shape(lens, lens, 1, 1))
    padded = _predicted(config(), ProblemShape(4, 1, 2048, 2048))
    assert padded > 2.0 * packed


@pytest.mark.slow
def test_issue_varlen_figure() -> None:
    """Lengths (8192, 512, 512, 128) against padding every sequence to 8192 (issue 'The serving path')."""
    from ptofa.pipeline import ProblemShape

    lens = [8192, 512, 512, 128]
    packed = _predicted(config(varlen=True), varlen_shape(lens, lens, 1, 1))
    padded = _predicted(config(), ProblemShape(4, 1, 8192, 8192))
    assert padded > 3.0 * packed


def test_longest_first_snake_order_is_predicted_faster() -> None:
    """Causal units of unequal work: the unit table's longest-first ranks, handed out in a snake over
    the waves, finish before the same units in Q-block order (timing model: 20 units on 8 blocks, the
    last wave partial, as at S = 8192 on 24 blocks: 111 vs 127 us)."""
    from ptofa.sim.timing import predict
    from ptofa.launch.varlen import make_varlen_inputs

    s, blocks = 2560, 8
    cfg = config(varlen=True, mods=window_mods())
    shape = varlen_shape([s], [s], 1, 1, (-1, 0))
    q, k, v = make_varlen_inputs(shape, cfg, 0)
    table = unit_table(cfg, [s], [s], 1, (-1, 0))
    times = {}
    for name, units in (("longest_first", table), ("q_block_order", table[torch.argsort(table[:, 5])].contiguous())):
        o = torch.empty(s, 1, 128, dtype=torch.float16)
        args = sim_kernel_args(cfg, shape, q, k, v, o, blocks, 1 / math.sqrt(128), units=units)
        times[name] = predict(simulate(parsed(cfg), args, blocks, trace=True).trace, cfg, shape, block_dim=blocks).kernel_us
    assert times["longest_first"] < 0.95 * times["q_block_order"], times
