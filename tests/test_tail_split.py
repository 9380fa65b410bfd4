"""Per-unit split counts (issue 17, the last wave's tail): mixed counts in one launch against the
reference and the unsplit kernel on guarded tensors (a partial the forward kernel did not write is
NaN in the workspace, so reading one shows in O), the reduce table, the exact workspace, the
planner on synthetic costs, the dense call and the --balance options."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch
from click.testing import CliRunner
from test_splitkv import _check, _split, _unsplit
from test_variants import config

import ptofa
from ptofa.launch import dispatch
from ptofa.launch import splitkv
from ptofa.cli.main import main
from ptofa.pipeline import MAX_SPLITS, ConfigError, workspace_bytes
from ptofa.reference import check_accuracy, check_lse, reference_fa
from ptofa.launch.splitkv import SplitCosts, balanced_splits, plan_splits, plan_varlen
from ptofa.launch.varlen import make_varlen_inputs, reduce_table, reference_varlen, unit_table, unit_visible_tiles, varlen_shape
from ptofa.kernels.builtin_mods.window import window_mods

LENS = [0, 300, 640]
# A unit split 7 or 16 ways has more splits than its at most 5 tiles: empty splits (LSE -inf, O 0).
PATTERN = [1, 2, 3, 7, 1, 16, 1, 4]


def _counts(units: int) -> list[int]:
    return [PATTERN[i % len(PATTERN)] for i in range(units)]


@pytest.mark.parametrize("window, heads, kv_heads", [((-1, -1), 2, 2), ((-1, 0), 2, 2), ((100, 20), 2, 2),
                                                     ((-1, -1), 4, 2), ((-1, 0), 4, 1)])
def test_mixed_split_counts_equal_unsplit_and_reference(window, heads, kv_heads) -> None:
    base = config(head=64, varlen=True, lse=True, mods=window_mods(window != (-1, -1)), tile_s1=128, qk_preload=2)
    cfg = dataclasses.replace(base, split_kv=True)
    shape = varlen_shape(LENS, LENS, heads, kv_heads, window)
    q, k, v = make_varlen_inputs(shape, base, seed=4)
    scale = 1 / 8
    ref = reference_varlen(q, k, v, LENS, LENS, scale, window, torch.float16)
    whole = unit_table(base, LENS, LENS, heads, window)
    ref_out, ref_lse = _unsplit(base, shape, q, k, v, whole, scale)
    counts = _counts(int(whole.shape[0]))
    table = unit_table(cfg, LENS, LENS, heads, window, counts)
    assert table.shape[0] == sum(counts) and max(counts) == MAX_SPLITS
    tiles = unit_visible_tiles(base, whole, window)
    assert any(n > t for n, t in zip(counts, tiles))  # some unit has empty splits
    out, lse = _split(cfg, shape, q, k, v, table, scale, max(counts), 6)
    _check(out, lse, ref, ref_out, ref_lse)


def test_reduce_table_lists_the_split_units_with_their_counts() -> None:
    cfg = config(head=64, varlen=True, split_kv=True, tile_s1=128)
    whole = unit_table(cfg, LENS, LENS, 2)
    counts = _counts(int(whole.shape[0]))
    red = reduce_table(cfg, unit_table(cfg, LENS, LENS, 2, num_splits=counts), 2)
    assert sorted(red[:, 3].tolist()) == sorted(n for n in counts if n > 1)
    units = {(int(h), int(r)) for h, r, _, _ in red.tolist()}
    assert len(units) == len(red)  # one entry per split unit
    assert all(1 <= rows <= cfg.cube_s0 for _, _, rows, _ in red.tolist())
    assert reduce_table(cfg, whole, 2).shape == (0, 4)  # nothing split, nothing reduced


def test_per_unit_counts_rules() -> None:
    cfg = config(head=64, varlen=True, split_kv=True)
    units = int(unit_table(cfg, LENS, LENS, 2).shape[0])
    with pytest.raises(ConfigError, match=rf"split-KV: 3 per-unit split counts for a table of {units} units"):
        unit_table(cfg, LENS, LENS, 2, num_splits=[2, 2, 2])
    with pytest.raises(ConfigError, match=rf"split-KV: 17 splits of one unit; at most MAX_SPLITS={MAX_SPLITS}"):
        unit_table(cfg, LENS, LENS, 2, num_splits=[17] + [1] * (units - 1))
    with pytest.raises(ConfigError, match="needs num_splits >= 1"):
        unit_table(cfg, LENS, LENS, 2, num_splits=[0] + [1] * (units - 1))
    with pytest.raises(ConfigError, match="more than num_splits=2"):
        _split(cfg, varlen_shape(LENS, LENS, 2, 2), *make_varlen_inputs(varlen_shape(LENS, LENS, 2, 2), cfg, 0),
               unit_table(cfg, LENS, LENS, 2, num_splits=[3] * units), 0.1, 2, 4)


def test_workspace_is_the_slot_rings_and_one_block_per_split() -> None:
    cfg = config(head=64, varlen=True, split_kv=True)
    shape = varlen_shape([5, 300], [300, 7], 3, 1)
    total_q, heads, head = 305, 3, 64
    for splits in (1, 2, 7, 16):
        expected = 4 * cfg.gm_slot_f32_per_block * 5 + 4 * splits * total_q * heads * (head + 1)
        assert workspace_bytes(cfg, shape, 5, splits) == expected


def _uniform(tiles: list[int], s: int) -> list[int]:
    return [s] * len(tiles)


COSTS = SplitCosts(unit_us=2.0, tile_us=1.0, reduce_unit_us=1.5, reduce_split_us=0.2)


@pytest.mark.parametrize("units, tiles", [(32, 16), (128, 32), (50, 8)])
def test_planner_splits_only_the_last_wave(units, tiles) -> None:
    counts = balanced_splits(COSTS, [tiles] * units, 24)
    whole = units // 24 * 24
    assert counts[:whole] == [1] * whole and min(counts[whole:]) > 1
    assert sum(counts[whole:]) <= 24  # the last wave's units fill one wave of entries
    ideal = (COSTS.unit_us + COSTS.tile_us * tiles) * units / 24
    assert COSTS.plan_us([tiles] * units, counts, 24) < 1.15 * ideal + 2 * COSTS.reduce_unit_us


def test_plan_charges_each_launch_its_block_start_up() -> None:
    """A split plan pays two start-ups (the forward launch's, then the reduce's, queued behind it),
    an unsplit one the forward's only, as `timing.launch_cycles` charges a predicted launch."""
    started = dataclasses.replace(COSTS, start_us=5.6, reduce_start_us=0.5)
    tiles = [8] * 10
    assert started.plan_us(tiles, [1] * 10, 24) == pytest.approx(COSTS.plan_us(tiles, [1] * 10, 24) + 5.6)
    assert started.plan_us(tiles, [2] * 10, 24) == pytest.approx(COSTS.plan_us(tiles, [2] * 10, 24) + 6.1)


def test_planner_is_never_worse_than_a_uniform_count() -> None:
    rng = random.Random(17)
    for _ in range(40):
        tiles = sorted((rng.randint(1, 40) for _ in range(rng.randint(1, 90))), reverse=True)
        cores = rng.choice([8, 20, 24])
        counts = balanced_splits(COSTS, tiles, cores)
        best = COSTS.plan_us(tiles, counts, cores)
        for s in range(1, MAX_SPLITS + 1):
            assert best <= COSTS.plan_us(tiles, _uniform(tiles, s), cores) + 1e-9
        assert all(1 <= n <= MAX_SPLITS for n in counts) and len(counts) == len(tiles)


def test_planner_keeps_one_split_when_units_fill_the_cores(monkeypatch) -> None:
    assert balanced_splits(COSTS, [16] * 48, 24) == [1] * 48
    cfg = config(head=64, varlen=True)
    table = unit_table(cfg, [128] * 48, [2048] * 48, 1)
    monkeypatch.setattr(splitkv, "split_costs", lambda *a: pytest.fail("no costs needed for an even fill"))
    assert plan_splits(cfg, table, 24) == [1] * 48


def test_plan_takes_per_unit_counts() -> None:
    cfg = config(head=64, varlen=True)
    shape = varlen_shape(LENS, LENS, 2, 2)
    units = int(unit_table(cfg, LENS, LENS, 2).shape[0])
    counts = _counts(units)
    plan = plan_varlen(cfg, shape, lambda c, n: unit_table(c, LENS, LENS, 2, num_splits=n), counts, 24)
    assert plan.config.split_kv and plan.num_splits == 16 and plan.unit_splits == tuple(counts)
    assert plan.table.shape[0] == sum(counts)
    assert plan.describe() == "+".join(f"{counts.count(n)}x{n}" for n in sorted(set(counts), reverse=True))
    with pytest.raises(ConfigError, match="2 per-unit split counts"):
        plan_varlen(cfg, shape, lambda c, n: unit_table(c, LENS, LENS, 2, num_splits=n), [1, 2], 24)




def test_dense_call_balances_the_last_wave(monkeypatch) -> None:
    """flash_attn_func (automatic config) on 26 units: the model splits only the 2 units of the last wave."""
    launched = []
    real = dispatch.launch_on

    def spy(backend, plan, tensors, **kw):
        if plan.split is not None:
            launched.append(plan.split.launch_splits)
        return real(backend, plan, tensors, **kw)

    monkeypatch.setattr(dispatch, "launch_on", spy)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, 26, 64, generator=g).half() for n in (128, 512, 512))
    out, lse = ptofa.flash_attn_func(q, k, v, return_lse=True, backend="sim")
    (counts,) = launched
    assert not isinstance(counts, int) and sorted(counts)[:24] == [1] * 24 and max(counts) > 1, counts
    ref = reference_fa(q, k, v, 0.125)
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed and check_lse(lse, ref).passed


def test_run_balance_prints_the_split_and_both_launches() -> None:
    args = ["run", "--backend", "sim", "--batch", "1", "--heads", "26", "--s0", "128", "--s1", "512", "--head", "64",
            "--tile-s1", "128", "--qk-preload", "2", "--balance"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "balanced split-KV (units x splits: " in result.output
    assert "x1; 24 blocks): pass" in result.output.replace("\n", " ")
    assert "predicted speedup" in result.output
    bad = CliRunner().invoke(main, args + ["--backward"])
    assert bad.exit_code == 2 and "--balance: a dense shape on the sim backend" in bad.output


def test_sweep_balance_adds_a_split_row(tmp_path) -> None:
    # 13 heads x 4 Q blocks = 52 units: two full waves, then 4 units that the planner splits
    args = ["sweep", "--square", "--s1", "512", "--heads", "13", "--head-dim", "64", "--tile-s1", "128",
            "--qk-preload", "2", "--balance", "-j", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [row["key"].endswith(",balance=1,batch=1,heads=13,s0=512,s1=512,backend=sim") for row in rows] == [False, True]
    assert all(row["status"] == "pass" and row["predicted_us"] > 0 for row in rows)
    split = rows[1]["extra"]
    assert split["split"].endswith("x1") and split["main_us"] + split["reduce_us"] == pytest.approx(rows[1]["predicted_us"], abs=0.02)
    assert "note NxS: balanced split-KV, N units split S ways" in result.output
    assert rows[1]["predicted_us"] < rows[0]["predicted_us"]  # the model's own verdict on the split


def test_sweep_notes_a_balanced_launch_that_split_nothing() -> None:
    """When the planner splits no unit (the estimated gain is below the reduce launch's cost),
    the balanced row says "unsplit" (this crashed the summary table before)."""
    from ptofa.cli.sweep import _split_note

    assert _split_note({"extra": {"split": "unsplit"}}) == "unsplit"
    assert _split_note({"extra": {"split": "4x4+48x1"}}) == "4x4"
    assert _split_note({"extra": {}}) == ""
