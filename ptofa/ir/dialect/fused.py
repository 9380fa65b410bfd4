"""Fused, broadcast and concatenating tile ops, the biased matmul and pointer/integer casts:
`tprelu` (per-element slope), `trowexpand` (column 0 broadcast along each row), `taddsc` /
`tsubsc` (src0 +/- scalar + src1), `tconcat` / `tconcatidx` (columns of two tiles side by
side), `tmatmul.bias`, `ptrtoint` / `inttoptr` and `taddrelu` (add + ReLU, which only ptoas's
vpto back end lowers).

Rules follow docs/PTO_IR_manual.md of PTOAS and its A2/A3 verifiers (lib/PTO/IR/PTO.cpp):
tprelu's f16/f32 row-major operands of one valid shape and its i8 tmp of at least
validRow + 1 rows and ceil(validCol / 8) columns; trowexpand's vec tiles of one element
type with equal, non-zero valid rows; tmatmul.bias's bias tile of dst's element type in
loc=bias with one row; inttoptr's i64 address, scalar element type, and a result used only
as the pointer of load_scalar / store_scalar.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import IndexType, IntegerType, i64
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, opt_operand_def, result_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _check_elementwise, _check_matmul, _check_vec_row_major, _fail, _InsOutsOp, _ScalarPtrOp, _tile
from ptofa.ir.dialect.types import DYN, PtrType, TileBufType, _dims_str

_ROWEXPAND_DTYPES = ("i8", "i16", "i32", "f16", "bf16", "f32")


@irdl_op_definition
class TPReluOp(_InsOutsOp):
    """`ins(%src0, %slope, %tmp : T, T, I8) outs(%dst : T)`: dst = src0 > 0 ? src0 : slope * src0."""

    name = "pto.tprelu"
    N_INS: ClassVar[int] = 2
    HAS_TMP: ClassVar[bool] = True
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s0, s1, d = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst, "dst")
        _check_elementwise(self, [s0, s1, d])
        if d.elem not in ("f16", "f32"):
            _fail(self, "dtype", f"tprelu takes f16 or f32 tiles, got {d.elem}")
        if self.tmp is None:
            return
        t = _tile(self, self.tmp, "tmp")
        _check_vec_row_major(self, t, "tmp")
        if t.elem not in ("i8", "ui8"):
            _fail(self, "tmp", f"tmp must be an 8-bit integer tile, got {t.elem}")
        vr, vc = d.valid
        if vr != DYN and t.rows.data < vr + 1:
            _fail(self, "tmp size", f"tmp needs {vr + 1} rows (valid rows + 1 scratch row), has {t.rows.data}")
        if vc != DYN and t.valid[1] != DYN and t.valid[1] < -(-vc // 8):
            _fail(self, "tmp size", f"tmp needs {-(-vc // 8)} valid columns (one bit per dst column), has {t.valid[1]}")


@irdl_op_definition
class TRowExpandOp(_InsOutsOp):
    """`ins(%src : S) outs(%dst : D)`: dst[i, j] = src[i, 0]."""

    name = "pto.trowexpand"
    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if s.space != "vec" or s.is_boxed:
            _fail(self, "layout", f"src must be a loc=vec none_box tile, got {s.describe()}")
        if d.space != "vec" or not d.is_row_major or d.is_boxed:
            _fail(self, "layout", f"dst must be a loc=vec ND tile (row_major, none_box), got {d.describe()}")
        if s.dtype != d.dtype or d.elem not in _ROWEXPAND_DTYPES:
            _fail(self, "dtype", f"src and dst must share one of {_ROWEXPAND_DTYPES}, got {s.elem} and {d.elem}")
        if 0 in s.valid or 0 in d.valid:
            _fail(self, "shape agreement", f"valid shapes must be non-zero, got src {_dims_str(s.valid)}, dst {_dims_str(d.valid)}")
        if DYN not in (s.valid[0], d.valid[0]) and s.valid[0] != d.valid[0]:
            _fail(self, "shape agreement", f"src valid rows {s.valid[0]} != dst valid rows {d.valid[0]}")


class _ScalarSandwichOp(_InsOutsOp):
    """`ins(%src0, %scalar, %src1 : T, s, T) outs(%dst : T)`."""

    N_INS: ClassVar[int] = 3
    src0 = operand_def(TileBufType)
    scalar = operand_def()
    src1 = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        tiles = [_tile(self, v, n) for v, n in ((self.src0, "src0"), (self.src1, "src1"), (self.dst, "dst"))]
        _check_elementwise(self, tiles)
        if self.scalar.type != tiles[0].dtype:
            _fail(self, "operand type", f"the scalar must be the tiles' element type {tiles[0].elem}, got {self.scalar.type}")


@irdl_op_definition
class TAddSCOp(_ScalarSandwichOp):
    """dst = src0 + scalar + src1"""

    name = "pto.taddsc"
    COL_MAJOR_OK: ClassVar[bool] = True  # ptoas 0.60 compiles it on a [R,1] column


@irdl_op_definition
class TSubSCOp(_ScalarSandwichOp):
    """dst = src0 - scalar + src1"""

    name = "pto.tsubsc"
    COL_MAJOR_OK: ClassVar[bool] = True  # ptoas 0.60 compiles it on a [R,1] column


@irdl_op_definition
class TMatmulBiasOp(_InsOutsOp):
    """`ins(%a, %b, %bias : L, R, B) outs(%c : C)`: C = A @ B + bias (bias broadcast down the rows)."""

    name = "pto.tmatmul.bias"
    N_INS: ClassVar[int] = 3
    lhs = operand_def(TileBufType)
    rhs = operand_def(TileBufType)
    bias = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        c = _tile(self, self.dst, "dst")
        _check_matmul(self, _tile(self, self.lhs, "lhs"), _tile(self, self.rhs, "rhs"), c)
        b = _tile(self, self.bias, "bias")
        if b.space != "bias" or b.rows.data != 1:
            _fail(self, "bias", f"bias must be a loc=bias tile with one row, got {b.describe()}")
        if b.dtype != c.dtype:
            _fail(self, "bias", f"bias element type {b.elem} must be dst's {c.elem}")


_CONCAT_DTYPES = ("i8", "i16", "i32", "f16", "f32", "bf16")


def _check_concat(op: IRDLOperation, a: TileBufType, b: TileBufType, d: TileBufType) -> None:
    for t, role in ((a, "src0"), (b, "src1"), (d, "dst")):
        if t.space != "vec":
            _fail(op, "memory space", f"{role} must be loc=vec, got {t.describe()}")
    if not (a.dtype == b.dtype == d.dtype) or d.elem not in _CONCAT_DTYPES:
        _fail(op, "dtype", f"src0, src1 and dst must share one of {_CONCAT_DTYPES}, got {a.elem}, {b.elem}, {d.elem}")
    rows = {t.valid[0] for t in (a, b, d)} - {DYN}
    if len(rows) > 1:
        _fail(op, "shape agreement", f"valid rows differ: src0 {a.valid[0]}, src1 {b.valid[0]}, dst {d.valid[0]}")


@irdl_op_definition
class TConcatOp(_InsOutsOp):
    """`ins(%src0, %src1 : A, B) outs(%dst : D)`: dst[i, :C0] = src0[i], dst[i, C0:C0+C1] = src1[i]."""

    name = "pto.tconcat"
    N_INS: ClassVar[int] = 2
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        a, b, d = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst, "dst")
        _check_concat(self, a, b, d)
        if DYN not in (a.valid[1], b.valid[1]) and a.valid[1] + b.valid[1] > d.cols.data:
            _fail(self, "shape agreement", f"src0 valid cols {a.valid[1]} + src1 valid cols {b.valid[1]} exceed dst's {d.cols.data} columns")


@irdl_op_definition
class TConcatIdxOp(_InsOutsOp):
    """`ins(%src0, %src1, %n0, %n1 : A, B, I, I) outs(%dst : D)`: per row i, the first n0[i, 0] columns of
    src0 then the first n1[i, 0] of src1 (each clipped to what fits)."""

    name = "pto.tconcatidx"
    N_INS: ClassVar[int] = 4
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    src0_idx = operand_def(TileBufType)
    src1_idx = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        a, b, d = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst, "dst")
        _check_concat(self, a, b, d)
        i0, i1 = _tile(self, self.src0_idx, "src0Idx"), _tile(self, self.src1_idx, "src1Idx")
        for t in (a, b, d, i0, i1):
            if not t.is_row_major:
                _fail(self, "layout", f"tconcatidx tiles must be row_major, got {t.describe()}")
        if i0.dtype != i1.dtype or i0.elem not in ("i8", "i16", "i32") or i0.space != "vec" or i1.space != "vec":
            _fail(self, "index", f"src0Idx and src1Idx must be loc=vec tiles of one of i8/i16/i32, got {i0.describe()}, {i1.describe()}")
        if 0 in (i0.valid[1], i1.valid[1]) or len({t.valid[0] for t in (i0, i1, d)} - {DYN}) > 1:
            _fail(self, "index", f"index tiles need >= 1 valid column and dst's valid rows, got {_dims_str(i0.valid)}, {_dims_str(i1.valid)}")


class _CastOp(IRDLOperation):
    """`%r = pto.<op> %v : A -> B`."""

    @classmethod
    def parse(cls, parser: Parser):
        v = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation("->")
        r = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(v, t)], result_types=[r])

    def print(self, printer: Printer) -> None:
        (value,) = self.operands
        printer.print_string(" ")
        printer.print_operand(value)
        printer.print_string(" : ")
        printer.print_attribute(value.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.results[0].type)


@irdl_op_definition
class PtrToIntOp(_CastOp):
    """`%a = pto.ptrtoint %p : !pto.ptr<T> -> i64`: a GM pointer's byte address."""

    name = "pto.ptrtoint"
    ptr = operand_def(PtrType)
    result = result_def(IntegerType)

    def verify_(self) -> None:
        if self.result.type != i64:
            _fail(self, "operand type", f"ptrtoint yields an i64 byte address, got {self.result.type}")


@irdl_op_definition
class IntToPtrOp(_CastOp):
    """`%p = pto.inttoptr %a : i64 -> !pto.ptr<T>`: a byte address as a pointer for scalar access only."""

    name = "pto.inttoptr"
    addr = operand_def(IntegerType)
    result = result_def(PtrType)

    def verify_(self) -> None:
        if self.addr.type != i64:
            _fail(self, "operand type", f"the address must be i64, got {self.addr.type}")
        t = self.result.type
        assert isinstance(t, PtrType)
        if isinstance(t.elem, IndexType):
            _fail(self, "operand type", "the result element type must be a scalar (float, integer), got index")
        for use in self.result.uses:
            user = use.operation
            if not (isinstance(user, _ScalarPtrOp) and use.index == user.PTR_OPERAND):
                _fail(self, "uses", f"an inttoptr pointer may only be the pointer of load_scalar / store_scalar, used by {user.name}")


@irdl_op_definition
class TAddReluOp(_InsOutsOp):
    """`pto.taddrelu ins(%a, %b : A, B) outs(%d : D)`: d = max(0, a + b) (pto-isa's fused VADDRELU).

    ptoas verifies it for A2/A3 (row-major tiles of one i16 / f16 / f32 element type, PTOAS
    TAddReluOp::verify) but only its vpto back end lowers it: with the default EmitC back end
    it fails to legalize (`ptofa.ir.dialect.lowering`)."""

    name = "pto.taddrelu"
    N_INS: ClassVar[int] = 2
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        tiles = [_tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst, "dst")]
        _check_elementwise(self, tiles)
        if tiles[2].elem not in ("i16", "f16", "f32"):
            _fail(self, "dtype", f"taddrelu takes i16, f16 or f32 tiles, got {tiles[2].elem}")


OPS = (TPReluOp, TRowExpandOp, TAddSCOp, TSubSCOp, TConcatOp, TConcatIdxOp, TMatmulBiasOp, PtrToIntOp, IntToPtrOp, TAddReluOp)
