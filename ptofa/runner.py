"""Run one FlashAttention case on a backend and check it against the reference.

`run_case` is the single entry point used by `run_fa run`, the sweep and the
tests: build the `.pto` for a config, write it, run it on the simulator (the
parsed text file, not the builder's objects) or on an NPU, and compare O with
the torch reference using the accuracy rule of `ptofa.reference`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ptofa.pipeline import FAConfig, ProblemShape

BACKENDS = ("sim", "npu", "auto")


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
