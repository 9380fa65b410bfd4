"""The simulator launch of any plan, and the simulator backend of `run_fa run`.

`launch(plan, tensors)` runs every kernel call of a `LaunchPlan` on `ptofa.sim`, in order,
with `plan.bind`'s values as the entry's arguments (`arguments`) and the plan's workspace
(the caller's, or a NaN-filled one).

The backend runs the `.pto` file as written, checks and times it.
The file is parsed and verified from its text (not the builder's objects), run with
the request's `RunOptions` (an injected fault is applied by the simulator to the
parsed module; its text is written beside the `.pto` as `fa.<fault>.pto`, the file
the reports' line numbers refer to), O is checked against the torch reference and,
with `timing`, the recorded trace is replayed by the timing model.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from ptofa.ir.textio import PtoCheckError, check_text
from ptofa.kernels import argspec
from ptofa.launch.base import (TORCH_DTYPES, RunRequest, RunResult, case_key_mask, case_score_mods, check_output,
                               pad_heads, register_backend)
from ptofa.launch.calls import BuiltKernel, KernelCall, LaunchPlan, Workspace, bind, blocks_for, forward_plan
from ptofa.launch.varlen import make_varlen_inputs, reference_varlen, unit_table
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.reference import make_inputs
from ptofa.sim.errors import SimDeadlock, SimError
from ptofa.sim.executor import SimResult, simulate
from ptofa.sim.memory import GmPointer
from ptofa.sim.faults import fault_path, fault_text
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import DEFAULT_SOC, get_soc
from ptofa.sim.timeline import write_chrome_trace, write_timeline
from ptofa.sim.timing import blocks_to_trace, predict


def launch(plan: LaunchPlan, tensors: Mapping[str, object], *, workspace=None,
           options: RunOptions | Mapping[str, RunOptions] | None = None) -> list[SimResult]:
    """Run every kernel call of `plan` on the simulator, in order; returns one `SimResult` per call.

    `tensors` are the caller's buffers by entry-argument name (CPU torch tensors, numpy arrays
    or `GmPointer`s, None for no buffer; outputs are written in place). `workspace` is the
    caller's buffer for the plan's workspace (checked against its size), else a NaN-filled one,
    so a slot or partial read before it is written shows up in the output. `options` are the
    simulator's run options of the first call, where later calls (the reduce) run without a fault
    and with every block; or the options of each call by its name. Raises what `simulate` raises."""
    ws = _workspace(plan, workspace)
    results = []
    for i, call in enumerate(plan.calls):
        run_options = options
        if isinstance(options, Mapping):
            run_options = options.get(call.name)
        elif i and options is not None:
            run_options = dataclasses.replace(options, fault=None, blocks=None, trace_blocks=None)
        results.append(simulate(call.kernel.parsed, arguments(call, tensors, ws), call.block_dim, run_options))
    return results


def arguments(call: KernelCall, tensors: Mapping[str, object], workspace: GmPointer | None) -> dict[str, object]:
    """`simulate`'s arguments of one call, by entry-argument name (`plan.bind`'s values): a tensor
    as a `GmPointer`, a `Workspace` region as a pointer into `workspace` in the argument's element
    type, a zeroed FFTS block for `ffts`."""
    values = bind(call, tensors)
    args: dict[str, object] = {}
    for arg in call.args:
        if arg.source == "ffts":
            args[arg.name] = GmPointer.of(np.zeros(16, dtype=np.int64))
            continue
        value = values[arg.source]
        if isinstance(value, Workspace):
            value = GmPointer(workspace.buf, workspace.offset + value.offset, arg.ir_type[len("!pto.ptr<"):-1])
        elif arg.ir_type.startswith("!pto.ptr<"):
            value = _pointer(value)
            if value is not None and arg.name != arg.source:  # a second view of a buffer (`slots_h`)
                value = value.retyped(arg.ir_type[len("!pto.ptr<"):-1])
        args[arg.name] = value
    return args


def _workspace(plan: LaunchPlan, workspace) -> GmPointer | None:
    if workspace is None:
        return GmPointer.of(np.full(max(plan.workspace_bytes, 4) // 4, np.nan, dtype=np.float32))
    ws = _pointer(workspace).retyped(np.float32)
    plan.check_workspace(ws.buf.nbytes - ws.offset)
    return ws


def sim_kernel_args(config: FAConfig, shape: ProblemShape, q, k, v, o, block_dim: int, scale: float, *, lse=None,
                    key_mask=None, units=None, block_table=None, slots=None, partials=None,
                    bounds: tuple[int, int] | None = None) -> dict[str, object]:
    """The forward entry's arguments for a direct `ptofa.sim.simulate` call (tests surround tensors with
    guard regions through `GmPointer`s): `forward_plan`'s values bound to these tensors. `slots` is the
    caller's workspace (any element type), else a NaN-filled one; `partials` the split-KV partials."""
    kernel = BuiltKernel("", config.summary(), argspec.ENTRY_NAME, argspec.entry_args(config))
    plan = forward_plan(kernel, config, shape, DEFAULT_SOC, scale=scale, bounds=bounds, key_mask=key_mask,
                        block_dim=block_dim, units=units,
                        max_pages=0 if block_table is None else int(block_table.shape[-1]))
    ws = _workspace(plan, None) if slots is None else _pointer(slots).retyped(np.float32)
    tensors = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "key_mask": key_mask, "block_table": block_table,
               "partials": partials}
    call = dataclasses.replace(plan.calls[0], values={**plan.calls[0].values, "partials": partials})
    return arguments(call, tensors, ws)


def _pointer(x) -> GmPointer | None:
    return x if x is None or isinstance(x, GmPointer) else GmPointer.of(x)


class SimBackend:
    """`ptofa.sim` behind the backend interface; always available."""

    name = "sim"

    def available(self) -> tuple[bool, str]:
        return True, "CPU simulator"

    def run(self, request: RunRequest) -> RunResult:
        config, shape, pto_path = request.config, request.shape, request.pto_path
        spec = get_soc(request.soc)
        result = RunResult.start(config, shape, self.name,
                                 block_dim=blocks_for(shape.work_units(config), spec, request.block_dim or None))
        head, head_v = request.head_dims or (config.head, config.head)
        scale = shape.default_scale(head) if request.scale is None else request.scale
        started = time.perf_counter()
        try:
            parsed = check_text(pto_path.read_text(), str(pto_path))
        except PtoCheckError as exc:
            result.status, result.message = "error", str(exc)
            return result
        key_mask = case_key_mask(config, shape, request.key_mask, request.seed)
        softcap, slopes = case_score_mods(config, shape, request.softcap, request.alibi_slopes)
        reference, units = None, None
        if shape.seqlens is not None:  # packed sequences: Q [total_q, N, D], LSE [N, total_q]
            q, k, v = make_varlen_inputs(shape, config, request.seed)
            units = unit_table(config, *zip(*shape.seqlens), shape.heads, shape.window)
            o = torch.full((q.shape[0], shape.heads, config.head), math.nan, dtype=TORCH_DTYPES[config.out_dtype])
            lse = torch.full((shape.heads, q.shape[0]), math.nan) if config.lse else None
            reference = reference_varlen(q, k, v, *zip(*shape.seqlens), scale, shape.window, TORCH_DTYPES[config.out_dtype],
                                         softcap, slopes)
        else:
            q, k, v = make_inputs(shape, head, request.seed, TORCH_DTYPES[config.in_dtype], shape.kv_heads, head_v)
            o = torch.full((shape.batch, shape.s0, shape.heads, config.head), math.nan, dtype=TORCH_DTYPES[config.out_dtype])
            lse = torch.full((shape.batch, shape.heads, shape.s0), math.nan) if config.lse else None
        kernel = BuiltKernel(pto_path.read_text(), config.summary(), argspec.ENTRY_NAME, argspec.entry_args(config),
                             parsed)
        plan = forward_plan(kernel, config, shape, spec, scale=scale, key_mask=key_mask, block_dim=result.block_dim,
                            units=units, softcap=softcap, alibi=slopes)
        block_dim = plan.block_dim
        options = request.options
        if request.timing:
            # Masks and key padding give units unequal work: then every block is replayed.
            varied = config.narrowing or config.key_padding or config.varlen
            blocks = None if varied else blocks_to_trace(block_dim, shape.work_units(config))
            options = dataclasses.replace(options, trace=True, trace_blocks=blocks)
        try:
            if options.fault is not None:  # the text the reports' line numbers refer to, for the reader
                Path(fault_path(str(pto_path), options.fault)).write_text(fault_text(parsed, options.fault))
            padded = dict(zip("qkv", pad_heads(config.head, q, k, v)))
            (sim,) = launch(plan, {**padded, "o": o, "lse": lse, "key_mask": key_mask, "alibi_slopes": slopes},
                            options=options)
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
        check_output(result, o[..., :head_v], q, k, v, scale, window=shape.window, key_mask=key_mask, lse=lse,
                     out_dtype=config.out_dtype, reference=reference, softcap=softcap, alibi_slopes=slopes)

        if request.timing and sim.trace is not None:
            timed = predict(sim.trace, config, shape, soc=spec, block_dim=block_dim)
            result.predicted_us = float(timed.kernel_us)
            result.predicted_tflops = float(timed.tflops)
            result.extra["predicted_bound"] = timed.bound
            result.extra["timing_summary"] = timed.summary()
            result.extra["predicted_util"] = timed.steady_util
            result.extra["peak_fraction"] = timed.peak_fraction
            result.extra["utilization"] = timed.utilization_line()
            if request.timeline is not None:
                write_timeline(timed, request.timeline)
            if request.trace is not None:
                write_chrome_trace(timed, request.trace)
        return result


register_backend("sim", SimBackend())
