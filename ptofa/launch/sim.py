"""The simulator backend: run the `.pto` file as written on `ptofa.sim`, check and time it.

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
from pathlib import Path

import numpy as np
import torch

from ptofa.kernels import argspec
from ptofa.launch.base import TORCH_DTYPES, RunRequest, RunResult, case_key_mask, check_output, register_backend
from ptofa.pipeline import UNIT_TABLE, ConfigError, FAConfig, ProblemShape, default_block_dim, workspace_bytes
from ptofa.reference import make_inputs
from ptofa.sim import GmPointer, SimDeadlock, SimError, SimResult, simulate
from ptofa.sim.faults import fault_path, fault_text
from ptofa.sim.socspec import get_soc
from ptofa.sim.timeline import write_chrome_trace, write_timeline
from ptofa.sim.timing import blocks_to_trace, predict
from ptofa.ir.textio import PtoCheckError, check_text
from ptofa.launch.varlen import make_varlen_inputs, reduce_table, reference_varlen, unit_table


def sim_kernel_args(
    config: FAConfig,
    shape: ProblemShape,
    q, k, v, o,
    block_dim: int,
    scale: float,
    *,
    lse=None,
    key_mask=None,
    units=None,
    block_table=None,
    slots=None,
    partials=None,
    bounds: tuple[int, int] | None = None,
) -> dict[str, object]:
    """The entry's arguments for `ptofa.sim.simulate`, by `argspec.entry_args(config)` name.

    Tensors are CPU torch tensors, numpy arrays or `GmPointer`s (a pointer into a larger
    buffer lets a test surround a tensor with guard regions); O and LSE are written in
    place. The slot workspace is one NaN-filled buffer passed as f32 and input-dtype
    pointers, so a slot read before it is written shows up in O. `key_mask` is the
    normalised int8 mask ([B, S1], or [S1] shared by the batch); `units` the varlen unit
    table (`ptofa.launch.varlen.unit_table`). `slots` is a caller's slot workspace instead of the
    NaN buffer (a tensor, array or `GmPointer` of at least `gm_slot_bytes_per_block *
    block_dim` bytes, any element type: the kernel addresses it as f32 and input-dtype
    words); `partials` the split-KV partials (`launch_split_sim`); `bounds` the kernel's (win_left, win_right) instead of `shape.window_bounds()`
    (the right bound may be negative: torch's top-left causal with S1 > S0).
    """
    if slots is None:
        slots = GmPointer.of(np.full(workspace_bytes(config, shape, block_dim) // 4, np.nan, dtype=np.float32))
    else:
        slots = _pointer(slots).retyped(np.float32)
    left, right = shape.window_bounds() if bounds is None else bounds
    mask_stride = 0 if key_mask is None or key_mask.dim() == 1 else shape.s1
    values: dict[str, object] = {
        "ffts": GmPointer.of(np.zeros(16, dtype=np.int64)),
        "slots": slots,
        "slots_h": slots.retyped(config.in_dtype),
        "q": _pointer(q), "k": _pointer(k), "v": _pointer(v), "o": _pointer(o),
        "lse": _pointer(lse), "key_mask": _pointer(key_mask),
        "batch": shape.batch, "heads": shape.heads, "kv_heads": shape.kv_heads, "s0": shape.s0, "s1": shape.s1,
        "scale": scale, "win_left": left, "win_right": right, "key_mask_stride": mask_stride,
        "units": _pointer(units), "num_units": 0 if units is None else int(units.shape[0]),
        "block_table": _pointer(block_table), "max_pages": 0 if block_table is None else int(block_table.shape[-1]),
        "partials": _pointer(partials),
    }
    return {a.name: values[a.name] for a in argspec.entry_args(config)}


def _pointer(x) -> GmPointer | None:
    return x if x is None or isinstance(x, GmPointer) else GmPointer.of(x)


def launch_sim(parsed, config: FAConfig, shape: ProblemShape, q, k, v, o, block_dim: int, scale: float, *,
               options=None, **tensors) -> SimResult:
    """Run a parsed kernel once on the simulator; O (and LSE) are written in place.

    The launch shared by `SimBackend.run` (`run_case`) and `ptofa.attention.core.attend`:
    `tensors` are `sim_kernel_args`'s keyword arguments (lse, key_mask, units, slots,
    bounds, ...), `options` the `RunOptions`. Raises what `simulate` raises.
    """
    return simulate(parsed, sim_kernel_args(config, shape, q, k, v, o, block_dim, scale, **tensors), block_dim, options)


def launch_split_sim(parsed, reduce_parsed, config: FAConfig, shape: ProblemShape, q, k, v, o, block_dim: int,
                     scale: float, num_splits: int, *, units, workspace=None, lse=None, block_table=None,
                     options=None) -> tuple[SimResult, SimResult | None]:
    """Split-KV on the simulator: the `split_kv` forward kernel writes each split's partial O
    and LSE after the slot rings in one workspace (`pipeline.workspace_bytes`, `num_splits` the
    most splits of a unit in `units`) and the result of every unit of one split; then the reduce
    kernel (`kernels/fa_reduce.py`) combines the split units' partials into O (and LSE), in place.

    `workspace` is the caller's buffer (tensor, array or `GmPointer`), else a NaN-filled one,
    so a partial read before it is written shows up in O. Returns both launches' results (the
    reduce's None when no unit has more than one split); the reduce runs on
    `reduce_block_dim(reduce units)` blocks."""
    most = max(units[:, UNIT_TABLE.index("splits")].tolist(), default=1)
    if most > num_splits:
        raise ConfigError(f"split-KV: a unit of the table has {most} splits, more than num_splits={num_splits}")
    need = workspace_bytes(config, shape, block_dim, num_splits)
    if workspace is None:
        ws = GmPointer.of(np.full(need // 4, np.nan, dtype=np.float32))
    else:
        ws = _pointer(workspace).retyped(np.float32)
        have = ws.buf.nbytes - ws.offset
        if have < need:
            raise ConfigError(f"workspace: {have} bytes, but split-KV with num_splits={num_splits} on {block_dim} "
                              f"blocks needs {need} (slot rings + partial O and LSE)")
    partials = ws.add(config.gm_slot_f32_per_block * block_dim)
    main = launch_sim(parsed, config, shape, q, k, v, o, block_dim, scale, options=options, lse=lse, units=units,
                      block_table=block_table, slots=ws, partials=partials)
    table = reduce_table(config, units, shape.heads, shape.heads // shape.kv_heads)
    if not table.shape[0]:
        return main, None
    heads, rows = reduce_rows(config, shape)
    values = {"ffts": GmPointer.of(np.zeros(16, dtype=np.int64)), "partials": partials, "o": _pointer(o),
              "lse": _pointer(lse), "units": _pointer(table), "heads": heads, "s0": rows,
              "num_units": int(table.shape[0])}
    reduce_args = {a.name: values[a.name] for a in argspec.reduce_entry_args(config)}
    reduce_options = None if options is None else dataclasses.replace(options, fault=None, blocks=None, trace_blocks=None)
    reduced = simulate(reduce_parsed, reduce_args, reduce_block_dim(int(table.shape[0])), reduce_options)
    return main, reduced


def reduce_rows(config: FAConfig, shape: ProblemShape) -> tuple[int, int]:
    """(heads, rows per head) the reduce kernel addresses: (N, total_q), or (1, total_q * N) after GQA
    packing, whose O rows and [total_q, N] LSE are one contiguous run of rows."""
    return (1, shape.s0 * shape.heads) if config.gqa_pack else (shape.heads, shape.s0)


def reduce_block_dim(reduce_units: int, cube_cores: int = 24) -> int:
    """Blocks of the reduce launch: one per reduce unit (`varlen.reduce_table` entry), up to the cube cores."""
    return max(1, min(reduce_units, cube_cores))


class SimBackend:
    """`ptofa.sim` behind the backend interface; always available."""

    name = "sim"

    def available(self) -> tuple[bool, str]:
        return True, "CPU simulator"

    def run(self, request: RunRequest) -> RunResult:
        config, shape, pto_path = request.config, request.shape, request.pto_path
        spec = get_soc(request.soc)
        block_dim = request.block_dim or default_block_dim(shape, spec.cube_cores, config)
        result = RunResult.start(config, shape, self.name, block_dim=block_dim)
        scale = shape.default_scale(config.head) if request.scale is None else request.scale
        started = time.perf_counter()
        try:
            parsed = check_text(pto_path.read_text(), str(pto_path))
        except PtoCheckError as exc:
            result.status, result.message = "error", str(exc)
            return result
        key_mask = case_key_mask(config, shape, request.key_mask, request.seed)
        reference, units = None, None
        if shape.seqlens is not None:  # packed sequences: Q [total_q, N, D], LSE [N, total_q]
            q, k, v = make_varlen_inputs(shape, config, request.seed)
            units = unit_table(config, *zip(*shape.seqlens), shape.heads, shape.window)
            o = torch.full((q.shape[0], shape.heads, config.head), math.nan, dtype=TORCH_DTYPES[config.out_dtype])
            lse = torch.full((shape.heads, q.shape[0]), math.nan) if config.lse else None
            reference = reference_varlen(q, k, v, *zip(*shape.seqlens), scale, shape.window, TORCH_DTYPES[config.out_dtype])
        else:
            q, k, v = make_inputs(shape, config.head, request.seed, TORCH_DTYPES[config.in_dtype], shape.kv_heads)
            o = torch.full((shape.batch, shape.s0, shape.heads, config.head), math.nan, dtype=TORCH_DTYPES[config.out_dtype])
            lse = torch.full((shape.batch, shape.heads, shape.s0), math.nan) if config.lse else None
        options = request.options
        if request.timing:
            # Masks and key padding give units unequal work: then every block is replayed.
            varied = config.masked or config.key_padding or config.varlen
            blocks = None if varied else blocks_to_trace(block_dim, shape.work_units(config))
            options = dataclasses.replace(options, trace=True, trace_blocks=blocks)
        try:
            if options.fault is not None:  # the text the reports' line numbers refer to, for the reader
                Path(fault_path(str(pto_path), options.fault)).write_text(fault_text(parsed, options.fault))
            sim = launch_sim(parsed, config, shape, q, k, v, o, block_dim, scale, options=options,
                             lse=lse, key_mask=key_mask, units=units)
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
        check_output(result, o, q, k, v, scale, window=shape.window, key_mask=key_mask, lse=lse,
                     out_dtype=config.out_dtype, reference=reference)

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
