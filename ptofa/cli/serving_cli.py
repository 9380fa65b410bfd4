"""The serving switches of `run_fa run`: `--decode --cache-len --page-size`, `--num-splits`,
`--seqlens-file` (the run they start, `run_serving`, and the serving sweep are in
`ptofa.cli.serving_run`, simulator only)."""

from __future__ import annotations

from pathlib import Path

import click

from ptofa.pipeline import MAX_SPLITS
from ptofa.cli.switches import InputError


def serving_options(f):
    """The decode / split-KV / seqlens-file options of `run` (and `sweep`'s --num-splits list lives in sweep)."""
    f = click.option("--num-splits", type=click.IntRange(0, MAX_SPLITS), default=None,
                     help="Split-KV: split each unit's KV tiles over N blocks and combine them with the reduce "
                          "kernel (0: chosen by the timing model; prints the split against num_splits=1). "
                          "Varlen (--seqlens) and --decode runs.")(f)
    f = click.option("--page-size", type=int, default=128, show_default=True,
                     help="--decode: keys per page of the paged cache (a multiple of 128).")(f)
    f = click.option("--cache-len", type=int, default=None, help="--decode: keys in the cache of every sequence.")(f)
    f = click.option("--decode", is_flag=True, default=False,
                     help="Decode step: --s0 query tokens (default 1) per sequence against a random paged cache "
                          "(shuffled block table) of --cache-len keys; --batch, --heads, --kv-heads apply.")(f)
    f = click.option("--seqlens-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                     help="Varlen prefill: the --seqlens list from a file (integers separated by commas or whitespace).")(f)
    return f


def read_seqlens(path: Path, given: list[int] | None) -> list[int]:
    """The lengths in `path`, or `InputError` (exit 2) naming the file and the bad word."""
    if given is not None:
        raise InputError("--seqlens and --seqlens-file: give the lengths one way")
    words = path.read_text().replace(",", " ").split()
    lens = []
    for word in words:
        try:
            lens.append(int(word))
        except ValueError:
            raise InputError(f"--seqlens-file {path}: {word!r} is not an integer") from None
    if not lens or min(lens) < 0:
        raise InputError(f"--seqlens-file {path}: needs one or more lengths >= 0, got {lens}")
    return lens


