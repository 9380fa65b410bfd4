"""The NPU launch of the backward kernels: `dq` (which also writes D = rowsum(dO * O)), then `dkdv`.

Each kernel's `.pto` (`kernels.fa_bwd.emit_bwd`) is built once per text with ptoas and bisheng
(`serving_npu.launcher_of`: `toolchain.compile_pto`, cached on disk) and its launcher loaded with
argtypes from the entry the text declares; the host arguments are put in that order by name
(`serving_npu.host_values`), so the order lives only in `bwd_pipeline.entry_args`. Both kernels
are built before either is enqueued, so a failed build launches nothing. They run on one stream,
dq first: dkdv reads the D that dq wrote. Each launch gets its own slot workspace
(`BwdConfig.slot_bytes_per_block(kernel) * block_dim`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ptofa import argspec
from ptofa.bwd_pipeline import BwdConfig, work_units
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.npu import check_launch_code, cube_core_count
from ptofa.pipeline import ProblemShape
from ptofa.serving_npu import EntryLauncher, host_values, launcher_of, npu_device, npu_stream

KERNELS = ("dq", "dkdv")


@dataclass
class NpuBackwardLaunch:
    """What `launch_backward_npu` enqueued, per kernel: its block_dim and its slot workspace."""

    block_dims: dict[str, int]
    workspaces: dict[str, torch.Tensor]


def kernel_launcher(config: BwdConfig, kernel: str) -> EntryLauncher:
    """The backward kernel `kernel` of `config`, built and loaded."""
    return launcher_of(emit_bwd(config, kernel), f"{kernel} {config.summary()}")


def block_dim_of(config: BwdConfig, kernel: str, shape: ProblemShape, block_dim: int | None) -> int:
    """`block_dim` when given, else one block per work unit up to the device's cube cores."""
    if block_dim is not None:
        if block_dim < 1:
            raise ValueError(f"block_dim={block_dim} must be >= 1")
        return block_dim
    units = work_units(config, kernel, shape.batch, shape.heads, shape.kv_heads, shape.s0, shape.s1)
    return max(1, min(units, cube_core_count()))


def _on(device: torch.device, tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` itself when it is contiguous on `device`, else a contiguous device copy."""
    return tensor.to(device).contiguous()


def launch_backward_npu(config: BwdConfig, shape: ProblemShape, q, k, v, out, lse, dout, grads, scale: float, *,
                        block_dim: int | None = None, bounds: tuple[int, int] | None = None,
                        stream=None) -> NpuBackwardLaunch:
    """Enqueue dq then dkdv on the NPU and write `grads` (`backward.BackwardBuffers`: dq, dk, dv
    zeroed by the caller, and D) in place. Inputs not on the NPU are copied there and the
    gradients copied back (which waits for the kernels)."""
    blocks = {kernel: block_dim_of(config, kernel, shape, block_dim) for kernel in KERNELS}
    launchers = {kernel: kernel_launcher(config, kernel) for kernel in KERNELS}
    device = npu_device()
    stream = npu_stream() if stream is None else stream
    outputs = {name: _on(device, getattr(grads, name)) for name in ("dq", "dk", "dv")}
    dsum = torch.full(tuple(grads.dsum.shape), math.nan, dtype=torch.float32, device=device)
    left, right = shape.window_bounds() if bounds is None else bounds
    values = {"q": _on(device, q), "k": _on(device, k), "v": _on(device, v), "o": _on(device, out),
              "do": _on(device, dout), "lse": _on(device, lse), "dsum": dsum, **outputs,
              "batch": shape.batch, "heads": shape.heads, "kv_heads": shape.kv_heads, "s0": shape.s0, "s1": shape.s1,
              "scale": float(scale), "win_left": left, "win_right": right}
    workspaces = {kernel: torch.empty(config.slot_bytes_per_block(kernel) * blocks[kernel] // 4, dtype=torch.float32,
                                      device=device) for kernel in KERNELS}
    handle = getattr(stream, "_as_parameter_", stream)
    for kernel in KERNELS:
        launcher = launchers[kernel]
        code = launcher.launcher(blocks[kernel], handle,
                                 *host_values(launcher.args, {**values, "slots": workspaces[kernel]}))
        check_launch_code(code, argspec.LAUNCHERS[launcher.entry])
    for name, buffer in (*outputs.items(), ("dsum", dsum)):
        target = getattr(grads, name)
        if buffer is not target:
            target.copy_(buffer.to(target.device))
    return NpuBackwardLaunch(blocks, workspaces)


__all__ = ["NpuBackwardLaunch", "block_dim_of", "kernel_launcher", "launch_backward_npu"]
