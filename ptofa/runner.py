"""Run one FlashAttention case on a backend and check it against the reference.

`run_case` is the single entry point used by `run_fa run`, the sweep and the
tests: build the `.pto` for a config, write it, and hand it to a backend of the
`ptofa.launch.base` registry (`ptofa.launch.sim`: the simulator on the parsed text
file, not the builder's objects; `ptofa.launch.npu`: an Ascend device), which compares O
with the torch reference using the accuracy rule of `ptofa.reference`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import ptofa.launch.npu  # noqa: F401  (registers the "npu" backend)
from ptofa.launch.base import (  # noqa: F401 (BackendUnavailable, RunResult, BACKENDS: re-exported)
    AUTO,
    BACKENDS,
    BackendUnavailable,
    RunRequest,
    RunResult,
    get_backend,
    registered_backends,
)
from ptofa.fa_builder import emit_fa
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import DEFAULT_SOC
from ptofa.launch.sim import sim_kernel_args  # noqa: F401 (re-exported; the import registers "sim")

# `auto` runs on the first of these that is available here.
AUTO_PREFERENCE = ("npu", "sim")


def resolve_backend(backend: str) -> str:
    """`auto` -> npu when an NPU with torch_npu is usable here, else sim."""
    names = registered_backends()
    if backend != AUTO and backend not in names:
        raise ValueError(f"backend={backend!r} must be one of {(*names, AUTO)}")
    if backend != AUTO:
        return backend
    return next(name for name in AUTO_PREFERENCE if get_backend(name).available()[0])


def run_case(
    config: FAConfig,
    shape: ProblemShape,
    backend: str = "sim",
    seed: int = 0,
    keep_dir: Path | None = None,
    block_dim: int | None = None,
    timing: bool = False,
    timeline: Path | None = None,
    trace: Path | None = None,
    soc: str = DEFAULT_SOC,
    scale: float | None = None,
    options: RunOptions | None = None,
    key_mask=None,
    softcap: float = 0.0,
    alibi_slopes=None,
    head_dims: tuple[int, int] | None = None,
) -> RunResult:
    """Build the kernel for `config`, run it on `backend` and check O against the reference.

    `options` are the simulator's run options (tracing, an injected fault, ...); `key_mask`
    is the key-padding mask of a `key_padding` kernel (None: random ragged lengths); `softcap` the
    value of a `softcap` kernel, `alibi_slopes` ([N] or [B, N] fp32) an `alibi` kernel's (None: ALiBi's usual);
    `head_dims` (D, Dv) runs inputs of those head dims zero-padded to the kernel's width;
    `timing` asks the simulator for the timing model's prediction (`timeline`: also
    a picture of it, `trace`: its Chrome trace events, `soc`: the chip it models).
    Never raises for a failing kernel: the status says "pass", "fail", "deadlock",
    "error" (simulator error, imbalance, overflow) or "rejected" (shape breaks a rule).
    Raises `BackendUnavailable` when the backend cannot run on this machine.
    """
    backend = resolve_backend(backend)
    try:
        shape.check(config)
    except ConfigError as exc:
        return RunResult.start(config, shape, backend, status="rejected", message=str(exc))
    with tempfile.TemporaryDirectory(prefix="ptofa_") as tmp:
        work = Path(keep_dir) if keep_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        pto_path = work / "fa.pto"
        pto_path.write_text(emit_fa(config))
        request = RunRequest(
            config, shape, pto_path, seed=seed, block_dim=block_dim, scale=scale,
            options=options or RunOptions(), key_mask=key_mask, timing=timing, timeline=timeline, trace=trace, soc=soc,
            softcap=softcap, alibi_slopes=alibi_slopes,
            head_dims=head_dims,
        )
        return get_backend(backend).run(request)
