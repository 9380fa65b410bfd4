"""The serving switches of `run_fa run`: `--decode --cache-len --page-size`, `--num-splits`,
`--seqlens-file`, and the run they start (`ptofa.cli.serving_run`, simulator only)."""

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


def run_serving(config, backend: str, batch: int, heads: int, kv_heads: int | None, s0: int | None,
                seqlens: list[int] | None, kv_seqlens: list[int] | None, decode: bool, cache_len: int | None,
                page_size: int, num_splits: int | None, window: tuple[int, int], seed: int, soc: str) -> int:
    """Run a decode step or a varlen batch (split-KV) on the simulator; print the rows; the exit code."""
    from ptofa.pipeline import ConfigError
    from ptofa.attention.serving import pack_allowed
    from ptofa.cli.serving_run import compare_splits, decode_case, padded_line, run_split, speedup_line, varlen_case

    if backend == "npu":
        raise InputError("--decode / --num-splits: run_fa runs these on the sim backend (it prints the timing model's "
                         "split comparison); on an NPU call ptofa.flash_attn_with_kvcache / flash_attn_varlen_func "
                         "with backend='npu'")
    if config.key_padding:
        raise InputError("--key-padding-mask: varlen and decode kernels take key lengths from the sequences instead")
    kvn = kv_heads or heads
    try:
        if decode:
            if seqlens is not None or kv_seqlens is not None:
                raise InputError("--decode: the cache length is --cache-len, not --seqlens")
            if cache_len is None or cache_len < 1 or batch < 1 or heads < 1 or (s0 is not None and s0 < 1):
                raise InputError(f"--decode: needs --cache-len >= 1, --batch, --heads, --s0 >= 1; got cache_len="
                                 f"{cache_len}, batch={batch}, heads={heads}, s0={s0}")
            if page_size < 1 or page_size % 128 != 0:
                raise InputError(f"--page-size: {page_size} must be a positive multiple of 128 (a KV tile lies in one page)")
            if heads % kvn != 0:
                raise InputError(f"grouped heads: heads={heads} must be a multiple of kv_heads={kvn}")
            pack = pack_allowed(s0 or 1, heads, kvn, window)
            case = decode_case(config, batch, heads, kvn, s0 or 1, cache_len, page_size, window, seed, pack)
            title = (f"decode B={batch} N={heads} KVN={kvn} S0={s0 or 1} cache_len={cache_len} page_size={page_size} "
                     f"D={config.head} gqa_pack={pack}")
        else:
            if seqlens is None and kv_seqlens is None:
                raise InputError("--num-splits: applies to --decode and varlen (--seqlens) runs")
            case = varlen_case(config, seqlens or kv_seqlens, kv_seqlens or seqlens, heads, kvn, window, seed)
            title = f"varlen seqlens={seqlens or kv_seqlens} N={heads} KVN={kvn} D={config.head}"
        case.shape.check(case.config)
    except ConfigError as exc:
        raise InputError(f"invalid shape: {exc}") from None
    click.echo(f"{title}  window={window}  config: {case.config.summary()}")
    rows = compare_splits(case, 0 if num_splits is None else num_splits, soc)
    for row in rows:
        click.echo(row.line())
    click.echo(speedup_line(rows))
    if decode and case.config.gqa_pack:
        unpacked = decode_case(config, batch, heads, kvn, s0 or 1, cache_len, page_size, window, seed, False)
        row = run_split(unpacked, rows[0].num_splits, soc)
        click.echo(f"GQA packing off: {row.line()}")
        click.echo(f"GQA packing ({heads // kvn} q heads per unit): {rows[0].predicted_us:.1f} us vs unpacked "
                   f"{row.predicted_us:.1f} us at num_splits={row.num_splits} -> {row.predicted_us / rows[0].predicted_us:.2f}x")
        rows.append(row)
    if not decode and len(case.shape.seqlens) > 1:
        best = min(row.predicted_us for row in rows)
        click.echo(padded_line(case.config, *map(list, zip(*case.shape.seqlens)), heads, kvn, window, best, soc))
    return 0 if all(row.passed for row in rows) else 1


