"""Semantics of the mask ops: triangle and index tiles (`ttri`, `tci`), comparisons into packed
predicate tiles (`tcmp`, `tcmps`) and the select that reads them (`tsel`), in the style of
`ptofa.sim.tileops`."""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim.errors import SimError
from ptofa.sim.memory import BF16, Tile
from ptofa.sim.registry import semantics
from ptofa.sim.tileops import Fn, Slot, _same_valid, copy_cast, np_dtype


@semantics(d.TTriOp)
def ttri(op: d.TTriOp, slot: Slot) -> Fn:
    """dst = 1 where col <= row + diag (lower) or col >= row + diag (upper), else 0, on the valid region."""
    diag_s, dst = slot(op.diagonal), slot(op.dst)
    upper = op.upper_or_lower == 1

    def fn(vals):
        t = vals[dst]
        diag = vals[diag_s]
        rows = np.arange(t.vr, dtype=np.int64)[:, None] + diag
        cols = np.arange(t.vc, dtype=np.int64)[None, :]
        mask = cols >= rows if upper else cols <= rows
        copy_cast(t.v, mask.astype(np.float32))

    return fn


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


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
    r*vc/8 .. (r+1)*vc/8 - 1 (rows packed densely, pto-ir.md 7.13)."""
    vr, vc = bits.shape
    if vc % 8:
        raise SimError(f"{what}: {vc} valid columns; the packed-predicate layout of a row that is not a whole "
                       "number of bytes is not verified on hardware (pto-ir.md 7.13): use a multiple of 8 columns")
    packed = np.packbits(bits, axis=1, bitorder="little")
    _mask_bytes(m, packed.size, what)[...] = packed.reshape(-1)


def _unpack_predicate(m: Tile, vr: int, vc: int, what: str) -> np.ndarray:
    if vc % 8:
        raise SimError(f"{what}: {vc} valid columns; the packed-predicate layout of a row that is not a whole "
                       "number of bytes is not verified on hardware (pto-ir.md 7.13): use a multiple of 8 columns")
    raw = _mask_bytes(m, vr * vc // 8, what).reshape(vr, vc // 8)
    return np.unpackbits(raw, axis=1, bitorder="little").astype(bool)


@semantics(d.TCmpSOp)
def tcmps(op: d.TCmpSOp, slot: Slot) -> Fn:
    """mask bit (r, c) = src[r, c] <mode> scalar over src's valid region (scalar in src's dtype)."""
    src, sc, dst = slot(op.src), slot(op.scalar), slot(op.dst)
    cmp = _CMP[op.mode]
    cast = np_dtype(op.src.type.dtype).type

    def fn(vals):
        s = vals[src]
        _pack_predicate(cmp(s.v, cast(vals[sc])), vals[dst], "tcmps")

    return fn


@semantics(d.TCmpOp)
def tcmp(op: d.TCmpOp, slot: Slot) -> Fn:
    """mask bit (r, c) = src0[r, c] <mode> src1[r, c] (default eq)."""
    a, b, dst = slot(op.src0), slot(op.src1), slot(op.dst)
    cmp = _CMP[op.mode]

    def fn(vals):
        x, y = vals[a], vals[b]
        _same_valid("tcmp src0 vs src1", x, y)
        _pack_predicate(cmp(x.v, y.v), vals[dst], "tcmp")

    return fn


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16) if a.dtype == BF16 else a


@semantics(d.TSelOp)
def tsel(op: d.TSelOp, slot: Slot) -> Fn:
    """dst = src0 where the mask bit is 1, else src1 (mask laid out as tcmp / tcmps write it)."""
    m, a, b, dst = slot(op.mask), slot(op.src0), slot(op.src1), slot(op.dst)

    def fn(vals):
        x, y, t = vals[a], vals[b], vals[dst]
        _same_valid("tsel src0 / src1 / dst", x, y, t)
        bits = _unpack_predicate(vals[m], t.vr, t.vc, "tsel")
        np.copyto(_bits(t.v), np.where(bits, _bits(x.v), _bits(y.v)))

    return fn


@semantics(d.TCIOp)
def tci(op: d.TCIOp, slot: Slot) -> Fn:
    """dst[0][j] = start + j (descending: start - j) for the valid columns, wrapping in the dtype."""
    start, dst = slot(op.start), slot(op.dst)
    sign = -1 if op.is_descending else 1

    def fn(vals):
        t = vals[dst]
        if t.vr == 0:
            return
        seq = vals[start] + sign * np.arange(t.vc, dtype=np.int64)
        np.copyto(t.v[0], seq, casting="unsafe")

    return fn
