"""Timelines of the timing model (`ptofa.sim.timing`) in the formats people already open.

* `write_timeline`: one block's queues over time as a picture (`.svg` or `.png`,
  both drawn by matplotlib).
* `write_chrome_trace`: every replayed block's queues as Chrome trace events
  (JSON object format, "X" complete events in microseconds, one process per block
  and one thread per core queue). msprof exports its profiles in this format, and
  Perfetto, chrome://tracing and MindStudio Insight open it, so a predicted
  timeline can sit next to a measured NPU profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ptofa.sim.timing import CUBE_QUEUES, VEC_QUEUES, OpInterval, TimingResult, core_order

STAGE_COLOURS = {"qk": "#4c78a8", "p": "#f58518", "pv": "#54a24b", "gu": "#b279a2", "other": "#9d9d9d"}
WAIT_COLOUR = "#bbbbbb"
DEFAULT_WINDOW_US = 40.0
PICTURE_SUFFIXES = (".svg", ".png")


@dataclass
class _Lane:
    core: str
    queue: str
    bars: list[OpInterval] = field(default_factory=list)


def _queues(core: str) -> tuple[str, ...]:
    return CUBE_QUEUES if core == "cube" else VEC_QUEUES


def _timeline_lanes(result: TimingResult, block: int, window_us: float) -> list[_Lane]:
    lanes: dict[tuple[str, str], _Lane] = {}
    cores = sorted({iv.core for iv in result.intervals if iv.block == block}, key=core_order)
    for core in cores:
        for queue in _queues(core):
            lanes[(core, queue)] = _Lane(core, queue)
    for iv in result.intervals:
        if iv.block == block and iv.wait_from_us < window_us:
            lanes[(iv.core, iv.queue)].bars.append(iv)
    return list(lanes.values())


def _pipe_wait(iv: OpInterval) -> bool:
    """A cross-core wait worth drawing: a pop/alloc that waited past its issue."""
    return iv.pipe_kind in ("tpop", "talloc") and iv.start_us > iv.wait_from_us


def write_timeline(
    result: TimingResult, path: str | Path, block: int | None = None, window_us: float = DEFAULT_WINDOW_US
) -> Path:
    """Draw one block's queues over time into `.svg` or `.png` (matplotlib), or write `.json` trace events.

    Only the first `window_us` microseconds are drawn (long runs repeat the same
    steady pattern; the title gives the full block time). Bars are coloured by
    stage; hatched grey bars on a core's S lane are cross-core pipe waits (the
    scalar unit stalled on a `tpop`/`talloc` flag from issue to release; the core's
    other queues may still be draining work issued before it).
    """
    path = Path(path)
    if path.suffix.lower() == ".json":
        return write_chrome_trace(result, path)
    if path.suffix.lower() not in PICTURE_SUFFIXES:
        raise ValueError(f"timeline path {path} must end in .svg, .png or .json")
    block = result.critical_block if block is None else block
    total_us = result.block_us[block]
    shown_us = min(window_us, total_us) or 1e-3
    title = (
        f"block {block} on {result.soc.name}: first {shown_us:.1f} of {total_us:.1f} us; "
        f"kernel {result.kernel_us:.1f} us, bound by {result.bound}"
    )
    _draw(_timeline_lanes(result, block, shown_us), shown_us, title, path)
    return path


def _label(iv: OpInterval) -> str:
    pipe = f" pipe {iv.pipe_id} {iv.pipe_kind} #{iv.pipe_index}" if iv.pipe_kind else ""
    return f"{iv.op} line {iv.line} [{iv.stage}]{pipe} {iv.start_us:.3f}-{iv.end_us:.3f} us"


def _draw(lanes: list[_Lane], shown_us: float, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    # Text stays text in the SVG (searchable, and the lane names can be checked).
    with plt.rc_context({"svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(14, 0.35 * len(lanes) + 1.6))
    for n, lane in enumerate(lanes):
        y = len(lanes) - 1 - n
        waits = [(iv.wait_from_us, iv.start_us - iv.wait_from_us) for iv in lane.bars if _pipe_wait(iv)]
        if waits:
            ax.broken_barh(waits, (y - 0.4, 0.8), facecolors="#eeeeee", edgecolor=WAIT_COLOUR, hatch="///", lw=0,
                           gid=f"wait {lane.core} {lane.queue}")
        for stage, colour in STAGE_COLOURS.items():
            bars = [(iv.start_us, iv.end_us - iv.start_us) for iv in lane.bars
                    if (iv.stage if iv.stage in STAGE_COLOURS else "other") == stage]
            if bars:
                ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=colour, gid=f"{stage} {lane.core} {lane.queue}")
    ax.set_yticks(range(len(lanes)), [f"{lane.core} {lane.queue}" for lane in reversed(lanes)])
    ax.set_xlim(0, shown_us)
    ax.set_xlabel("time (us)")
    ax.set_title(title, fontsize=10)
    handles = [Patch(facecolor=c, label=s) for s, c in STAGE_COLOURS.items()]
    handles.append(Patch(facecolor="#eeeeee", edgecolor=WAIT_COLOUR, hatch="///", label="pipe wait"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=6, fontsize=8, frameon=False)
    fig.tight_layout()
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(path, dpi=120)
    plt.close(fig)


def chrome_trace_events(result: TimingResult) -> dict:
    """The trace-event JSON object: metadata naming each block (pid) and core queue (tid), then
    one complete ("X") event per op and one per cross-core pipe wait, times in microseconds."""
    threads: dict[tuple[int, str, str], int] = {}
    for iv in sorted(result.intervals, key=lambda iv: (iv.block, core_order(iv.core))):
        for queue in _queues(iv.core):
            threads.setdefault((iv.block, iv.core, queue), len(threads))
    events: list[dict] = []
    for block in sorted({b for b, _, _ in threads}):
        events.append({"name": "process_name", "ph": "M", "pid": block, "tid": 0,
                       "args": {"name": f"block {block} ({result.soc.name}, predicted)"}})
    for (block, core, queue), tid in threads.items():
        events.append({"name": "thread_name", "ph": "M", "pid": block, "tid": tid, "args": {"name": f"{core} {queue}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": block, "tid": tid, "args": {"sort_index": tid}})
    for iv in result.intervals:
        tid = threads[(iv.block, iv.core, iv.queue)]
        args = {"line": iv.line, "stage": iv.stage}
        if iv.pipe_kind:
            args.update(pipe=iv.pipe_id, kind=iv.pipe_kind, index=iv.pipe_index)
        if _pipe_wait(iv):
            events.append({"name": f"wait {iv.pipe_kind}", "cat": "pipe wait", "ph": "X", "pid": iv.block, "tid": tid,
                           "ts": iv.wait_from_us, "dur": iv.start_us - iv.wait_from_us, "args": args})
        events.append({"name": iv.op, "cat": iv.stage, "ph": "X", "pid": iv.block, "tid": tid,
                       "ts": iv.start_us, "dur": iv.end_us - iv.start_us, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"source": "ptofa timing model", "soc": result.soc.name, "kernel_us": result.kernel_us,
                          "bound": result.bound}}


def write_chrome_trace(result: TimingResult, path: str | Path) -> Path:
    """Write `chrome_trace_events` to `path` (open it in Perfetto, chrome://tracing or MindStudio Insight)."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace_events(result)))
    return path
