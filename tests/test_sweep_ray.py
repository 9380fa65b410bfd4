"""`run_fa sweep --executor ray` on a real local Ray: the rows of the local executor, resume after
an interrupt, failing tasks as error rows, joining a running cluster with --address."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'ptofa[ray]'")

from ptofa.pipeline import FAConfig, ProblemShape  # noqa: E402
from ptofa.runner import BackendUnavailable, RunResult  # noqa: E402
from ptofa.cli.sweep import JSONL_NAME, SweepGrid, run_sweep  # noqa: E402
from test_sweep import GRID, REJECTED, TOTAL, fake_run, fake_run_interrupted_at_512, quiet  # noqa: E402

TESTS = Path(__file__).parent
# 4 small points on the simulator, one rejected by the tile-factor rule.
SIM_GRID = SweepGrid(tile_s1=(128, 256), qk_preload=(1, 2), head=(64,), s1=(256,))


def without_wall_time(rows: list[dict]) -> list[dict]:
    """The rows less the simulator's wall time, the one column that differs between two runs."""
    return [{name: value for name, value in row.items() if name != "wall_s"} for row in rows]


def test_ray_sweep_gives_the_rows_of_the_local_executor(tmp_path: Path) -> None:
    """The sweep starts its own local Ray (2 CPUs) and shuts it down at the end."""
    if ray.is_initialized():  # left by another test of this module: this one needs Ray not running
        ray.shutdown()
    local = run_sweep(SIM_GRID, tmp_path / "local", jobs=1, console=quiet())
    on_ray = run_sweep(SIM_GRID, tmp_path / "ray", jobs=2, console=quiet(), executor="ray")
    assert not ray.is_initialized()
    assert on_ray.ran == local.ran == 3 and not on_ray.interrupted
    assert [row["status"] for row in on_ray.rows] == ["pass", "pass", "rejected", "pass"]
    assert all(row["wall_s"] > 0 for row in on_ray.rows if row["status"] == "pass")
    assert without_wall_time(on_ray.rows) == without_wall_time(local.rows)
    assert (tmp_path / "ray" / "results.png").stat().st_size > 10_000
    assert without_wall_time(json.loads((tmp_path / "ray" / "results.json").read_text())) == without_wall_time(
        local.rows)


@pytest.fixture(scope="module")
def _shutdown_ray_after_module() -> Iterator[None]:
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def local_ray(_shutdown_ray_after_module: None) -> str:
    """This process connected to a local Ray of 2 CPUs (started once for the module) whose workers
    import this directory's modules, as a cluster's nodes import an installed ptofa; its address."""
    if not ray.is_initialized():
        python_path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": python_path}})
    return ray.get_runtime_context().gcs_address


def test_interrupted_ray_sweep_resumes(tmp_path: Path, local_ray: str) -> None:
    first = run_sweep(GRID, tmp_path, run_fn=fake_run_interrupted_at_512, console=quiet(), executor="ray")
    assert first.interrupted
    done = {row["key"] for row in first.rows}
    assert "head=64,tile_s1=256,qk_preload=2,batch=1,heads=1,s0=128,s1=512,backend=sim" not in done
    assert all(row["status"] in ("pass", "rejected") for row in first.rows)
    assert len((tmp_path / JSONL_NAME).read_text().splitlines()) == len(done) < TOTAL

    second = run_sweep(GRID, tmp_path, run_fn=fake_run, console=quiet(), executor="ray")
    assert not second.interrupted
    assert second.skipped == len(done) and second.ran == TOTAL - len(done)
    assert sum(row["status"] == "pass" for row in second.rows) == TOTAL - REJECTED
    keys = [json.loads(line)["key"] for line in (tmp_path / JSONL_NAME).read_text().splitlines()]
    assert sorted(keys) == sorted(point.key for point in GRID.points("sim"))
    assert ray.is_initialized()  # the sweep used this process's Ray and left it connected


def crash_or_fail(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
    """Kills its worker at (128, 1, 256), raises at (128, 2, 256), passes elsewhere."""
    if (config.tile_s1, config.qk_preload, shape.s1) == (128, 1, 256):
        os._exit(3)
    if (config.tile_s1, config.qk_preload, shape.s1) == (128, 2, 256):
        raise RuntimeError("builder crashed")
    return fake_run(config, shape, **kwargs)


def test_failing_ray_tasks_become_error_rows(tmp_path: Path, local_ray: str) -> None:
    outcome = run_sweep(GRID, tmp_path, run_fn=crash_or_fail, console=quiet(), executor="ray")
    assert not outcome.interrupted and outcome.ran == TOTAL - REJECTED
    errors = {(row["tile_s1"], row["qk_preload"], row["s1"]): row["message"] for row in outcome.failed}
    assert set(errors) == {(128, 1, 256), (128, 2, 256)}
    assert errors[(128, 1, 256)].startswith("ray task failed: WorkerCrashedError: ")
    assert errors[(128, 2, 256)] == "RuntimeError: builder crashed"
    assert all(row["status"] == "error" for row in outcome.failed)
    assert sum(row["status"] == "pass" for row in outcome.rows) == TOTAL - REJECTED - 2


def npu_missing(config: FAConfig, shape: ProblemShape, **kwargs: object) -> RunResult:
    raise BackendUnavailable("backend npu: torch_npu is not installed")


def test_backend_unavailable_in_a_ray_task_ends_the_sweep(tmp_path: Path, local_ray: str) -> None:
    with pytest.raises(BackendUnavailable, match="torch_npu is not installed"):
        run_sweep(GRID, tmp_path, run_fn=npu_missing, console=quiet(), executor="ray")


def test_cli_joins_a_running_cluster(tmp_path: Path, local_ray: str) -> None:
    """`run_fa sweep --executor ray --address ADDR` from another process: its tasks run on this
    module's cluster, which is still up afterwards."""
    args = ["--tile-s1", "128", "--qk-preload", "2", "--head-dim", "64", "--s1", "256", "--out", str(tmp_path)]
    command = [sys.executable, "-c", "from ptofa.cli.sweep import sweep_cmd; sweep_cmd()", *args,
               "--executor", "ray", "--address", local_ray]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "1 points (1 run now, 0 from" in finished.stdout
    [row] = [json.loads(line) for line in (tmp_path / JSONL_NAME).read_text().splitlines()]
    assert row["status"] == "pass" and row["err"] <= row["tolerance"]
    assert ray.get(ray.remote(lambda: 1).remote()) == 1
