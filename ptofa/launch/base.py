"""The backend interface: what running one case takes and gives back, and the registry.

A backend runs a built `.pto` for one config and problem shape and checks O against
the reference: `ptofa.launch.sim` on the CPU simulator, `ptofa.launch.npu` on an Ascend
device. Each registers itself when imported:

    class MyBackend:
        name = "mine"
        def available(self) -> tuple[bool, str]: ...  # (usable here, device name or what is missing)
        def run(self, request: RunRequest) -> RunResult: ...

    register_backend("mine", MyBackend())

`ptofa.runner.run_case` builds the `.pto`, puts it in a `RunRequest` with the case's
config, shape, seed, block_dim, scale and simulator `RunOptions`, and dispatches
through `get_backend`. This module sits below the runner and the backends: it
imports neither.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from ptofa.kernels.mods import has_mod
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.reference import check_accuracy, check_lse, default_alibi_slopes, make_key_mask, reference_fa
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import DEFAULT_SOC

AUTO = "auto"
# The shipped backends (`ptofa.runner` imports both modules, so both are registered) and `auto`.
BACKENDS = ("sim", "npu", AUTO)


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


@dataclass(frozen=True)
class RunRequest:
    """One case for a backend: the built `.pto` and how to run it.

    `block_dim` None = the backend's default (min(work units, cube cores)); `scale`
    None = 1/sqrt(head). `timing`, `timeline`, `trace` and `soc` ask the simulator for the
    timing model's prediction (and a timeline picture, Chrome trace events); `options` are the simulator's
    run options. A backend ignores what does not apply to it.
    """

    config: FAConfig
    shape: ProblemShape
    pto_path: Path
    seed: int = 0
    block_dim: int | None = None
    scale: float | None = None
    options: RunOptions = field(default_factory=RunOptions)
    key_mask: torch.Tensor | None = None  # [B, S1] or [S1]; None with config.key_padding: random ragged lengths
    softcap: float = 0.0  # > 0 with the Softcap mod in config.mods
    alibi_slopes: torch.Tensor | None = None  # [N] or [B, N] fp32; None with ALiBi: `default_alibi_slopes`
    timing: bool = False
    timeline: Path | None = None
    trace: Path | None = None
    soc: str = DEFAULT_SOC
    # (D, Dv) of the inputs when they are narrower than the kernel (config.head = kernel_head(D, Dv)):
    # they are zero-padded to it (`pad_heads`) and O's first Dv columns are checked. None: both config.head.
    head_dims: tuple[int, int] | None = None


class Backend(Protocol):
    """What `register_backend` takes."""

    def available(self) -> tuple[bool, str]:
        """(True, what runs the kernel) when the backend can run here, else (False, what is missing)."""
        ...

    def run(self, request: RunRequest) -> RunResult:
        """Run and check one case. Never raises for a failing kernel (the status says how it
        failed); raises `BackendUnavailable` (one line) when the backend cannot run here."""
        ...


_REGISTRY: dict[str, Backend] = {}


def register_backend(name: str, backend: Backend) -> Backend:
    """Make `backend` runnable as `run_case(..., backend=name)`; a later registration replaces it."""
    if name == AUTO:
        raise ValueError(f"{AUTO!r} is not a backend name: it picks one of the registered backends")
    _REGISTRY[name] = backend
    return backend


def registered_backends() -> tuple[str, ...]:
    """Names of the registered backends: the shipped ones in `BACKENDS` order, then the others."""
    return tuple(sorted(_REGISTRY, key=lambda name: BACKENDS.index(name) if name in BACKENDS else len(BACKENDS)))


def get_backend(name: str) -> Backend:
    """The backend registered as `name`; `ValueError` naming the registered ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"backend={name!r} is not registered (registered: {', '.join(_REGISTRY) or 'none'})") from None


TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def pad_heads(width: int, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each tensor with its last (head) dim zero-padded on the right to `width` columns, the compiled
    head dim `ptofa.pipeline.kernel_head` chose; a tensor already `width` wide is returned as is.
    The one place where a head dim that is no kernel width (or a v head dim unlike q/k's) becomes one:
    zero Q/K columns add nothing to Q K^T, zero V (and dO) columns give zero O (and dV) columns, and
    the callers slice the true head dims back out. Costs one copy of each padded tensor."""
    return tuple(t if t.shape[-1] == width else torch.nn.functional.pad(t, (0, width - t.shape[-1]))
                 for t in tensors)


def normalize_key_mask(mask, batch: int, s1: int) -> torch.Tensor:
    """A key-padding mask as the kernel reads it: int8 0/1, [B, S1] or [S1] (shared by the batch).

    Accepts bool or any integer dtype (nonzero = the key takes part), shaped [B, S1], [1, S1] or [S1];
    anything else raises `ConfigError` naming the rule and the shapes.
    """
    m = torch.as_tensor(mask)
    if m.dtype.is_floating_point or m.dtype.is_complex:
        raise ConfigError(f"key padding mask: dtype {m.dtype} must be bool or an integer type (nonzero = key takes part)")
    if m.dim() == 2 and m.shape[0] == 1:
        m = m[0]
    if not (m.dim() == 1 and m.shape[0] == s1) and not (m.dim() == 2 and tuple(m.shape) == (batch, s1)):
        raise ConfigError(f"key padding mask: shape {tuple(m.shape)} must be [B, S1] = [{batch}, {s1}] or [S1] = [{s1}]")
    return (m != 0).to(torch.int8).contiguous()


def case_key_mask(config: FAConfig, shape: ProblemShape, mask, seed: int) -> torch.Tensor | None:
    """The normalised key mask of a case: the given one, a random ragged one when the kernel
    takes a mask and none was given, None when the kernel takes none."""
    if not config.key_padding:
        if mask is not None:
            raise ConfigError("key padding mask: given, but the kernel was built without key_padding")
        return None
    if mask is None:
        mask = make_key_mask(shape.batch, shape.s1, seed)[0]
    return normalize_key_mask(mask, shape.batch, shape.s1)


def case_score_mods(config: FAConfig, shape: ProblemShape, softcap: float,
                    slopes: torch.Tensor | None) -> tuple[float, torch.Tensor | None]:
    """(softcap, ALiBi slopes) of a case: the given ones, ALiBi's usual slopes for a kernel with `alibi`
    and none given; `ConfigError` when the kernel's switches and the values disagree."""
    if has_mod(config.mods, "softcap") != (softcap > 0):
        raise ConfigError(f"softcap: {softcap} given, but the kernel was built with mods={config.mods}")
    if not has_mod(config.mods, "alibi"):
        if slopes is not None:
            raise ConfigError("alibi slopes: given, but the kernel was built without alibi")
        return softcap, None
    return softcap, default_alibi_slopes(shape.heads) if slopes is None else slopes


def check_output(
    result: RunResult, o: np.ndarray | torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
    *, window: tuple[int, int] = (-1, -1), key_mask: torch.Tensor | None = None, lse: torch.Tensor | None = None,
    out_dtype: str | None = None, reference=None, softcap: float = 0.0, alibi_slopes: torch.Tensor | None = None,
) -> RunResult:
    """Compare O (and LSE) with the torch reference (`ptofa.reference` rules); fill status, errors, message.
    `reference` (a `ptofa.reference.Reference`) replaces `reference_fa` (varlen: per sequence)."""
    ref = reference or reference_fa(q, k, v, scale, window, key_mask, TORCH_DTYPES[out_dtype] if out_dtype else None,
                                    softcap, alibi_slopes)
    accuracy = check_accuracy(torch.as_tensor(o).float(), ref.out32, ref.out_low)
    passed = accuracy.passed
    result.err, result.ref16_err, result.tolerance = accuracy.err, accuracy.ref16_err, accuracy.tolerance
    result.max_abs_err, result.max_rel_err = accuracy.max_abs_err, accuracy.max_rel_err
    result.message = accuracy.summary()
    if lse is not None:
        lse_acc = check_lse(lse, ref)
        passed = passed and lse_acc.passed
        result.extra.update(lse_err=lse_acc.err, lse_tolerance=lse_acc.tolerance)
        result.message += "; " + lse_acc.message
    result.status = "pass" if passed else "fail"
    return result


def check_softcap(softcap) -> float:
    """flash-attn's `softcap` as a float >= 0 (0: off); ValueError otherwise."""
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap: {softcap!r} must be a finite float >= 0 (0 = no softcapping)")
    return float(softcap)


def check_alibi_slopes(slopes, batch: int, heads: int) -> torch.Tensor | None:
    """flash-attn's `alibi_slopes`: fp32 [N] or [B, N] (returned contiguous, on its device), or None."""
    if slopes is None:
        return None
    if not isinstance(slopes, torch.Tensor) or slopes.dtype != torch.float32:
        raise ValueError(f"alibi_slopes: must be a float32 tensor of shape [{heads}] or [{batch}, {heads}], got "
                         f"{getattr(slopes, 'dtype', type(slopes).__name__)}")
    if tuple(slopes.shape) not in ((heads,), (batch, heads)):
        raise ValueError(f"alibi_slopes: shape {tuple(slopes.shape)} must be [{heads}] or [{batch}, {heads}] (nheads, or "
                         f"batch x nheads)")
    if not torch.isfinite(slopes).all():
        raise ValueError("alibi_slopes: must be finite")
    return slopes.detach().contiguous()
