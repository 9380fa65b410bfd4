"""The backward kernels from the command line: `run_fa build --backward` writes them (`build_backward`),
`backward_config` is the backward config of a forward one (`--atomic`) for `build` and `run`.

`run_fa run --backward` (`ptofa.cli.run.run_backward_case`) builds and runs the forward kernel
(with LSE) and then the backward kernels on its O and LSE, checks dq, dk and dv against fp64
autograd with the accuracy rule, and prints the timing model's backward time, the
backward/forward ratio and what bounds each kernel. With `--seqlens` (packed sequences) the
forward is the varlen one and the backward the varlen backward (one launch of each kernel over
unit tables), checked per sequence and predicted from its unit tables.
"""

from __future__ import annotations

from pathlib import Path

from ptofa.kernels.bwd_pipeline import BwdConfig, budget, default_config
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.pipeline import ConfigError, FAConfig
from ptofa.cli.switches import InputError

# Largest B * N * S0 * S1 the fp64 autograd reference is run for (it holds several such tensors).
MAX_CHECKED_SCORES = 1 << 24


def backward_config(config: FAConfig, atomic: bool = False) -> BwdConfig:
    """The backward kernels for a forward config's switches (`atomic`: the atomic-add dQ mode, 64-query
    dkdv steps; a varlen config: the kernels over unit tables), or `InputError` naming what they lack."""
    if config.out_dtype != config.in_dtype:  # (--key-padding-mask with --seqlens: the varlen config refuses it)
        raise InputError(f"--backward: --out-dtype not supported by the backward kernels (dq, dk, dv are in the "
                         f"input dtype {config.in_dtype}, not {config.out_dtype})")
    try:
        return default_config(config.head, config.in_dtype, target=config.target,
                              atomic_dq=atomic, key_padding=config.key_padding, mods=config.mods,
                              varlen=config.varlen)
    except ConfigError as exc:
        raise InputError(f"invalid backward config: {exc}") from None


def build_backward(config: FAConfig, out_dir: Path, echo, atomic: bool = False) -> None:
    """Write the backward kernels' `.pto` files into `out_dir`, with their budgets."""
    bwd = backward_config(config, atomic)
    out_dir.mkdir(parents=True, exist_ok=True)
    echo(f"backward config: {bwd.summary()}")
    for kernel in bwd.kernels:
        text = emit_bwd(bwd, kernel)
        path = out_dir / f"fa_bwd_{kernel}.pto"
        tmp = path.with_suffix(".pto.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        echo(f"[{kernel}]\n{budget(bwd, kernel).table()}")
        echo(f"wrote {path} ({len(text.splitlines())} lines)")
