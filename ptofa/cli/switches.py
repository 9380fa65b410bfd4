"""The forward kernel's switches as command-line options, shared by `run_fa build`, `run` and `sweep`.

`config_options` adds `--head --tile-s1 --qk-preload` and the switches, `score_mod_options`
`--softcap --alibi`; `make_config` / `with_score_mods` make the `FAConfig` (or exit 2), and
`print_results` prints result rows on the commands' `console`.

`kernel_switches` adds `--dtype --out-dtype --causal --window --key-padding-mask --lse
--prescale-q/--no-prescale-q --softmax-dtype`,
`kv_heads_option` adds `--kv-heads`; `config_knobs` maps the parsed switches to
`FAConfig` keyword arguments and `window_of` gives the problem shape's window. A
switch value that cannot be parsed, or two switches that contradict each other,
raise `InputError`: one line naming the rule, exit code 2.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings

import click
from rich import box
from rich.console import Console
from rich.table import Table

from ptofa.kernels.builtin_mods.registry import with_builtin_mods
from ptofa.kernels.builtin_mods.window import window_mods
from ptofa.pipeline import MAX_HEAD, SUPPORTED_HEAD, ConfigError, FAConfig

# --dtype / --out-dtype spelling -> FAConfig dtype name (None: O in the input dtype).
DTYPES = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", None: None}
IN_CHOICES = ("fp16", "bf16")
OUT_CHOICES = ("fp16", "bf16", "fp32")
SOFTMAX_CHOICES = ("f32", "f16")
UNBOUNDED = (-1, -1)
CAUSAL = (-1, 0)


class InputError(click.ClickException):
    """Bad input or an unavailable backend: one clear line, exit code 2."""

    exit_code = 2


def parse_window(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> tuple[int, int] | None:
    """`--window LEFT,RIGHT` as (left, right); each >= -1 (-1 = unbounded)."""
    if value is None:
        return None
    try:
        left, right = (int(x) for x in value.split(","))
    except ValueError:
        raise InputError(f"window: --window {value!r} must be LEFT,RIGHT (two integers, -1 = unbounded)") from None
    if min(left, right) < -1:
        raise InputError(f"window: --window {left},{right}: LEFT and RIGHT must each be >= -1 (-1 = unbounded)")
    return left, right


def parse_softmax_dtypes(ctx: click.Context | None, param: click.Parameter | None, value: str) -> tuple[str, ...]:
    """`--softmax-dtype f32`, `f16`, or (sweep) a comma list of them, as a tuple without repeats."""
    values = tuple(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))
    bad = [item for item in values if item not in SOFTMAX_CHOICES]
    if not values or bad:
        raise InputError(f"softmax dtype: --softmax-dtype {value!r} must be one of {', '.join(SOFTMAX_CHOICES)} "
                         f"(sweep: a comma-separated list of them)")
    return values


def one_softmax_dtype(values: tuple[str, ...]) -> str:
    """The one --softmax-dtype of build and run (only sweep takes a list)."""
    if len(values) != 1:
        raise InputError(f"softmax dtype: --softmax-dtype {','.join(values)}: build and run take one value; "
                         f"sweep takes a list")
    return values[0]


def window_of(causal: bool, window: tuple[int, int] | None) -> tuple[int, int]:
    """--causal and --window as one (left, right) pair; both given must agree."""
    if causal and window is not None and window != CAUSAL:
        raise InputError(f"window: --causal is --window -1,0, which contradicts --window {window[0]},{window[1]}")
    return CAUSAL if causal else (window or UNBOUNDED)


def config_knobs(dtype: str = "fp16", out_dtype: str | None = None, causal: bool = False,
                 window: tuple[int, int] | None = None, key_padding: bool = False, lse: bool = False,
                 prescale_q: bool = True, softmax_dtype: str = "f32") -> dict:
    """The switches as `FAConfig` keyword arguments (a window other than unbounded needs the window mod)."""
    return dict(in_dtype=DTYPES[dtype], out_dtype=DTYPES[out_dtype], mods=window_mods(window_of(causal, window) != UNBOUNDED),
                key_padding=key_padding, lse=lse, prescale_q=prescale_q, softmax_dtype=softmax_dtype)


def kernel_switches(f):
    """The kernel's switches (options of build, run and sweep), in --help order:
    --dtype --out-dtype --causal --window --key-padding-mask --lse --prescale-q/--no-prescale-q --softmax-dtype."""
    f = click.option("--softmax-dtype", "softmax_dtypes", default="f32", show_default=True,
                     callback=parse_softmax_dtypes, metavar="f32|f16",
                     help="The softmax's working dtype: f32 (high precision) or f16 (high performance: the cube rounds "
                          "the scores to f16 and the row max, exp and row sum run on f16 tiles; fp16 inputs, without "
                          "--lse). sweep: a comma list is an axis of the grid.")(f)
    f = click.option("--prescale-q/--no-prescale-q", default=True, show_default=True,
                     help="Scale Q once per work unit on the vectors (a fourth pipe) instead of every score tile.")(f)
    f = click.option("--lse", is_flag=True, help="Also write LSE [B, heads, S0] fp32 (+inf on rows without a visible key).")(f)
    f = click.option("--key-padding-mask", "key_padding", is_flag=True,
                     help="Take a key-padding mask [B, S1] (run, sweep: random ragged valid lengths per batch).")(f)
    f = click.option("--window", callback=parse_window, default=None, metavar="LEFT,RIGHT",
                     help="Sliding window, bottom-right aligned: key j visible for query i iff "
                          "i+S1-S0-LEFT <= j <= i+S1-S0+RIGHT (-1 = unbounded).")(f)
    f = click.option("--causal", is_flag=True, help="Causal mask, bottom-right aligned (= --window -1,0).")(f)
    f = click.option("--out-dtype", type=click.Choice(OUT_CHOICES), default=None,
                     help="O dtype [default: the input dtype].")(f)
    f = click.option("--dtype", type=click.Choice(IN_CHOICES), default="fp16", show_default=True,
                     help="Q, K, V dtype (P is rounded to it).")(f)
    return f


def kv_heads_option(f):
    """`--kv-heads`: key/value heads of the problem shape (None: as many as query heads)."""
    return click.option("--kv-heads", type=int, default=None,
                        help="Key/value heads (GQA/MQA; divides --heads) [default: --heads].")(f)


# Non-terminal output (logs, pipes) gets a width that fits a result row instead of 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=120)


def config_options(f):
    """The FAConfig knobs of build and run: --head --tile-s1 --qk-preload, then the kernel's
    switches (`ptofa.cli.switches.kernel_switches`, shared with sweep)."""
    f = kernel_switches(f)
    f = click.option("--qk-preload", type=int, default=3, show_default=True,
                     help="QK tiles computed ahead of PV (1..4; exp_max ring depth = this).")(f)
    f = click.option("--tile-s1", type=int, default=256, show_default=True,
                     help="Logical S1 tile width per pipeline step (128, 256, 512 or 1024).")(f)
    f = click.option("--head", "--head-dim", "head", type=int, default=128, show_default=True,
                     help=f"Head dimension D: a kernel width ({', '.join(map(str, SUPPORTED_HEAD))}); `run` takes "
                          f"any 1..{MAX_HEAD} (inputs zero-padded to the next width).")(f)
    return f


def score_mod_options(f):
    """--softcap X and --alibi: the kernel's score modifications (the built-in mods `Softcap`, `Alibi`)."""
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
        return dataclasses.replace(config, mods=with_builtin_mods(config.mods, softcap=softcap > 0, alibi=alibi))
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None


def int_list(value: str | None, name: str) -> list[int] | None:
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
