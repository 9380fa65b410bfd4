"""A launch plan on a named backend: the one switch between the simulator and the NPU.

    plan = plan_forward(config, shape, backend_soc("sim"), scale=0.125)
    launch_on("sim", plan, {"q": q, "k": k, "v": v, "o": o})

`resolve_backend` names the backend a call runs on (`auto`: the NPU where there is one);
`backend_soc` is the chip a backend plans for: the simulated one (`socspec.DEFAULT_SOC`, or
the one named), or the NPU's facts with the device's own cube-core count.
"""

from __future__ import annotations

from collections.abc import Mapping

from ptofa.launch import npu, sim
from ptofa.launch.calls import LaunchPlan
from ptofa.sim.socspec import DEFAULT_SOC, SocSpec, get_soc


def backend_soc(backend: str, soc: str | SocSpec = DEFAULT_SOC) -> SocSpec:
    """The chip `backend` ("sim" or "npu", resolved) plans and launches for."""
    return npu.npu_soc(soc) if backend == "npu" else get_soc(soc)


def launch_on(backend: str, plan: LaunchPlan, tensors: Mapping[str, object], *, workspace=None, stream=None,
              options=None):
    """`npu.launch` or `sim.launch` of `plan` with the caller's tensors (and workspace); `stream` is
    the NPU's, `options` the simulator's run options. Returns what the backend's launch returns."""
    if backend == "npu":
        return npu.launch(plan, tensors, workspace=workspace, stream=stream)
    return sim.launch(plan, tensors, workspace=workspace, options=options)


BACKEND_NAMES = ("auto", "sim", "npu")


def resolve_backend(backend: str) -> str:
    """sim or npu: `auto` is npu when `ptofa.launch.npu.npu_available()` says so, else sim;
    `npu` raises `BackendUnavailable` (one line) where there is none."""
    if backend not in BACKEND_NAMES:
        raise ValueError(f"backend: {backend!r} must be one of {BACKEND_NAMES}")
    if backend == "auto":
        return "npu" if npu.npu_available()[0] else "sim"
    if backend == "npu":
        npu.require_npu()
    return backend


__all__ = ["BACKEND_NAMES", "backend_soc", "launch_on", "resolve_backend"]
