"""The NPU launch of the backward kernels, in `BwdConfig.kernels` order: `dq` (which also writes
D = rowsum(dO * O)) then `dkdv`; or, in the atomic-add dQ mode, `prep` (D, and zeros over the f32
dQ accumulator), `dkdv` (dK, dV, and dQ added atomically into the accumulator), `post` (the
accumulator cast to dQ).

Each kernel's `.pto` (`kernels.fa_bwd.emit_bwd`) is built once per text with ptoas and bisheng
(`serving_npu.launcher_of`: `toolchain.compile_pto`, cached on disk) and its launcher loaded with
argtypes from the entry the text declares; the host arguments are put in that order by name
(`serving_npu.host_values`), so the order lives only in `bwd_pipeline.entry_args`. Every kernel
is built before any is enqueued, so a failed build launches nothing. They run on one stream in
order: each reads what the previous one wrote (D; the zeroed, then accumulated dQ). Each mixed
kernel gets its own slot workspace (`BwdConfig.slot_bytes_per_block(kernel) * block_dim`); the
vector-only prep and post kernels have none. The f32 accumulator is allocated uninitialised on
the device: the prep kernel zeroes it in the same stream, so no host memset has to be ordered
before the atomic adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ptofa.kernels import argspec
from ptofa.kernels.bwd_pipeline import BwdConfig, work_units
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.launch.npu import check_launch_code, cube_core_count
from ptofa.pipeline import ProblemShape
from ptofa.launch.serving_npu import EntryLauncher, host_values, launcher_of, npu_device, npu_stream


@dataclass
class NpuBackwardLaunch:
    """What `launch_backward_npu` enqueued, per kernel: its block_dim and (mixed kernels) its slot
    workspace; and the f32 dQ accumulator of the atomic mode."""

    block_dims: dict[str, int]
    workspaces: dict[str, torch.Tensor]
    dq_acc: torch.Tensor | None = None


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


def key_mask_stride(mask: torch.Tensor | None, s1: int) -> int:
    """Elements between batches of a normalised key mask: S1 for [B, S1], 0 for a shared [S1] (or none)."""
    return 0 if mask is None or mask.dim() == 1 else s1


def _on(device: torch.device, tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` itself when it is contiguous on `device`, else a contiguous device copy."""
    return tensor.to(device).contiguous()


def launch_backward_npu(config: BwdConfig, shape: ProblemShape, q, k, v, out, lse, dout, grads, scale: float, *,
                        block_dim: int | None = None, bounds: tuple[int, int] | None = None,
                        key_mask: torch.Tensor | None = None, stream=None) -> NpuBackwardLaunch:
    """Enqueue `config.kernels` on the NPU and write `grads` (`backward.BackwardBuffers`: dq, dk, dv
    zeroed by the caller, D, and in atomic mode dq_acc) in place; `key_mask` is the normalised key
    mask of a `key_padding` config. Inputs not on the NPU are copied there and the gradients
    copied back (which waits for the kernels)."""
    kernels = config.kernels
    blocks = {kernel: block_dim_of(config, kernel, shape, block_dim) for kernel in kernels}
    launchers = {kernel: kernel_launcher(config, kernel) for kernel in kernels}
    device = npu_device()
    stream = npu_stream() if stream is None else stream
    outputs = {name: _on(device, getattr(grads, name)) for name in ("dq", "dk", "dv")}
    dsum = torch.full(tuple(grads.dsum.shape), math.nan, dtype=torch.float32, device=device)
    dq_acc = torch.empty(tuple(q.shape), dtype=torch.float32, device=device) if config.atomic_dq else None
    left, right = shape.window_bounds() if bounds is None else bounds
    values = {"q": _on(device, q), "k": _on(device, k), "v": _on(device, v), "o": _on(device, out),
              "do": _on(device, dout), "lse": _on(device, lse), "dsum": dsum, "dq_acc": dq_acc, **outputs,
              "batch": shape.batch, "heads": shape.heads, "kv_heads": shape.kv_heads, "s0": shape.s0, "s1": shape.s1,
              "scale": float(scale), "win_left": left, "win_right": right,
              "key_mask": None if key_mask is None else _on(device, key_mask),
              "key_mask_stride": key_mask_stride(key_mask, shape.s1)}
    workspaces = {kernel: torch.empty(config.slot_bytes_per_block(kernel) * blocks[kernel] // 4, dtype=torch.float32,
                                      device=device) for kernel in kernels if config.pipes(kernel)}
    handle = getattr(stream, "_as_parameter_", stream)
    for kernel in kernels:
        launcher = launchers[kernel]
        code = launcher.launcher(blocks[kernel], handle,
                                 *host_values(launcher.args, {**values, "slots": workspaces.get(kernel)}))
        check_launch_code(code, argspec.LAUNCHERS[launcher.entry])
    copies = [*outputs.items(), ("dsum", dsum)] + ([("dq_acc", dq_acc)] if dq_acc is not None else [])
    for name, buffer in copies:
        target = getattr(grads, name)
        if target is not None and buffer is not target:
            target.copy_(buffer.to(target.device))
    return NpuBackwardLaunch(blocks, workspaces, dq_acc)


__all__ = ["NpuBackwardLaunch", "block_dim_of", "kernel_launcher", "key_mask_stride", "launch_backward_npu"]
