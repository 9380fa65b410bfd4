"""`run_fa run` for the serving shapes on the simulator: a decode step against a random paged
cache (`--decode`), or a varlen batch with `--num-splits`; checked against the reference and
timed by the timing model, the split launch against the unsplit one (`run_serving`, which
`run_fa run` calls; its options are `serving_cli`'s); and `sweep_serving`, `run_fa sweep`
over serving shapes.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import click
import torch

from ptofa.cli.switches import InputError
from ptofa.launch.base import TORCH_DTYPES
from ptofa.attention.kvcache import (KVCache, decode_config, decode_lse, decode_shape, decode_units, pack_allowed, paged_tiles,
                                    reference_kvcache)
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.reference import Reference, check_accuracy, check_lse
from ptofa.launch import sim
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import DEFAULT_SOC, get_soc
from ptofa.sim.timing import predict
from ptofa.launch.splitkv import plan_serving, reduce_us
from ptofa.launch.varlen import make_varlen_inputs, reference_varlen, unit_table, varlen_shape


@dataclasses.dataclass
class ServingRow:
    """One launch (split or not): the check against the reference and the predicted time."""

    num_splits: int
    passed: bool
    message: str
    wall_s: float
    main_us: float
    reduce_us: float
    split: str = "unsplit"  # the plan's split (`splitkv.Plan.describe`)

    @property
    def predicted_us(self) -> float:
        return self.main_us + self.reduce_us

    def line(self) -> str:
        parts = f"main {self.main_us:.1f} + reduce {self.reduce_us:.1f} us" if self.num_splits > 1 else "no reduce"
        status = "passed" if self.passed else "FAILED"
        return (f"num_splits={self.num_splits:<2} {status}  predicted {self.predicted_us:8.1f} us ({parts})  "
                f"wall {self.wall_s:.1f} s  split: {self.split}  {self.message}")


@dataclasses.dataclass
class ServingCase:
    """Everything a launch of one serving shape needs; `table_of(config, num_splits)` builds its units."""

    config: FAConfig
    shape: ProblemShape
    table_of: object
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out_shape: tuple[int, ...]
    reference: Reference
    scale: float
    block_table: torch.Tensor | None = None
    lse_of: object = None  # the kernel's LSE -> the reference's layout

    @property
    def lse_shape(self) -> tuple[int, int]:
        """The kernel's LSE: [heads, total_q], or [total_q, heads] after GQA packing."""
        rows, heads = self.shape.s0, self.shape.heads
        return (rows, heads) if self.config.gqa_pack else (heads, rows)


def decode_case(config: FAConfig, batch: int, heads: int, kv_heads: int, s0: int, cache_len: int, page_size: int,
                window: tuple[int, int], seed: int, pack: bool = False) -> ServingCase:
    """A decode step: q [B, S0, N, D] against a paged cache of `cache_len` keys per sequence
    (pages shuffled over the pool, two spare pages) for the kernel of `config`, GQA-packed or not."""
    g = torch.Generator().manual_seed(seed)
    dtype = TORCH_DTYPES[config.in_dtype]
    per_seq = -(-cache_len // page_size)
    pages = batch * per_seq + 2
    block_table = torch.randperm(pages, generator=g)[: batch * per_seq].to(torch.int32).reshape(batch, per_seq)
    k, v = (torch.randn(pages, page_size, kv_heads, config.head, generator=g).to(dtype) for _ in range(2))
    cache = KVCache(k, v, block_table.contiguous())
    q = torch.randn(batch, s0, heads, config.head, generator=g).to(dtype)
    cfg = dataclasses.replace(decode_config(paged_tiles(config, page_size), cache), gqa_pack=pack)
    lens = [cache_len] * batch
    scale = 1 / math.sqrt(config.head)
    return ServingCase(
        cfg, decode_shape(cache, batch, s0, lens, heads, window),
        lambda c, n: decode_units(c, cache, batch, s0, lens, heads, window, n),
        q.reshape(batch * s0, heads, config.head), cache.k, cache.v, tuple(q.shape),
        reference_kvcache(q, cache, lens, scale, window, TORCH_DTYPES[cfg.out_dtype]), scale, cache.block_table,
        lambda lse: decode_lse(lse, batch, s0, pack))


def varlen_case(config: FAConfig, q_lens: list[int], k_lens: list[int], heads: int, kv_heads: int,
                window: tuple[int, int], seed: int) -> ServingCase:
    """A packed varlen batch for the varlen kernel of `config`."""
    cfg = dataclasses.replace(config, varlen=True)
    shape = varlen_shape(q_lens, k_lens, heads, kv_heads, window)
    q, k, v = make_varlen_inputs(shape, cfg, seed)
    scale = 1 / math.sqrt(config.head)
    ref = reference_varlen(q, k, v, q_lens, k_lens, scale, window, TORCH_DTYPES[cfg.out_dtype])
    return ServingCase(cfg, shape, lambda c, n: unit_table(c, q_lens, k_lens, heads, window, n), q, k, v,
                       tuple(q.shape), ref, scale)


def run_split(case: ServingCase, num_splits: int, soc: str = DEFAULT_SOC) -> ServingRow:
    """Launch the case with `num_splits` (0: chosen), check it, and predict its time."""
    cfg = case.config
    out = torch.full(case.out_shape, math.nan, dtype=TORCH_DTYPES[cfg.out_dtype])
    lse = torch.full(case.lse_shape, math.nan) if cfg.lse else None
    started = time.perf_counter()
    plan = plan_serving(cfg, case.shape, case.table_of, num_splits, get_soc(soc), scale=case.scale,
                        block_table=case.block_table)
    results = [] if plan is None else sim.launch(
        plan, {"q": case.q, "k": case.k, "v": case.v, "o": out.view(case.q.shape[0], -1, cfg.head), "lse": lse,
               "block_table": case.block_table}, options=RunOptions(trace=True))
    wall = time.perf_counter() - started
    acc = check_accuracy(out.float(), case.reference.out32, case.reference.out_low)
    passed, message = acc.passed, acc.summary()
    if lse is not None:
        lse_check = check_lse(case.lse_of(lse) if case.lse_of else lse, case.reference)
        passed, message = passed and lse_check.passed, f"{message}; {lse_check.message}"
    main_us = red_us = 0.0
    if results:
        main_us = predict(results[0].trace, plan.config, case.shape, soc=soc, block_dim=plan.block_dim).kernel_us
    if len(results) > 1:
        red_us = reduce_us(results[1].trace, plan.config, case.shape, plan.table, soc)
    split = plan.describe() if plan is not None else "unsplit"
    return ServingRow(plan.num_splits if plan is not None else 1, passed, message, wall, main_us, red_us, split)


def compare_splits(case: ServingCase, num_splits: int, soc: str = DEFAULT_SOC) -> list[ServingRow]:
    """The run with `num_splits` (0: the timing model's choice) and, if that split, the unsplit run."""
    rows = [run_split(case, num_splits, soc)]
    if rows[0].num_splits != 1:
        rows.append(run_split(case, 1, soc))
    return rows


def padded_line(config: FAConfig, q_lens: list[int], k_lens: list[int], heads: int, kv_heads: int,
                window: tuple[int, int], packed_us: float, soc: str = DEFAULT_SOC) -> str:
    """The timing model's time of the uniform kernel on every sequence padded to the longest, against `packed_us`."""
    from ptofa.runner import run_case

    cfg = dataclasses.replace(config, varlen=False, split_kv=False, page_size=0)
    shape = ProblemShape(len(q_lens), heads, max(1, max(q_lens)), max(1, max(k_lens)), kv_heads=kv_heads, window=window)
    result = run_case(cfg, shape, backend="sim", timing=True, soc=soc)
    if result.predicted_us is None:
        return f"padded to {shape.s0}x{shape.s1}: not predicted ({result.status}: {result.message})"
    return (f"padded: every sequence to {shape.s0}x{shape.s1} (B={shape.batch}): {result.predicted_us:.1f} us vs varlen "
            f"{packed_us:.1f} us -> varlen predicted {result.predicted_us / packed_us:.2f}x faster")


def speedup_line(rows: list[ServingRow]) -> str:
    """How much faster the split launch is predicted than the unsplit one."""
    if len(rows) < 2:
        return "no split: the unsplit launch is the one predicted fastest" if rows else ""
    split, whole = rows
    return (f"split-KV num_splits={split.num_splits}: {split.predicted_us:.1f} us vs num_splits=1: "
            f"{whole.predicted_us:.1f} us -> {whole.predicted_us / split.predicted_us:.2f}x predicted speedup")


def sweep_serving(config, batches, heads_list, kv_heads: int | None, s0_list, cache_lens, page_size: int,
                  seqlens: list[int] | None, splits_list, window: tuple[int, int], seed: int, out_dir: Path,
                  decode: bool) -> list[dict]:
    """`run_fa sweep` over serving shapes: every (batch, heads, S0, cache length) decode step, or the
    one varlen batch, at every split count; one checked, timed row each, written to
    `out_dir/serving.json` and `.csv`. Returns the rows."""
    import csv
    import itertools
    import json

    from ptofa.pipeline import ConfigError

    rows = []
    if decode:
        points = itertools.product(batches, heads_list, s0_list, cache_lens)
    else:
        if seqlens is None:
            raise InputError("sweep --num-splits: needs --decode (with --cache-len) or --seqlens")
        points = ((len(seqlens), n, None, None) for n in heads_list)
    for batch, heads, s0, cache_len in points:
        kvn = kv_heads or heads
        try:
            if decode:
                pack = pack_allowed(s0, heads, kvn, window)
                case = decode_case(config, batch, heads, kvn, s0, cache_len, page_size, window, seed, pack)
                shape = f"decode B={batch} N={heads} KVN={kvn} S0={s0} cache_len={cache_len}"
            else:
                case = varlen_case(config, seqlens, seqlens, heads, kvn, window, seed)
                shape = f"varlen seqlens={seqlens} N={heads} KVN={kvn}"
            case.shape.check(case.config)
        except ConfigError as exc:
            raise InputError(f"invalid shape: {exc}") from None
        for splits in splits_list:
            row = run_split(case, splits)
            rows.append({"shape": shape, "gqa_pack": case.config.gqa_pack, "num_splits_asked": splits,
                         "num_splits": row.num_splits, "split": row.split, "status": "pass" if row.passed else "fail",
                         "predicted_us": round(row.predicted_us, 2), "main_us": round(row.main_us, 2),
                         "reduce_us": round(row.reduce_us, 2), "wall_s": round(row.wall_s, 2)})
            click.echo(" ".join(f"{k}={v}" for k, v in rows[-1].items()))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "serving.json").write_text(json.dumps(rows, indent=1))
    with (out_dir / "serving.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    click.echo(f"{len(rows)} points; wrote {out_dir / 'serving.json'}, {out_dir / 'serving.csv'}")
    return rows


def run_serving(config, backend: str, batch: int, heads: int, kv_heads: int | None, s0: int | None,
                seqlens: list[int] | None, kv_seqlens: list[int] | None, decode: bool, cache_len: int | None,
                page_size: int, num_splits: int | None, window: tuple[int, int], seed: int, soc: str) -> int:
    """Run a decode step or a varlen batch (split-KV) on the simulator; print the rows; the exit code."""
    from ptofa.pipeline import ConfigError

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
