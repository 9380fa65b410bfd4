"""The forward kernel's switches as command-line options, shared by `run_fa build`, `run` and `sweep`.

`kernel_switches` adds `--dtype --out-dtype --causal --window --key-padding-mask --lse
--prescale-q/--no-prescale-q`,
`kv_heads_option` adds `--kv-heads`; `config_knobs` maps the parsed switches to
`FAConfig` keyword arguments and `window_of` gives the problem shape's window. A
switch value that cannot be parsed, or two switches that contradict each other,
raise `InputError`: one line naming the rule, exit code 2.
"""

from __future__ import annotations

import click

# --dtype / --out-dtype spelling -> FAConfig dtype name (None: O in the input dtype).
DTYPES = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", None: None}
IN_CHOICES = ("fp16", "bf16")
OUT_CHOICES = ("fp16", "bf16", "fp32")
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


def window_of(causal: bool, window: tuple[int, int] | None) -> tuple[int, int]:
    """--causal and --window as one (left, right) pair; both given must agree."""
    if causal and window is not None and window != CAUSAL:
        raise InputError(f"window: --causal is --window -1,0, which contradicts --window {window[0]},{window[1]}")
    return CAUSAL if causal else (window or UNBOUNDED)


def config_knobs(dtype: str = "fp16", out_dtype: str | None = None, causal: bool = False,
                 window: tuple[int, int] | None = None, key_padding: bool = False, lse: bool = False,
                 prescale_q: bool = True) -> dict:
    """The switches as `FAConfig` keyword arguments (a window other than unbounded needs a masked kernel)."""
    return dict(in_dtype=DTYPES[dtype], out_dtype=DTYPES[out_dtype], masked=window_of(causal, window) != UNBOUNDED,
                key_padding=key_padding, lse=lse, prescale_q=prescale_q)


def kernel_switches(f):
    """The kernel's switches (options of build, run and sweep), in --help order:
    --dtype --out-dtype --causal --window --key-padding-mask --lse --prescale-q/--no-prescale-q."""
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
