"""A sweep's points: the grid, each point's key, labels and row columns, its legality check
(one point's run, `run_point`, is in `ptofa.cli.sweep_executors`, which runs the points)."""

from __future__ import annotations

import importlib.metadata
import itertools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy
import torch

import ptofa
from ptofa.cli.switches import UNBOUNDED
from ptofa.kernels.builtin_mods.window import window_mods
from ptofa.launch.base import RunResult
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, kernel_head

RunFunction = Callable[..., RunResult]


@dataclass(frozen=True)
class PointRuns:
    """The run functions of a sweep, both with `ptofa.runner.run_case`'s signature: `plain` runs a
    point, `balanced` a `--balance` point (`ptofa.launch.balance.run_balanced`). Module-level
    functions, so that worker processes and Ray tasks can unpickle them."""

    plain: RunFunction
    balanced: RunFunction

    def of(self, point: SweepPoint) -> RunFunction:
        return self.balanced if point.balance else self.plain

# The kernel's switches and kv_heads: columns of every row (RunResult has no field for them).
SWITCH_FIELDS = ("kv_heads", "window", "key_padding", "lse", "in_dtype", "out_dtype", "prescale_q", "softmax_dtype")


def variant_label(window: Sequence[int], key_padding: bool, lse: bool, in_dtype: str, out_dtype: str) -> str:
    """The kernel's switches in a few words ("" for the plain fp16 kernel): causal or
    window=L,R, key_padding, lse, and IN->OUT when the dtypes are not fp16 -> fp16."""
    window = tuple(window)
    words = []
    if window == (-1, 0):
        words.append("causal")
    elif window != UNBOUNDED:
        words.append(f"window={window[0]},{window[1]}")
    words += [name for name, on in (("key_padding", key_padding), ("lse", lse)) if on]
    if (in_dtype, out_dtype) != ("f16", "f16"):
        words.append(f"{in_dtype}->{out_dtype}")
    return " ".join(words)


def row_variant_label(row: dict) -> str:
    """`variant_label` of a result row (rows written before the switches existed are the plain kernel)."""
    in_dtype = row.get("in_dtype", "f16")
    return variant_label(row.get("window", UNBOUNDED), row.get("key_padding", False), row.get("lse", False),
                         in_dtype, row.get("out_dtype") or in_dtype)


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: the config knobs the sweep varies, the problem shape, the backend,
    and the kernel's switches (the same for every point of a sweep).

    `kv_heads` None means `heads`, `out_dtype` None the input dtype; both are filled in,
    so equal points compare (and key) equal.
    """

    head: int
    tile_s1: int
    qk_preload: int
    batch: int
    heads: int
    s0: int
    s1: int
    backend: str
    kv_heads: int | None = None
    window: tuple[int, int] = UNBOUNDED
    key_padding: bool = False
    lse: bool = False
    in_dtype: str = "f16"
    out_dtype: str | None = None
    prescale_q: bool = True
    balance: bool = False  # the balanced split-KV launch (`ptofa.launch.balance`) instead of the dense kernel
    softmax_dtype: str = "f32"

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", self.in_dtype)
        object.__setattr__(self, "window", tuple(self.window))

    @property
    def key(self) -> str:
        """Identity of the point in `results.jsonl`; a point whose key is there is not run again.
        Switches at their default (and kv_heads = heads) are left out: the plain kernel's key."""
        switches = ""
        if self.window != UNBOUNDED:
            switches += f",window={self.window[0]}:{self.window[1]}"
        switches += "".join(f",{name}=1" for name, on in (("key_padding", self.key_padding), ("lse", self.lse)) if on)
        if self.in_dtype != "f16":
            switches += f",in_dtype={self.in_dtype}"
        if self.out_dtype != self.in_dtype:
            switches += f",out_dtype={self.out_dtype}"
        if not self.prescale_q:
            switches += ",prescale_q=0"
        if self.softmax_dtype != "f32":
            switches += f",softmax_dtype={self.softmax_dtype}"
        kv_heads = f",kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        switches += ",balance=1" if self.balance else ""
        return (
            f"head={self.head},tile_s1={self.tile_s1},qk_preload={self.qk_preload}{switches},"
            f"batch={self.batch},heads={self.heads}{kv_heads},s0={self.s0},s1={self.s1},backend={self.backend}"
        )

    @property
    def shape(self) -> ProblemShape:
        return ProblemShape(batch=self.batch, heads=self.heads, s0=self.s0, s1=self.s1, kv_heads=self.kv_heads,
                            window=self.window)

    @property
    def variant(self) -> str:
        return variant_label(self.window, self.key_padding, self.lse, self.in_dtype, self.out_dtype)

    @property
    def config_label(self) -> str:
        words = [f"head={self.head} tile_s1={self.tile_s1} qk_preload={self.qk_preload}", self.variant]
        if self.kv_heads != self.heads:
            words.append(f"kv_heads={self.kv_heads}")
        if not self.prescale_q:
            words.append("no_prescale_q")
        if self.softmax_dtype != "f32":
            words.append(f"softmax={self.softmax_dtype}")
        if self.balance:
            words.append("balanced split")
        return " ".join(word for word in words if word)

    def switch_columns(self) -> dict:
        """The row's SWITCH_FIELDS."""
        return {name: list(self.window) if name == "window" else getattr(self, name) for name in SWITCH_FIELDS}


@dataclass(frozen=True)
class SweepGrid:
    """The values of each swept axis; the grid is their product."""

    tile_s1: Sequence[int]
    qk_preload: Sequence[int]
    head: Sequence[int]
    s1: Sequence[int]
    s0: Sequence[int] = (128,)
    batch: Sequence[int] = (1,)
    heads: Sequence[int] = (1,)
    # The kernel's switches, applied to every point (not swept).
    kv_heads: int | None = None  # None: as many as query heads
    window: tuple[int, int] = UNBOUNDED  # bottom-right aligned (left, right); causal = (-1, 0)
    key_padding: bool = False  # random ragged valid key lengths per batch (from the seed)
    lse: bool = False
    in_dtype: str = "f16"
    out_dtype: str | None = None  # None: the input dtype
    prescale_q: bool = True
    square: bool = False  # S0 = S1 at every point (the s0 axis is not used)
    balance: bool = False  # each point also through the balanced split-KV launch
    softmax_dtype: Sequence[str] = ("f32",)  # swept, after qk_preload

    def points(self, backend: str) -> list[SweepPoint]:
        """Points ordered by shape, then by config, so a partial sweep covers whole shapes first.
        A value listed twice on an axis gives one point."""
        s0_axis = (None,) if self.square else self.s0
        axes = (self.batch, self.heads, s0_axis, self.s1, self.head, self.tile_s1, self.qk_preload,
                self.softmax_dtype, (False, True) if self.balance else (False,))
        switches = dict(kv_heads=self.kv_heads, window=tuple(self.window), key_padding=self.key_padding,
                        lse=self.lse, in_dtype=self.in_dtype, out_dtype=self.out_dtype, prescale_q=self.prescale_q)
        return [
            SweepPoint(head, tile_s1, qk_preload, batch, heads, s1 if s0 is None else s0, s1, backend, **switches,
                       balance=balance, softmax_dtype=softmax)
            for batch, heads, s0, s1, head, tile_s1, qk_preload, softmax, balance in itertools.product(
                *(dict.fromkeys(axis) for axis in axes)
            )
        ]


def package_versions() -> dict[str, str]:
    return {
        "ptofa": ptofa.__version__,
        "torch": torch.__version__,
        "xdsl": importlib.metadata.version("xdsl"),
        "numpy": numpy.__version__,
    }


def validate_point(point: SweepPoint) -> tuple[FAConfig | None, str, list[str]]:
    """(config, rejection message, config warnings); config is None when a legality rule rejects the point.
    A head dim that is no kernel width runs on `kernel_head(D)`, its inputs zero-padded (`run_point`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if point.balance and point.head != kernel_head(point.head):
                raise ConfigError(f"--balance: head dim {point.head} is no kernel width; the balanced launch runs "
                                  f"kernel widths only")
            config = FAConfig(head=kernel_head(point.head), tile_s1=point.tile_s1, qk_preload=point.qk_preload,
                              in_dtype=point.in_dtype, out_dtype=point.out_dtype, mods=window_mods(point.window != UNBOUNDED),
                              key_padding=point.key_padding, lse=point.lse, prescale_q=point.prescale_q,
                              softmax_dtype=point.softmax_dtype)
            point.shape.check(config)
        except ConfigError as exc:
            return None, str(exc), []
    return config, "", [str(w.message) for w in caught]


def rejected_result(point: SweepPoint, message: str) -> RunResult:
    return RunResult(
        head=point.head,
        tile_s1=point.tile_s1,
        qk_preload=point.qk_preload,
        batch=point.batch,
        heads=point.heads,
        s0=point.s0,
        s1=point.s1,
        backend=point.backend,
        status="rejected",
        message=message,
    )
