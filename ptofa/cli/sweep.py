"""Parameter sweeps: run a grid of configs and shapes, resumably, in parallel.

Each grid point (`ptofa.cli.sweep_points`) is validated first (`FAConfig`,
`ProblemShape.check`); a point that breaks a legality rule becomes a row with status
"rejected" and the rule's message. The others run through a run function
(`ptofa.runner.run_case` unless one is injected) on an executor
(`ptofa.cli.sweep_executors`): this process, local worker processes (the default),
or Ray tasks on a cluster (the optional `ray` extra); `run_sweep` is the one loop
for all of them. Every finished row is appended to
`results.jsonl` at once, so an interrupted sweep resumes where it stopped: on
restart, points whose key (config + shape + backend) is already in the file are
not run again. At the end `results.csv`, `results.json` and `results.png` are
written from the rows of the grid, and a summary table is printed.

The kernel's switches (`--causal`/`--window`, `--kv-heads`, `--key-padding-mask`,
`--lse`, `--dtype`, `--out-dtype`; parsed by `ptofa.cli.switches`, as for `run_fa build`
and `run`) apply to every point of a sweep. They are part of each point's key, row
and config label; at their defaults the key is that of the plain kernel.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from types import FrameType

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ptofa.cli.sweep_executors import (EXECUTORS, ExecutorUnavailable, Job, PointExecutor, check_executor,
                                       make_executor)
from ptofa.cli.sweep_points import (SWITCH_FIELDS, PointRuns, RunFunction, SweepGrid, SweepPoint, package_versions,
                                    rejected_result, row_variant_label, validate_point)
from ptofa.cli.switches import config_knobs, kernel_switches, kv_heads_option, one_softmax_dtype, window_of
from ptofa.launch.base import BACKENDS, BackendUnavailable, RunResult
from ptofa.pipeline import ConfigError, FAConfig

JSONL_NAME = "results.jsonl"
CSV_NAME = "results.csv"
JSON_NAME = "results.json"
PNG_NAME = "results.png"

FAILED_STATUSES = ("fail", "deadlock", "error")
# Metrics that rank passing points, in order of preference (lower is better).
TIME_METRICS = (
    ("predicted_us", "predicted time (timing model)"),
    ("kernel_us", "kernel time"),
    ("wall_s", "wall time"),
)
RESULT_FIELDS = tuple(f.name for f in fields(RunResult))
VERSION_PACKAGES = ("ptofa", "torch", "xdsl", "numpy")
STOP_POLL_S = 0.5


@dataclass
class SweepOutcome:
    """The rows of the grid (from `results.jsonl`, in grid order) and how the sweep ended."""

    rows: list[dict]
    ran: int  # points run by this invocation
    skipped: int  # points found in results.jsonl and not run again
    interrupted: bool
    best_metric: str | None  # the column that ranked passing points, None if nothing passed

    @property
    def failed(self) -> list[dict]:
        return [row for row in self.rows if row["status"] in FAILED_STATUSES]


def _resolve_run_function(run_fn: RunFunction | None) -> PointRuns:
    """`run_fn` (default `ptofa.runner.run_case`) for a point, `run_balanced` for a `--balance` point."""
    from ptofa.launch.balance import run_balanced
    from ptofa.runner import run_case

    return PointRuns(run_fn or run_case, run_balanced)


class ResultsLog:
    """`results.jsonl`: one JSON row per finished point, flushed and fsynced as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, dict] = {}
        if path.exists():
            self._load()

    def _load(self) -> None:
        lines = self.path.read_text().splitlines()
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                # A write cut short by a hard kill: that point simply runs again.
                continue
            self.rows[row["key"]] = row
        if len(self.rows) != len(lines):
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in self.rows.values()))
        os.replace(tmp, self.path)

    def append(self, row: dict) -> None:
        with self.path.open("a") as log:
            log.write(json.dumps(row) + "\n")
            log.flush()
            os.fsync(log.fileno())
        self.rows[row["key"]] = row


def make_row(
    point: SweepPoint, result: RunResult, seed: int, versions: dict[str, str], config_warnings: list[str]
) -> dict:
    row = {"key": point.key, **result.as_dict(), **point.switch_columns(), "seed": seed, "versions": versions}
    if config_warnings:
        row["extra"] = {**row["extra"], "config_warnings": config_warnings}
    return row


class _StopRequest:
    """The first Ctrl-C asks the sweep to stop after the points in flight; the second aborts."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.console.print("[yellow]interrupted: finishing the points in flight (Ctrl-C again to abort)[/]")

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def run_sweep(
    grid: SweepGrid,
    out_dir: Path,
    backend: str = "sim",
    jobs: int | None = None,
    seed: int = 0,
    run_fn: RunFunction | None = None,
    console: Console | None = None,
    executor: str = "local",
    address: str | None = None,
) -> SweepOutcome:
    """Run the grid's points not yet in `out_dir/results.jsonl`, then write the CSV, JSON and PNG.

    `run_fn` has `ptofa.runner.run_case`'s signature (the default); unless it runs in this
    process (local executor with `jobs` = 1) it must be picklable (a module-level function).
    `executor` and `address` choose where the points run (`make_executor`).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} must be one of {BACKENDS}")
    check_executor(executor, address)
    console = console or Console()
    runs = _resolve_run_function(run_fn)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = ResultsLog(out_dir / JSONL_NAME)
    versions = package_versions()
    points = grid.points(backend)
    pending = [point for point in points if point.key not in log.rows]
    skipped = len(points) - len(pending)

    to_run: list[Job] = []
    for point in pending:
        config, rejection, config_warnings = validate_point(point)
        if config is None:
            log.append(make_row(point, rejected_result(point, rejection), seed, versions, []))
        else:
            to_run.append(Job(point, config, config_warnings))

    stop = _StopRequest(console)
    ran = 0

    def record(job: Job, result: RunResult, worker_versions: dict[str, str]) -> None:
        nonlocal ran
        log.append(make_row(job.point, result, seed, worker_versions, job.config_warnings))
        ran += 1

    progress = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
    )
    try:
        if to_run:
            _run_jobs(to_run, make_executor(executor, runs, seed, jobs, len(to_run), address), stop, progress,
                      len(points), record)
    except KeyboardInterrupt:
        # A second Ctrl-C: the executor abandoned the running points; the finished ones are in the log.
        stop.requested = True

    rows = [log.rows[point.key] for point in points if point.key in log.rows]
    best_metric = mark_best(rows)
    write_outputs(rows, out_dir)
    return SweepOutcome(
        rows=rows,
        ran=ran,
        skipped=skipped,
        interrupted=stop.requested,
        best_metric=best_metric,
    )


def _run_jobs(
    pending: list[Job],
    executor: PointExecutor,
    stop: _StopRequest,
    progress: Progress,
    total: int,
    record: Callable[[Job, RunResult, dict[str, str]], None],
) -> None:
    """Keep the executor's slots filled until every pending job is recorded (`record`: result and the
    versions of the process that ran it) or a stop is requested; then wait for the jobs in flight."""
    # The executor starts before the Ctrl-C handler is installed (ray.init), so the handler stays the sweep's.
    with executor, progress, stop.installed():
        task = progress.add_task("", total=total, completed=total - len(pending))
        queued = iter(pending)
        in_flight = 0
        while True:
            if not stop.requested:
                for job in itertools.islice(queued, max(0, executor.slots() - in_flight)):
                    executor.submit(job)
                    in_flight += 1
            if not in_flight:
                return
            # The timeout lets the main thread run the Ctrl-C handler while it waits.
            for job, result in executor.finished(STOP_POLL_S):
                in_flight -= 1
                if result is None:
                    stop.requested = True
                    continue
                run_result, worker_versions = result
                record(job, run_result, worker_versions)
                progress.update(task, advance=1, description=f"{job.point.config_label} s1={job.point.s1}: "
                                                             f"{run_result.status}")


def _time_metric(rows: list[dict]) -> str | None:
    passing = [row for row in rows if row["status"] == "pass"]
    for metric, _ in TIME_METRICS:
        if any(row.get(metric) is not None for row in passing):
            return metric
    return None


def mark_best(rows: list[dict]) -> str | None:
    """Set `best` on the fastest passing row of each problem (head, batch, heads, s0, s1, and the
    kernel's switches, which are the same for every point of one sweep).

    The head dim belongs to the problem: the tuning choice is (tile_s1, qk_preload).
    Ranks by the first of predicted_us, kernel_us, wall_s that any passing row has;
    returns that column's name.
    """
    metric = _time_metric(rows)
    for row in rows:
        row["best"] = False
    if metric is None:
        return None
    best: dict[tuple[int, ...], dict] = {}
    for row in rows:
        if row["status"] != "pass" or row.get(metric) is None:
            continue
        problem = (row["head"], row["batch"], row["heads"], row["s0"], row["s1"],
                   *(json.dumps(row.get(name)) for name in SWITCH_FIELDS))
        if problem not in best or row[metric] < best[problem][metric]:
            best[problem] = row
    for row in best.values():
        row["best"] = True
    return metric


def _csv_columns() -> list[str]:
    """key, the result's fields with the switch columns before status, seed, best, versions."""
    at = RESULT_FIELDS.index("status")
    switches = [name for name in SWITCH_FIELDS if name not in RESULT_FIELDS]
    return ["key", *RESULT_FIELDS[:at], *switches, *RESULT_FIELDS[at:], "seed", "best",
            *(f"{name}_version" for name in VERSION_PACKAGES)]


def write_outputs(rows: list[dict], out_dir: Path) -> None:
    """results.csv and results.json (one row per point) and results.png."""
    with (out_dir / CSV_NAME).open("w", newline="") as csv_file:
        writer = csv.DictWriter(csv_file, fieldnames=_csv_columns())
        writer.writeheader()
        for row in rows:
            flat = {key: value for key, value in row.items() if key != "versions"}
            flat["extra"] = json.dumps(row["extra"]) if row["extra"] else ""
            if "window" in flat:
                flat["window"] = ",".join(str(w) for w in flat["window"])
            flat.update({f"{name}_version": row["versions"].get(name, "") for name in VERSION_PACKAGES})
            writer.writerow(flat)
    (out_dir / JSON_NAME).write_text(json.dumps(rows, indent=1) + "\n")
    plot_results(rows, out_dir / PNG_NAME)


def _series_label(row: dict, varying_shape_fields: list[str]) -> str:
    label = f"D={row['head']} tile_s1={row['tile_s1']} qk_preload={row['qk_preload']}"
    return " ".join([label, *(f"{name}={row[name]}" for name in varying_shape_fields)])


def plot_results(rows: list[dict], path: Path) -> None:
    """Measured time (sim: wall time; npu: TFLOPS) against S1, one line per config through its
    passing points, and a second panel with the timing model's predicted TFLOPS when any row has it.
    Failed points are red markers; rejected points are 'x' markers along the bottom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    on_npu = any(row["backend"] == "npu" and row.get("tflops") is not None for row in rows)
    measured = ("tflops", "TFLOPS (measured)") if on_npu else ("wall_s", "wall time (s)")
    panels = [measured]
    if any(row.get("predicted_tflops") is not None for row in rows):
        panels.append(("predicted_tflops", "predicted TFLOPS (timing model)"))

    varying = [name for name in ("batch", "heads", "s0") if len({row[name] for row in rows}) > 1]
    figure, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    for axis, (column, ylabel) in zip(axes[0], panels):
        series: dict[str, list[dict]] = {}
        for row in rows:
            if row["status"] == "pass":
                series.setdefault(_series_label(row, varying), []).append(row)
        for label, series_rows in series.items():
            points = sorted((row["s1"], row[column]) for row in series_rows if row.get(column) is not None)
            if points:
                axis.plot(*zip(*points), marker="o", label=label)
        failed = [row for row in rows if row["status"] in FAILED_STATUSES]
        failed_with_value = [(row["s1"], row[column]) for row in failed if row.get(column) is not None]
        failed_without_value = [row["s1"] for row in failed if row.get(column) is None]
        bottom = axis.get_xaxis_transform()  # x in data, y in axes fraction
        if failed_with_value:
            axis.scatter(*zip(*failed_with_value), color="red", marker="o", s=60, zorder=3, label="failed / deadlock / error")
        if failed_without_value:
            axis.scatter(
                failed_without_value, [0.03] * len(failed_without_value), transform=bottom,
                color="red", marker="o", s=60, zorder=3,
                label=None if failed_with_value else "failed / deadlock / error",
            )
        rejected = [row["s1"] for row in rows if row["status"] == "rejected"]
        if rejected:
            axis.scatter(
                rejected, [0.03] * len(rejected), transform=bottom,
                color="gray", marker="x", s=50, zorder=3, label="rejected by a config rule",
            )
        axis.set_xscale("log", base=2)
        # Set explicitly: markers drawn at the bottom do not widen the data limits.
        all_s1 = sorted({row["s1"] for row in rows})
        if all_s1:  # no row yet when a sweep is interrupted before its first point ends: empty axes
            axis.set_xlim(all_s1[0] / 1.5, all_s1[-1] * 1.5)
            axis.set_xticks(all_s1, [str(s1) for s1 in all_s1])
        axis.set_ylim(bottom=0)
        axis.set_xlabel("S1")
        axis.set_ylabel(ylabel)
        axis.grid(True, alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize="small")
    variant = row_variant_label(rows[0]) if rows else ""
    figure.suptitle("ptofa sweep" + (f" ({variant})" if variant else ""))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _format_number(value: float | None, spec: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return format(value, spec)


STATUS_STYLE = {"pass": "green", "fail": "red", "deadlock": "red", "error": "red", "rejected": "dim"}
# (header, row column, format); columns empty in every row are left out of the table.
TABLE_NUMBERS = (
    ("err", "err", ".1e"),
    ("tol", "tolerance", ".1e"),
    ("wall s", "wall_s", ".3g"),
    ("kern us", "kernel_us", ".4g"),
    ("TFLOPS", "tflops", ".3g"),
    ("pred us", "predicted_us", ".4g"),
    ("pred TF", "predicted_tflops", ".3g"),
)
# Shape columns shown only when they vary; constant ones go into the caption.
# KVN (key/value heads) only when it differs from N in some row.
TABLE_SHAPE = (("D", "head"), ("B", "batch"), ("N", "heads"), ("KVN", "kv_heads"), ("S0", "s0"))


def _bound(row: dict) -> str | None:
    """The timing model's bounding resource of the point (`extra["predicted_bound"]`), if any."""
    return (row.get("extra") or {}).get("predicted_bound")


def _util(row: dict, name: str) -> float | None:
    """A steady-state utilization of the timing model's prediction (`extra["predicted_util"]`), if any."""
    return ((row.get("extra") or {}).get("predicted_util") or {}).get(name)


# (header, utilization or extra field, format): the model's steady state beside the predicted time.
TABLE_MODEL = (
    ("M busy", lambda row: _util(row, "cube M"), ".0%"),
    ("V busy", lambda row: _util(row, "vector V"), ".0%"),
    ("peak", lambda row: (row.get("extra") or {}).get("peak_fraction"), ".1%"),
)


def _table_note(row: dict) -> str:
    """The rule's name for a rejected point, the first line of the report for a failed one,
    the split of a passing balanced split-KV point, else nothing (the full messages are in the files)."""
    if row["status"] == "rejected":
        return row["message"].split(":", 1)[0]
    if row["status"] == "pass":
        return _split_note(row)
    return row["message"].splitlines()[0] if row["message"] else ""


def _split_note(row: dict) -> str:
    """A balanced split-KV point's split units, "NxS" (N units split S ways; the others whole)."""
    split = (row.get("extra") or {}).get("split")
    if not split:
        return ""
    if split == "unsplit":  # the planner split no unit
        return split
    return "+".join(part for part in split.split("+") if part.split("x")[1] != "1") or "unsplit"


def summary_table(outcome: SweepOutcome, best_only: bool = False) -> Table:
    """The sweep's rows (`best_only`: the best row of each problem and the failed ones)."""
    rows = [row for row in outcome.rows if not best_only or row["best"] or row["status"] in FAILED_STATUSES]
    metric_names = dict(TIME_METRICS)
    if outcome.best_metric is None:
        title = "sweep results (no passing point, no best config)"
    else:
        title = f"sweep: * = best of each (D, B, N, S0, S1) by {metric_names[outcome.best_metric]}"
    rows = [{"kv_heads": row["heads"], **row} for row in rows]  # rows written before kv_heads was a column
    grouped = any(row["kv_heads"] != row["heads"] for row in rows)
    shown = [(header, name) for header, name in TABLE_SHAPE if name != "kv_heads" or grouped]
    shape_columns = [(header, name) for header, name in shown if len({row[name] for row in rows}) > 1]
    constant = [f"{header}={rows[0][name]}" for header, name in shown if rows and (header, name) not in shape_columns]
    if rows and row_variant_label(rows[0]):
        constant.append(row_variant_label(rows[0]))
    if any(_split_note(row) for row in rows):
        constant.append("note NxS: balanced split-KV, N units split S ways")
    number_columns = [column for column in TABLE_NUMBERS if any(row.get(column[1]) is not None for row in rows)]
    with_bound = any(_bound(row) for row in rows)
    model_columns = [column for column in TABLE_MODEL if any(column[1](row) is not None for row in rows)]

    table = Table(
        title=title, caption=" ".join(constant) if rows else None, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0)
    )
    table.add_column("")
    for header, _ in shape_columns:
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("tile", justify="right", no_wrap=True)
    table.add_column("pre", justify="right", no_wrap=True)
    table.add_column("S1", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for header, _, _ in number_columns:
        table.add_column(header, justify="right", no_wrap=True)
    for header, _, _ in model_columns:
        table.add_column(header, justify="right", no_wrap=True)
    if with_bound:
        table.add_column("bound", no_wrap=True)
    table.add_column("note", min_width=16)
    for row in rows:
        style = STATUS_STYLE.get(row["status"], "")
        table.add_row(
            "*" if row["best"] else "",
            *(str(row[name]) for _, name in shape_columns),
            str(row["tile_s1"]),
            str(row["qk_preload"]),
            str(row["s1"]),
            f"[{style}]{row['status']}[/]",
            *(_format_number(row.get(name), spec) for _, name, spec in number_columns),
            *(_format_number(value(row), spec) for _, value, spec in model_columns),
            *([_bound(row) or ""] if with_bound else []),
            _table_note(row),
            style="bold" if row["best"] else "",
        )
    return table


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in value.split(",") if item.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None
    if not values:
        raise click.BadParameter("needs at least one value")
    return values


@click.command("sweep")
@click.option("--tile-s1", default="256,512", callback=_int_list, show_default=True, help="TILE_S1 values.")
@click.option("--qk-preload", default="2,3", callback=_int_list, show_default=True, help="QK_PRELOAD values.")
@click.option("--head-dim", default="128", callback=_int_list, show_default=True, help="Head dims D.")
@click.option("--s1", default="1024,2048,4096,8192", callback=_int_list, show_default=True, help="KV lengths.")
@click.option("--s0", default="128", callback=_int_list, show_default=True, help="Query lengths.")
@click.option("--square", is_flag=True, help="S0 = S1 at every point (replaces --s0).")
@click.option("--best-only", is_flag=True, help="Show only the best config of each shape (and failed points).")
@click.option("--batch", default="1", callback=_int_list, show_default=True, help="Batch sizes B.")
@click.option("--heads", default="1", callback=_int_list, show_default=True, help="Head counts N.")
@kv_heads_option
@kernel_switches
@click.option("--backend", type=click.Choice(BACKENDS), default="sim", show_default=True)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Points run at once: worker processes (local; default: the CPUs), or at most this many Ray tasks "
                   "(ray; default: the cluster's CPUs; a local Ray gets this many CPUs).")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Where the points run: local worker processes, or Ray tasks of one CPU each (needs "
                   "pip install 'ptofa[ray]').")
@click.option("--address", default=None,
              help="--executor ray: the cluster to join (auto, HOST:PORT or ray://HOST:PORT); without it a local "
                   "Ray is started for the sweep and shut down at its end.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, help="Directory for results.jsonl/.csv/.json/.png; a rerun resumes from it.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs (and key-mask lengths).")
@click.option("--num-splits", default=None, callback=lambda ctx, p, v: None if v is None else _int_list(ctx, p, v),
              help="Split-KV counts (0: the timing model's choice); sweeps --decode steps or one --seqlens batch.")
@click.option("--decode", is_flag=True, default=False,
              help="Sweep decode steps: --batch x --heads x --s0 (query tokens; 1 unless given) x --cache-len, paged "
                   "(--page-size), with the first --head-dim/--tile-s1/--qk-preload.")
@click.option("--cache-len", default="4096", callback=_int_list, show_default=True, help="--decode: cached keys per sequence.")
@click.option("--page-size", default=128, show_default=True, help="--decode: keys per page (a multiple of 128).")
@click.option("--seqlens", default=None, callback=lambda ctx, p, v: None if v is None else _int_list(ctx, p, v),
              help="One packed varlen batch of these lengths, at each --num-splits.")
@click.option("--balance", is_flag=True, help="Also run every point through the balanced split-KV launch (sim; "
              "the timing model's per-unit splits, then the reduce); the note says how it split.")
def sweep_cmd(
    tile_s1: tuple[int, ...],
    qk_preload: tuple[int, ...],
    head_dim: tuple[int, ...],
    s1: tuple[int, ...],
    s0: tuple[int, ...],
    square: bool,
    best_only: bool,
    batch: tuple[int, ...],
    heads: tuple[int, ...],
    kv_heads: int | None,
    dtype: str,
    out_dtype: str | None,
    causal: bool,
    window: tuple[int, int] | None,
    key_padding: bool,
    lse: bool,
    prescale_q: bool,
    softmax_dtypes: tuple[str, ...],
    backend: str,
    jobs: int | None,
    executor: str,
    address: str | None,
    out_dir: Path,
    seed: int,
    num_splits: tuple[int, ...] | None,
    decode: bool,
    cache_len: tuple[int, ...],
    page_size: int,
    seqlens: tuple[int, ...] | None,
    balance: bool,
) -> None:
    """Run every (config, shape) of a grid, check accuracy and time it; resumable.

    The kernel's switches (--causal, --window, --kv-heads, --key-padding-mask, --lse,
    --dtype, --out-dtype) apply to every point. Points breaking a config rule are
    listed as "rejected" with the rule. --executor ray runs each point as a Ray task,
    on a local Ray or on the cluster at --address. Exits non-zero if any point fails,
    deadlocks or errors, with 2 for contradicting switches or --executor ray without
    Ray, and with 130 when interrupted (rerun the same command to resume).
    """
    console = Console() if sys.stdout.isatty() else Console(width=120)
    knobs = config_knobs(dtype, out_dtype, causal, window, key_padding, lse, prescale_q, softmax_dtypes[0])
    if address is not None and executor != "ray":
        raise click.UsageError("--address is for --executor ray")
    if decode or num_splits is not None or seqlens is not None:
        from ptofa.cli.serving_run import sweep_serving

        if executor != "local":
            raise click.UsageError("--executor ray: --decode, --num-splits and --seqlens sweeps run locally only")

        one_softmax_dtype(softmax_dtypes)
        try:
            config = FAConfig(head=head_dim[0], tile_s1=tile_s1[0], qk_preload=qk_preload[0], **knobs)
        except ConfigError as exc:
            raise click.UsageError(f"invalid config: {exc}") from None
        decode_s0 = (1,) if s0 == (128,) else s0  # --s0 left at its default: one query token per step
        rows = sweep_serving(config, batch, heads, kv_heads, decode_s0, cache_len,
                             page_size, None if seqlens is None else list(seqlens), num_splits or (0, 1),
                             window_of(causal, window), seed, out_dir, decode)
        if any(row["status"] != "pass" for row in rows):
            raise click.ClickException("a serving point failed its accuracy check")
        return
    if balance and (key_padding or backend != "sim"):
        raise click.UsageError("--balance: the balanced split-KV launch runs on --backend sim, without --key-padding-mask")
    grid = SweepGrid(tile_s1=tile_s1, qk_preload=qk_preload, head=head_dim, s1=s1, s0=s0, batch=batch, heads=heads,
                     kv_heads=kv_heads, window=window_of(causal, window), key_padding=key_padding, lse=lse,
                     in_dtype=knobs["in_dtype"], out_dtype=knobs["out_dtype"], prescale_q=prescale_q, square=square,
                     balance=balance, softmax_dtype=softmax_dtypes)
    try:
        outcome = run_sweep(grid, out_dir, backend=backend, jobs=jobs, seed=seed, console=console, executor=executor,
                            address=address)
    except ExecutorUnavailable as exc:
        raise click.UsageError(str(exc)) from None
    except (BackendUnavailable, ConnectionError) as exc:
        raise click.ClickException(str(exc)) from None
    console.print(summary_table(outcome, best_only))
    console.print(
        f"{len(outcome.rows)} points ({outcome.ran} run now, {outcome.skipped} from {out_dir / JSONL_NAME}); "
        f"wrote {out_dir / CSV_NAME}, {out_dir / JSON_NAME}, {out_dir / PNG_NAME}"
    )
    if outcome.interrupted:
        console.print("[yellow]interrupted: rerun the same command to resume[/]")
        raise SystemExit(130)
    if outcome.failed:
        raise click.ClickException(
            f"{len(outcome.failed)} of {len(outcome.rows)} points failed, deadlocked or errored: "
            + "; ".join(f"{row['key']} {row['status']}" for row in outcome.failed)
        )
