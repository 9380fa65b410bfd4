"""Simulated memory: GM pointers and strided tensor views on byte buffers, local tiles,
and the per-core local-memory budget.

GM is a set of numpy `uint8` buffers owned by the caller; a `GmPointer` is a buffer,
a byte offset and an element dtype (two pointers may alias one buffer, as the f32 and
f16 views of the slot workspace do). Tensor views are `GmView`s: pointer + shape +
strides (elements); `GmView.array` builds the numpy view after a bounds check.

A tile is a 2-D numpy array `[rows, cols]` plus its valid region (pto-ir.md 6.4).
Non-boxed `col_major` tiles are stored in Fortran order so that `treshape` sees the
same flat storage as the hardware (a `[R,1]` DN column and its `[1,R]` row view).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ptofa.target import ALIGNMENT, CAPACITY, SPACE_NAMES
from ptofa.sim.errors import SimError, SimMemoryOverflow

NP_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
}


@dataclass
class GmPointer:
    """A GM pointer argument: byte buffer + byte offset + element dtype.

    `GmPointer.of(array)` wraps a C-contiguous numpy array; `p.retyped(np.float16)`
    is a second pointer to the same bytes (e.g. `fifo` and `fifo_h`).
    """

    buf: np.ndarray  # 1-D uint8
    offset: int = 0  # bytes
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))

    def __post_init__(self) -> None:
        self.dtype = np.dtype(self.dtype)
        if self.buf.dtype != np.uint8 or self.buf.ndim != 1:
            raise SimError(f"GmPointer.buf must be a 1-D uint8 array, got {self.buf.dtype} with {self.buf.ndim} dims")

    @classmethod
    def of(cls, array: np.ndarray) -> "GmPointer":
        if not array.flags.c_contiguous:
            raise SimError("GmPointer.of needs a C-contiguous array (its bytes are the GM buffer)")
        return cls(array.reshape(-1).view(np.uint8), 0, array.dtype)

    def retyped(self, dtype) -> "GmPointer":
        return GmPointer(self.buf, self.offset, np.dtype(dtype))

    def add(self, elems: int) -> "GmPointer":
        return GmPointer(self.buf, self.offset + elems * self.dtype.itemsize, self.dtype)


class GmView:
    """A strided GM tensor (tensor_view, partition or pipe entry); `slot` >= 0 for pipe slots."""

    __slots__ = ("buf", "offset", "dtype", "shape", "strides", "slot")

    def __init__(self, buf: np.ndarray, offset: int, dtype: np.dtype, shape: tuple, strides: tuple, slot: int = -1):
        self.buf = buf
        self.offset = offset
        self.dtype = dtype
        self.shape = shape
        self.strides = strides
        self.slot = slot

    def byte_range(self) -> tuple[int, int]:
        """[lo, hi) bytes touched in the buffer (hi == lo for an empty view)."""
        item = self.dtype.itemsize
        lo = hi = self.offset
        for n, s in zip(self.shape, self.strides):
            if n <= 0:
                return self.offset, self.offset
            ext = (n - 1) * s * item
            if ext >= 0:
                hi += ext
            else:
                lo += ext
        return lo, hi + item

    def array(self) -> np.ndarray:
        """The numpy view of this tensor on its buffer (bounds-checked)."""
        lo, hi = self.byte_range()
        if lo < 0 or hi > self.buf.nbytes:
            raise SimError(
                f"GM access out of range: a {'x'.join(map(str, self.shape))} {self.dtype} view with strides "
                f"{list(self.strides)} (elements) at byte offset {self.offset} touches bytes [{lo}, {hi}) "
                f"of a {self.buf.nbytes}-byte buffer"
            )
        item = self.dtype.itemsize
        return np.ndarray(self.shape, self.dtype, self.buf, self.offset, tuple(s * item for s in self.strides))

    def describe(self) -> str:
        return f"{'x'.join(map(str, self.shape))}x{self.dtype} @ byte {self.offset}, strides {list(self.strides)}"


class Tile:
    """A local buffer (or an alias of one): full storage `data`, valid view `v`, root buffer id."""

    __slots__ = ("data", "v", "vr", "vc", "root", "name", "space")

    def __init__(self, data: np.ndarray, vr: int, vc: int, root: int, name: str, space: str):
        self.data = data
        self.vr = vr
        self.vc = vc
        self.v = data[:vr, :vc]
        self.root = root
        self.name = name
        self.space = space

    def set_valid(self, vr: int, vc: int) -> None:
        rows, cols = self.data.shape
        if not (0 <= vr <= rows and 0 <= vc <= cols):
            raise SimError(f"valid shape {vr}x{vc} of tile %{self.name} exceeds its {rows}x{cols} shape")
        self.vr, self.vc = vr, vc
        self.v = self.data[:vr, :vc]


def new_tile_storage(rows: int, cols: int, dtype: np.dtype, fortran: bool) -> np.ndarray:
    """Uninitialised storage: NaN for float tiles (reads of unwritten data show up), 0 otherwise."""
    fill = np.nan if dtype.kind == "f" else 0
    return np.full((rows, cols), fill, dtype=dtype, order="F" if fortran else "C")


@dataclass
class LiveBuffer:
    name: str
    type_str: str
    nbytes: int


class LocalMemory:
    """Live local buffers of one core, per space, checked against `pipeline.CAPACITY`.

    Every `alloc_tile` op is one buffer for the life of the launch on that core (ptoas
    plans addresses statically); hidden ptoas scratch buffers are added by the caller.
    Buffers that PlanMemory could overlap (disjoint live ranges) are all counted, so the
    check is conservative.
    """

    def __init__(self, core_name: str, spaces: tuple[str, ...]):
        self.core_name = core_name
        self.spaces = spaces
        self.used: dict[str, int] = {s: 0 for s in CAPACITY}
        self.buffers: dict[str, list[LiveBuffer]] = {s: [] for s in CAPACITY}
        self.peak: dict[str, int] = {s: 0 for s in CAPACITY}

    def allocate(self, space: str, name: str, type_str: str, nbytes: int) -> None:
        if space not in CAPACITY:
            return
        align = ALIGNMENT[space]
        size = (nbytes + align - 1) // align * align
        self.used[space] += size
        self.buffers[space].append(LiveBuffer(name, type_str, size))
        self.peak[space] = max(self.peak[space], self.used[space])
        if self.used[space] > CAPACITY[space]:
            lines = [
                f"{SPACE_NAMES[space]} overflow on {self.core_name}: {self.used[space]} bytes of live tiles, "
                f"capacity {CAPACITY[space]} bytes ({self.used[space] - CAPACITY[space]} over)"
            ]
            for b in self.buffers[space]:
                lines.append(f"  {b.name:<40} {b.type_str:<55} {b.nbytes:>8} B")
            raise SimMemoryOverflow("\n".join(lines))
