"""The NPU backend and the bench command: what can be checked without an NPU, and the real run."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ptofa.cli import bench

from ptofa.launch import npu
from ptofa.cli.bench import BenchRow, append_rows, bench_cmd, cann_version, flops_dsl_gp, flops_matmul, tflops
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.runner import BackendUnavailable

UNAVAILABLE = "npu backend: torch_npu is not installed (on an Ascend host with CANN: pip install '.[npu]')"


@pytest.fixture
def without_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu, "npu_available", lambda: (False, UNAVAILABLE))


def test_npu_available_reports_a_missing_torch_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # makes `import torch_npu` raise ImportError
    assert npu.npu_available() == (False, UNAVAILABLE)


def test_run_npu_raises_backend_unavailable_with_one_line(without_npu: None, tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable) as raised:
        npu.run_npu(FAConfig(), ProblemShape(), tmp_path / "fa.pto", seed=0)
    assert str(raised.value) == UNAVAILABLE


def test_bench_without_npu_exits_2_with_one_line(without_npu: None, tmp_path: Path) -> None:
    result = CliRunner().invoke(bench_cmd, ["--pto", str(tmp_path / "fa.pto"), "--csv", str(tmp_path / "b.csv")])
    assert result.exit_code == 2
    assert result.stderr == f"error: {UNAVAILABLE}\n"
    assert not (tmp_path / "b.csv").exists()


def test_bench_options_all_have_help() -> None:
    for option in bench_cmd.params:
        assert option.help, option.name


def test_cube_core_count_falls_back_to_20_without_torch_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr("torch.npu", raising=False)
    assert npu.cube_core_count() == npu.FALLBACK_CUBE_CORES == 20


def test_a_launch_plan_rejects_a_zero_block_dim(tmp_path: Path) -> None:
    from ptofa.launch.plan import plan_forward

    with pytest.raises(ValueError, match="block_dim=0 must be >= 1"):
        plan_forward(FAConfig(), ProblemShape(), "910B2", scale=0.1, block_dim=0)


def test_flop_conventions() -> None:
    shape = ProblemShape(batch=2, heads=3, s0=128, s1=1024)
    assert flops_matmul(shape, 128) == 4 * 2 * 3 * 128 * 1024 * 128
    assert flops_dsl_gp(shape, 128) == 2 * 3 * (4 * 128 * 1024 * 128 + 128 * 1024 + 128 * (5 * 1024 - 2))
    # docs/sources.md §4.5: convention B is about 1.2% above A at HEAD=128.
    assert flops_dsl_gp(shape, 128) / flops_matmul(shape, 128) == pytest.approx(1.012, abs=0.001)
    assert tflops(10**12, 1e6) == pytest.approx(1.0)


def test_append_rows_writes_the_csv_header_once_and_extends_the_json_list(tmp_path: Path) -> None:
    def row(s1: int) -> BenchRow:
        return BenchRow(128, 256, 3, 1, 1, 3072, s1, 24, "event", 10, 15, "pass", kernel_us=100.0, device="fake")

    csv_path, json_path = tmp_path / "bench.csv", tmp_path / "bench.json"
    append_rows([row(1024)], csv_path, json_path)
    append_rows([row(2048), row(4096)], csv_path, json_path)
    with csv_path.open() as rows_in:
        rows = list(csv.DictReader(rows_in))
    assert [r["s1"] for r in rows] == ["1024", "2048", "4096"]
    assert [r["s1"] for r in json.loads(json_path.read_text())] == [1024, 2048, 4096]


def test_cann_version_reads_the_toolkit_install_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    assert cann_version() == "unknown (ASCEND_HOME_PATH unset)"
    info = tmp_path / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir()
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.5.0\narch=aarch64\n")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    assert cann_version() == "8.5.0"


def test_time_on_npu_rejects_unknown_modes() -> None:
    with pytest.raises(ValueError, match="timing='wall' must be one of"):
        bench.time_on_npu(lambda: None, 1, 1, "wall")


SMALL_SHAPE = ProblemShape(batch=1, heads=2, s0=256, s1=1024)


@pytest.fixture
def emitted_pto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from ptofa.fa_builder import emit_fa

    monkeypatch.setenv("PTOFA_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "fa.pto"
    path.write_text(emit_fa(FAConfig()))
    return path


@pytest.mark.npu
@pytest.mark.bisheng
def test_run_npu_small_shape_passes(emitted_pto: Path) -> None:
    result = npu.run_npu(FAConfig(), SMALL_SHAPE, emitted_pto, seed=0)
    assert result.status == "pass", result.message
    assert result.block_dim == min(SMALL_SHAPE.work_units(), npu.cube_core_count())
    assert result.extra.get("fused_close") is True, result.extra


@pytest.mark.npu
@pytest.mark.bisheng
@pytest.mark.parametrize("timing", bench.TIMING_MODES)
def test_bench_command_small_shape_appends_rows(emitted_pto: Path, tmp_path: Path, timing: str) -> None:
    csv_path, json_path = tmp_path / "bench.csv", tmp_path / "bench.json"
    shape_args = ["--batch", "1", "--heads", "2", "--s0", "256", "--s1", "1024"]
    result = CliRunner().invoke(
        bench_cmd,
        ["--pto", str(emitted_pto), *shape_args, "--timing", timing, "--warmup", "1", "--iters", "2",
         "--csv", str(csv_path), "--json", str(json_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [row] = json.loads(json_path.read_text())
    assert row["status"] == "pass" and row["kernel_us"] > 0 and row["tflops"] > 0
    assert row["torch_npu"] and row["device"]
