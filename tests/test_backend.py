"""The backend interface (`ptofa.launch.base`): registry, dispatch of `run_case`, `auto`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ptofa.launch import base as backend

from ptofa.launch import npu
from ptofa.launch.base import RunRequest, RunResult, get_backend, register_backend
from ptofa.cli.main import main
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.runner import BACKENDS, resolve_backend, run_case
from ptofa.sim.options import RunOptions


class FakeBackend:
    def __init__(self) -> None:
        self.requests: list[RunRequest] = []

    def available(self) -> tuple[bool, str]:
        return True, "fake device"

    def run(self, request: RunRequest) -> RunResult:
        assert "func.func" in request.pto_path.read_text()  # the built kernel, written before dispatch
        self.requests.append(request)
        return RunResult.start(request.config, request.shape, "fake", status="pass")


def test_run_case_dispatches_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend()
    monkeypatch.setitem(backend._REGISTRY, "fake", fake)
    options = RunOptions(trace=True)
    result = run_case(FAConfig(), ProblemShape(1, 1, 128, 1024), backend="fake", seed=7, block_dim=2, options=options)
    assert result.passed and result.backend == "fake"
    (request,) = fake.requests
    assert (request.seed, request.block_dim, request.options) == (7, 2, options)


def test_shipped_backends_are_registered() -> None:
    assert BACKENDS == ("sim", "npu", "auto")
    assert get_backend("sim").available() == (True, "CPU simulator")
    assert isinstance(get_backend("npu"), npu.NpuBackend)
    with pytest.raises(ValueError, match="backend='nope' is not registered"):
        get_backend("nope")
    with pytest.raises(ValueError, match="'auto' is not a backend name"):
        register_backend("auto", FakeBackend())


def test_auto_is_npu_when_available_else_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu, "npu_available", lambda: (False, "no npu"))
    assert resolve_backend("auto") == "sim"
    monkeypatch.setattr(npu, "npu_available", lambda: (True, "Ascend910B2"))
    assert resolve_backend("auto") == "npu"
    with pytest.raises(ValueError, match=r"backend='gpu' must be one of \('sim', 'npu', 'auto'\)"):
        resolve_backend("gpu")


def test_fault_injection_is_a_simulator_option(tmp_path) -> None:
    request = RunRequest(FAConfig(), ProblemShape(), tmp_path / "fa.pto", options=RunOptions(fault="drop_tfree"))
    with pytest.raises(ValueError, match="fault injection is a simulator run option"):
        npu.NpuBackend().run(request)
    res = CliRunner().invoke(main, ["run", "--backend", "npu", "--s1", "1024", "--inject-fault", "drop_tfree"])
    assert res.exit_code == 2
    assert "--inject-fault is a simulator option" in res.output
