"""The simulator backend: run the `.pto` file as written on `ptofa.sim`, check and time it.

The file is parsed and verified from its text (not the builder's objects), run with
the request's `RunOptions` (an injected fault is applied by the simulator to the
parsed module; its text is written beside the `.pto` as `fa.<fault>.pto`, the file
the reports' line numbers refer to), O is checked against the torch reference and,
with `timing`, the recorded trace is replayed by the timing model.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from ptofa import argspec
from ptofa.backend import RunRequest, RunResult, check_output, register_backend
from ptofa.pipeline import FAConfig, ProblemShape, default_block_dim
from ptofa.reference import make_inputs
from ptofa.sim import GmPointer, SimDeadlock, SimError, simulate
from ptofa.sim.faults import fault_path, fault_text
from ptofa.sim.socspec import get_soc
from ptofa.sim.timing import blocks_to_trace, predict, write_timeline
from ptofa.textio import PtoCheckError, check_text


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


class SimBackend:
    """`ptofa.sim` behind the backend interface; always available."""

    name = "sim"

    def available(self) -> tuple[bool, str]:
        return True, "CPU simulator"

    def run(self, request: RunRequest) -> RunResult:
        config, shape, pto_path = request.config, request.shape, request.pto_path
        spec = get_soc(request.soc)
        block_dim = request.block_dim or default_block_dim(shape, spec.cube_cores)
        result = RunResult.start(config, shape, self.name, block_dim=block_dim)
        scale = shape.default_scale(config.head) if request.scale is None else request.scale
        started = time.perf_counter()
        try:
            parsed = check_text(pto_path.read_text(), str(pto_path))
        except PtoCheckError as exc:
            result.status, result.message = "error", str(exc)
            return result
        q, k, v = make_inputs(shape, config.head, request.seed)
        o = np.full((shape.batch, shape.s0, shape.heads, config.head), np.nan, dtype=np.float32)
        args = sim_kernel_args(config, shape, q.numpy(), k.numpy(), v.numpy(), o, block_dim, scale)
        options = request.options
        if request.timing:
            options = dataclasses.replace(options, trace=True, trace_blocks=blocks_to_trace(block_dim, shape.work_units))
        try:
            if options.fault is not None:  # the text the reports' line numbers refer to, for the reader
                Path(fault_path(str(pto_path), options.fault)).write_text(fault_text(parsed, options.fault))
            sim = simulate(parsed, args, block_dim, options)
        except PtoCheckError as exc:  # the injected fault makes the module fail the verifier
            result.status, result.message = "error", str(exc)
            return result
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
        check_output(result, o, q, k, v, scale)

        if request.timing and sim.trace is not None:
            timed = predict(sim.trace, config, shape, soc=spec, block_dim=block_dim)
            result.predicted_us = float(timed.kernel_us)
            result.predicted_tflops = float(timed.tflops)
            result.extra["predicted_bound"] = timed.bound
            result.extra["timing_summary"] = timed.summary()
            if request.timeline is not None:
                write_timeline(timed, request.timeline)
        return result


register_backend("sim", SimBackend())
