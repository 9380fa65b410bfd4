"""Semantics of the tile and GM-view ops, compiled to closures over a value array.

Each factory takes the op and a `slot(value) -> int` function and returns
`fn(vals)`, which reads its operands from `vals[slot]` and writes only the
destination's valid region (pto-ir.md 7-9). Shapes, dtypes and ufuncs are resolved
here, once; at run time a closure does a few list loads and one or two numpy calls.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ptofa import dialect as d
from ptofa.sim.errors import SimError
from ptofa.sim.memory import NP_DTYPES, GmView, Tile

Fn = Callable[[list], object]
Slot = Callable[[object], int]

F32 = np.dtype(np.float32)


def np_dtype(t) -> np.dtype:
    name = d.elem_name(t)
    if name not in NP_DTYPES:
        raise SimError(f"element type {name} is not supported by the simulator")
    return NP_DTYPES[name]


_FLOATS = (np.dtype(np.float16), np.dtype(np.float32))


def copy_cast(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src with dtype conversion (f32 -> f16 rounds to nearest even).

    numpy's f16 <-> f32 casts run at ~2 ns per element; torch's use F16C and are
    ~15x faster, which matters for matmul operands and P tiles.
    """
    if dst.dtype != src.dtype and dst.dtype in _FLOATS and src.dtype in _FLOATS and dst.shape == src.shape:
        torch.from_numpy(dst).copy_(torch.from_numpy(src))
    else:
        np.copyto(dst, src, casting="unsafe")


def _shape_error(what: str, got, want) -> SimError:
    return SimError(f"shape agreement: {what} {'x'.join(map(str, got))} != {'x'.join(map(str, want))}")


# GM views --------------------------------------------------------------------------------


def make_tensor_view(op: d.MakeTensorViewOp, slot: Slot) -> Fn:
    p, res = slot(op.ptr), slot(op.result)
    shape_s = [slot(v) for v in op.shape]
    stride_s = [slot(v) for v in op.strides]
    rt = op.result.type
    static = rt.dims
    dtype = np_dtype(rt.elem)

    def fn(vals):
        ptr = vals[p]
        shape = tuple(vals[s] for s in shape_s)
        for i, (got, want) in enumerate(zip(shape, static)):
            if want != d.DYN and got != want:
                raise SimError(f"dim {i} is {got} at run time but the view type says {want}")
            if got < 0:
                raise SimError(f"dim {i} is negative ({got})")
        vals[res] = GmView(ptr.buf, ptr.offset, dtype, shape, tuple(vals[s] for s in stride_s))

    return fn


def partition_view(op: d.PartitionViewOp, slot: Slot) -> Fn:
    src, res = slot(op.source), slot(op.result)
    off_s = [slot(v) for v in op.offsets]
    size_s = [slot(v) for v in op.sizes]
    static = op.result.type.dims

    def fn(vals):
        tv = vals[src]
        offs = [vals[s] for s in off_s]
        sizes = tuple(vals[s] for s in size_s)
        delta = 0
        for i, (o, n, dim, st) in enumerate(zip(offs, sizes, tv.shape, tv.strides)):
            if o < 0 or n < 0 or o + n > dim:
                raise SimError(
                    f"partition out of the view: dim {i} window [{o}, {o + n}) of a view with dim {dim} "
                    f"(view shape {list(tv.shape)}, offsets {offs}, sizes {list(sizes)})"
                )
            if static[i] != d.DYN and n != static[i]:
                raise SimError(f"partition size {n} of dim {i} != {static[i]} in the result type")
            delta += o * st
        vals[res] = GmView(tv.buf, tv.offset + delta * tv.dtype.itemsize, tv.dtype, sizes, tv.strides, tv.slot)

    return fn


def _collapse(shape: tuple) -> tuple[int, int]:
    rows = 1
    for n in shape[:-1]:
        rows *= n
    return rows, shape[-1]


def tload(op: d.TLoadOp, slot: Slot) -> Fn:
    src, dst = slot(op.src), slot(op.dst)

    def fn(vals):
        view = vals[src]
        tile = vals[dst]
        a = view.array()
        if a.ndim != 2:
            a = a.reshape(_collapse(a.shape))
        if a.shape != tile.v.shape:
            raise _shape_error("partition (as rows x cols) vs tile valid shape", a.shape, tile.v.shape)
        copy_cast(tile.v, a)

    return fn


def tstore(op: d.TStoreOp, slot: Slot) -> Fn:
    src, dst = slot(op.src), slot(op.dst)

    def fn(vals):
        tile = vals[src]
        a = vals[dst].array()
        v = tile.v
        if a.ndim != 2:
            if _collapse(a.shape) != v.shape:
                raise _shape_error("tile valid shape vs partition (as rows x cols)", v.shape, _collapse(a.shape))
            v = v.reshape(a.shape)
        elif a.shape != v.shape:
            raise _shape_error("tile valid shape vs partition", v.shape, a.shape)
        copy_cast(a, v)

    return fn


def tmov(op: d.TMovOp, slot: Slot) -> Fn:
    src, dst = slot(op.src), slot(op.dst)

    def fn(vals):
        copy_cast(vals[dst].v, vals[src].v)

    return fn


# Tile aliases --------------------------------------------------------------------------------


def treshape(op: d.TReshapeOp, slot: Slot) -> Fn:
    src, res = slot(op.src), slot(op.result)
    rt = op.result.type
    shape = rt.shape
    vr, vc = rt.valid
    fortran = not rt.is_row_major and not rt.is_boxed
    space = rt.space
    name = op.result.name_hint or ""

    def fn(vals):
        t = vals[src]
        data = t.data
        src_f = data.flags.f_contiguous and not data.flags.c_contiguous
        if not (data.flags.c_contiguous or data.flags.f_contiguous):
            raise SimError(f"treshape of a non-contiguous view of %{t.name} ({data.shape} window): no flat storage to alias")
        flat = data.reshape(-1, order="F" if src_f else "C")
        new = flat.reshape(shape, order="F" if fortran else "C")
        if not np.shares_memory(new, data):
            raise SimError("treshape could not alias the source storage")
        r = vr if vr != d.DYN else shape[0]
        c = vc if vc != d.DYN else shape[1]
        vals[res] = Tile(new, r, c, t.root, name or t.name, space)

    return fn


def subview(op: d.SubviewOp, slot: Slot) -> Fn:
    src, res, row_s, col_s = slot(op.src), slot(op.result), slot(op.row), slot(op.col)
    rt = op.result.type
    rows, cols = rt.shape
    vr, vc = rt.valid
    space = rt.space
    name = op.result.name_hint or ""

    def fn(vals):
        t = vals[src]
        r, c = vals[row_s], vals[col_s]
        full_r, full_c = t.data.shape
        if r < 0 or c < 0 or r + rows > full_r or c + cols > full_c:
            raise SimError(
                f"subview window rows [{r}, {r + rows}) x cols [{c}, {c + cols}) exceeds the "
                f"{full_r}x{full_c} source %{t.name}"
            )
        window = t.data[r : r + rows, c : c + cols]
        vals[res] = Tile(window, rows if vr == d.DYN else vr, cols if vc == d.DYN else vc, t.root, name or t.name, space)

    return fn


# Matmul --------------------------------------------------------------------------------


def _as_f32(a: np.ndarray, scratch: dict, key: str) -> torch.Tensor:
    """An f32 torch view of `a` (converted into a reusable scratch buffer when needed)."""
    if a.dtype == F32:
        return torch.from_numpy(a)
    buf = scratch.get(key)
    if buf is None or buf.shape != a.shape:
        buf = scratch[key] = torch.empty(a.shape, dtype=torch.float32)
    return buf.copy_(torch.from_numpy(a))


def tmatmul(op, slot: Slot, accumulate: bool) -> Fn:
    """C = A @ B (or C_in + A @ B) with f16 operands widened to f32 and f32 accumulation."""
    a_s, b_s, c_s = slot(op.lhs), slot(op.rhs), slot(op.dst)
    cin_s = slot(op.acc_in) if accumulate else -1
    scratch: dict = {}

    def fn(vals):
        a, b, c = vals[a_s], vals[b_s], vals[c_s]
        m, k = a.vr, a.vc
        n = b.vc
        if b.vr < k:
            raise SimError(f"matmul: rhs has {b.vr} valid rows, lhs has k={k} valid columns")
        ta = _as_f32(a.v, scratch, "a")
        tb = _as_f32(b.data[:k, :n], scratch, "b")
        out = c.data[:m, :n]
        if out.dtype != F32:
            raise SimError(f"matmul: accumulator dtype {out.dtype} is not f32")
        tc = torch.from_numpy(out)
        if accumulate:
            cin = vals[cin_s].data[:m, :n]
            if cin is not out and not np.shares_memory(cin, out):
                tc.copy_(torch.from_numpy(cin))
            tc.addmm_(ta, tb)
        elif out.flags.c_contiguous:
            torch.mm(ta, tb, out=tc)
        else:
            tc.copy_(torch.mm(ta, tb))

    return fn


# Vector ops --------------------------------------------------------------------------------

BINARY = {
    d.TAddOp: np.add,
    d.TSubOp: np.subtract,
    d.TMulOp: np.multiply,
    d.TDivOp: np.divide,
    d.TMaxOp: np.maximum,
    d.TMinOp: np.minimum,
}


def binary(op, slot: Slot) -> Fn:
    ufunc = BINARY[type(op)]
    a, b, dst = slot(op.lhs), slot(op.rhs), slot(op.dst)

    def fn(vals):
        ufunc(vals[a].v, vals[b].v, out=vals[dst].v)

    return fn


def _rsqrt(x, out):
    np.sqrt(x, out=out)
    np.divide(1, out, out=out)


def _relu(x, out):
    np.maximum(x, 0, out=out)


UNARY = {
    d.TExpOp: np.exp,
    d.TLogOp: np.log,
    d.TSqrtOp: np.sqrt,
    d.TRsqrtOp: _rsqrt,
    d.TRecipOp: np.reciprocal,
    d.TAbsOp: np.abs,
    d.TNegOp: np.negative,
    d.TReluOp: _relu,
}


def unary(op, slot: Slot) -> Fn:
    f = UNARY[type(op)]
    a, dst = slot(op.src), slot(op.dst)

    def fn(vals):
        f(vals[a].v, out=vals[dst].v)

    return fn


SCALAR = {
    d.TAddsOp: np.add,
    d.TSubsOp: np.subtract,
    d.TMulsOp: np.multiply,
    d.TDivsOp: np.divide,
    d.TMaxsOp: np.maximum,
    d.TMinsOp: np.minimum,
}


def scalar(op, slot: Slot) -> Fn:
    ufunc = SCALAR[type(op)]
    ins = op.ins_values()
    scalar_first = not isinstance(ins[0].type, d.TileBufType)
    tile_v, scalar_v = (ins[1], ins[0]) if scalar_first else (ins[0], ins[1])
    a, s, dst = slot(tile_v), slot(scalar_v), slot(op.dst)
    cast = np_dtype(tile_v.type.dtype).type  # the scalar is passed as the tile's element type

    if scalar_first:

        def fn(vals):
            ufunc(cast(vals[s]), vals[a].v, out=vals[dst].v)

    else:

        def fn(vals):
            ufunc(vals[a].v, cast(vals[s]), out=vals[dst].v)

    return fn


def texpands(op: d.TExpandsOp, slot: Slot) -> Fn:
    s, dst = slot(op.scalar), slot(op.dst)

    def fn(vals):
        vals[dst].v.fill(vals[s])

    return fn


REDUCE = {d.TRowMaxOp: np.max, d.TRowSumOp: np.sum, d.TRowMinOp: np.min}


def row_reduce(op, slot: Slot) -> Fn:
    f = REDUCE[type(op)]
    src, dst = slot(op.src), slot(op.dst)
    dst_row_major = op.dst.type.is_row_major

    def fn(vals):
        s, t = vals[src], vals[dst]
        out = t.v if not dst_row_major else t.v[:, :1]
        if out.shape[0] != s.vr:
            raise _shape_error("dst valid rows vs src valid rows", (out.shape[0],), (s.vr,))
        f(s.v, axis=1, keepdims=True, out=out)

    return fn


def _expdif(a, col, out):
    np.subtract(a, col, out=out)
    np.exp(out, out=out)


ROW_EXPAND = {
    d.TRowExpandSubOp: np.subtract,
    d.TRowExpandMulOp: np.multiply,
    d.TRowExpandDivOp: np.divide,
    d.TRowExpandAddOp: np.add,
    d.TRowExpandMaxOp: np.maximum,
    d.TRowExpandMinOp: np.minimum,
    d.TRowExpandExpdifOp: _expdif,
}


def row_expand(op, slot: Slot) -> Fn:
    f = ROW_EXPAND[type(op)]
    a, c, dst = slot(op.src), slot(op.col), slot(op.dst)
    # A row_major per-row operand holds 32/sizeof(T) copies of each row's scalar: use column 0.
    col_row_major = op.col.type.is_row_major

    def fn(vals):
        col = vals[c].v
        if col_row_major:
            col = col[:, :1]
        f(vals[a].v, col, out=vals[dst].v)

    return fn


# tcvt --------------------------------------------------------------------------------


def _directed_float(x: np.ndarray, dt: np.dtype, mode: str) -> np.ndarray:
    """Round float array x to the narrower float dtype dt with rounding `mode`."""
    with np.errstate(over="ignore"):
        y = x.astype(dt)
    if mode in ("CAST_RINT", "RINT", "NONE"):
        return y
    xd = x.astype(np.float64)
    yd = y.astype(np.float64)
    inf = dt.type(np.inf)
    if mode in ("TRUNC", "ODD"):
        fix = np.abs(yd) > np.abs(xd)
        y[fix] = np.nextafter(y[fix], dt.type(0))
        if mode == "ODD":
            inexact = y.astype(np.float64) != xd
            inexact &= np.isfinite(xd)
            bits = y.view(np.uint16 if dt.itemsize == 2 else np.uint32)
            bits[inexact] |= 1
    elif mode == "FLOOR":
        fix = yd > xd
        y[fix] = np.nextafter(y[fix], -inf)
    elif mode == "CEIL":
        fix = yd < xd
        y[fix] = np.nextafter(y[fix], inf)
    elif mode == "ROUND":
        towards = np.where(xd > yd, inf, -inf).astype(dt)
        other = np.nextafter(y, towards)
        tie = (xd != yd) & (np.abs(other.astype(np.float64) - xd) == np.abs(yd - xd))
        pick = tie & (np.abs(other) > np.abs(y))
        y[pick] = other[pick]
    else:
        raise SimError(f"tcvt: unknown round mode {mode}")
    return y


_INT_ROUND = {
    "CAST_RINT": np.rint,
    "RINT": np.rint,
    "NONE": np.rint,
    "TRUNC": np.trunc,
    "FLOOR": np.floor,
    "CEIL": np.ceil,
    "ROUND": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
}


def tcvt(op: d.TCvtOp, slot: Slot) -> Fn:
    src, dst = slot(op.src), slot(op.dst)
    st, dt = np_dtype(op.src.type.dtype), np_dtype(op.dst.type.dtype)
    mode = op.rmode.data
    if st.kind == "f" and dt.kind == "f" and dt.itemsize < st.itemsize and mode not in ("CAST_RINT", "RINT", "NONE"):

        def fn(vals):
            vals[dst].v[...] = _directed_float(vals[src].v, dt, mode)

    elif st.kind == "f" and dt.kind in "iu":
        if mode == "ODD":
            raise SimError("tcvt: round mode ODD applies to float narrowing only")
        rnd = _INT_ROUND[mode]

        def fn(vals):
            np.copyto(vals[dst].v, rnd(vals[src].v), casting="unsafe")

    else:

        def fn(vals):
            copy_cast(vals[dst].v, vals[src].v)

    return fn


FACTORIES: dict[type, Callable[..., Fn]] = {
    d.MakeTensorViewOp: make_tensor_view,
    d.PartitionViewOp: partition_view,
    d.TLoadOp: tload,
    d.TStoreOp: tstore,
    d.TMovOp: tmov,
    d.TReshapeOp: treshape,
    d.SubviewOp: subview,
    d.TMatmulOp: lambda op, slot: tmatmul(op, slot, False),
    d.TMatmulAccOp: lambda op, slot: tmatmul(op, slot, True),
    d.TExpandsOp: texpands,
    d.TCvtOp: tcvt,
    **{cls: binary for cls in BINARY},
    **{cls: unary for cls in UNARY},
    **{cls: scalar for cls in SCALAR},
    **{cls: row_reduce for cls in REDUCE},
    **{cls: row_expand for cls in ROW_EXPAND},
}
