"""Simulated memory: GM pointers and strided tensor views on byte buffers, local tiles,
and the per-core local-memory budget.

GM is a set of numpy `uint8` buffers owned by the caller; a `GmPointer` is a buffer,
a byte offset and an element dtype (two pointers may alias one buffer, as the f32 and
f16 views of the slot workspace do). Tensor views are `GmView`s: pointer + shape +
strides (elements); `GmView.array` builds the numpy view after a bounds check.

A tile is a 2-D numpy array `[rows, cols]` plus its valid region (docs/sources.md §3.2).
Non-boxed `col_major` tiles are stored in Fortran order so that `treshape` sees the
same flat storage as the hardware (a `[R,1]` DN column and its `[1,R]` row view).

bf16 has no numpy dtype: GM and tiles hold its 16-bit patterns, as the hardware does,
in arrays of the opaque 2-byte dtype `BF16` (numpy's `V2`), which no numpy arithmetic
accepts, so a bf16 array can only reach arithmetic through `bf16_decode` (exact, to f32)
and be written through `bf16_encode` (rounding, round-to-nearest-even by default). A
`torch.bfloat16` tensor backs a `!pto.ptr<bf16>` directly: `GmPointer.of(t)` wraps its
bytes, so stores land in the caller's tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ptofa.ir.target import ALIGNMENT, CAPACITY, SPACE_NAMES
from ptofa.sim.errors import SimError, SimMemoryOverflow

BF16 = np.dtype("V2")  # bf16 bit patterns (see the module docstring)

NP_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": BF16,
    "f32": np.dtype(np.float32),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
}

_TORCH_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: BF16,
    torch.float32: np.dtype(np.float32),
    torch.int8: np.dtype(np.int8),
    torch.uint8: np.dtype(np.uint8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
}


def as_np_dtype(dtype) -> np.dtype:
    """A numpy dtype from a numpy dtype / type, a PTO element name ("bf16", "f16", ...) or a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _TORCH_DTYPES:
            raise SimError(f"torch dtype {dtype} cannot back a GM tensor")
        return _TORCH_DTYPES[dtype]
    if isinstance(dtype, str) and dtype in NP_DTYPES:
        return NP_DTYPES[dtype]
    return np.dtype(dtype)


def elem_np_dtype(name: str) -> np.dtype:
    """The numpy dtype of a PTO element type name; `SimError` for one the simulator does not support."""
    if name not in NP_DTYPES:
        raise SimError(f"element type {name} is not supported by the simulator")
    return NP_DTYPES[name]


def is_bf16(a: np.ndarray | np.dtype) -> bool:
    return (a if isinstance(a, np.dtype) else a.dtype) == BF16


def bf16_decode(a: np.ndarray) -> np.ndarray:
    """f32 values of a bf16 array (exact): the bit pattern shifted into the high half."""
    return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


# Rounding of f32 -> bf16 on the dropped low 16 bits (sign-magnitude, so the bias acts on
# the magnitude): (bias for positive values, bias for negative values).
_BF16_BIAS = {
    "TRUNC": (0, 0),
    "ROUND": (0x8000, 0x8000),  # half away from zero
    "FLOOR": (0, 0xFFFF),
    "CEIL": (0xFFFF, 0),
    "ODD": (0, 0),
}


def bf16_encode(x: np.ndarray, out: np.ndarray, mode: str = "CAST_RINT") -> None:
    """out (BF16) = x rounded to bf16: round-to-nearest-even for CAST_RINT / RINT / NONE,
    else TRUNC, FLOOR, CEIL, ROUND (half away from zero) or ODD (round to odd)."""
    f = np.asarray(x, dtype=np.float32)
    bits = np.ascontiguousarray(f).view(np.uint32).astype(np.uint64)
    low = bits & 0xFFFF
    if mode in ("CAST_RINT", "RINT", "NONE"):
        bias = 0x7FFF + ((bits >> 16) & 1)
    elif mode in _BF16_BIAS:
        pos, neg = _BF16_BIAS[mode]
        bias = np.where(bits >> 31 != 0, neg, pos).astype(np.uint64)
    else:
        raise SimError(f"tcvt: unknown round mode {mode}")
    hi = ((bits + bias) >> 16) & 0xFFFF
    if mode == "ODD":
        hi |= (low != 0).astype(np.uint64)
    nan = np.isnan(f)
    if nan.any():
        hi = np.where(nan, ((bits >> 16) | 0x0040) & 0xFFFF, hi)  # quiet NaN, sign kept
    out.view(np.uint16)[...] = hi.astype(np.uint16).reshape(f.shape)


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
        self.dtype = as_np_dtype(self.dtype)
        if self.buf.dtype != np.uint8 or self.buf.ndim != 1:
            raise SimError(f"GmPointer.buf must be a 1-D uint8 array, got {self.buf.dtype} with {self.buf.ndim} dims")

    @classmethod
    def of(cls, array: "np.ndarray | torch.Tensor") -> "GmPointer":
        """Wrap a C-contiguous numpy array or CPU torch tensor (its bytes are the GM buffer;
        stores land in it). A `torch.bfloat16` tensor gives a bf16 pointer."""
        if isinstance(array, torch.Tensor):
            if array.device.type != "cpu":
                raise SimError(f"GmPointer.of needs a CPU tensor, got one on {array.device}")
            if not array.is_contiguous():
                raise SimError("GmPointer.of needs a contiguous tensor (its bytes are the GM buffer)")
            dtype = as_np_dtype(array.dtype)
            flat = array.detach().reshape(-1)
            buf = flat.view(torch.uint8).numpy() if flat.numel() else np.zeros(0, np.uint8)
            return cls(buf, 0, dtype)
        if not array.flags.c_contiguous:
            raise SimError("GmPointer.of needs a C-contiguous array (its bytes are the GM buffer)")
        return cls(array.reshape(-1).view(np.uint8), 0, array.dtype)

    def retyped(self, dtype) -> "GmPointer":
        """A second pointer to the same bytes; `dtype` may be "bf16" or a torch dtype."""
        return GmPointer(self.buf, self.offset, as_np_dtype(dtype))

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
    order = "F" if fortran else "C"
    if dtype == BF16:
        data = np.empty((rows, cols), dtype=BF16, order=order)
        data.view(np.uint16)[...] = 0x7FC0  # bf16 quiet NaN
        return data
    fill = np.nan if dtype.kind == "f" else 0
    return np.full((rows, cols), fill, dtype=dtype, order=order)


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


def _mask_bytes(m: Tile, nbytes: int, what: str) -> np.ndarray:
    """The first `nbytes` of the i8 mask tile's storage, as uint8 (the packed predicate)."""
    data = m.data
    if not data.flags.c_contiguous:
        raise SimError(f"{what}: mask tile %{m.name} is not contiguous storage (a subview window?); the packed "
                       "predicate is addressed from the start of the tile's buffer")
    flat = data.reshape(-1).view(np.uint8)
    if nbytes > flat.size:
        raise SimError(f"{what}: the packed predicate needs {nbytes} bytes, mask tile %{m.name} has {flat.size}")
    return flat[:nbytes]


def _pack_predicate(bits: np.ndarray, m: Tile, what: str) -> None:
    """Write bits[vr, vc] into the mask: one bit per element, LSB first, row r at bytes
    r*vc/8 .. (r+1)*vc/8 - 1 (rows packed densely, docs/sources.md §3.3)."""
    vr, vc = bits.shape
    if vc % 8:
        raise SimError(f"{what}: {vc} valid columns; the packed-predicate layout of a row that is not a whole "
                       "number of bytes is not verified on hardware: use a multiple of 8 columns")
    packed = np.packbits(bits, axis=1, bitorder="little")
    _mask_bytes(m, packed.size, what)[...] = packed.reshape(-1)


def _unpack_predicate(m: Tile, vr: int, vc: int, what: str) -> np.ndarray:
    if vc % 8:
        raise SimError(f"{what}: {vc} valid columns; the packed-predicate layout of a row that is not a whole "
                       "number of bytes is not verified on hardware: use a multiple of 8 columns")
    raw = _mask_bytes(m, vr * vc // 8, what).reshape(vr, vc // 8)
    return np.unpackbits(raw, axis=1, bitorder="little").astype(bool)
