"""Semantics of the tile-window, element, transpose, gather and print ops
(`ptofa.ir.dialect.tileaccess`), in the style of `ptofa.sim.tileops`: a factory per op
class that resolves shapes once and returns `fn(vals)`."""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim.errors import SimError
from ptofa.sim.registry import semantics
from ptofa.sim.tileops import Fn, Slot, copy_bits, copy_cast, np_dtype


def _window(name: str, r: int, c: int, rows: int, cols: int, big, what: str):
    full_r, full_c = big.data.shape
    if r < 0 or c < 0 or r + rows > full_r or c + cols > full_c:
        raise SimError(f"{name}: window rows [{r}, {r + rows}) x cols [{c}, {c + cols}) exceeds the "
                       f"{full_r}x{full_c} {what} %{big.name}")
    return big.data[r : r + rows, c : c + cols]


def _plain_form_only(op) -> None:
    """textract / tinsert: the quantizing `fp` and `reluPreMode` forms are not simulated."""
    if op.fp is not None:
        raise SimError(f"{op.name}: the quantizing fp form is not simulated")
    if op.reluPreMode is not None:
        raise SimError(f"{op.name}: reluPreMode is not simulated")
    for key in ("accToVecMode", "tinsertMode"):
        if key in op.attributes:
            raise SimError(f"{op.name}: {key} (an A5 mode of ptoas) is not simulated")


@semantics(d.TExtractOp)
def textract(op: d.TExtractOp, slot: Slot) -> Fn:
    """dst's valid region = src[r : r + vr, c : c + vc] (acc -> mat casts f32 to f16/bf16)."""
    _plain_form_only(op)
    src, row, col, dst = slot(op.src), slot(op.index_row), slot(op.index_col), slot(op.dst)
    cast = op.src.type.dtype != op.dst.type.dtype
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        win = _window(name, vals[row], vals[col], t.vr, t.vc, s, "src")
        (copy_cast if cast else copy_bits)(t.v, win)

    return fn


@semantics(d.TInsertOp)
def tinsert(op: d.TInsertOp, slot: Slot) -> Fn:
    """dst[r : r + vr, c : c + vc] = src's valid region."""
    _plain_form_only(op)
    src, row, col, dst = slot(op.src), slot(op.index_row), slot(op.index_col), slot(op.dst)
    cast = op.src.type.dtype != op.dst.type.dtype
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        win = _window(name, vals[row], vals[col], s.vr, s.vc, t, "dst")
        (copy_cast if cast else copy_bits)(win, s.v)

    return fn


def _flat_index(name: str, tile, off: int) -> tuple[int, int]:
    rows, cols = tile.data.shape
    if not 0 <= off < rows * cols:
        raise SimError(f"{name}: offset {off} is outside the {rows}x{cols} tile %{tile.name}")
    return divmod(off, cols)


@semantics(d.TSetValOp)
def tsetval(op: d.TSetValOp, slot: Slot) -> Fn:
    """dst's element at row-major linear offset `off` = value."""
    off, val, dst = slot(op.offset), slot(op.value), slot(op.dst)
    name = op.name
    if d.elem_name(op.dst.type.dtype) == "bf16":
        raise SimError(f"{name}: bf16 tiles are not simulated")

    def fn(vals):
        t = vals[dst]
        i, j = _flat_index(name, t, vals[off])
        t.data[i, j] = vals[val]

    return fn


@semantics(d.TGetValOp)
def tgetval(op: d.TGetValOp, slot: Slot) -> Fn:
    src, off, res = slot(op.src), slot(op.offset), slot(op.result)
    name = op.name
    if d.elem_name(op.src.type.dtype) == "bf16":
        raise SimError(f"{name}: bf16 tiles are not simulated")
    is_float = d.elem_name(op.src.type.dtype).startswith("f")

    def fn(vals):
        t = vals[src]
        i, j = _flat_index(name, t, vals[off])
        x = t.data[i, j]
        vals[res] = float(x) if is_float else int(x)

    return fn


@semantics(d.TTransOp)
def ttrans(op: d.TTransOp, slot: Slot) -> Fn:
    """dst's valid region = src's valid region transposed."""
    src, dst = slot(op.src), slot(op.dst)
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        if (t.vr, t.vc) != (s.vc, s.vr):
            raise SimError(f"shape agreement: {name}: dst %{t.name} valid {t.vr}x{t.vc} is not the transpose of "
                           f"src %{s.name} valid {s.vr}x{s.vc}")
        copy_bits(t.v, s.v.T)

    return fn


# P0101 keeps elements 0 and 2 of each group of four (the pattern read right to left).
_PATTERN_KEEP = {p: [i for i in range(4) if p[4 - i] == "1"] for p in ("P0101", "P1010", "P0001", "P0010", "P0100", "P1000", "P1111")}


@semantics(d.TGatherOp)
def tgather(op: d.TGatherOp, slot: Slot) -> Fn:
    """Index form: dst[i, j] = src.flat[idx[i, j]] over src's storage (row-major); mask form:
    along the axis ("row": each row's columns, "col": each column's rows) the elements that the
    pattern keeps of each group of four, packed. The compare form is refused: pto-isa's
    TGATHER documents the index and mask forms only."""
    src, dst = slot(op.src), slot(op.dst)
    name = op.name
    if op.form == "compare":
        raise SimError(f"{name}: the compare form (outs(%dst, %cdst), a scalar k) is not simulated; pto-isa documents no semantics for it")
    if op.maskPattern is not None:
        pattern = op.maskPattern.value.data
        keep = _PATTERN_KEEP[pattern]
        by_rows = op.axis is not None and op.axis.data == "col"

        def fn_mask(vals):
            s, t = vals[src], vals[dst]
            sv = s.v.T if by_rows else s.v
            tv = t.v.T if by_rows else t.v
            picked = [j for j in range(sv.shape[1]) if j % 4 in keep]
            if tv.shape != (sv.shape[0], len(picked)):
                raise SimError(f"shape agreement: {name}: mask {pattern} keeps {len(picked)} of {sv.shape[1]} "
                               f"{'rows' if by_rows else 'columns'} of %{s.name}, dst %{t.name} has valid {t.vr}x{t.vc}")
            copy_bits(tv, sv[:, picked])

        return fn_mask
    idx = slot(op.indices)

    def fn(vals):
        s, i, t = vals[src], vals[idx], vals[dst]
        if i.v.shape != t.v.shape:
            raise SimError(f"shape agreement: {name}: indices %{i.name} valid {i.vr}x{i.vc} != dst %{t.name} valid {t.vr}x{t.vc}")
        flat = s.data.reshape(-1, order="C") if s.data.flags.c_contiguous else np.ascontiguousarray(s.data).reshape(-1)
        ix = i.v.astype(np.int64)
        if ix.size and (ix.min() < 0 or ix.max() >= flat.size):
            raise SimError(f"{name}: index {int(ix.max() if ix.max() >= flat.size else ix.min())} is outside "
                           f"the {s.data.shape[0]}x{s.data.shape[1]} src %{s.name}")
        copy_bits(t.v, flat[ix])

    return fn


@semantics(d.TGatherBOp)
def tgatherb(op: d.TGatherBOp, slot: Slot) -> Fn:
    """dst[i, j] = the dst-typed element at byte offset offsets[i, j] (uint32) of src's storage."""
    src, off, dst = slot(op.src), slot(op.offsets), slot(op.dst)
    name = op.name

    def fn(vals):
        s, o, t = vals[src], vals[off], vals[dst]
        if o.v.shape != t.v.shape:
            raise SimError(f"shape agreement: {name}: offsets %{o.name} valid {o.vr}x{o.vc} != dst %{t.name} valid {t.vr}x{t.vc}")
        order = "F" if s.data.flags.f_contiguous and not s.data.flags.c_contiguous else "C"
        raw = np.frombuffer(s.data.tobytes(order=order), dtype=np.uint8)
        size = t.data.dtype.itemsize
        ix = o.v.astype(np.int64) & 0xFFFFFFFF
        if ix.size and int(ix.max()) + size > raw.size:
            raise SimError(f"{name}: byte offset {int(ix.max())} reads past the {raw.size} bytes of src %{s.name}")
        picked = raw[ix[..., None] + np.arange(size)].reshape(ix.shape + (size,))
        t.v[...] = np.ascontiguousarray(picked).view(t.data.dtype).reshape(ix.shape)

    return fn


@semantics(d.TColExpandOp)
def tcolexpand(op: d.TColExpandOp, slot: Slot) -> Fn:
    """dst[i, j] = src[0, j] on dst's valid region."""
    src, dst = slot(op.src), slot(op.dst)
    name = op.name

    def fn(vals):
        s, t = vals[src], vals[dst]
        if s.vr < 1 or s.vc != t.vc:
            raise SimError(f"shape agreement: {name}: src %{s.name} valid {s.vr}x{s.vc}, dst %{t.name} has {t.vc} valid columns")
        copy_bits(t.v, np.broadcast_to(s.v[:1], t.v.shape))

    return fn


@semantics(d.TPrintOp)
def tprint(op: d.TPrintOp, slot: Slot) -> Fn:
    """Print the valid region, or a GM partition (the device's printf goes to the host's stdout).
    A tile printed through a GM scratch `tmp` (mat / acc) also leaves its data in `tmp` on the
    device, which the simulator does not model: that form is refused."""
    if op.tmp is not None:
        raise SimError(f"{op.name} with a tmp (a mat / acc tile printed through GM scratch) is not simulated")
    src = slot(op.src)
    if isinstance(op.src.type, d.PartitionTensorViewType):

        def fn_view(vals):
            a = vals[src].array()
            print(f"tprint {op.src.type}:\n{a}")

        return fn_view
    dtype = np_dtype(op.src.type.dtype)

    def fn(vals):
        t = vals[src]
        print(f"tprint %{t.name} [{t.vr}x{t.vc} {dtype}]:\n{t.v}")

    return fn


# Sections, reserved buffers, casts, barriers ------------------------------------------------


@semantics(d.ReserveBufferOp)
def reserve_buffer(op: d.ReserveBufferOp, slot: Slot) -> Fn:
    """The buffer's address: its explicit base, or 0 for an auto-placed one (the simulator
    gives local pipes no address space of their own)."""
    res = slot(op.result)
    base = op.base.value.data if op.base is not None else 0

    def fn(vals):
        vals[res] = base

    return fn


@semantics(d.ImportReservedBufferOp)
def import_reserved_buffer(op: d.ImportReservedBufferOp, slot: Slot) -> Fn:
    raise SimError(f"{op.name} (@{op.peer_func.root_reference.data} \"{op.buf_name.data}\"): local (reserved-buffer) "
                   "pipes are not simulated; ptofa runs global (gm_slot_tensor) pipes")


@semantics(d.CastPtrOp)
def castptr(op: d.CastPtrOp, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: an integer address as a pointer has no simulated memory behind it")


@semantics(d.BarrierOp)
def barrier(op: d.BarrierOp, slot: Slot) -> Fn:
    """The simulator runs each core's ops in order: every pipe has drained already."""

    def fn(vals):
        return None

    return fn


# Bitwise, shift, power and remainder ops (`ptofa.ir.dialect.intops`) ----------------------------

INT_UFUNCS = {
    d.TAndOp: np.bitwise_and, d.TOrOp: np.bitwise_or, d.TXorOp: np.bitwise_xor, d.TShlOp: np.left_shift,
    d.TShrOp: np.right_shift, d.TPowOp: np.power, d.TRemOp: np.remainder, d.TFModOp: np.fmod,
    d.TAndsOp: np.bitwise_and, d.TOrsOp: np.bitwise_or, d.TXorsOp: np.bitwise_xor, d.TShlsOp: np.left_shift,
    d.TShrsOp: np.right_shift, d.TPowsOp: np.power, d.TRemsOp: np.remainder, d.TFModsOp: np.fmod,
}


def _same_shapes(name: str, *tiles) -> None:
    if len({t.v.shape for t in tiles}) > 1:
        shapes = ", ".join(f"%{t.name} {t.vr}x{t.vc}" for t in tiles)
        raise SimError(f"shape agreement: {name}: valid shapes differ: {shapes}")


@semantics(*d.intops.BINARY_OPS)
def int_binary(op, slot: Slot) -> Fn:
    ufunc = INT_UFUNCS[type(op)]
    a, b, dst = slot(op.lhs), slot(op.rhs), slot(op.dst)
    name = op.name

    def fn(vals):
        x, y, t = vals[a], vals[b], vals[dst]
        _same_shapes(name, x, y, t)
        t.v[...] = ufunc(x.v, y.v).astype(t.v.dtype, copy=False)

    return fn


@semantics(*d.intops.SCALAR_OPS)
def int_scalar(op, slot: Slot) -> Fn:
    ufunc = INT_UFUNCS[type(op)]
    a, s, dst = slot(op.src), slot(op.scalar), slot(op.dst)
    cast = np_dtype(op.src.type.dtype).type
    name = op.name

    def fn(vals):
        x, t = vals[a], vals[dst]
        _same_shapes(name, x, t)
        t.v[...] = ufunc(x.v, cast(vals[s])).astype(t.v.dtype, copy=False)

    return fn


@semantics(d.TNotOp)
def tnot(op, slot: Slot) -> Fn:
    a, dst = slot(op.src), slot(op.dst)
    name = op.name

    def fn(vals):
        x, t = vals[a], vals[dst]
        _same_shapes(name, x, t)
        np.invert(x.v, out=t.v)

    return fn
