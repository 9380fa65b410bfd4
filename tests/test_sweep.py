"""The sweep engine with injected run functions, its files, resume after interrupt, and the CLI command."""

from __future__ import annotations

import csv
import json
import struct
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import ptofa.runner
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.runner import BackendUnavailable, RunResult
from ptofa.cli.sweep import JSONL_NAME, SweepGrid, SweepPoint, run_sweep, summary_table, sweep_cmd

# 2 tile sizes x 2 preloads x 3 S1 = 12 points; rejected: (256, preload 1) at every S1 by the
# tile-factor rule. (256, preload 2) at S1=256 runs: the schedule shrinks to the one tile.
GRID = SweepGrid(tile_s1=(128, 256), qk_preload=(1, 2), head=(64,), s1=(256, 512, 1024), s0=(128,))
REJECTED = 3
TOTAL = 12


def predicted_us(config: FAConfig, shape: ProblemShape) -> float:
    """A made-up timing model: larger tiles and deeper preload are faster."""
    return shape.s1 / config.tile_s1 * (10.0 / config.qk_preload)


def fake_run(
    config: FAConfig, shape: ProblemShape, backend: str = "sim", seed: int = 0, timing: bool = False, **_: object
) -> RunResult:
    """A plausible simulator result: passes, with a wall time and predicted time."""
    us = predicted_us(config, shape)
    return RunResult.start(
        config, shape, backend, status="pass",
        err=2e-5, ref16_err=1.5e-4, tolerance=3.1e-4, max_abs_err=2e-5, max_rel_err=1e-3,
        wall_s=0.01 * shape.s1 / 128, predicted_us=us, predicted_tflops=shape.flops(config.head) / us / 1e6,
        extra={"seed_seen": seed, "timing_seen": timing},
    )


def fake_run_failing_at_1024(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
    result = fake_run(config, shape, **kwargs)
    if shape.s1 == 1024 and config.tile_s1 == 128 and config.qk_preload == 2:
        result.status = "fail"
        result.message = "err=1e-2 > tolerance=3.1e-4"
    return result


def fake_run_interrupted_at_512(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
    if shape.s1 == 512 and config.tile_s1 == 256:
        raise KeyboardInterrupt
    return fake_run(config, shape, **kwargs)


def fake_run_crashing(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
    raise RuntimeError(f"builder crashed at tile_s1={config.tile_s1}")


def quiet() -> Console:
    return Console(quiet=True)


def read_csv(out: Path) -> list[dict[str, str]]:
    with (out / "results.csv").open() as csv_file:
        return list(csv.DictReader(csv_file))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def by_point(rows: list[dict]) -> dict[tuple[int, int, int], dict]:
    return {(int(r["tile_s1"]), int(r["qk_preload"]), int(r["s1"])): r for r in rows}


def test_grid_points_cover_the_product_with_unique_keys() -> None:
    points = GRID.points("sim")
    assert len(points) == TOTAL
    assert len({p.key for p in points}) == TOTAL
    assert points[0] == SweepPoint(head=64, tile_s1=128, qk_preload=1, batch=1, heads=1, s0=128, s1=256, backend="sim")
    assert points[0].key == "head=64,tile_s1=128,qk_preload=1,batch=1,heads=1,s0=128,s1=256,backend=sim"
    # Shapes vary slowest: the first four points share S1=256.
    assert {p.s1 for p in points[:4]} == {256}
    repeated = SweepGrid(tile_s1=(128, 128), qk_preload=(2,), head=(64,), s1=(512, 256, 512))
    assert [(p.tile_s1, p.s1) for p in repeated.points("npu")] == [(128, 512), (128, 256)]


def test_sweep_rows_and_files(tmp_path: Path) -> None:
    calls: list[tuple[int, int, int]] = []

    def counting_run(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
        calls.append((config.tile_s1, config.qk_preload, shape.s1))
        return fake_run(config, shape, **kwargs)

    outcome = run_sweep(GRID, tmp_path, jobs=1, seed=5, run_fn=counting_run, console=quiet())

    assert len(calls) == TOTAL - REJECTED
    assert (256, 1, 512) not in calls
    assert outcome.ran == TOTAL - REJECTED and outcome.skipped == 0 and not outcome.interrupted
    assert outcome.failed == []
    rows = by_point(outcome.rows)
    tile_factor_rule = rows[(256, 1, 512)]
    assert tile_factor_rule["status"] == "rejected"
    assert tile_factor_rule["message"] == (
        "preload vs tile factor: qk_preload=1 needs k_tile_factor=1 (tile_s1=cube_s1=128), got tile_s1=256, "
        "cube_s1=128"
    )
    assert rows[(256, 2, 256)]["status"] == "pass"
    assert rows[(128, 2, 512)]["extra"] == {"seed_seen": 5, "timing_seen": True}

    csv_rows = read_csv(tmp_path)
    assert len(csv_rows) == TOTAL
    assert [r["key"] for r in csv_rows] == [p.key for p in GRID.points("sim")]
    assert sum(r["status"] == "rejected" for r in csv_rows) == REJECTED
    assert sum(r["status"] == "pass" for r in csv_rows) == TOTAL - REJECTED
    first = csv_rows[0]
    assert first["torch_version"] and first["xdsl_version"] == "0.74.0" and first["ptofa_version"]
    assert float(first["err"]) == 2e-5 and first["seed"] == "5"

    json_rows = json.loads((tmp_path / "results.json").read_text())
    assert len(json_rows) == TOTAL
    assert set(json_rows[0]["versions"]) == {"ptofa", "torch", "xdsl", "numpy"}
    assert json_rows == outcome.rows

    # A second panel for predicted TFLOPS doubles the figure's width.
    assert png_size(tmp_path / "results.png") == (1400, 500)
    assert (tmp_path / "results.png").stat().st_size > 20_000


def test_best_config_per_shape_uses_predicted_time(tmp_path: Path) -> None:
    outcome = run_sweep(GRID, tmp_path, jobs=1, run_fn=fake_run, console=quiet())
    assert outcome.best_metric == "predicted_us"
    best = sorted((r["tile_s1"], r["qk_preload"], r["s1"]) for r in outcome.rows if r["best"])
    # Tile 256 with preload 2 is fastest in the fake model at every S1 (at 256 it is a single tile).
    assert best == [(256, 2, 256), (256, 2, 512), (256, 2, 1024)]
    assert [r["best"] for r in read_csv(tmp_path)].count("True") == 3


def test_best_config_falls_back_to_wall_time_and_skips_failed(tmp_path: Path) -> None:
    def wall_time_only(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
        result = fake_run_failing_at_1024(config, shape, **kwargs)
        result.predicted_us = result.predicted_tflops = None
        result.wall_s = 1.0 / config.qk_preload / config.tile_s1
        return result

    outcome = run_sweep(GRID, tmp_path, jobs=1, run_fn=wall_time_only, console=quiet())
    assert outcome.best_metric == "wall_s"
    assert [r["key"] for r in outcome.failed] == [
        "head=64,tile_s1=128,qk_preload=2,batch=1,heads=1,s0=128,s1=1024,backend=sim"
    ]
    best = sorted((r["tile_s1"], r["qk_preload"], r["s1"]) for r in outcome.rows if r["best"])
    assert best == [(256, 2, 256), (256, 2, 512), (256, 2, 1024)]
    # Without predicted TFLOPS the figure has one panel.
    assert png_size(tmp_path / "results.png") == (700, 500)


def test_crashing_run_function_gives_error_rows(tmp_path: Path) -> None:
    outcome = run_sweep(GRID, tmp_path, jobs=1, run_fn=fake_run_crashing, console=quiet())
    errors = [r for r in outcome.rows if r["status"] == "error"]
    assert len(errors) == TOTAL - REJECTED == len(outcome.failed)
    assert errors[0]["message"] == "RuntimeError: builder crashed at tile_s1=128"
    assert outcome.best_metric is None and not any(r["best"] for r in outcome.rows)


def test_interrupt_then_resume_runs_only_the_remaining_points(tmp_path: Path) -> None:
    interrupt_at_call = 5
    first_calls: list[str] = []

    def interrupted_run(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
        first_calls.append(f"{config.tile_s1}/{config.qk_preload}/{shape.s1}")
        if len(first_calls) == interrupt_at_call:
            raise KeyboardInterrupt
        return fake_run(config, shape, **kwargs)

    first = run_sweep(GRID, tmp_path, jobs=1, run_fn=interrupted_run, console=quiet())
    assert first.interrupted
    assert first.ran == interrupt_at_call - 1
    # Rejected points are recorded up front, finished points as they complete.
    assert len(first.rows) == REJECTED + interrupt_at_call - 1
    assert len((tmp_path / JSONL_NAME).read_text().splitlines()) == len(first.rows)
    assert len(read_csv(tmp_path)) == len(first.rows)

    second_calls: list[str] = []

    def resumed_run(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
        second_calls.append(f"{config.tile_s1}/{config.qk_preload}/{shape.s1}")
        return fake_run(config, shape, **kwargs)

    second = run_sweep(GRID, tmp_path, jobs=1, run_fn=resumed_run, console=quiet())
    assert not second.interrupted
    assert second.skipped == len(first.rows)
    assert set(second_calls).isdisjoint(first_calls[: interrupt_at_call - 1])
    assert first_calls[interrupt_at_call - 1] in second_calls
    assert len(second_calls) == TOTAL - REJECTED - (interrupt_at_call - 1)
    assert len(read_csv(tmp_path)) == TOTAL
    assert all(r["status"] in ("pass", "rejected") for r in read_csv(tmp_path))
    assert len(json.loads((tmp_path / "results.json").read_text())) == TOTAL


def test_parallel_workers_interrupt_and_resume(tmp_path: Path) -> None:
    first = run_sweep(GRID, tmp_path, jobs=2, run_fn=fake_run_interrupted_at_512, console=quiet())
    assert first.interrupted
    done = {r["key"] for r in first.rows}
    assert "head=64,tile_s1=256,qk_preload=2,batch=1,heads=1,s0=128,s1=512,backend=sim" not in done
    assert all(r["status"] in ("pass", "rejected") for r in first.rows)

    second = run_sweep(GRID, tmp_path, jobs=2, run_fn=fake_run, console=quiet())
    assert not second.interrupted
    assert second.skipped == len(done)
    assert second.ran == TOTAL - len(done)
    assert len(read_csv(tmp_path)) == TOTAL
    keys = [json.loads(line)["key"] for line in (tmp_path / JSONL_NAME).read_text().splitlines()]
    assert sorted(keys) == sorted(p.key for p in GRID.points("sim"))


def test_truncated_last_line_is_dropped_and_rerun(tmp_path: Path) -> None:
    run_sweep(GRID, tmp_path, jobs=1, run_fn=fake_run, console=quiet())
    log = tmp_path / JSONL_NAME
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    again = run_sweep(GRID, tmp_path, jobs=1, run_fn=fake_run, console=quiet())
    assert again.ran == 1 and again.skipped == TOTAL - 1
    assert len(log.read_text().splitlines()) == TOTAL
    assert all(json.loads(line) for line in log.read_text().splitlines())


CLI_ARGS = ["--tile-s1", "128,256", "--qk-preload", "1,2", "--head-dim", "64", "--s1", "256,512,1024", "-j", "1"]


def test_cli_exit_code_zero_with_rejected_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ptofa.runner, "run_case", fake_run, raising=False)
    result = CliRunner().invoke(sweep_cmd, [*CLI_ARGS, "--out", str(tmp_path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "* = best of each (D, B, N, S0, S1) by predicted time (timing model)" in result.output
    assert "rejected" in result.output and "preload vs tile factor" in result.output
    assert "12 points (9 run now, 0 from" in result.output


def test_cli_exit_code_non_zero_with_a_failed_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ptofa.runner, "run_case", fake_run_failing_at_1024, raising=False)
    result = CliRunner().invoke(sweep_cmd, [*CLI_ARGS, "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "1 of 12 points failed, deadlocked or errored" in result.output
    assert "tile_s1=128,qk_preload=2,batch=1,heads=1,s0=128,s1=1024,backend=sim fail" in result.output


def test_cli_backend_unavailable_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_npu(*args: object, **kwargs: object) -> RunResult:
        raise BackendUnavailable("backend npu: torch_npu is not installed")

    monkeypatch.setattr(ptofa.runner, "run_case", no_npu, raising=False)
    result = CliRunner().invoke(sweep_cmd, [*CLI_ARGS, "--backend", "npu", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "Error: backend npu: torch_npu is not installed" in result.output


def test_cli_rejects_a_malformed_list(tmp_path: Path) -> None:
    result = CliRunner().invoke(sweep_cmd, ["--s1", "1024,2k", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "'1024,2k' is not a comma-separated list of integers" in result.output


def test_sweep_end_to_end_on_the_simulator(tmp_path: Path) -> None:
    args = ["--tile-s1", "128,256", "--qk-preload", "1,2", "--head-dim", "64", "--s1", "512", "--s0", "128",
            "-j", "2", "--out", str(tmp_path)]
    result = CliRunner().invoke(sweep_cmd, args)
    assert result.exit_code == 0, result.output
    rows = by_point(json.loads((tmp_path / "results.json").read_text()))
    assert rows[(256, 1, 512)]["status"] == "rejected"
    assert rows[(256, 1, 512)]["message"].startswith("preload vs tile factor: qk_preload=1 needs k_tile_factor=1")
    for point in ((128, 1, 512), (128, 2, 512), (256, 2, 512)):
        assert rows[point]["status"] == "pass", rows[point]["message"]
        assert rows[point]["err"] <= rows[point]["tolerance"]
        assert rows[point]["wall_s"] > 0
    assert sum(row["best"] for row in rows.values()) == 1
    for point in ((128, 1, 512), (128, 2, 512), (256, 2, 512)):
        assert rows[point]["predicted_us"] > 0 and rows[point]["predicted_tflops"] > 0
    assert png_size(tmp_path / "results.png")[0] >= 700


def test_npu_rows_rank_by_kernel_time(tmp_path: Path) -> None:
    def npu_run(config: FAConfig, shape: ProblemShape, backend: str = "npu", **_: object) -> RunResult:
        kernel_us = shape.s1 / config.tile_s1 * (10.0 / config.qk_preload)
        return RunResult.start(
            config, shape, backend, status="pass", err=2e-5, tolerance=3.1e-4, wall_s=0.5,
            kernel_us=kernel_us, tflops=shape.flops(config.head) / kernel_us / 1e6,
        )

    outcome = run_sweep(GRID, tmp_path, backend="npu", jobs=1, run_fn=npu_run, console=quiet())
    assert outcome.best_metric == "kernel_us"
    assert sorted((r["tile_s1"], r["qk_preload"], r["s1"]) for r in outcome.rows if r["best"]) == [
        (256, 2, 256), (256, 2, 512), (256, 2, 1024)
    ]
    assert all(r["key"].endswith("backend=npu") for r in outcome.rows)
    assert png_size(tmp_path / "results.png") == (700, 500)


# ---------------------------------------------------------------------------------------------
# The kernel's switches (--causal/--window, --kv-heads, --key-padding-mask, --lse, --dtype, --out-dtype)
# ---------------------------------------------------------------------------------------------

SWITCHED = SweepGrid(tile_s1=(128,), qk_preload=(2,), head=(64,), s1=(300,), s0=(100,), heads=(2, 4), kv_heads=2,
                     window=(-1, 0), key_padding=True, lse=True, in_dtype="bf16", out_dtype="f32")


def test_switches_are_part_of_the_key_and_label() -> None:
    plain, grouped = SWITCHED.points("sim")
    assert plain.key == ("head=64,tile_s1=128,qk_preload=2,window=-1:0,key_padding=1,lse=1,in_dtype=bf16,"
                         "out_dtype=f32,batch=1,heads=2,s0=100,s1=300,backend=sim")
    assert grouped.key.endswith(",batch=1,heads=4,kv_heads=2,s0=100,s1=300,backend=sim")
    assert grouped.config_label == "head=64 tile_s1=128 qk_preload=2 causal key_padding lse bf16->f32 kv_heads=2"
    assert grouped.shape == ProblemShape(1, 4, 100, 300, kv_heads=2, window=(-1, 0))
    # Defaults spelled out give the plain kernel's point and key.
    spelled = SweepPoint(64, 128, 2, 1, 2, 100, 300, "sim", kv_heads=2, window=(-1, -1), in_dtype="f16", out_dtype="f16")
    assert spelled == SweepPoint(64, 128, 2, 1, 2, 100, 300, "sim")
    assert spelled.key == "head=64,tile_s1=128,qk_preload=2,batch=1,heads=2,s0=100,s1=300,backend=sim"
    window = SweepPoint(64, 128, 2, 1, 2, 100, 300, "sim", window=(16, -1), out_dtype="bf16")
    assert window.config_label == "head=64 tile_s1=128 qk_preload=2 window=16,-1 f16->bf16"
    assert ",window=16:-1,out_dtype=bf16," in window.key


def test_switches_reach_every_point_and_row(tmp_path: Path) -> None:
    seen: list[tuple[FAConfig, ProblemShape, object]] = []

    def recording_run(config: FAConfig, shape: ProblemShape, key_mask=None, **kwargs: object) -> RunResult:
        seen.append((config, shape, key_mask))
        result = fake_run(config, shape, **kwargs)
        result.extra["predicted_bound"] = "vector V"
        return result

    outcome = run_sweep(SWITCHED, tmp_path, jobs=1, run_fn=recording_run, console=quiet())
    assert len(seen) == 2
    for config, shape, key_mask in seen:
        assert (config.narrowing is not None, config.key_padding, config.lse, config.in_dtype, config.out_dtype) == (
            True, True, True, "bf16", "f32")
        assert shape.window == (-1, 0) and shape.kv_heads == 2
        assert key_mask is not None and tuple(key_mask.shape) == (1, 300)
    for row in outcome.rows:
        assert {name: row[name] for name in ("kv_heads", "window", "key_padding", "lse", "in_dtype", "out_dtype")} == {
            "kv_heads": 2, "window": [-1, 0], "key_padding": True, "lse": True, "in_dtype": "bf16", "out_dtype": "f32"}
        assert len(row["extra"]["key_lengths"]) == 1
    csv_rows = read_csv(tmp_path)
    assert [r["window"] for r in csv_rows] == ["-1,0", "-1,0"]
    assert [r["kv_heads"] for r in csv_rows] == ["2", "2"]
    assert list(csv_rows[0]).index("out_dtype") < list(csv_rows[0]).index("status")

    console = Console(width=200, record=True)
    console.print(summary_table(outcome))
    text = console.export_text()
    assert "bound" in text.splitlines()[2] and text.count("vector V") == 2
    # N varies (a column); KVN is constant (the caption), with the switches.
    assert "D=64 B=1 KVN=2 S0=100 causal key_padding lse bf16->f32" in text


def test_summary_table_has_no_bound_or_kvn_column_without_them(tmp_path: Path) -> None:
    outcome = run_sweep(GRID, tmp_path, jobs=1, run_fn=fake_run, console=quiet())
    console = Console(width=200, record=True)
    console.print(summary_table(outcome))
    text = console.export_text()
    assert "bound" not in text and "KVN" not in text
    assert "D=64 B=1 N=1 S0=128" in text


def test_cli_contradicting_switches_exit_2_with_one_line(tmp_path: Path) -> None:
    for args, message in (
        (["--causal", "--window", "3,4"], "Error: window: --causal is --window -1,0, which contradicts --window 3,4"),
        (["--window", "-2,0"], "Error: window: --window -2,0: LEFT and RIGHT must each be >= -1 (-1 = unbounded)"),
    ):
        result = CliRunner().invoke(sweep_cmd, [*CLI_ARGS, *args, "--out", str(tmp_path / "x")])
        assert result.exit_code == 2, result.output
        assert result.output.strip() == message
    assert not (tmp_path / "x").exists()


def test_masked_sweep_on_the_simulator(tmp_path: Path) -> None:
    """Causal window, GQA, key padding and LSE on every point of a real simulator sweep (3 points, 1 rejected)."""
    args = ["--tile-s1", "128,256", "--qk-preload", "1,2", "--head-dim", "64", "--s1", "300", "--s0", "100",
            "--batch", "2", "--heads", "4", "--kv-heads", "2", "--window", "48,0", "--key-padding-mask", "--lse",
            "--dtype", "bf16", "-j", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(sweep_cmd, args)
    assert result.exit_code == 0, result.output
    rows = by_point(json.loads((tmp_path / "results.json").read_text()))
    assert rows[(256, 1, 300)]["status"] == "rejected"
    for point in ((128, 1, 300), (128, 2, 300), (256, 2, 300)):
        row = rows[point]
        assert row["status"] == "pass", row["message"]
        assert ",window=48:0,key_padding=1,lse=1,in_dtype=bf16," in row["key"] and ",kv_heads=2," in row["key"]
        assert row["window"] == [48, 0] and row["kv_heads"] == 2 and row["out_dtype"] == "bf16"
        assert "lse pass" in row["message"]
        assert len(row["extra"]["key_lengths"]) == 2
        assert row["extra"]["predicted_bound"] and row["predicted_us"] > 0
    assert sum(row["best"] for row in rows.values()) == 1
    assert "bound" in result.output and "window=48,0 key_padding lse bf16->bf16" in result.output
    # A rerun with the same switches resumes: nothing runs again.
    again = CliRunner().invoke(sweep_cmd, args)
    assert again.exit_code == 0 and "4 points (0 run now, 4 from" in again.output


def test_square_grid_and_best_only_table_with_the_model_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--square pairs S0 = S1 (the s0 axis is unused); --best-only keeps one row per shape; the
    steady state's M / V busy and the fraction of cube peak come from the run's `extra`."""
    grid = SweepGrid(tile_s1=(128, 256), qk_preload=(2,), head=(64,), s1=(256, 512), s0=(128, 999), square=True)
    assert [(p.s0, p.s1, p.tile_s1) for p in grid.points("sim")] == [(256, 256, 128), (256, 256, 256),
                                                                     (512, 512, 128), (512, 512, 256)]

    def modelled(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
        result = fake_run(config, shape, **kwargs)
        result.extra.update(predicted_bound="cube M", peak_fraction=0.5 + config.tile_s1 / 1000,
                            predicted_util={"cube M": config.tile_s1 / 400, "vector V": 0.25})
        return result

    outcome = run_sweep(grid, tmp_path, jobs=1, run_fn=modelled, console=quiet())
    console = Console(width=200, record=True)
    console.print(summary_table(outcome, best_only=True))
    text = console.export_text()
    lines = [line for line in text.splitlines() if " pass " in line]
    assert len(lines) == 2 and all(" 256 " in line.split("pass")[0] for line in lines)  # tile 256 wins both
    assert "M busy" in text and "V busy" in text and "peak" in text
    assert all("64%" in line and "25%" in line and "75.6%" in line for line in lines)
    monkeypatch.setattr(ptofa.runner, "run_case", fake_run, raising=False)
    result = CliRunner().invoke(sweep_cmd, [*CLI_ARGS, "--square", "--best-only", "--out", str(tmp_path / "cli")],
                                env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert {(r["s0"], r["s1"]) for r in rows} == {(256, 256), (512, 512), (1024, 1024)}
    assert result.output.count(" pass ") == 3  # the best row of each shape only


def test_cli_executor_ray_without_ray_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    result = CliRunner().invoke(sweep_cmd, [*CLI_ARGS, "--executor", "ray", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--executor ray needs Ray, an optional extra of ptofa: pip install 'ptofa[ray]'" in result.output
    assert result.output.count("Error") == 1
    assert not (tmp_path / JSONL_NAME).exists()


def test_cli_address_needs_the_ray_executor(tmp_path: Path) -> None:
    result = CliRunner().invoke(sweep_cmd, [*CLI_ARGS, "--address", "auto", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--address is for --executor ray" in result.output


def interrupted_at_once(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
    raise KeyboardInterrupt


def test_sweep_interrupted_before_any_row_writes_empty_files(tmp_path: Path) -> None:
    grid = SweepGrid(tile_s1=(128,), qk_preload=(2,), head=(64,), s1=(256, 512))
    outcome = run_sweep(grid, tmp_path, jobs=1, run_fn=interrupted_at_once, console=quiet())
    assert outcome.interrupted and outcome.rows == [] and outcome.ran == 0
    assert read_csv(tmp_path) == [] and json.loads((tmp_path / "results.json").read_text()) == []
    assert png_size(tmp_path / "results.png") == (700, 500)
    console = Console(width=120, record=True)
    console.print(summary_table(outcome))
    assert "no passing point" in console.export_text()
