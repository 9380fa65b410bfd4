"""The kernel cache (memory and disk) and the automatic config from the timing model.

Emits, parses and timing-model predictions are counted by wrapping the functions the
caches call; a "second process" is simulated by clearing the in-memory caches, so only
the disk entries remain.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

import ptofa
from ptofa.launch import kernel_cache
from ptofa.launch import npu
from ptofa.launch import tune
from ptofa.attention.core import auto_config
from ptofa.cli.main import main
from ptofa.attention.functional import flash_attn_func
from ptofa.launch.kernel_cache import clear_kernel_cache, get_kernel, kernel_cache_info, kernel_key
from ptofa.pipeline import FAConfig
from ptofa.reference import check_accuracy, reference_fa
from ptofa.launch.tune import TuneShape, prediction_count
from ptofa.kernels.builtin_mods.window import window_mods


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """An empty cache root per test, empty in-memory caches, and counted emits / parses."""
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(npu, "npu_available", lambda: (False, "no NPU in this test"))
    clear_kernel_cache()
    tune.clear_tune_memory()
    calls = {"emit": 0, "parse": 0}
    real_emit, real_parse = kernel_cache.emit_fa, kernel_cache.check_text

    def emit(config):
        calls["emit"] += 1
        return real_emit(config)

    def parse(text, path="<pto>"):
        calls["parse"] += 1
        return real_parse(text, path)

    monkeypatch.setattr(kernel_cache, "emit_fa", emit)
    monkeypatch.setattr(kernel_cache, "check_text", parse)
    yield calls
    clear_kernel_cache()
    tune.clear_tune_memory()


CONFIG = FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), lse=True)


def inputs(s0: int = 70, s1: int = 300, head: int = 64):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, s0, 2, head, generator=g).half()
    k, v = (torch.randn(1, s1, 2, head, generator=g).half() for _ in range(2))
    return q, k, v


def test_second_call_emits_and_parses_nothing(fresh_cache) -> None:
    q, k, v = inputs()
    first = flash_attn_func(q, k, v, causal=True, backend="sim", config=CONFIG)
    assert fresh_cache == {"emit": 1, "parse": 1}
    second = flash_attn_func(q, k, v, causal=True, backend="sim", config=CONFIG)
    assert fresh_cache == {"emit": 1, "parse": 1}
    assert torch.equal(first, second)
    info = kernel_cache_info()
    assert (info.hits, info.misses, info.size, info.emits, info.parses) == (1, 1, 1, 1, 1)


def test_a_new_process_reads_the_disk_entry_instead_of_emitting(fresh_cache) -> None:
    q, k, v = inputs()
    first = flash_attn_func(q, k, v, causal=True, backend="sim", config=CONFIG)
    clear_kernel_cache()  # what a new process starts with: the disk only
    second = flash_attn_func(q, k, v, causal=True, backend="sim", config=CONFIG)
    # The simulator parses the stored text once per process (an xDSL module is not stored); nothing is emitted.
    assert fresh_cache == {"emit": 1, "parse": 2}
    assert kernel_cache_info().disk_hits == 1 and kernel_cache_info().emits == 0
    assert torch.equal(first, second)


def test_disk_entries_are_keyed_by_config_version_and_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    key = kernel_key(CONFIG)
    assert kernel_key(FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), lse=True)) == key
    assert kernel_key(FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods())) != key  # a switch
    assert kernel_key(FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), lse=True, in_dtype="bf16")) != key
    assert kernel_key(FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), lse=True, target="a2")) != key
    monkeypatch.setattr(ptofa, "__version__", "0.0.0-other")
    assert kernel_key(CONFIG) != key
    monkeypatch.undo()
    monkeypatch.setattr(kernel_cache, "builder_digest", lambda: "another builder")
    assert kernel_key(CONFIG) != key


def test_a_corrupted_entry_is_ignored_and_rewritten(fresh_cache) -> None:
    text = get_kernel(CONFIG).text
    path = kernel_cache.cache_root() / "kernels" / f"{kernel_key(CONFIG)}.pto"
    assert path.read_text() == text and json.loads(path.with_suffix(".json").read_text())["sha256"]
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left behind
    path.write_text(text[: len(text) // 2])  # a torn write
    clear_kernel_cache()
    assert get_kernel(CONFIG).text == text
    assert fresh_cache["emit"] == 2 and path.read_text() == text
    path.with_suffix(".json").write_text("{not json")
    clear_kernel_cache()
    assert get_kernel(CONFIG).text == text and fresh_cache["emit"] == 3


def test_cache_root_follows_xdg_cache_home(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kernel_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_root() == tmp_path / "xdg" / "ptofa"
    from ptofa.launch.toolchain import cache_root as builds_root

    monkeypatch.delenv("PTOFA_CACHE", raising=False)
    assert builds_root() == tmp_path / "xdg" / "ptofa" / "builds"


def test_cache_info_and_clear_commands() -> None:
    get_kernel(CONFIG)
    clear_kernel_cache()
    get_kernel(CONFIG)  # a second process: a disk hit
    runner = CliRunner()
    info = runner.invoke(main, ["cache", "info"])
    assert info.exit_code == 0, info.output
    root = kernel_cache.cache_root()
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert f"root: {root}" in info.output
    assert "kernels: 1 entries; since the last clear: 1 disk hits, 1 misses (emitted)" in info.output
    assert f"total: {size} bytes" in info.output
    mine = root / "notes.txt"
    mine.write_text("not ptofa's")
    cleared = runner.invoke(main, ["cache", "clear"])
    assert cleared.exit_code == 0 and f"({size} bytes)" in cleared.output
    assert list(root.iterdir()) == [mine]  # only what ptofa wrote is deleted
    empty = runner.invoke(main, ["cache", "info"]).output
    assert "kernels: 0 entries; since the last clear: 0 disk hits, 0 misses" in empty


# --------------------------------------------------------------------------------------
# Automatic config from the timing model
# --------------------------------------------------------------------------------------

SMALL = TuneShape(batch=1, heads=2, kv_heads=2, s0=128, s1=512, head=64)


def test_tune_picks_the_argmin_of_its_table() -> None:
    result = tune.tune(SMALL)
    times = [row.predicted_us for row in result.table]
    assert all(t is not None and t > 0 for t in times), result.table
    # every candidate with prescale_q on, and the fastest of them again with it off
    assert times == sorted(times) and len(times) == len(tune.candidates(SMALL.base_config(), SMALL.s0)) + 1
    (off,) = [row for row in result.table if not row.prescale_q]
    fastest_on = min((row for row in result.table if row.prescale_q), key=lambda row: row.predicted_us)
    assert (off.tile_s1, off.qk_preload) == (fastest_on.tile_s1, fastest_on.qk_preload)
    best = min(result.table, key=lambda row: row.predicted_us)
    assert (result.config.tile_s1, result.config.qk_preload, result.config.prescale_q) == \
        (best.tile_s1, best.qk_preload, best.prescale_q)
    assert {(row.tile_s1, row.qk_preload) for row in result.table} >= {(128, 2), (256, 3)}
    for row in result.table:  # TFLOP/s is the shape's matmul flops over the predicted time
        assert row.tflops == pytest.approx(SMALL.problem().flops(64) / row.predicted_us / 1e6)


def test_tune_caches_per_bucket_in_memory_and_on_disk() -> None:
    before = prediction_count()
    first = tune.tune(SMALL)
    made = prediction_count() - before
    assert made == len(first.table)
    same_bucket = TuneShape(batch=1, heads=2, kv_heads=2, s0=100, s1=300, head=64)  # rounds up to 128 x 512
    assert tune.tune(same_bucket) is first and prediction_count() - before == made
    tune.clear_tune_memory()  # a new process: the ranking comes from disk
    again = tune.tune(SMALL)
    assert prediction_count() - before == made and again.table == first.table and again.config == first.config
    tune.tune(TuneShape(batch=1, heads=2, kv_heads=2, s0=128, s1=1024, head=64))  # another bucket
    assert prediction_count() - before == 2 * made


def test_attention_without_a_config_runs_the_tuned_one() -> None:
    q, k, v = inputs(s0=128, s1=512)
    out = flash_attn_func(q, k, v, backend="sim")
    chosen = tune.tune(TuneShape(1, 2, 2, 128, 512, 64, lse=True)).config  # the op always asks for LSE
    assert chosen in kernel_cache._KERNELS
    ref = reference_fa(q, k, v, 1 / math.sqrt(64))
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed


def test_auto_config_falls_back_to_the_fixed_rule_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(shape):
        raise RuntimeError("simulator report")

    monkeypatch.setattr(tune, "tune", broken)
    shape = SMALL.problem()
    with pytest.warns(RuntimeWarning, match="timing model's ranking failed .simulator report.; using the fixed rule"):
        config = auto_config(64, "f16", s1=512, shape=shape)
    assert (config.tile_s1, config.qk_preload) == (128, 2)


def test_tune_command_prints_the_ranking_and_the_choice() -> None:
    result = CliRunner().invoke(main, ["tune", "--s0", "128", "--s1", "512", "--heads", "2", "--head-dim", "64",
                                       "--causal"])
    assert result.exit_code == 0, result.output
    chosen = tune.tune(TuneShape(1, 2, 2, 128, 512, 64, window=(-1, 0))).config
    assert "predicted us" in result.output and "TFLOP/s" in result.output and "bound" in result.output
    assert "chosen: " + " ".join(chosen.summary().split()) in " ".join(result.output.split())
    first_row = next(line.split() for line in result.output.splitlines() if line.split()[:1] == ["1"])
    assert first_row[1:4] == [str(chosen.tile_s1), str(chosen.qk_preload), "on" if chosen.prescale_q else "off"]
    bad = CliRunner().invoke(main, ["tune", "--s0", "128", "--s1", "512", "--heads", "3", "--kv-heads", "2",
                                    "--head-dim", "64"])
    assert bad.exit_code == 2 and "heads=3 must be a multiple of kv_heads=2" in bad.output


def test_longest_first_makespan() -> None:
    assert tune.longest_first_makespan([3, 5, 3, 4, 3], 2) == 10  # 5+3 | 4+3+3
    assert tune.longest_first_makespan([2.0] * 6, 3) == 4.0 and tune.longest_first_makespan([7.0], 4) == 7.0


def test_causal_probes_equal_the_full_timing_model_when_each_block_runs_one_unit() -> None:
    """Two heads of two causal Q blocks on four blocks: each unit is probed alone with the keys it sees."""
    import dataclasses

    from ptofa.runner import run_case

    shape = TuneShape(batch=1, heads=2, kv_heads=1, s0=256, s1=512, head=64, window=(-1, 0))
    config = dataclasses.replace(shape.base_config(), tile_s1=128, qk_preload=2, exp_ring=None, cube_s1=None)
    full = run_case(config, shape.problem(), backend="sim", timing=True)
    assert full.passed, full.message
    assert tune.predict_config(config, shape).predicted_us == pytest.approx(full.predicted_us, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0)])
def test_tune_agrees_with_the_full_timing_model(window) -> None:
    """The probe-scaled prediction against `run_case` with every block simulated and timed."""
    import dataclasses

    from ptofa.runner import run_case

    shape = TuneShape(batch=1, heads=4, kv_heads=4, s0=512, s1=1024, head=64, window=window)
    full = {}
    for row in tune.rank(shape).table:
        config = dataclasses.replace(shape.base_config(), tile_s1=row.tile_s1, qk_preload=row.qk_preload,
                                     prescale_q=row.prescale_q, exp_ring=None, cube_s1=None)
        result = run_case(config, shape.problem(), backend="sim", timing=True)
        assert result.passed, result.message
        full[(row.tile_s1, row.qk_preload, row.prescale_q)] = result.predicted_us
        assert row.predicted_us == pytest.approx(result.predicted_us, rel=0.1)
    chosen = tune.rank(shape).config
    assert full[(chosen.tile_s1, chosen.qk_preload, chosen.prescale_q)] == pytest.approx(min(full.values()), rel=0.02)
