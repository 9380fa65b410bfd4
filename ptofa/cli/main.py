"""`run_fa`: build, check, compile, run, sweep and bench the FlashAttention kernel.

Exit codes: 0 success; 1 the kernel failed (wrong numbers, deadlock, a `.pto`
that does not verify); 2 bad input or a backend/tool that is not available here.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
import warnings
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table

from ptofa.pipeline import MAX_HEAD, SUPPORTED_HEAD, ConfigError, FAConfig, ProblemShape, budget, kernel_head
from ptofa.sim.options import FAULTS, RunOptions
from ptofa.cli.serving_cli import read_seqlens, serving_options
from ptofa.cli.switches import (  # noqa: F401 (DTYPES, window_of, InputError: re-exported)
    DTYPES,
    InputError,
    config_knobs,
    kernel_switches,
    kv_heads_option,
    one_softmax_dtype,
    window_of,
)

# Non-terminal output (logs, pipes) gets a width that fits a result row instead of 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=120)


def _config_options(f):
    """The FAConfig knobs of build and run: --head --tile-s1 --qk-preload, then the kernel's
    switches (`ptofa.cli.switches.kernel_switches`, shared with sweep)."""
    f = kernel_switches(f)
    f = click.option("--qk-preload", type=int, default=3, show_default=True,
                     help="QK tiles computed ahead of PV (1..4; exp_max ring depth = this).")(f)
    f = click.option("--tile-s1", type=int, default=256, show_default=True,
                     help="Logical S1 tile width per pipeline step (128, 256 or 512).")(f)
    f = click.option("--head", "--head-dim", "head", type=int, default=128, show_default=True,
                     help=f"Head dimension D: a kernel width ({', '.join(map(str, SUPPORTED_HEAD))}); `run` takes "
                          f"any 1..{MAX_HEAD} (inputs zero-padded to the next width).")(f)
    return f


def _score_mod_options(f):
    """--softcap X and --alibi: the kernel's score modifications (`FAConfig.softcap`, `.alibi`)."""
    f = click.option("--alibi", is_flag=True,
                     help="ALiBi bias -slope * |i + S1 - S0 - j| in the kernel (run: ALiBi's usual slopes 2^(-8h/N)).")(f)
    f = click.option("--softcap", type=float, default=0.0, show_default=True,
                     help="> 0: scores = softcap * tanh(scores / softcap) in the kernel (tanh from exp).")(f)
    return f


def with_score_mods(config: FAConfig, softcap: float, alibi: bool) -> FAConfig:
    """`config` with the switches of --softcap / --alibi, or exit 2 with the broken rule."""
    if softcap < 0 or not math.isfinite(softcap):
        raise InputError(f"--softcap {softcap}: must be a finite value >= 0 (0 = off)")
    if softcap == 0 and not alibi:
        return config
    try:
        return dataclasses.replace(config, softcap=softcap > 0, alibi=alibi)
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None


def _int_list(value: str | None, name: str) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(x) for x in value.split(",") if x.strip() != ""]
    except ValueError:
        raise click.BadParameter(f"{value!r} must be comma-separated integers", param_hint=name) from None


def make_config(head: int, tile_s1: int, qk_preload: int, dtype: str = "fp16", out_dtype: str | None = None,
                causal: bool = False, window: tuple[int, int] | None = None, key_padding: bool = False,
                lse: bool = False, prescale_q: bool = True, softmax_dtypes: tuple[str, ...] = ("f32",)) -> FAConfig:
    """An FAConfig, or exit 2 with the broken rule on one line."""
    knobs = config_knobs(dtype, out_dtype, causal, window, key_padding, lse, prescale_q,
                         one_softmax_dtype(softmax_dtypes))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            config = FAConfig(head=head, tile_s1=tile_s1, qk_preload=qk_preload, **knobs)
        for w in caught:
            console.print(f"[yellow]warning:[/] {w.message}")
        return config
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None


class LazyGroup(click.Group):
    """A click group that imports a command's module when the command is first looked up, so that
    `run_fa --help` or `run_fa build` loads neither torch's heavier paths nor the simulator, and
    this module sits below the commands it offers (click's documented pattern for lazily loaded
    subcommands). `lazy`: command name -> "module:attribute"."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, attribute = self.lazy[cmd_name].split(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)


# The commands defined in other modules (each imported when used).
LAZY_COMMANDS = {
    "bench": "ptofa.cli.bench:bench_cmd",
    "cache": "ptofa.launch.kernel_cache:cache_cmd",
    "catalog": "ptofa.kernels.catalog:catalog_cmd",
    "compile": "ptofa.launch.toolchain:compile_cmd",
    "sweep": "ptofa.cli.sweep:sweep_cmd",
    "tune": "ptofa.cli.tune_cli:tune_cmd",
}


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ptofa")
def main() -> None:
    """Write, build, check and run a FlashAttention forward kernel for Ascend A2/A3 (PTO IR)."""


@main.command()
@_config_options
@_score_mod_options
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Where to write the .pto file [default: fa.pto]; with --backward, a folder [default: .].")
@click.option("--backward", is_flag=True, help="Write the backward kernels (fa_bwd_dq.pto, fa_bwd_dkdv.pto) instead.")
@click.option("--atomic", is_flag=True, help="With --backward: the atomic-add dQ mode (fa_bwd_prep, _dkdv, _post).")
def build(head: int, tile_s1: int, qk_preload: int, dtype: str, out_dtype: str | None, causal: bool,
          window: tuple[int, int] | None, key_padding: bool, lse: bool, prescale_q: bool,
          softmax_dtypes: tuple[str, ...], softcap: float, alibi: bool, output: Path | None, backward: bool,
          atomic: bool) -> None:
    """Emit the kernel as PTO IR, and print the config and its memory budget."""
    from ptofa.fa_builder import emit_fa

    config = make_config(head, tile_s1, qk_preload, dtype, out_dtype, causal, window, key_padding, lse, prescale_q,
                         softmax_dtypes)
    config = with_score_mods(config, softcap, alibi)
    if backward:
        from ptofa.cli.bwd_cli import build_backward

        build_backward(config, output or Path("."), lambda line: console.print(line, markup=False), atomic)
        return
    output = output or Path("fa.pto")
    text = emit_fa(config)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(output.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(output)
    console.print(f"config: {config.summary()}")
    console.print(budget(config).table(), markup=False)
    console.print(f"wrote {output} ({len(text.splitlines())} lines)")


@main.command()
@click.argument("pto_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--ptoas-only", is_flag=True,
              help="Check what `ptoas --pto-arch=a3` accepts: skip ptofa's own rules (set_ffts before cube-vector pipes, "
                   "no tile arguments on an entry, and the C++-build rules ptoas does not check, such as an acc->vec tmov).")
@click.option("--pto-backend", "pto_backend", type=click.Choice(["emitc", "vpto"]), default=None,
              help="ptoas's back end, as its --pto-backend: emitc (ptoas's default, what `run_fa compile` uses) refuses the "
                   "ops it cannot lower; vpto leaves that rule out. Default: the module's pto.backend attribute, else emitc.")
def check(pto_file: Path, ptoas_only: bool, pto_backend: str | None) -> None:
    """Parse and verify any .pto file; report every error with its line number.

    \b
    Without options: what ptoas compiles for A3 with its default back end, and ptofa builds
    and launches. --ptoas-only: what ptoas compiles (its parser, verifiers and lowering).
    --pto-backend vpto: no EmitC lowering rule, so with --ptoas-only what ptoas's parser and
    verifiers accept. An op that verifies but does not lower says so ("... lowering: ptoas
    parses and verifies it, but its default (EmitC) back end cannot lower it").
    """
    from ptofa.ir.textio import PtoCheckError, check_text

    try:
        check_text(pto_file.read_text(), str(pto_file), launch_rules=not ptoas_only, backend=pto_backend)
    except PtoCheckError as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    console.print(f"{pto_file}: ok")


@main.command()
@click.argument("kernel_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--arg", "kernel_args", multiple=True, metavar="NAME=VALUE",
              help="With KERNEL_FILE: one entry argument, a tensor dtype:shape (f32:1000x256, zeros:f32:64), a .npy "
                   "file or a number; repeat for every argument.")
@click.option("--out", "kernel_out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With KERNEL_FILE: save every tensor argument after the run as OUT/NAME.npy.")
@click.option("--backend", type=click.Choice(["sim", "npu", "auto"]), default="auto", show_default=True,
              help="sim = CPU simulator of the emitted .pto; npu = Ascend device; auto = npu when available, else sim.")
@click.option("--batch", type=int, default=1, show_default=True, help="B (batch).")
@click.option("--heads", type=int, default=2, show_default=True, help="N (query heads).")
@kv_heads_option
@click.option("--s0", type=int, default=None, help="Query length S0 (any >= 1) [default: 256; 1 with --decode].")
@click.option("--s1", type=int, default=4096, show_default=True, help="Key/value length S1 (any >= 1).")
@click.option("--seqlens", callback=lambda ctx, p, v: _int_list(v, "--seqlens"), default=None, metavar="L1,L2,...",
              help="Varlen prefill: packed sequences of these query lengths (0 allowed); replaces --batch/--s0/--s1.")
@click.option("--kv-seqlens", callback=lambda ctx, p, v: _int_list(v, "--kv-seqlens"), default=None, metavar="L1,L2,...",
              help="Varlen key/value lengths per sequence [default: --seqlens].")
@serving_options
@_config_options
@_score_mod_options
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs (and key-mask lengths).")
@click.option("--block-dim", type=int, default=None,
              help="Blocks to launch (default: min(work units, cube cores)).")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the .pto (and build files) in this folder.")
@click.option("--timeline", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the timing model's timeline of one block (.svg or .png); sim backend only.")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the timing model's per-queue timeline of every replayed block as Chrome trace events "
                   "(FILE.json: Perfetto, chrome://tracing, MindStudio Insight); sim backend only.")
@click.option("--soc", default="910B2", show_default=True, help="Chip of the timing model (910B1..910B4).")
@click.option("--inject-fault", type=click.Choice(FAULTS), default=None, hidden=True,
              help="Test only: the simulator breaks the parsed kernel this way, to exercise its reports.")
@click.option("--backward", is_flag=True,
              help="Also run the backward kernels on the forward's O and LSE (with --seqlens the varlen backward, one "
                   "launch per kernel over unit tables): check dq, dk, dv; predict their time (sim).")
@click.option("--atomic", is_flag=True, help="With --backward: the atomic-add dQ mode (prep + dkdv + post kernels).")
@click.option("--head-dim-v", "head_v", type=int, default=None,
              help="V's (and O's) head dimension Dv, 1..256 [default: --head-dim]; the kernel runs at the width "
                   "kernel_head(D, Dv) with zero-padded inputs.")
@click.option("--balance", is_flag=True,
              help="Also run the dense shape through the balanced split-KV launch (per-unit splits chosen by the "
                   "timing model, e.g. only the last wave's units; then the reduce kernel): check it and predict both "
                   "launches (sim).")
def run(kernel_file: Path | None, kernel_args: tuple[str, ...], kernel_out: Path | None, backend: str, batch: int, heads: int, kv_heads: int | None, s0: int | None, s1: int, seqlens: list[int] | None,
        kv_seqlens: list[int] | None, seqlens_file: Path | None, decode: bool, cache_len: int | None, page_size: int,
        num_splits: int | None, head: int, tile_s1: int, qk_preload: int, dtype: str, out_dtype: str | None,
        causal: bool, window: tuple[int, int] | None, key_padding: bool, lse: bool, prescale_q: bool,
        softmax_dtypes: tuple[str, ...], softcap: float, alibi: bool, seed: int, block_dim: int | None,
        keep: Path | None, timeline: Path | None, trace: Path | None, soc: str, inject_fault: str | None,
        backward: bool, atomic: bool, balance: bool, head_v: int | None) -> None:
    """Build, run and check the kernel against the torch reference; print one result row.

    With KERNEL_FILE (any .pto: `run_fa run k.pto --arg x=f32:64x256 --arg rows=64 --block-dim 2`) run that
    kernel's entry with the `--arg` values instead, on the simulator or an NPU, and print the timing model's
    prediction (`ptofa.run_kernel`)."""
    import dataclasses

    if kernel_file is not None:
        from ptofa.cli.kernel_run import run_kernel_file

        sys.exit(run_kernel_file(kernel_file, kernel_args, block_dim, backend, soc, seed, timeline, trace, kernel_out,
                                 lambda line: console.print(line, markup=False, soft_wrap=True)))
    if kernel_args or kernel_out is not None:
        raise InputError("--arg / --out: only with a KERNEL_FILE (run_fa run FILE.pto --arg NAME=VALUE ...)")

    from ptofa.reference import make_key_mask
    from ptofa.runner import BackendUnavailable, resolve_backend, run_case
    from ptofa.launch.varlen import varlen_shape

    head_v = head if head_v is None else head_v
    try:
        width = kernel_head(head, head_v)
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None
    head_dims = None if (head, head_v) == (width, width) else (head, head_v)
    if head_dims is not None and (decode or num_splits is not None or seqlens or kv_seqlens or seqlens_file
                                  or balance or backend == "npu"):
        raise InputError(f"--head-dim {head} --head-dim-v {head_v}: inputs padded to the kernel width {width} run "
                         f"dense on the sim backend here (ptofa.flash_attn_varlen_func takes them packed)")
    config = make_config(width, tile_s1, qk_preload, dtype, out_dtype, causal, window, key_padding, lse, prescale_q,
                         softmax_dtypes)
    config = with_score_mods(config, softcap, alibi)
    if seqlens_file is not None:
        seqlens = read_seqlens(seqlens_file, seqlens)
    if decode or num_splits is not None:
        if backward:
            raise InputError("--backward: not with --decode / --num-splits (the backward kernels run prefill batches: "
                             "dense, or packed with --seqlens)")
        if config.softcap or config.alibi:
            raise InputError("--softcap / --alibi: not with --decode / --num-splits in run_fa (flash_attn_with_kvcache "
                             "and flash_attn_varlen_func take softcap and alibi_slopes)")
        from ptofa.cli.serving_run import run_serving

        sys.exit(run_serving(config, backend, batch, heads, kv_heads, s0, seqlens, kv_seqlens, decode, cache_len,
                             page_size, num_splits, window_of(causal, window), seed, soc))
    s0 = 256 if s0 is None else s0
    if key_padding and (seqlens is not None or kv_seqlens is not None):
        raise InputError("--key-padding-mask: not with --seqlens / --kv-seqlens (packed sequences take their key "
                         "lengths from --kv-seqlens)")
    try:
        if seqlens is not None or kv_seqlens is not None:
            config = dataclasses.replace(config, varlen=True)
            shape = varlen_shape(seqlens or kv_seqlens, kv_seqlens or seqlens, heads, kv_heads or heads,
                                 window_of(causal, window))
        else:
            shape = ProblemShape(batch, heads, s0, s1, kv_heads=kv_heads, window=window_of(causal, window))
        shape.check(config)
    except ConfigError as exc:
        raise InputError(f"invalid shape: {exc}") from None
    if trace is not None and trace.suffix.lower() != ".json":
        raise InputError(f"--trace {trace}: Chrome trace events are JSON; the file name must end in .json")
    backend = resolve_backend(backend)
    if backward:
        from ptofa.cli.bwd_cli import backward_config

        backward_config(config, atomic)
    if inject_fault is not None and backend != "sim":
        raise InputError(f"--inject-fault is a simulator option; the {backend} backend runs the kernel as built")
    if balance and (backend != "sim" or backward or key_padding or config.varlen or block_dim is not None):
        raise InputError("--balance: a dense shape on the sim backend, without --backward, --key-padding-mask, "
                         "--seqlens or --block-dim")
    key_mask = None
    if key_padding:
        key_mask, lengths = make_key_mask(batch, s1, seed)
        console.print(f"key-padding mask: valid keys per batch {lengths} of {s1}")
    try:
        result = run_case(config, shape, backend=backend, seed=seed, keep_dir=keep, block_dim=block_dim,
                          timing=True, timeline=timeline, trace=trace, soc=soc, options=RunOptions(fault=inject_fault),
                          key_mask=key_mask, softcap=softcap, head_dims=head_dims)
    except BackendUnavailable as exc:
        raise InputError(str(exc)) from None
    print_results([result])
    if head_dims is not None:
        console.print(f"head dims D={head}, Dv={head_v}: run on the kernel width {width} (inputs zero-padded on the host)")
    if result.message and not result.passed:
        click.echo(result.message, err=True)
    for path in (timeline, trace):
        if path is not None and result.predicted_us is not None:
            console.print(f"timeline written to {path}")
    if balance:
        from ptofa.launch.balance import balanced_line, run_balanced

        split = run_balanced(config, shape, backend, seed, soc)
        print_results([split])
        console.print(balanced_line(split), markup=False)
        if result.predicted_us and split.predicted_us:
            console.print(f"balanced split vs unsplit: {result.predicted_us / split.predicted_us:.2f}x predicted speedup")
        sys.exit(0 if result.passed and split.passed else 1)
    if backward and result.passed:
        from ptofa.cli.bwd_cli import run_backward_case

        passed = run_backward_case(config, shape, result.predicted_us, seed, soc, block_dim,
                                   lambda line: console.print(line, markup=False), backend, atomic, softcap,
                                   head_dims)
        sys.exit(0 if passed else 1)
    sys.exit(0 if result.passed else 1)


def print_results(results) -> None:
    """One row per result: backend, config, shape, status, errors, times."""
    table = Table(title="ptofa run", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("backend", "D/tile/pre", "BxN", "S0xS1", "status", "err", "tol", "wall s", "predicted"):
        table.add_column(col, justify="right", no_wrap=True)

    def fmt(x, spec):
        return "-" if x is None else format(x, spec)

    for r in results:
        style = "green" if r.passed else "red"
        predicted = "-" if r.predicted_us is None else f"{r.predicted_us:.1f} us {r.predicted_tflops:.0f} TF"
        table.add_row(r.backend, f"{r.head}/{r.tile_s1}/{r.qk_preload}", f"{r.batch}x{r.heads}", f"{r.s0}x{r.s1}",
                      f"[{style}]{r.status}[/]", fmt(r.err, ".1e"), fmt(r.tolerance, ".1e"),
                      fmt(r.wall_s, ".2f"), predicted)
    console.print(table)
    for r in results:
        if r.extra.get("timing_summary"):
            console.print(r.extra["timing_summary"], markup=False)
            console.print(r.extra["utilization"], markup=False)


if __name__ == "__main__":
    main()
