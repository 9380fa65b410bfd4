"""Semantics of the tile and GM-view ops, compiled to closures over a value array.

Each factory takes the op and a `slot(value) -> int` function and returns
`fn(vals)`, which reads its operands from `vals[slot]` and writes only the
destination's valid region (docs/sources.md §3.3-3.4). Shapes, dtypes and ufuncs are resolved
here, once; at run time a closure does a few list loads and one or two numpy calls.
`@semantics(...)` registers a factory for its op classes (`ptofa.sim.registry`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ptofa.ir import dialect as d
from ptofa.sim.errors import SimError
from ptofa.sim.memory import BF16, GmView, Tile, bf16_decode, bf16_encode, elem_np_dtype
from ptofa.sim.registry import semantics

Fn = Callable[[list], object]
Slot = Callable[[object], int]

F32 = np.dtype(np.float32)


def np_dtype(t) -> np.dtype:
    return elem_np_dtype(d.elem_name(t))


_FLOATS = (np.dtype(np.float16), np.dtype(np.float32))


def as_float(a: np.ndarray) -> np.ndarray:
    """`a` itself, or the f32 values of a bf16 array (exact)."""
    return bf16_decode(a) if a.dtype == BF16 else a


def copy_cast(dst: np.ndarray, src: np.ndarray, mode: str = "CAST_RINT") -> None:
    """dst[...] = src with dtype conversion (narrowing to f16 / bf16 rounds to nearest even).

    numpy's f16 <-> f32 casts run at ~2 ns per element; torch's use F16C and are
    ~15x faster, which matters for matmul operands and P tiles.
    """
    if dst.shape != src.shape:
        raise _shape_error("copy: destination vs source", dst.shape, src.shape)
    if dst.dtype == src.dtype:
        np.copyto(dst, src)
    elif dst.dtype == BF16:
        bf16_encode(as_float(src), dst, mode)
    elif src.dtype == BF16:
        copy_cast(dst, bf16_decode(src), mode)
    elif dst.dtype in _FLOATS and src.dtype in _FLOATS:
        torch.from_numpy(dst).copy_(torch.from_numpy(src))
    else:
        np.copyto(dst, src, casting="unsafe")


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def copy_bits(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src's bytes element by element (a DMA copy: same element size, no conversion)."""
    if dst.shape != src.shape:
        raise _shape_error("copy: destination vs source", dst.shape, src.shape)
    if dst.dtype == src.dtype:
        np.copyto(dst, src)
    else:
        u = _UINT[dst.dtype.itemsize]
        np.copyto(dst.view(u), src.view(u))


def fill_value(dst: np.ndarray, value: float) -> None:
    """Every element of `dst` = value, converted to its dtype (bf16: rounded to nearest even)."""
    if dst.dtype == BF16:
        bf16_encode(np.full(dst.shape, value, np.float32), dst)
    else:
        dst.fill(value)


def _shape_error(what: str, got, want) -> SimError:
    return SimError(f"shape agreement: {what} {'x'.join(map(str, got))} != {'x'.join(map(str, want))}")


def _same_valid(what: str, *tiles: Tile) -> None:
    """Runtime valid shapes of `tiles` agree (numpy would broadcast a 1-row tile silently)."""
    first = tiles[0].v.shape
    for t in tiles[1:]:
        if t.v.shape != first:
            raise SimError(f"shape agreement: {what}: runtime valid shapes {'x'.join(map(str, first))} "
                           f"(%{tiles[0].name}) and {'x'.join(map(str, t.v.shape))} (%{t.name}) differ")


# GM views --------------------------------------------------------------------------------


@semantics(d.MakeTensorViewOp)
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


@semantics(d.PartitionViewOp)
def partition_view(op: d.PartitionViewOp, slot: Slot) -> Fn:
    src, res = slot(op.source), slot(op.result)
    off_s = [slot(v) for v in op.offsets]
    size_s = [slot(v) for v in op.sizes]
    static = [(i, n) for i, n in enumerate(op.result.type.dims) if n != d.DYN]

    def fn(vals):
        tv = vals[src]
        offs = [vals[s] for s in off_s]
        sizes = tuple([vals[s] for s in size_s])
        delta = 0
        for o, n, dim, st in zip(offs, sizes, tv.shape, tv.strides):
            if o < 0 or n < 0 or o + n > dim:
                raise _partition_error(tv, offs, sizes)
            delta += o * st
        for i, n in static:
            if sizes[i] != n:
                raise SimError(f"partition size {sizes[i]} of dim {i} != {n} in the result type")
        vals[res] = GmView(tv.buf, tv.offset + delta * tv.dtype.itemsize, tv.dtype, sizes, tv.strides, tv.slot)

    return fn


def _partition_error(tv: GmView, offs: list, sizes: tuple) -> SimError:
    """The first dim whose window [offset, offset + size) leaves the view."""
    for i, (o, n, dim) in enumerate(zip(offs, sizes, tv.shape)):
        if o < 0 or n < 0 or o + n > dim:
            return SimError(f"partition out of the view: dim {i} window [{o}, {o + n}) of a view with dim {dim} "
                            f"(view shape {list(tv.shape)}, offsets {offs}, sizes {list(sizes)})")
    raise AssertionError("no dim leaves the view")


def _collapse(shape: tuple) -> tuple[int, int]:
    rows = 1
    for n in shape[:-1]:
        rows *= n
    return rows, shape[-1]


def _transfer_shape(what: str, view: GmView, tile: Tile) -> tuple[int, int]:
    """The partition as rows x cols; it must equal the tile's runtime valid shape, and be non-empty
    (pto-isa asserts valid dims > 0 in TLOAD / TSTORE)."""
    shape = _collapse(view.shape)
    if shape != (tile.vr, tile.vc):
        raise SimError(
            f"shape agreement: {what}: the partition is {'x'.join(map(str, view.shape))} (as {shape[0]}x{shape[1]}) "
            f"at run time but tile %{tile.name} has valid shape {tile.vr}x{tile.vc}; they must be equal "
            "(set a dynamic tile's valid shape with alloc_tile valid_row/valid_col or pto.set_validshape)"
        )
    if 0 in shape:
        raise SimError(f"{what}: a {shape[0]}x{shape[1]} transfer (valid shape of %{tile.name}); pto-isa asserts "
                       "that the valid rows and cols are > 0 on hardware")
    return shape


@semantics(d.TLoadOp)
def tload(op: d.TLoadOp, slot: Slot) -> Fn:
    """A DMA copy of the partition into the tile's valid region (no dtype conversion)."""
    src, dst = slot(op.src), slot(op.dst)

    def fn(vals):
        view = vals[src]
        tile = vals[dst]
        shape = _transfer_shape("tload", view, tile)
        a = view.array()
        if a.ndim != 2:
            a = a.reshape(shape)
        copy_bits(tile.v, a)

    return fn


@semantics(d.TStoreOp)
def tstore(op: d.TStoreOp, slot: Slot) -> Fn:
    """The tile's valid region to the partition: a copy from vec / mat, a conversion from acc
    (FIX: f32 -> f16 / bf16 rounds to nearest even); `atomic_add` adds into GM instead."""
    if op.reluPreMode is not None:
        raise SimError(f"{op.name}: reluPreMode is not simulated")
    if op.fp is not None or op.pre_quant is not None:
        raise SimError(f"{op.name}: the quantizing FIX store (fp / preQuantScalar) is not simulated")
    src, dst = slot(op.src), slot(op.dst)
    convert = op.src.type.space == "acc"
    atomic = op.atomic_add

    def fn(vals):
        tile = vals[src]
        view = vals[dst]
        _transfer_shape("tstore", view, tile)
        a = view.array()
        v = tile.v
        if a.ndim != 2:
            v = v.reshape(a.shape)
        if atomic:
            _atomic_add(a, v)
        elif convert:
            copy_cast(a, v)
        else:
            copy_bits(a, v)

    return fn


def _atomic_add(gm: np.ndarray, v: np.ndarray) -> None:
    """gm += v: float sums in f32 (rounded back to an f16 / bf16 GM tensor), integers in the GM dtype."""
    if gm.dtype.kind in "iu":
        np.add(gm, v.astype(gm.dtype), out=gm, casting="unsafe")
        return
    total = as_float(gm).astype(np.float32) + as_float(v).astype(np.float32)
    copy_cast(gm, total)


@semantics(d.TMovOp)
def tmov(op: d.TMovOp, slot: Slot) -> Fn:
    if op.reluPreMode is not None:
        raise SimError(f"{op.name}: reluPreMode is not simulated")
    if op.fp is not None or op.pre_quant is not None:
        raise SimError(f"{op.name}: the quantizing FIX move (fp / preQuantScalar) is not simulated")
    if (op.src.type.space, op.dst.type.space) == ("acc", "vec"):
        raise SimError(f"{op.name}: acc -> vec (accToVecMode) is not simulated: pto-isa's A2/A3 TMOV has no such path")
    src, dst = slot(op.src), slot(op.dst)

    def fn(vals):
        s, t = vals[src], vals[dst]
        _same_valid("tmov src vs dst", s, t)
        copy_cast(t.v, s.v)

    return fn


# Tile aliases --------------------------------------------------------------------------------


@semantics(d.TReshapeOp)
def treshape(op: d.TReshapeOp, slot: Slot) -> Fn:
    src, res = slot(op.src), slot(op.result)
    rt = op.result.type
    shape = rt.shape
    vr, vc = rt.valid
    fortran = not rt.is_row_major and not rt.is_boxed
    space = rt.space
    name = op.result.name_hint or ""
    elem = np_dtype(rt.dtype)

    def fn(vals):
        t = vals[src]
        data = t.data
        src_f = data.flags.f_contiguous and not data.flags.c_contiguous
        if not (data.flags.c_contiguous or data.flags.f_contiguous):
            raise SimError(f"treshape of a non-contiguous view of %{t.name} ({data.shape} window): no flat storage to alias")
        flat = data.reshape(-1, order="F" if src_f else "C")
        if flat.dtype != elem:  # a view in another element type of the same bytes (f32 scratch as i32)
            flat = flat.view(elem)
        new = flat.reshape(shape, order="F" if fortran else "C")
        if not np.shares_memory(new, data):
            raise SimError("treshape could not alias the source storage")
        r = vr if vr != d.DYN else shape[0]
        c = vc if vc != d.DYN else shape[1]
        vals[res] = Tile(new, r, c, t.root, name or t.name, space)

    return fn


@semantics(d.SubviewOp)
def subview(op: d.SubviewOp, slot: Slot) -> Fn:
    src, res, row_s, col_s = slot(op.src), slot(op.result), slot(op.row), slot(op.col)
    rt = op.result.type
    rows, cols = rt.shape
    vr, vc = rt.valid
    space = rt.space
    name = op.result.name_hint or ""
    valid = [slot(v) for v in op.valid]

    def fn(vals):
        t = vals[src]
        r, c = vals[row_s], vals[col_s]
        if valid:  # `valid [%vr, %vc]`: the window's runtime valid shape
            return _subview_valid(vals, t, r, c, rows, cols, [vals[v] for v in valid], res, name, space)
        full_r, full_c = t.data.shape
        if r < 0 or c < 0 or r + rows > full_r or c + cols > full_c:
            raise SimError(
                f"subview window rows [{r}, {r + rows}) x cols [{c}, {c + cols}) exceeds the "
                f"{full_r}x{full_c} source %{t.name}"
            )
        window = t.data[r : r + rows, c : c + cols]
        vals[res] = Tile(window, rows if vr == d.DYN else vr, cols if vc == d.DYN else vc, t.root, name or t.name, space)

    return fn


def _subview_valid(vals, t, r, c, rows, cols, valid, res, name, space) -> None:
    full_r, full_c = t.data.shape
    if r < 0 or c < 0 or r + rows > full_r or c + cols > full_c:
        raise SimError(f"subview window rows [{r}, {r + rows}) x cols [{c}, {c + cols}) exceeds the {full_r}x{full_c} source %{t.name}")
    vr, vc = valid
    if not (0 <= vr <= rows and 0 <= vc <= cols):
        raise SimError(f"subview valid {vr}x{vc} exceeds the {rows}x{cols} window of %{t.name}")
    vals[res] = Tile(t.data[r : r + rows, c : c + cols], vr, vc, t.root, name or t.name, space)


# Matmul --------------------------------------------------------------------------------


def _as_f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(bf16_decode(a) if a.dtype == BF16 else a).double()


@semantics(d.TMatmulOp, d.TMatmulAccOp)
def tmatmul(op, slot: Slot) -> Fn:
    """C[:m, :n] = A @ B (or C_in + A @ B), m, k = lhs valid rows / cols, n = rhs valid cols;
    f16 / bf16 operands accumulate in f32 (i8 in i32); the rest of C is left untouched.

    Each element is the f64 sum of its K exact products (f16 / bf16 products are exact; the sum is
    exact unless the products span more than f64's 53 bits), plus C_in, rounded once to f32: a value
    of row i of A and column j of B alone, whatever M and N. That is the property the backward's
    D = diag(dO O^T) rests on (`kernels/fa_bwd.py`: it must equal dP = dO V^T bit for bit where
    O = V): one Mmad instruction (Ascend C API reference, "Mmad") takes K whole for every element of
    its [M, N] result, so the cube's K order does not depend on M or N (assumed, not measured on an
    NPU). A CPU BLAS f32 GEMM's does: its K blocking and vector paths change with the shape, and one
    column against N = 64 columns gives other low bits.
    """
    accumulate = isinstance(op, d.TMatmulAccOp)
    a_s, b_s, c_s = slot(op.lhs), slot(op.rhs), slot(op.dst)
    cin_s = slot(op.acc_in) if accumulate else -1
    integer = d.elem_name(op.dst.type.dtype) == "i32"

    def fn(vals):
        a, b, c = vals[a_s], vals[b_s], vals[c_s]
        m, k = a.vr, a.vc
        n = b.vc
        if b.vr < k:
            raise SimError(f"matmul: rhs %{b.name} has {b.vr} valid rows, lhs %{a.name} has k={k} valid columns")
        if m > c.data.shape[0] or n > c.data.shape[1]:
            raise SimError(f"matmul: the {m}x{n} result does not fit the {c.data.shape[0]}x{c.data.shape[1]} dst %{c.name}")
        out = c.data[:m, :n]
        if integer:
            prod = a.v.astype(np.int64) @ b.data[:k, :n].astype(np.int64)
            if accumulate:
                prod += vals[cin_s].data[:m, :n]
            np.copyto(out, prod, casting="unsafe")
            return
        if out.dtype != F32:
            raise SimError(f"matmul: accumulator dtype {out.dtype} is not f32")
        prod = torch.mm(_as_f64(a.v), _as_f64(b.data[:k, :n]))
        if accumulate:
            prod += torch.from_numpy(vals[cin_s].data[:m, :n])
        np.copyto(out, prod.numpy(), casting="same_kind")

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


@semantics(*BINARY)
def binary(op, slot: Slot) -> Fn:
    ufunc = BINARY[type(op)]
    a, b, dst = slot(op.lhs), slot(op.rhs), slot(op.dst)

    def fn(vals):
        x, y, t = vals[a], vals[b], vals[dst]
        if not (x.v.shape == y.v.shape == t.v.shape):
            _same_valid(op.name, x, y, t)
        ufunc(x.v, y.v, out=t.v)

    return fn


def _rsqrt(x, out):
    np.sqrt(x, out=out)
    np.divide(1, out, out=out)


def _relu(x, out):
    np.maximum(x, 0, out=out)


def _f16_exp_table() -> np.ndarray:
    """exp of every f16 bit pattern, as numpy's f16 exp computes it (in f32, rounded to f16)."""
    with np.errstate(over="ignore", invalid="ignore"):  # (inf and NaN patterns)
        return np.exp(np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16))


_EXP_F16 = _f16_exp_table()


def _exp(x, out):
    """np.exp; an f16 tile by table lookup of its bit patterns (bit-identical to np.exp on f16,
    which converts every element to f32 and back, several times slower)."""
    if x.dtype == np.float16 and out.dtype == np.float16:
        np.take(_EXP_F16, x.view(np.uint16), out=out, mode="clip")
    else:
        np.exp(x, out=out)


UNARY = {
    d.TExpOp: _exp,
    d.TLogOp: np.log,
    d.TSqrtOp: np.sqrt,
    d.TRsqrtOp: _rsqrt,
    d.TRecipOp: np.reciprocal,
    d.TAbsOp: np.abs,
    d.TNegOp: np.negative,
    d.TReluOp: _relu,
}


@semantics(*UNARY)
def unary(op, slot: Slot) -> Fn:
    f = UNARY[type(op)]
    a, dst = slot(op.src), slot(op.dst)

    def fn(vals):
        x, t = vals[a], vals[dst]
        if x.v.shape != t.v.shape:
            _same_valid(op.name, x, t)
        f(x.v, out=t.v)

    return fn


SCALAR = {
    d.TAddsOp: np.add,
    d.TSubsOp: np.subtract,
    d.TMulsOp: np.multiply,
    d.TDivsOp: np.divide,
    d.TMaxsOp: np.maximum,
    d.TMinsOp: np.minimum,
}


@semantics(*SCALAR)
def scalar(op, slot: Slot) -> Fn:
    ufunc = SCALAR[type(op)]
    ins = op.ins_values()
    scalar_first = not isinstance(ins[0].type, d.TileBufType)
    tile_v, scalar_v = (ins[1], ins[0]) if scalar_first else (ins[0], ins[1])
    a, s, dst = slot(tile_v), slot(scalar_v), slot(op.dst)
    cast = np_dtype(tile_v.type.dtype).type  # the scalar is passed as the tile's element type

    name = op.name
    if scalar_first:

        def fn(vals):
            x, t = vals[a], vals[dst]
            if x.v.shape != t.v.shape:
                _same_valid(name, x, t)
            ufunc(cast(vals[s]), x.v, out=t.v)

    else:

        def fn(vals):
            x, t = vals[a], vals[dst]
            if x.v.shape != t.v.shape:
                _same_valid(name, x, t)
            ufunc(x.v, cast(vals[s]), out=t.v)

    return fn


@semantics(d.TExpandsOp)
def texpands(op: d.TExpandsOp, slot: Slot) -> Fn:
    s, dst = slot(op.scalar), slot(op.dst)

    def fn(vals):
        fill_value(vals[dst].v, vals[s])

    return fn


# What to change when a per-row [R, 1] operand and its [R, C] tile disagree on valid rows at run
# time: the usual cause is a ragged last chunk whose data tile is dynamic and whose statistic is not.
RAGGED_ROWS_ADVICE = ("a [R, 1] per-row tile must have the valid rows of the tile it reduces or expands: give it a "
                      "dynamic valid shape (valid=?x?) and set_validshape it with the same rows (ptofa rule 'ragged rows')")

REDUCE = {d.TRowMaxOp: np.max, d.TRowSumOp: np.sum, d.TRowMinOp: np.min}


@semantics(*REDUCE)
def row_reduce(op, slot: Slot) -> Fn:
    f = REDUCE[type(op)]
    src, dst = slot(op.src), slot(op.dst)
    dst_row_major = op.dst.type.is_row_major

    def fn(vals):
        s, t = vals[src], vals[dst]
        out = t.v if not dst_row_major else t.v[:, :1]
        if out.shape[0] != s.vr:
            raise SimError(f"shape agreement: {op.name}: dst %{t.name} has {out.shape[0]} valid rows, src %{s.name} "
                           f"{s.vr}; {RAGGED_ROWS_ADVICE}")
        if s.vr == 0 or s.vc == 0:
            raise SimError(f"row reduction of %{s.name} with valid shape {s.vr}x{s.vc}: the valid dims must be non-zero")
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


@semantics(*ROW_EXPAND)
def row_expand(op, slot: Slot) -> Fn:
    f = ROW_EXPAND[type(op)]
    a, c, dst = slot(op.src), slot(op.col), slot(op.dst)
    # A row_major per-row operand holds 32/sizeof(T) copies of each row's scalar: use column 0.
    col_row_major = op.col.type.is_row_major
    block = 32 // np.dtype(np_dtype(op.col.type.dtype)).itemsize

    def fn(vals):
        x, t, cv = vals[a], vals[dst], vals[c]
        col = cv.v
        if col_row_major:
            if cv.vc != block:
                raise SimError(f"{op.name}: a row-major per-row operand is one 32-byte block ({block} elements) per row in "
                               f"pto-isa's mode 2; %{cv.name} has {cv.vc} valid columns, which ptoas compiles but the "
                               "simulator does not model (use a DN [R,1] column)")
            col = col[:, :1]
        if x.v.shape != t.v.shape:
            _same_valid(op.name, x, t)
        if col.shape[0] != t.vr or col.shape[1] != 1:
            raise SimError(f"shape agreement: {op.name}: per-row operand %{cv.name} has valid shape "
                           f"{cv.vr}x{cv.vc}, the tile has {t.vr} valid rows; {RAGGED_ROWS_ADVICE}")
        f(x.v, col, out=t.v)

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


@semantics(d.TCvtOp)
def tcvt(op: d.TCvtOp, slot: Slot) -> Fn:
    """dst = cast(src) on the valid region; narrowing rounds with the op's mode (bf16 and f16:
    round-to-nearest-even for CAST_RINT / RINT / NONE)."""
    src, dst = slot(op.src), slot(op.dst)
    st, dt = np_dtype(op.src.type.dtype), np_dtype(op.dst.type.dtype)
    mode = op.round_mode
    if mode not in d.ROUND_MODES or op.sat_mode is not None:
        raise SimError(f"tcvt: round mode {mode} with satmode {op.sat_mode} is not simulated")
    s_float = st.kind == "f" or st == BF16
    if dt == BF16:

        def convert(x, out):
            bf16_encode(as_float(x), out, mode)

    elif s_float and dt.kind == "f" and (dt.itemsize < st.itemsize or st == BF16) and mode not in ("CAST_RINT", "RINT", "NONE"):

        def convert(x, out):
            out[...] = _directed_float(as_float(x), dt, mode)

    elif s_float and dt.kind in "iu":
        if mode == "ODD":
            raise SimError("tcvt: round mode ODD applies to float narrowing only")
        rnd = _INT_ROUND[mode]

        def convert(x, out):
            np.copyto(out, rnd(as_float(x)), casting="unsafe")

    else:

        def convert(x, out):
            copy_cast(out, x)

    def fn(vals):
        s, t = vals[src], vals[dst]
        if s.v.shape != t.v.shape:
            _same_valid("tcvt src vs dst", s, t)
        convert(s.v, t.v)

    return fn



# Masks, iota, column broadcasts, padding, valid shapes (docs/sources.md §3.3) ----------------


@semantics(d.SetValidShapeOp)
def set_validshape(op: d.SetValidShapeOp, slot: Slot) -> Fn:
    """Set the runtime valid shape of the tile in place (every later op sees it)."""
    t, r, c = slot(op.source), slot(op.valid_row), slot(op.valid_col)

    def fn(vals):
        vals[t].set_valid(vals[r], vals[c])

    return fn


COL_EXPAND = {
    d.TColExpandAddOp: np.add,
    d.TColExpandSubOp: np.subtract,
    d.TColExpandMulOp: np.multiply,
    d.TColExpandDivOp: np.divide,
    d.TColExpandMaxOp: np.maximum,
    d.TColExpandMinOp: np.minimum,
}


@semantics(*COL_EXPAND)
def col_expand(op, slot: Slot) -> Fn:
    """dst[r][c] = f(src[r][c], row[0][c]) on the valid region."""
    f = COL_EXPAND[type(op)]
    a, r, dst = slot(op.src), slot(op.row), slot(op.dst)
    name = op.name

    def fn(vals):
        x, rv, t = vals[a], vals[r], vals[dst]
        if x.v.shape != t.v.shape:
            _same_valid(name, x, t)
        if rv.vr < 1 or rv.vc != t.vc:
            raise SimError(f"shape agreement: {name}: the row operand %{rv.name} has valid shape {rv.vr}x{rv.vc}, "
                           f"the tile has {t.vc} valid columns")
        f(x.v, rv.v[:1], out=t.v)

    return fn


def pad_value(dtype: np.dtype, pad: int):
    """The fill value of tile pad `pad` (1 zero, 2 max, 3 min): floats +-inf, integers their limits."""
    if pad == 1:
        return 0
    big = pad == 2
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if big else info.min
    return np.inf if big else -np.inf


@semantics(d.TFillPadOp)
def tfillpad(op: d.TFillPadOp, slot: Slot) -> Fn:
    """dst[:vr, :vc] = src's valid region; the rest of dst's physical tile = dst's pad value."""
    src, dst = slot(op.src), slot(op.dst)
    dt = op.dst.type
    pad = pad_value(np_dtype(dt.dtype), dt.pad.data)

    def fn(vals):
        s, t = vals[src], vals[dst]
        vr, vc = s.vr, s.vc
        rows, cols = t.data.shape
        if vr > rows or vc > cols:
            raise SimError(f"tfillpad: src %{s.name} valid shape {vr}x{vc} exceeds the {rows}x{cols} dst %{t.name}")
        copy_bits(t.data[:vr, :vc], s.v)
        fill_value(t.data[vr:, :], pad)
        fill_value(t.data[:vr, vc:], pad)

    return fn
