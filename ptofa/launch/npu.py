"""The NPU launch of any plan, and the NPU backend of `run_fa run`.

`launch(plan, tensors)` runs every kernel call of a `LaunchPlan` on one stream: each
kernel's text is built once (`launcher_of`: ptoas + bisheng through `toolchain.compile_pto`,
cached on disk) and its launcher loaded with argtypes from the entry the text declares
(`load_launcher`, the one loader); the host arguments are `plan.bind`'s values in that
entry's order (`host_values`). Tensors not on the NPU are copied there and the plan's
outputs copied back; the workspace is the caller's or one of the plan's size. The chip is
`npu_soc()`: the named chip's facts with the device's cube-core count.

`run_npu` (the `npu` backend) builds the `.pto` of a case, launches its plan on random BSND
inputs and checks O with the accuracy rule of `ptofa.reference`. It also compares O with
`torch_npu.npu_fused_infer_attention_score` (docs/sources.md §4.5) and reports the
difference in `RunResult.extra`; the pass/fail status comes from the reference rule.

Without torch_npu or a device every entry point raises `BackendUnavailable`
with one line saying what is missing. The module registers `NpuBackend` as the
`npu` backend of `ptofa.launch.base`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ptofa.kernels import argspec
from ptofa.launch.base import (TORCH_DTYPES, BackendUnavailable, RunRequest, RunResult, case_key_mask, case_score_mods,
                               check_output, register_backend)
from ptofa.launch.calls import BuiltKernel, KernelCall, LaunchPlan, Workspace, bind, forward_plan
from ptofa.launch.toolchain import cache_root, compile_pto, entry_signature
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.reference import make_inputs
from ptofa.sim.socspec import DEFAULT_SOC, SocSpec, get_soc

# Cube cores of a 910B3 (catlass include/acot/arch/arch.hpp @ 0a8dac9d, AscendC910B3::MaxBlock;
# docs/sources.md §1.1), used when torch_npu cannot say.
FALLBACK_CUBE_CORES = 20
# Tolerance of the comparison with the fused op (pto-dsl examples/aot/flash_attention/140tflops/run.py @ 896585e0; docs/sources.md §4.4).
FUSED_RTOL = FUSED_ATOL = 1e-3
# next_tokens for a non-causal fused-op call (docs/sources.md §4.5).
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


def npu_soc(soc: str | SocSpec = DEFAULT_SOC) -> SocSpec:
    """The chip the NPU launches plan for: `soc`'s facts with device 0's cube-core count."""
    return get_soc(soc).with_cube_cores(cube_core_count())


def npu_device() -> torch.device:
    """The current NPU (torch_npu's)."""
    return torch.device("npu", torch.npu.current_device())


def npu_stream():
    """torch_npu's current stream on the current NPU."""
    return torch.npu.current_stream()


def load_launcher(so_path: Path | str, entry: str, args: tuple[argspec.EntryArg, ...]) -> Callable[..., int]:
    """The launcher of `entry` (`argspec.launcher_name`) from a `.so` built for a `.pto` whose entry
    declares `args`, with argtypes from the same list (`argspec.host_params_of`)."""
    launcher = getattr(ctypes.CDLL(str(so_path)), argspec.launcher_name(entry))
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


@dataclass(frozen=True)
class EntryLauncher:
    """A loaded launcher, its entry and the entry arguments its `.pto` declares (whose host
    parameters `host_values` orders)."""

    launcher: Callable[..., int]
    entry: str
    args: tuple[argspec.EntryArg, ...]


@functools.lru_cache(maxsize=32)
def launcher_of(pto_text: str, summary: str) -> EntryLauncher:
    """Build `pto_text` (ptoas + bisheng, disk-cached by `compile_pto`) and load its launcher."""
    found = entry_signature(pto_text)
    if found is None:
        raise ValueError(f"kernel {summary}: no function with `attributes {{pto.entry}}` in its text")
    entry, args = found
    digest = hashlib.sha256(pto_text.encode()).hexdigest()[:20]
    source = cache_root() / "sources" / f"{entry}_{digest}.pto"
    source.parent.mkdir(parents=True, exist_ok=True)
    if not source.is_file():
        source.write_text(pto_text)
    compiled = compile_pto(source, config_summary=summary)
    return EntryLauncher(load_launcher(compiled.so_path, entry, args), entry, args)


def host_values(args: tuple[argspec.EntryArg, ...], values: Mapping[str, object]) -> list[int | float]:
    """The launcher's arguments after block_dim and stream, in `argspec.host_params_of(args)`
    order: a tensor as its device address (None as 0), a scalar as given."""
    out: list[int | float] = []
    for param in argspec.host_params_of(args):
        if param.name not in values:
            raise ValueError(f"entry argument {param.name!r}: the launch has no value for it")
        value = values[param.name]
        if param.ctype is ctypes.c_void_p:
            out.append(0 if value is None else value.data_ptr())
        else:
            out.append(value)
    return out


@dataclass
class NpuLaunch:
    """What `launch` enqueued: the plan, the workspace, and the device tensors it passed by name
    (the caller's own where they were on the device already), with each call's tables."""

    plan: LaunchPlan
    workspace: torch.Tensor
    tensors: dict[str, torch.Tensor | None]
    bound: dict[str, dict[str, object]] = field(default_factory=dict)  # call name -> its host values by name

    @property
    def block_dims(self) -> dict[str, int]:
        return {call.name: call.block_dim for call in self.plan.calls}

    @property
    def workspaces(self) -> dict[str, torch.Tensor]:
        """Each call's slot rings: its region of the workspace (f32), up to the next region."""
        starts = sorted({v.offset for c in self.plan.calls for v in c.values.values() if isinstance(v, Workspace)})
        ends = dict(zip(starts, [*starts[1:], self.plan.workspace_bytes]))
        flat = self.workspace.reshape(-1).view(torch.uint8)
        return {call.name: flat[call.values["slots"].offset:ends[call.values["slots"].offset]].view(torch.float32)
                for call in self.plan.calls if isinstance(call.values.get("slots"), Workspace)}

    @property
    def dq_acc(self) -> torch.Tensor | None:
        return self.tensors.get("dq_acc")

    @property
    def units(self) -> torch.Tensor | None:
        """The forward kernel's unit table on the device."""
        return self.bound[self.plan.calls[0].name].get("units")

    @property
    def partials(self) -> torch.Tensor | None:
        """The split-KV partials: the workspace after the slot rings."""
        return self.bound[self.plan.calls[0].name].get("partials")


def launch(plan: LaunchPlan, tensors: Mapping[str, object], *, workspace: torch.Tensor | None = None,
           stream=None) -> NpuLaunch:
    """Enqueue every kernel call of `plan` on one NPU stream, in order (each reads what the last
    wrote). Every kernel is built and the caller's workspace checked before anything is enqueued,
    so a failed build or check launches nothing. Tensors not on the NPU are copied there, and the
    plan's outputs copied back to them (which waits for the kernels); the plan's tables go to the
    device as int32. `workspace` is the caller's device buffer (else one of the plan's size)."""
    launchers = [launcher_of(call.kernel.text, call.kernel.name) for call in plan.calls]
    device = npu_device()
    if workspace is None:
        workspace = npu_workspace(plan.workspace_bytes, device)
    else:
        workspace = _callers_workspace(workspace, plan, device)
    flat = workspace.reshape(-1).view(torch.uint8)
    stream = npu_stream() if stream is None else stream
    handle = getattr(stream, "_as_parameter_", stream)
    on_device = {name: None if t is None else t.to(device).contiguous() for name, t in tensors.items()}
    bound: dict[str, dict[str, object]] = {}
    for call, kernel in zip(plan.calls, launchers):
        values = bound[call.name] = call_values(call, on_device, flat, device)
        check_launch_code(kernel.launcher(call.block_dim, handle, *host_values(kernel.args, values)),
                          argspec.launcher_name(kernel.entry))
    for name in plan.outputs:
        target, buffer = tensors.get(name), on_device.get(name)
        if target is not None and buffer is not target:
            target.copy_(buffer.to(target.device))
    return NpuLaunch(plan, workspace, on_device, bound)


def npu_workspace(nbytes: int, device: torch.device) -> torch.Tensor:
    """A plan's workspace when the caller gives none: `nbytes` (f32 words) on `device`."""
    return torch.empty(max(nbytes, 4) // 4, dtype=torch.float32, device=device)


def call_values(call: KernelCall, tensors: Mapping[str, object], workspace: torch.Tensor,
                device: torch.device) -> dict[str, object]:
    """`plan.bind`'s values of one call for its launcher: a `Workspace` region as the byte view of
    `workspace` from its offset, a host table of the plan as an int32 device tensor."""
    values = {}
    for name, value in bind(call, tensors).items():
        if isinstance(value, Workspace):
            value = workspace.reshape(-1).view(torch.uint8)[value.offset:]
        elif isinstance(value, torch.Tensor) and value.device != device:
            value = value.to(device=device, dtype=torch.int32).contiguous()
        values[name] = value
    return values


def _callers_workspace(workspace: torch.Tensor, plan: LaunchPlan, device: torch.device) -> torch.Tensor:
    """The caller's workspace as a flat byte view on `device`, or ConfigError when it cannot hold the plan's."""
    if workspace.device != device:
        raise ConfigError(f"workspace: must be on {device}, got a tensor on {workspace.device}")
    if not workspace.is_contiguous():
        raise ConfigError(f"workspace: must be contiguous, got strides {workspace.stride()}")
    flat = workspace.reshape(-1).view(torch.uint8)
    if flat.numel() < plan.workspace_bytes:
        raise ConfigError(f"workspace: {flat.numel()} bytes, but num_splits={plan.num_splits} on {plan.block_dim} "
                          f"blocks needs {plan.workspace_bytes} ({plan.workspace_parts})")
    return flat


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


def compare_with_fused(launched: NpuLaunch, scale: float) -> dict[str, float | bool | str]:
    """Max |O - fused| and whether it is within rtol = atol = 1e-3."""
    q, k, v, o = (launched.tensors[name] for name in ("q", "k", "v", "o"))
    try:
        fused = fused_attention(q, k, v, scale).float()
    except Exception as failure:  # the baseline is optional: report, do not fail the run
        return {"fused_error": f"{type(failure).__name__}: {failure}"}
    diff = (o - fused).abs().max().item()
    close = torch.allclose(o, fused, rtol=FUSED_RTOL, atol=FUSED_ATOL)
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
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
) -> RunResult:
    """Compile (cached), launch once on NPU 0, synchronise and check O against the reference."""
    require_npu()
    shape.check(config)
    scale = shape.default_scale(config.head) if scale is None else scale
    text = Path(pto_path).read_text()
    compiled = compile_pto(pto_path, config_summary=config.summary())
    q, k, v = make_inputs(shape, config.head, seed, TORCH_DTYPES[config.in_dtype], shape.kv_heads)
    key_mask = case_key_mask(config, shape, key_mask, seed)
    softcap, slopes = case_score_mods(config, shape, softcap, alibi_slopes)
    kernel = BuiltKernel(text, config.summary(), argspec.ENTRY_NAME, argspec.entry_args(config))
    plan = forward_plan(kernel, config, shape, npu_soc(), scale=scale, key_mask=key_mask, block_dim=block_dim,
                        softcap=softcap, alibi=slopes)
    device = npu_device()
    o = torch.zeros(shape.batch, shape.s0, shape.heads, config.head, dtype=TORCH_DTYPES[config.out_dtype], device=device)
    lse = torch.zeros(shape.batch, shape.heads, shape.s0, device=device) if config.lse else None
    result = RunResult.start(config, shape, "npu", block_dim=plan.block_dim)
    result.extra["so_path"] = str(compiled.so_path)
    result.extra["cache_hit"] = compiled.cache_hit

    started = time.perf_counter()
    try:
        launched = launch(plan, {"q": q, "k": k, "v": v, "o": o, "lse": lse, "key_mask": key_mask,
                                 "alibi_slopes": slopes})
        torch.npu.synchronize()
    except (NpuLaunchError, RuntimeError) as failure:  # RuntimeError: aicore exception or timeout at sync
        result.status = "error"
        result.message = str(failure).strip().splitlines()[0]
        return result
    result.wall_s = time.perf_counter() - started

    check_output(result, o.cpu(), q, k, v, scale, window=shape.window, key_mask=key_mask,
                 lse=None if lse is None else lse.cpu(), out_dtype=config.out_dtype, softcap=softcap,
                 alibi_slopes=slopes)
    plain = not (config.key_padding or config.mods) and shape.kv_heads == shape.heads and config.in_dtype == "f16"
    if compare_fused and plain:
        result.extra.update(compare_with_fused(launched, scale))
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
            softcap=request.softcap, alibi_slopes=request.alibi_slopes,
        )


register_backend("npu", NpuBackend())
