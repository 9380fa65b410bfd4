"""Benchmark the kernel and torch_npu's fused attention on an NPU (docs/sources.md §4.5).

Timing: `event` mode records NPU events around each iteration after a warm-up,
writing a 256 MB buffer before every iteration so that L2 holds nothing of the
previous one; `sync` mode times each iteration on the host between two
`torch.npu.synchronize()` calls (event timing can report invalid sub-microsecond
values for ctypes launches, docs/sources.md §4.5). The mean is reported.

Throughput in two conventions (docs/sources.md §4.5):
  tflops         A, matmul only: 4*B*N*S0*S1*D
  tflops_dsl_gp  B, matmul + scale + softmax: B*N*(4*S0*S1*D + S0*S1 + S0*(5*S1 - 2))

Each row is appended to a CSV file and a JSON file (a list of rows) together
with the versions of CANN, ptoas, torch and torch_npu and the device name.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import torch

from ptofa.fa_builder import emit_fa
from ptofa.kernels import argspec
from ptofa.launch import npu
from ptofa.launch.base import TORCH_DTYPES
from ptofa.launch.npu import require_npu, run_npu
from ptofa.launch.plan import BuiltKernel, plan_forward
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.reference import make_inputs
from ptofa.launch.base import BackendUnavailable
from ptofa.launch.toolchain import ToolchainError, find_ptoas, tool_version

L2_FLUSH_BYTES = 256 * 1024 * 1024
TIMING_MODES = ("event", "sync")


def flops_matmul(shape: ProblemShape, head: int) -> int:
    """Convention A: 4*B*N*S0*S1*D."""
    return shape.flops(head)


def flops_dsl_gp(shape: ProblemShape, head: int) -> int:
    """Convention B (dsl-gp): matmuls + S0*S1 scale + S0*(5*S1 - 2) softmax, per (batch, head)."""
    s0, s1 = shape.s0, shape.s1
    return shape.batch * shape.heads * (4 * s0 * s1 * head + s0 * s1 + s0 * (5 * s1 - 2))


def tflops(flops: int, microseconds: float) -> float:
    return flops / (microseconds * 1e-6) / 1e12


def time_on_npu(fn: Callable[[], object], warmup: int, iters: int, timing: str) -> list[float]:
    """Microseconds of each of `iters` calls of `fn`, after `warmup` calls, L2 flushed before each."""
    if timing not in TIMING_MODES:
        raise ValueError(f"timing={timing!r} must be one of {TIMING_MODES}")
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters={iters} must be >= 1 and warmup={warmup} >= 0")
    l2_flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="npu")
    for _ in range(warmup):
        fn()
    torch.npu.synchronize()
    if timing == "event":
        starts = [torch.npu.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.npu.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends):
            l2_flush.zero_()
            start.record()
            fn()
            end.record()
        torch.npu.synchronize()
        return [start.elapsed_time(end) * 1e3 for start, end in zip(starts, ends)]
    times = []
    for _ in range(iters):
        l2_flush.zero_()
        torch.npu.synchronize()
        started = time.perf_counter()
        fn()
        torch.npu.synchronize()
        times.append((time.perf_counter() - started) * 1e6)
    return times


def cann_version() -> str:
    """`version=` of the toolkit's install info under `$ASCEND_HOME_PATH`."""
    home = os.environ.get("ASCEND_HOME_PATH")
    if not home:
        return "unknown (ASCEND_HOME_PATH unset)"
    candidates = [*Path(home).glob("*/ascend_toolkit_install.info"), Path(home) / "compiler" / "version.info"]
    for info in candidates:
        if info.is_file():
            for line in info.read_text(errors="replace").splitlines():
                name, _, value = line.partition("=")
                if name.strip().lower() == "version":
                    return value.strip()
    return f"unknown (no version file under {home})"


def environment_versions() -> dict[str, str]:
    """Device name and versions recorded with every benchmark row."""
    import torch_npu

    ptoas, _ = find_ptoas()
    return {
        "device": torch.npu.get_device_name(0),
        "cann": cann_version(),
        "ptoas": tool_version(ptoas) if ptoas else "not found",
        "torch": torch.__version__,
        "torch_npu": getattr(torch_npu, "__version__", "unknown"),
    }


@dataclass
class BenchRow:
    """One benchmark result: case, accuracy status, kernel and fused-op times."""

    head: int
    tile_s1: int
    qk_preload: int
    batch: int
    heads: int
    s0: int
    s1: int
    block_dim: int | None
    timing: str
    warmup: int
    iters: int
    status: str  # run_npu's status: pass / fail / error
    err: float | None = None
    kernel_us: float | None = None  # mean
    kernel_us_min: float | None = None
    tflops: float | None = None  # convention A
    tflops_dsl_gp: float | None = None  # convention B
    fused_us: float | None = None
    fused_tflops: float | None = None
    fused_tflops_dsl_gp: float | None = None
    fused_max_abs_diff: float | None = None
    message: str = ""
    device: str = ""
    cann: str = ""
    ptoas: str = ""
    torch: str = ""
    torch_npu: str = ""
    timestamp: str = ""


def bench_case(
    config: FAConfig,
    shape: ProblemShape,
    pto_path: Path,
    timing: str = "event",
    warmup: int = 10,
    iters: int = 15,
    block_dim: int | None = None,
    seed: int = 0,
    with_fused: bool = True,
) -> BenchRow:
    """Check the kernel once (run_npu), then time it and, optionally, the fused op."""
    checked = run_npu(config, shape, pto_path, seed=seed, block_dim=block_dim, compare_fused=with_fused)
    row = BenchRow(
        head=config.head,
        tile_s1=config.tile_s1,
        qk_preload=config.qk_preload,
        batch=shape.batch,
        heads=shape.heads,
        s0=shape.s0,
        s1=shape.s1,
        block_dim=checked.block_dim,
        timing=timing,
        warmup=warmup,
        iters=iters,
        status=checked.status,
        err=checked.err,
        message=checked.message,
        fused_max_abs_diff=checked.extra.get("fused_max_abs_diff"),
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **environment_versions(),
    )
    if checked.status == "error":
        return row

    scale = shape.default_scale(config.head)
    device = npu.npu_device()
    q, k, v = (t.to(device).contiguous() for t in make_inputs(shape, config.head, seed))
    kernel = BuiltKernel(Path(pto_path).read_text(), config.summary(), argspec.ENTRY_NAME, argspec.entry_args(config))
    plan = plan_forward(config, shape, npu.npu_soc(), scale=scale, block_dim=checked.block_dim, kernel=kernel)
    out = torch.zeros(shape.batch, shape.s0, shape.heads, config.head, dtype=TORCH_DTYPES[config.out_dtype],
                      device=device)
    tensors = {"q": q, "k": k, "v": v, "o": out, "lse": None, "key_mask": None}
    workspace = torch.zeros(plan.workspace_bytes // 4, dtype=torch.float32, device=device)
    kernel_times = time_on_npu(lambda: npu.launch(plan, tensors, workspace=workspace), warmup, iters, timing)
    row.kernel_us = statistics.fmean(kernel_times)
    row.kernel_us_min = min(kernel_times)
    row.tflops = tflops(flops_matmul(shape, config.head), row.kernel_us)
    row.tflops_dsl_gp = tflops(flops_dsl_gp(shape, config.head), row.kernel_us)
    if with_fused and "fused_error" not in checked.extra:
        fused_times = time_on_npu(lambda: npu.fused_attention(q, k, v, scale), warmup, iters, timing)
        row.fused_us = statistics.fmean(fused_times)
        row.fused_tflops = tflops(flops_matmul(shape, config.head), row.fused_us)
        row.fused_tflops_dsl_gp = tflops(flops_dsl_gp(shape, config.head), row.fused_us)
    return row


def append_rows(rows: list[BenchRow], csv_path: Path, json_path: Path) -> None:
    """Append rows to a CSV file (header written once) and to a JSON list."""
    fields = [f.name for f in dataclasses.fields(BenchRow)]
    new_csv = not csv_path.exists() or csv_path.stat().st_size == 0
    with csv_path.open("a", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        if new_csv:
            writer.writeheader()
        writer.writerows(dataclasses.asdict(row) for row in rows)
    existing = json.loads(json_path.read_text()) if json_path.exists() else []
    json_path.write_text(json.dumps(existing + [dataclasses.asdict(row) for row in rows], indent=1) + "\n")


def _format_row(row: BenchRow) -> str:
    def number(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    return (
        f"B={row.batch} N={row.heads} S0={row.s0} S1={row.s1} D={row.head} tile_s1={row.tile_s1} "
        f"preload={row.qk_preload} blocks={row.block_dim} {row.status}: "
        f"kernel {number(row.kernel_us, '.1f')} us {number(row.tflops, '.2f')} TFLOPS "
        f"(B-conv {number(row.tflops_dsl_gp, '.2f')}), fused {number(row.fused_us, '.1f')} us "
        f"{number(row.fused_tflops, '.2f')} TFLOPS"
    )


@click.command("bench")
@click.option("--pto", "pto_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A .pto built for the --head/--tile-s1/--qk-preload given here "
                   "[default: emit it with ptofa.fa_builder].")
@click.option("--head", type=int, default=128, show_default=True, help="Head dimension D.")
@click.option("--tile-s1", type=int, default=256, show_default=True, help="TILE_S1 of the kernel.")
@click.option("--qk-preload", type=int, default=3, show_default=True, help="QK_PRELOAD of the kernel.")
@click.option("--batch", type=int, default=1, show_default=True, help="Batch size B.")
@click.option("--heads", type=int, default=1, show_default=True, help="Number of heads N.")
@click.option("--s0", type=int, default=3072, show_default=True, help="Query length S0.")
@click.option("--s1", "s1_values", type=int, multiple=True, default=(1024, 2048, 4096, 8192), show_default=True,
              help="Key/value length S1; repeat the option for several.")
@click.option("--block-dim", type=int, default=None,
              help="Blocks to launch [default: cube cores, capped by work units].")
@click.option("--timing", type=click.Choice(TIMING_MODES), default="event", show_default=True,
              help="event: NPU events with L2 flush; sync: host timer between synchronisations.")
@click.option("--warmup", type=int, default=10, show_default=True, help="Untimed iterations first.")
@click.option("--iters", type=int, default=15, show_default=True, help="Timed iterations (mean reported).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--no-fused", is_flag=True, help="Skip torch_npu.npu_fused_infer_attention_score.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("bench.csv"),
              show_default=True, help="CSV file the rows are appended to.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("bench.json"),
              show_default=True, help="JSON file (a list of rows) the rows are appended to.")  # fmt: skip
def bench_cmd(
    pto_path: Path | None, head: int, tile_s1: int, qk_preload: int, batch: int, heads: int, s0: int,
    s1_values: tuple[int, ...], block_dim: int | None, timing: str, warmup: int, iters: int, seed: int,
    no_fused: bool, csv_path: Path, json_path: Path,
) -> None:  # fmt: skip
    """Time the kernel and the fused op on an NPU; append the results to CSV and JSON."""
    try:
        require_npu()
    except BackendUnavailable as unavailable:
        click.echo(f"error: {unavailable}", err=True)
        click.get_current_context().exit(2)
    if pto_path is not None and not pto_path.is_file():
        raise click.BadParameter(f"{pto_path} is not a file", param_hint="--pto")
    rows = []
    try:
        config = FAConfig(head=head, tile_s1=tile_s1, qk_preload=qk_preload)
        if pto_path is None:
            pto_path = Path(tempfile.mkdtemp(prefix="ptofa-bench-")) / "fa.pto"
            pto_path.write_text(emit_fa(config))
        for s1 in s1_values:
            shape = ProblemShape(batch=batch, heads=heads, s0=s0, s1=s1)
            shape.check(config)
            row = bench_case(config, shape, pto_path, timing, warmup, iters, block_dim, seed, not no_fused)
            click.echo(_format_row(row))
            rows.append(row)
    except (ConfigError, ToolchainError) as failure:
        raise click.ClickException(str(failure)) from failure
    finally:
        if rows:
            append_rows(rows, csv_path, json_path)
