"""Run one FlashAttention case on a backend and check it against the reference.

`run_case` is the single entry point used by `run_fa run`, the sweep and the
tests: build the `.pto` for a config, write it, run it on the simulator (the
parsed text file, not the builder's objects) or on an NPU, and compare O with
the torch reference using the accuracy rule of `ptofa.reference`.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ptofa import argspec
from ptofa.fa_builder import emit_fa
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, default_block_dim
from ptofa.reference import check_accuracy, make_inputs, reference_attention
from ptofa.textio import PtoCheckError, check_text

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


def resolve_backend(backend: str) -> str:
    """`auto` -> npu when an NPU with torch_npu is usable here, else sim."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} must be one of {BACKENDS}")
    if backend != "auto":
        return backend
    from ptofa.npu import npu_available

    return "npu" if npu_available()[0] else "sim"


def run_case(
    config: FAConfig,
    shape: ProblemShape,
    backend: str = "sim",
    seed: int = 0,
    keep_dir: Path | None = None,
    block_dim: int | None = None,
    timing: bool = False,
    timeline: Path | None = None,
    soc: str = "910B2",
    scale: float | None = None,
) -> RunResult:
    """Build the kernel for `config`, run it on `backend` and check O against the reference.

    Never raises for a failing kernel: the status says "pass", "fail", "deadlock",
    "error" (simulator error, imbalance, overflow) or "rejected" (shape breaks a rule).
    Raises `BackendUnavailable` when the backend cannot run on this machine.
    """
    backend = resolve_backend(backend)
    result = RunResult.start(config, shape, backend)
    try:
        shape.check(config)
    except ConfigError as exc:
        result.status, result.message = "rejected", str(exc)
        return result
    with tempfile.TemporaryDirectory(prefix="ptofa_") as tmp:
        work = Path(keep_dir) if keep_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        pto_path = work / "fa.pto"
        pto_path.write_text(emit_fa(config))
        if backend == "npu":
            from ptofa.npu import require_npu, run_npu

            try:
                require_npu()
            except RuntimeError as exc:
                raise BackendUnavailable(str(exc).splitlines()[0]) from None
            return run_npu(config, shape, pto_path, seed=seed, block_dim=block_dim, scale=scale)
        return _run_sim(config, shape, pto_path, result, seed, block_dim, timing, timeline, soc, scale)


def sim_kernel_args(
    config: FAConfig,
    shape: ProblemShape,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    o: np.ndarray,
    block_dim: int,
    scale: float,
) -> dict[str, object]:
    """The entry's arguments for `ptofa.sim.simulate`, by `argspec.ENTRY_ARGS` name.

    The slot workspace is one NaN-filled buffer passed as f32 and f16 pointers (so a
    slot read before it is written shows up in O); `o` is written in place.
    """
    from ptofa.sim import GmPointer

    slots = GmPointer.of(np.full(config.gm_slot_f32_per_block * block_dim, np.nan, dtype=np.float32))
    values: dict[str, object] = {
        "ffts": GmPointer.of(np.zeros(16, dtype=np.int64)),
        "slots": slots,
        "slots_h": slots.retyped(np.float16),
        "q": GmPointer.of(q),
        "k": GmPointer.of(k),
        "v": GmPointer.of(v),
        "o": GmPointer.of(o),
        "batch": shape.batch,
        "heads": shape.heads,
        "s0": shape.s0,
        "s1": shape.s1,
        "scale": scale,
    }
    return {a.name: values[a.name] for a in argspec.ENTRY_ARGS}


def _run_sim(
    config: FAConfig,
    shape: ProblemShape,
    pto_path: Path,
    result: RunResult,
    seed: int,
    block_dim: int | None,
    timing: bool,
    timeline: Path | None,
    soc: str,
    scale: float | None,
) -> RunResult:
    """Simulate the `.pto` file as written (parsed from its text), then check and time it."""
    from ptofa.sim import SimDeadlock, SimError, simulate
    from ptofa.sim.socspec import get_soc
    from ptofa.sim.timing import blocks_to_trace, predict, write_timeline

    spec = get_soc(soc)
    block_dim = block_dim or default_block_dim(shape, spec.cube_cores)
    result.block_dim = block_dim
    scale = shape.default_scale(config.head) if scale is None else scale
    started = time.perf_counter()
    try:
        parsed = check_text(pto_path.read_text(), str(pto_path))
    except PtoCheckError as exc:
        result.status, result.message = "error", str(exc)
        return result
    q, k, v = make_inputs(shape, config.head, seed)
    o = np.full((shape.batch, shape.s0, shape.heads, config.head), np.nan, dtype=np.float32)
    args = sim_kernel_args(config, shape, q.numpy(), k.numpy(), v.numpy(), o, block_dim, scale)
    trace_blocks = blocks_to_trace(block_dim, shape.work_units) if timing else None
    try:
        sim = simulate(parsed, args, block_dim, trace=timing, trace_blocks=trace_blocks)
    except SimDeadlock as exc:
        result.status, result.message = "deadlock", str(exc)
        result.wall_s = time.perf_counter() - started
        return result
    except SimError as exc:
        result.status, result.message = "error", f"{type(exc).__name__}: {exc}"
        result.wall_s = time.perf_counter() - started
        return result
    result.wall_s = time.perf_counter() - started
    result.extra["sim_steps"] = int(sim.steps)
    if sim.warnings:
        result.extra["sim_warnings"] = list(sim.warnings)

    ref32, ref16 = reference_attention(q, k, v, scale)
    accuracy = check_accuracy(o, ref32, ref16)
    result.status = "pass" if accuracy.passed else "fail"
    result.err, result.ref16_err, result.tolerance = accuracy.err, accuracy.ref16_err, accuracy.tolerance
    result.max_abs_err, result.max_rel_err = accuracy.max_abs_err, accuracy.max_rel_err
    result.message = accuracy.summary()

    if timing and sim.trace is not None:
        timed = predict(sim.trace, config, shape, soc=spec, block_dim=block_dim)
        result.predicted_us = float(timed.kernel_us)
        result.predicted_tflops = float(timed.tflops)
        result.extra["predicted_bound"] = timed.bound
        result.extra["timing_summary"] = timed.summary()
        if timeline is not None:
            write_timeline(timed, timeline)
    return result
