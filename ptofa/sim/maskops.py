"""Semantics of the mask ops: triangle and index tiles (`ttri`, `tci`), comparisons into packed
predicate tiles (`tcmp`, `tcmps`) and the select that reads them (`tsel`), in the style of
`ptofa.sim.tileops`."""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim.memory import BF16, _pack_predicate, _unpack_predicate
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
