"""The NPU backend: compile a `.pto`, load the `.so` with ctypes, launch, check.

`run_npu` builds the kernel (cached, `ptofa.launch.toolchain`), loads `caller.cpp`'s
launcher with the argtypes of `ptofa.kernels.argspec`, allocates BSND fp16 Q/K/V, fp32 O
and the GM slot workspace with torch_npu, launches on the current stream and
checks O with the accuracy rule of `ptofa.reference`. It also compares O with
`torch_npu.npu_fused_infer_attention_score` (fa-pipeline.md 16.2) and reports the
difference in `RunResult.extra`; the pass/fail status comes from the reference rule.

Without torch_npu or a device every entry point raises `BackendUnavailable`
with one line saying what is missing. The module registers `NpuBackend` as the
`npu` backend of `ptofa.launch.base`.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ptofa.kernels import argspec
from ptofa.launch.base import TORCH_DTYPES, BackendUnavailable, RunRequest, RunResult, case_key_mask, check_output, register_backend
from ptofa.pipeline import FAConfig, ProblemShape, default_block_dim, workspace_bytes
from ptofa.reference import make_inputs
from ptofa.launch.toolchain import compile_pto

# Cube cores of a 910B3/B4 (fa-pipeline.md 17.3), used when torch_npu cannot say.
FALLBACK_CUBE_CORES = 20
# Tolerance of the comparison with the fused op (fa-pipeline.md 14).
FUSED_RTOL = FUSED_ATOL = 1e-3
# next_tokens for a non-causal fused-op call (fa-pipeline.md 16.2).
FUSED_NEXT_TOKENS_NON_CAUSAL = 65535


class NpuLaunchError(RuntimeError):
    """The launcher returned an error code instead of launching."""


def npu_available() -> tuple[bool, str]:
    """(True, device name) when torch_npu imports and sees a device, else (False, what is missing)."""
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except ImportError:
        return False, "npu backend: torch_npu is not installed (on an Ascend host with CANN: pip install '.[npu]')"
    except Exception as failure:  # torch_npu raises assorted errors when CANN libraries are missing
        return False, f"npu backend: torch_npu failed to import: {type(failure).__name__}: {failure}"
    if not torch.npu.is_available() or torch.npu.device_count() < 1:
        return False, (
            "npu backend: torch_npu is installed but sees no NPU (check `npu-smi info`, ASCEND_RT_VISIBLE_DEVICES)"
        )
    return True, torch.npu.get_device_name(0)


def require_npu() -> None:
    """Raise `BackendUnavailable` (one line) unless an NPU is usable."""
    available, reason = npu_available()
    if not available:
        raise BackendUnavailable(reason)


def cube_core_count() -> int:
    """Cube cores (AIC) of device 0, from torch_npu; 20 when the property is absent."""
    try:
        return int(torch.npu.get_device_properties(0).cube_core_num)
    except (AttributeError, RuntimeError):
        return FALLBACK_CUBE_CORES


def load_launcher(so_path: Path | str, config: FAConfig | None = None) -> Callable[..., int]:
    """`argspec.LAUNCHER_NAME` from the built `.so`, with argtypes and restype from argspec."""
    library = ctypes.CDLL(str(so_path))
    launcher = getattr(library, argspec.LAUNCHER_NAME)
    launcher.argtypes = argspec.launcher_argtypes(config)
    launcher.restype = argspec.LAUNCHER_RESTYPE
    return launcher


def load_entry_launcher(so_path: Path | str, entry: str, args: tuple[argspec.EntryArg, ...]) -> Callable[..., int]:
    """The launcher of `entry` (`argspec.LAUNCHERS`) from a `.so` built for a `.pto` whose entry
    declares `args`, with argtypes from the same list (`argspec.host_params_of`)."""
    launcher = getattr(ctypes.CDLL(str(so_path)), argspec.LAUNCHERS[entry])
    launcher.argtypes = [ctypes.c_uint32, ctypes.c_void_p] + [p.ctype for p in argspec.host_params_of(args)]
    launcher.restype = argspec.LAUNCHER_RESTYPE
    return launcher


def check_launch_code(code: int, launcher: str = argspec.LAUNCHER_NAME) -> None:
    """Turn a launcher return code into an exception naming the launcher and the cause."""
    if code == argspec.RC_OK:
        return
    if code == argspec.RC_FFTS_FAILED:
        raise NpuLaunchError(
            f"{launcher} returned {code}: rtGetC2cCtrlAddr failed or gave a null FFTS address "
            "(is the CANN runtime initialised on this device?)"
        )
    raise NpuLaunchError(f"{launcher} returned unknown code {code}")


@dataclass
class FALaunch:
    """One ready-to-launch kernel call: launcher, device buffers and runtime arguments."""

    launcher: Callable[..., int]
    block_dim: int
    shape: ProblemShape
    scale: float
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    slots: torch.Tensor
    config: FAConfig | None = None
    lse: torch.Tensor | None = None
    key_mask: torch.Tensor | None = None

    def host_args(self) -> list[int | float]:
        """Values for `argspec.host_params(config)`, in its order."""
        left, right = self.shape.window_bounds()
        by_name: dict[str, int | float] = {
            "slots": self.slots.data_ptr(),
            "q": self.q.data_ptr(),
            "k": self.k.data_ptr(),
            "v": self.v.data_ptr(),
            "o": self.o.data_ptr(),
            "lse": 0 if self.lse is None else self.lse.data_ptr(),
            "key_mask": 0 if self.key_mask is None else self.key_mask.data_ptr(),
            "batch": self.shape.batch,
            "heads": self.shape.heads,
            "kv_heads": self.shape.kv_heads,
            "s0": self.shape.s0,
            "s1": self.shape.s1,
            "scale": self.scale,
            "win_left": left,
            "win_right": right,
            "key_mask_stride": 0 if self.key_mask is None or self.key_mask.dim() == 1 else self.shape.s1,
        }
        return [by_name[param.name] for param in argspec.host_params(self.config)]

    def __call__(self) -> None:
        """Enqueue the kernel on the current stream (asynchronous)."""
        stream = torch.npu.current_stream()._as_parameter_
        check_launch_code(self.launcher(self.block_dim, stream, *self.host_args()))


def prepare_launch(
    config: FAConfig,
    shape: ProblemShape,
    so_path: Path | str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    block_dim: int | None = None,
    key_mask: torch.Tensor | None = None,
) -> FALaunch:
    """Copy Q/K/V (and the key mask) to the NPU and allocate O, LSE and the slot workspace
    (`pipeline.workspace_bytes`)."""
    if block_dim is None:
        block_dim = default_block_dim(shape, cube_core_count(), config)
    elif block_dim < 1:
        raise ValueError(f"block_dim={block_dim} must be >= 1")
    device = torch.device("npu", torch.npu.current_device())
    return FALaunch(
        launcher=load_launcher(so_path, config),
        block_dim=block_dim,
        shape=shape,
        scale=scale,
        q=q.to(device).contiguous(),
        k=k.to(device).contiguous(),
        v=v.to(device).contiguous(),
        o=torch.zeros(shape.batch, shape.s0, shape.heads, config.head, dtype=TORCH_DTYPES[config.out_dtype], device=device),
        slots=torch.zeros(workspace_bytes(config, shape, block_dim) // 4, dtype=torch.float32, device=device),
        config=config,
        lse=torch.zeros(shape.batch, shape.heads, shape.s0, device=device) if config.lse else None,
        key_mask=None if key_mask is None else key_mask.to(device).contiguous(),
    )


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """torch_npu's fused attention on BSND device tensors (non-causal); fp16 [B,S0,N,D]."""
    import torch_npu

    heads = q.shape[2]
    try:
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, k, v, num_heads=heads, input_layout="BSND", scale=scale, next_tokens=FUSED_NEXT_TOKENS_NON_CAUSAL
        )
    except TypeError:  # torch_npu < 2.5 names the argument scale_value
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, k, v, num_heads=heads, input_layout="BSND", scale_value=scale, next_tokens=FUSED_NEXT_TOKENS_NON_CAUSAL
        )
    return out


def compare_with_fused(launch: FALaunch) -> dict[str, float | bool | str]:
    """Max |O - fused| and whether it is within rtol = atol = 1e-3."""
    try:
        fused = fused_attention(launch.q, launch.k, launch.v, launch.scale).float()
    except Exception as failure:  # the baseline is optional: report, do not fail the run
        return {"fused_error": f"{type(failure).__name__}: {failure}"}
    diff = (launch.o - fused).abs().max().item()
    close = torch.allclose(launch.o, fused, rtol=FUSED_RTOL, atol=FUSED_ATOL)
    return {"fused_max_abs_diff": diff, "fused_close": bool(close)}


def run_npu(
    config: FAConfig,
    shape: ProblemShape,
    pto_path: Path | str,
    seed: int = 0,
    block_dim: int | None = None,
    scale: float | None = None,
    compare_fused: bool = True,
    key_mask: torch.Tensor | None = None,
) -> RunResult:
    """Compile (cached), launch once on NPU 0, synchronise and check O against the reference."""
    require_npu()
    shape.check(config)
    scale = shape.default_scale(config.head) if scale is None else scale
    compiled = compile_pto(pto_path, config_summary=config.summary())
    q, k, v = make_inputs(shape, config.head, seed, TORCH_DTYPES[config.in_dtype], shape.kv_heads)
    key_mask = case_key_mask(config, shape, key_mask, seed)
    launch = prepare_launch(config, shape, compiled.so_path, q, k, v, scale, block_dim, key_mask)
    result = RunResult.start(config, shape, "npu", block_dim=launch.block_dim)
    result.extra["so_path"] = str(compiled.so_path)
    result.extra["cache_hit"] = compiled.cache_hit

    started = time.perf_counter()
    try:
        launch()
        torch.npu.synchronize()
    except (NpuLaunchError, RuntimeError) as failure:  # RuntimeError: aicore exception or timeout at sync
        result.status = "error"
        result.message = str(failure).strip().splitlines()[0]
        return result
    result.wall_s = time.perf_counter() - started

    check_output(result, launch.o.cpu(), q, k, v, scale, window=shape.window, key_mask=key_mask,
                 lse=None if launch.lse is None else launch.lse.cpu(), out_dtype=config.out_dtype)
    plain = not (config.masked or config.key_padding) and shape.kv_heads == shape.heads and config.in_dtype == "f16"
    if compare_fused and plain:
        result.extra.update(compare_with_fused(launch))
        if result.extra.get("fused_close") is False:
            result.message += f"; differs from the fused op by {result.extra['fused_max_abs_diff']:.3g} (> 1e-3)"
    return result


class NpuBackend:
    """`run_npu` behind the backend interface (`ptofa.launch.base`)."""

    name = "npu"

    def available(self) -> tuple[bool, str]:
        return npu_available()

    def run(self, request: RunRequest) -> RunResult:
        if request.options.fault is not None:
            raise ValueError(
                f"fault={request.options.fault!r}: fault injection is a simulator run option; "
                "the npu backend runs the kernel as built"
            )
        return run_npu(
            request.config, request.shape, request.pto_path,
            seed=request.seed, block_dim=request.block_dim, scale=request.scale, key_mask=request.key_mask,
        )


register_backend("npu", NpuBackend())
