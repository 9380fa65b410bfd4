"""The backend interface: what running one case takes and gives back, and the registry.

A backend runs a built `.pto` for one config and problem shape and checks O against
the reference: `ptofa.sim_backend` on the CPU simulator, `ptofa.npu` on an Ascend
device. Each registers itself when imported:

    class MyBackend:
        name = "mine"
        def available(self) -> tuple[bool, str]: ...  # (usable here, device name or what is missing)
        def run(self, request: RunRequest) -> RunResult: ...

    register_backend("mine", MyBackend())

`ptofa.runner.run_case` builds the `.pto`, puts it in a `RunRequest` with the case's
config, shape, seed, block_dim, scale and simulator `RunOptions`, and dispatches
through `get_backend`. This module sits below the runner and the backends: it
imports neither.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.reference import check_accuracy, reference_attention
from ptofa.sim.options import RunOptions

AUTO = "auto"
# The shipped backends (`ptofa.runner` imports both modules, so both are registered) and `auto`.
BACKENDS = ("sim", "npu", AUTO)


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine (one clear line)."""


@dataclass
class RunResult:
    """One result row: config, shape, errors, status, times."""

    head: int
    tile_s1: int
    qk_preload: int
    batch: int
    heads: int
    s0: int
    s1: int
    backend: str
    status: str  # "pass", "fail", "deadlock", "error", "rejected"
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    err: float | None = None  # max abs error of the kernel against the fp32 reference
    ref16_err: float | None = None  # max abs error of torch-in-fp16 against the fp32 reference
    tolerance: float | None = None  # 2 * ref16_err + 1e-5
    wall_s: float | None = None  # wall time of the run (simulator) or of the whole launch (npu)
    kernel_us: float | None = None  # device kernel time (npu)
    tflops: float | None = None  # 4*B*N*S0*S1*D / kernel time (npu), or predicted (sim)
    predicted_us: float | None = None  # timing model prediction (sim)
    predicted_tflops: float | None = None
    block_dim: int | None = None
    message: str = ""
    extra: dict = field(default_factory=dict)

    @classmethod
    def start(cls, config: FAConfig, shape: ProblemShape, backend: str, **kw) -> "RunResult":
        return cls(
            head=config.head,
            tile_s1=config.tile_s1,
            qk_preload=config.qk_preload,
            batch=shape.batch,
            heads=shape.heads,
            s0=shape.s0,
            s1=shape.s1,
            backend=backend,
            status=kw.pop("status", "error"),
            **kw,
        )

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunRequest:
    """One case for a backend: the built `.pto` and how to run it.

    `block_dim` None = the backend's default (min(work units, cube cores)); `scale`
    None = 1/sqrt(head). `timing`, `timeline` and `soc` ask the simulator for the
    timing model's prediction (and a timeline picture); `options` are the simulator's
    run options. A backend ignores what does not apply to it.
    """

    config: FAConfig
    shape: ProblemShape
    pto_path: Path
    seed: int = 0
    block_dim: int | None = None
    scale: float | None = None
    options: RunOptions = field(default_factory=RunOptions)
    timing: bool = False
    timeline: Path | None = None
    soc: str = "910B2"


class Backend(Protocol):
    """What `register_backend` takes."""

    def available(self) -> tuple[bool, str]:
        """(True, what runs the kernel) when the backend can run here, else (False, what is missing)."""
        ...

    def run(self, request: RunRequest) -> RunResult:
        """Run and check one case. Never raises for a failing kernel (the status says how it
        failed); raises `BackendUnavailable` (one line) when the backend cannot run here."""
        ...


_REGISTRY: dict[str, Backend] = {}


def register_backend(name: str, backend: Backend) -> Backend:
    """Make `backend` runnable as `run_case(..., backend=name)`; a later registration replaces it."""
    if name == AUTO:
        raise ValueError(f"{AUTO!r} is not a backend name: it picks one of the registered backends")
    _REGISTRY[name] = backend
    return backend


def registered_backends() -> tuple[str, ...]:
    """Names of the registered backends: the shipped ones in `BACKENDS` order, then the others."""
    return tuple(sorted(_REGISTRY, key=lambda name: BACKENDS.index(name) if name in BACKENDS else len(BACKENDS)))


def get_backend(name: str) -> Backend:
    """The backend registered as `name`; `ValueError` naming the registered ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"backend={name!r} is not registered (registered: {', '.join(_REGISTRY) or 'none'})") from None


def check_output(
    result: RunResult, o: np.ndarray | torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> RunResult:
    """Compare O with the torch reference (`ptofa.reference` rule) and fill status, errors and message."""
    ref32, ref16 = reference_attention(q, k, v, scale)
    accuracy = check_accuracy(o, ref32, ref16)
    result.status = "pass" if accuracy.passed else "fail"
    result.err, result.ref16_err, result.tolerance = accuracy.err, accuracy.ref16_err, accuracy.tolerance
    result.max_abs_err, result.max_rel_err = accuracy.max_abs_err, accuracy.max_rel_err
    result.message = accuracy.summary()
    return result
