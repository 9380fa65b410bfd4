"""The NPU launch of the serving calls: the varlen forward kernel and, split-KV, the reduce.

The launch is planned as on the simulator (`splitkv.plan_varlen`: split count, unit table,
block count) with torch_npu's cube-core count. Each kernel's `.pto` is built once per text
(`toolchain.compile_pto`, cached on disk) and its launcher loaded with argtypes from the
entry the text declares (`toolchain.entry_signature`, `argspec.host_params_of`); the host
arguments are put in that same order by name, so no order is written twice. The unit
table, the reduce's table (`varlen.reduce_table`) and the block table go to the device as
int32 tensors, the workspace (slot rings, then the partials; the caller's, as InfiniOp's, or a
new one) is sized by `pipeline.workspace_bytes`, and the reduce is enqueued on the forward
kernel's stream after it, so it reads the partials once they are written.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ptofa.kernels import argspec
from ptofa.attention.core import get_kernel
from ptofa.kernels.fa_reduce import emit_reduce
from ptofa.launch.npu import check_launch_code, cube_core_count, load_entry_launcher
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, workspace_bytes
from ptofa.launch.sim import reduce_block_dim, reduce_rows
from ptofa.launch.splitkv import Plan, plan_varlen
from ptofa.launch.toolchain import cache_root, compile_pto, entry_signature
from ptofa.launch.varlen import reduce_table


@dataclass(frozen=True)
class EntryLauncher:
    """A loaded launcher, its entry and the entry arguments its `.pto` declares (whose host
    parameters `host_values` orders)."""

    launcher: Callable[..., int]
    entry: str
    args: tuple[argspec.EntryArg, ...]


@dataclass
class NpuServingLaunch:
    """What `launch_varlen_npu` enqueued: the plan and the device buffers it passed."""

    plan: Plan
    workspace: torch.Tensor
    units: torch.Tensor
    block_table: torch.Tensor | None
    partials: torch.Tensor | None


def npu_device() -> torch.device:
    """The current NPU (torch_npu's)."""
    return torch.device("npu", torch.npu.current_device())


def npu_stream():
    """torch_npu's current stream on the current NPU."""
    return torch.npu.current_stream()


@functools.lru_cache(maxsize=32)
def launcher_of(pto_text: str, summary: str) -> EntryLauncher:
    """Build `pto_text` (ptoas + bisheng, disk-cached by `compile_pto`) and load its launcher."""
    found = entry_signature(pto_text)
    if found is None:
        raise ValueError(f"kernel {summary}: no entry of {tuple(argspec.LAUNCHERS)} in its text")
    entry, args = found
    digest = hashlib.sha256(pto_text.encode()).hexdigest()[:20]
    source = cache_root() / "sources" / f"{entry}_{digest}.pto"
    source.parent.mkdir(parents=True, exist_ok=True)
    if not source.is_file():
        source.write_text(pto_text)
    compiled = compile_pto(source, config_summary=summary)
    return EntryLauncher(load_entry_launcher(compiled.so_path, entry, args), entry, args)


def forward_launcher(config: FAConfig) -> EntryLauncher:
    """The varlen forward kernel of `config`, built and loaded."""
    return launcher_of(get_kernel(config).text, config.summary())


def reduce_launcher(config: FAConfig) -> EntryLauncher:
    """The split-KV reduce kernel of `config`, built and loaded."""
    return launcher_of(emit_reduce(config), f"reduce {config.summary()}")


def host_values(args: tuple[argspec.EntryArg, ...], values: dict[str, object]) -> list[int | float]:
    """The launcher's arguments after block_dim and stream, in `argspec.host_params_of(args)`
    order: a tensor as its device address (None as 0), a scalar as given."""
    out: list[int | float] = []
    for param in argspec.host_params_of(args):
        if param.name not in values:
            raise ValueError(f"entry argument {param.name!r}: the serving launch has no value for it")
        value = values[param.name]
        if param.ctype is ctypes.c_void_p:
            out.append(0 if value is None else value.data_ptr())
        else:
            out.append(value)
    return out


def _enqueue(kernel: EntryLauncher, block_dim: int, stream, values: dict[str, object]) -> None:
    handle = getattr(stream, "_as_parameter_", stream)
    check_launch_code(kernel.launcher(block_dim, handle, *host_values(kernel.args, values)),
                      argspec.LAUNCHERS[kernel.entry])


def _on(device: torch.device, tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(device).contiguous()


def launch_varlen_npu(config: FAConfig, shape: ProblemShape, table_of, q, k, v, out, scale: float,
                      num_splits: int | Sequence[int], *, lse=None, block_table=None, stream=None,
                      workspace=None) -> NpuServingLaunch | None:
    """Enqueue the varlen kernel (and the reduce, split-KV) on the NPU and write O (and LSE)
    into `out` / `lse`; None when the unit table is empty. Tensors not on the NPU are copied
    there and the results copied back (which waits for the kernels). `workspace` is the
    caller's device buffer for the slot rings and partials (else one is allocated); it is
    checked, and both kernels built, before either is enqueued, so a failed check or build
    launches nothing."""
    plan = plan_varlen(config, shape, table_of, num_splits, cube_core_count())
    if plan is None:
        return None
    c = plan.config
    device = npu_device()
    need = workspace_bytes(c, shape, plan.block_dim, plan.num_splits)
    if workspace is None:
        workspace = torch.empty(need // 4, dtype=torch.float32, device=device)
    else:
        workspace = _callers_workspace(workspace, need, device, plan)
    forward = forward_launcher(c)
    reduce = reduce_launcher(c) if c.split_kv else None
    stream = npu_stream() if stream is None else stream
    o_dev = out if out.device == device else torch.empty(out.shape, dtype=out.dtype, device=device)
    lse_dev = lse if lse is None or lse.device == device else torch.empty(lse.shape, dtype=lse.dtype, device=device)
    units = plan.table.to(device=device, dtype=torch.int32).contiguous()
    pages = None if block_table is None else block_table.to(device=device, dtype=torch.int32).contiguous()
    partials = workspace.view(torch.uint8)[c.gm_slot_bytes_per_block * plan.block_dim:] if c.split_kv else None
    left, right = shape.window_bounds()
    values = {
        "slots": workspace, "q": _on(device, q), "k": _on(device, k), "v": _on(device, v), "o": o_dev, "lse": lse_dev,
        "key_mask": None, "units": units, "block_table": pages, "partials": partials,
        "batch": shape.batch, "heads": shape.heads, "kv_heads": shape.kv_heads, "s0": shape.s0, "s1": shape.s1,
        "num_units": int(units.shape[0]), "max_pages": 0 if pages is None else int(pages.shape[-1]),
        "scale": float(scale), "win_left": left, "win_right": right, "key_mask_stride": 0,
    }
    reduce_units = None
    if reduce is not None:
        reduce_units = reduce_table(c, plan.table, shape.heads, shape.heads // shape.kv_heads).to(device).contiguous()
    _enqueue(forward, plan.block_dim, stream, values)
    if reduce_units is not None and reduce_units.shape[0]:
        heads, rows = reduce_rows(c, shape)
        reduce_values = {"partials": partials, "o": o_dev, "lse": lse_dev, "units": reduce_units, "heads": heads,
                         "s0": rows, "num_units": int(reduce_units.shape[0])}
        _enqueue(reduce, reduce_block_dim(int(reduce_units.shape[0]), cube_core_count()), stream, reduce_values)
    if o_dev is not out:
        out.copy_(o_dev.to(out.device))
    if lse_dev is not lse:
        lse.copy_(lse_dev.to(lse.device))
    return NpuServingLaunch(plan, workspace, units, pages, partials)


def _callers_workspace(workspace: torch.Tensor, need: int, device: torch.device, plan: Plan) -> torch.Tensor:
    """The caller's workspace as a flat byte view on `device`, or ConfigError when it is too small."""
    if workspace.device != device:
        raise ConfigError(f"workspace: must be on {device}, got a tensor on {workspace.device}")
    if not workspace.is_contiguous():
        raise ConfigError(f"workspace: must be contiguous, got strides {workspace.stride()}")
    flat = workspace.reshape(-1).view(torch.uint8)
    if flat.numel() < need:
        raise ConfigError(f"workspace: {flat.numel()} bytes, but num_splits={plan.num_splits} on {plan.block_dim} "
                          f"blocks needs {need} (slot rings + partial O and LSE)")
    return flat
