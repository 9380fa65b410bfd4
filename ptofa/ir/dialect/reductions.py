"""Column reductions (tcolsum / tcolmax / tcolmin / tcolprod), the row product,
tcolexpandexpdif, arg reductions (tcolargmax / tcolargmin / trowargmax / trowargmin), and
three fused elementwise ops (tlrelu, taxpy, taddc / tsubc).

Rules follow ptoas's A2/A3 verifiers (PTOAS lib/PTO/IR/PTO.cpp: TColSumOp::verify,
TColMaxOp::verify, verifyTColArgReductionOpA2A3 and neighbours, TLReluOp, TAxpyOp,
TAddCOp): loc=vec ND tiles, a column reduction keeps src's valid columns in a one-row
dst, an arg reduction writes i32 indices, tcolsum's tmp needs `isBinary`, taxpy's dst is
src's type or f32 over f16.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import BoolAttr, Float16Type, Float32Type, IntegerAttr, IntegerType
from xdsl.ir import Attribute, Operation
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import (_check_col_vector, _check_elementwise, _check_vec_row_major, _ColExpandOp, _fail, _InsOutsOp,
                                   _RowReduceOp, _same_extent, _tile, _valid_compatible)
from ptofa.ir.dialect.types import DYN, TileBufType, _dims_str, elem_bytes

_MINMAX_DTYPES = ("f16", "f32", "i16", "i32")


def _check_nd_vec(op: Operation, t: TileBufType, role: str) -> None:
    """ptoas's verifyNDStyleVecTile: loc=vec, row_major, none_box."""
    _check_vec_row_major(op, t, role)
    if t.is_boxed:
        _fail(op, "layout", f"{role} must be slayout=none_box, got {t.slayout.data}")


def _check_col_result(op: Operation, s: TileBufType, d: TileBufType) -> None:
    """dst is one row holding src's valid columns."""
    if d.valid[0] not in (1, DYN):
        _fail(op, "shape agreement", f"dst must have 1 valid row, got {_dims_str(d.valid)}")
    if not _same_extent(s.valid[1], d.valid[1]):
        _fail(op, "shape agreement", f"dst valid cols {d.valid[1]} != src valid cols {s.valid[1]}")


class _ColReduceOp(_InsOutsOp):
    """`ins(%src : S) outs(%dst : D)`: per-column reduction to a [1,C] row."""

    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_nd_vec(self, s, "src")
        _check_nd_vec(self, d, "dst")
        if s.elem not in _MINMAX_DTYPES:
            _fail(self, "dtype", f"A2/A3 {self.name} element type must be one of {_MINMAX_DTYPES}, got {s.elem}")
        if s.dtype != d.dtype:
            _fail(self, "dtype", f"src {s.elem} != dst {d.elem}")
        _check_col_result(self, s, d)


@irdl_op_definition
class TColMaxOp(_ColReduceOp):
    """dst[0,j] = max_i src[i,j]"""

    name = "pto.tcolmax"


@irdl_op_definition
class TColMinOp(_ColReduceOp):
    """dst[0,j] = min_i src[i,j]"""

    name = "pto.tcolmin"


@irdl_op_definition
class TColProdOp(_ColReduceOp):
    """dst[0,j] = prod_i src[i,j]"""

    name = "pto.tcolprod"


@irdl_op_definition
class TColExpandExpdifOp(_ColExpandOp):
    """d = exp(a - row): the column-broadcast twin of trowexpandexpdif (f16 / f32 only)."""

    name = "pto.tcolexpandexpdif"
    DTYPES: ClassVar[tuple[str, ...]] = ("f16", "f32")


@irdl_op_definition
class TColSumOp(_InsOutsOp):
    """dst[0,j] = sum_i src[i,j]; `ins(%src, %tmp {isBinary = true} : S, T)` sums pairwise in tmp."""

    name = "pto.tcolsum"
    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    isBinary = opt_prop_def(BoolAttr)  # noqa: N815 (ptoas's attribute name)
    HAS_TMP: ClassVar[bool] = True
    INNER_ATTRS: ClassVar[bool] = True

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        binary = attrs.pop("isBinary", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if binary is None:
            return {}
        if not (isinstance(binary, IntegerAttr) and binary.type == IntegerType(1)):
            parser.raise_error(f"{cls.name}: isBinary must be true or false, got {binary}", start)
        return {"isBinary": binary}

    @classmethod
    def parse(cls, parser: Parser):
        """ptoas's two forms: `ins(%src, %tmp {isBinary = ...} : S, T) outs(...)` and, without
        a tmp, `ins(%src : S) outs(...) {isBinary = ...}` (PTOAS TColSumOp::parse)."""
        start = parser.pos
        op = super().parse(parser)
        trailing = parser.parse_optional_attr_dict()
        if not trailing:
            return op
        if op.tmp is not None or op.isBinary is not None:
            parser.raise_error(f"{cls.name}: with a tmp, isBinary goes inside ins(...) before the colon", start)
        op.properties.update(cls._props_from_attrs(parser, trailing, start))
        return op

    def print(self, printer: Printer) -> None:
        binary = f" {{isBinary = {'true' if self.isBinary.value.data else 'false'}}}" if self.isBinary is not None else ""
        printer.print_string(" ins(")
        printer.print_operand(self.src)
        if self.tmp is not None:
            printer.print_string(", ")
            printer.print_operand(self.tmp)
            printer.print_string(binary)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        if self.tmp is not None:
            printer.print_string(", ")
            printer.print_attribute(self.tmp.type)
        printer.print_string(") outs(")
        printer.print_operand(self.dst)
        printer.print_string(" : ")
        printer.print_attribute(self.dst.type)
        printer.print_string(")")
        if self.tmp is None:
            printer.print_string(binary)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_nd_vec(self, s, "src")
        _check_nd_vec(self, d, "dst")
        if s.dtype != d.dtype:
            _fail(self, "dtype", f"src {s.elem} != dst {d.elem}")
        _check_col_result(self, s, d)
        if self.tmp is None:
            return
        if self.isBinary is None:
            _fail(self, "tmp", "the tmp operand requires the isBinary attribute")
        t = _tile(self, self.tmp, "tmp")
        _check_nd_vec(self, t, "tmp")
        if t.dtype != s.dtype:
            _fail(self, "dtype", f"tmp {t.elem} != src {s.elem}")
        if self.isBinary.value.data and DYN not in s.valid:
            need = -(-s.valid[0] // 2) * s.valid[1] * elem_bytes(s.dtype)
            if t.nbytes < need:
                _fail(self, "tmp size", f"isBinary tmp of {t.nbytes} bytes is smaller than ceil(rows/2)*cols*elem = {need} bytes")


@irdl_op_definition
class TRowProdOp(_RowReduceOp):
    """dst[i,0] = prod_j src[i,j]"""

    name = "pto.trowprod"


class _ArgReduceOp(_InsOutsOp):
    """`ins(%src[, %tmp] : S[, T]) outs(%dst : i32 tile)`: the index of each row's / column's extreme."""

    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True
    AXIS: ClassVar[int] = 0  # 0: reduce the rows of each column, 1: the columns of each row
    BEST: ClassVar[str] = "max"

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_nd_vec(self, s, "src")
        if 0 in s.valid:
            _fail(self, "shape agreement", f"src valid dims must be non-zero, got {_dims_str(s.valid)}")
        if self.AXIS == 0 and (elem_bytes(s.dtype) not in (1, 2, 4) or s.elem == "bf16"):
            _fail(self, "dtype", f"src element type must be 1, 2 or 4 bytes wide, got {s.elem}")
        if self.AXIS == 1 and s.elem not in _MINMAX_DTYPES:
            _fail(self, "dtype", f"src element type must be one of {_MINMAX_DTYPES}, got {s.elem}")
        if d.elem not in ("i32", "ui32"):
            _fail(self, "dtype", f"dst element type must be i32 or ui32, got {d.elem}")
        if self.AXIS == 0:
            _check_vec_row_major(self, d, "dst")
            _check_col_result(self, s, d)
        else:
            _check_col_vector(self, d, s.valid[0], "dst", nd_valid_cols=1)
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            _check_vec_row_major(self, t, "tmp")


@irdl_op_definition
class TColArgMaxOp(_ArgReduceOp):
    name = "pto.tcolargmax"


@irdl_op_definition
class TColArgMinOp(_ArgReduceOp):
    name = "pto.tcolargmin"
    BEST: ClassVar[str] = "min"


@irdl_op_definition
class TRowArgMaxOp(_ArgReduceOp):
    name = "pto.trowargmax"
    AXIS: ClassVar[int] = 1


@irdl_op_definition
class TRowArgMinOp(_ArgReduceOp):
    name = "pto.trowargmin"
    AXIS: ClassVar[int] = 1
    BEST: ClassVar[str] = "min"


class _TileScalarOp(_InsOutsOp):
    """`ins(%src, %scalar : T, s) outs(%dst : D)`."""

    N_INS: ClassVar[int] = 2
    src = operand_def(TileBufType)
    scalar = operand_def()
    dst_ = operand_def(TileBufType)


@irdl_op_definition
class TLReluOp(_TileScalarOp):
    """dst = src where src > 0, else slope * src (leaky ReLU)."""

    name = "pto.tlrelu"
    COL_MAJOR_OK: ClassVar[bool] = True  # ptoas 0.60 compiles it on a [R,1] column

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_elementwise(self, [s, d])
        if s.elem not in ("f16", "f32"):
            _fail(self, "dtype", f"tlrelu needs f16 or f32 tiles, got {s.elem}")
        if self.scalar.type != s.dtype:
            _fail(self, "operand type", f"the slope must be {s.elem}, got {self.scalar.type}")


@irdl_op_definition
class TAxpyOp(_TileScalarOp):
    """dst = dst + scalar * src (dst f32 over an f16 src accumulates in f32)."""

    name = "pto.taxpy"

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_vec_row_major(self, s, "src")
        _check_vec_row_major(self, d, "dst")
        if not _valid_compatible(s.valid, d.valid) or s.shape != d.shape:
            _fail(self, "shape agreement", f"src {s.describe()} and dst {d.describe()} need the same shape and valid shape")
        if self.scalar.type != s.dtype:
            _fail(self, "operand type", f"the scalar must be the src element type {s.elem}, got {self.scalar.type}")
        if s.elem not in ("f16", "f32") or d.elem not in ("f16", "f32"):
            _fail(self, "dtype", f"A2/A3 taxpy takes f16/f32 tiles, got src {s.elem}, dst {d.elem}")
        if s.dtype != d.dtype and not (isinstance(s.dtype, Float16Type) and isinstance(d.dtype, Float32Type)):
            _fail(self, "dtype", f"dst must be src's type or f32 over an f16 src, got src {s.elem}, dst {d.elem}")


class _TernaryOp(_InsOutsOp):
    """`ins(%a, %b, %c : T, T, T) outs(%d : T)`."""

    N_INS: ClassVar[int] = 3
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    src2 = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        tiles = [_tile(self, v, n) for v, n in ((self.src0, "src0"), (self.src1, "src1"), (self.src2, "src2"), (self.dst, "dst"))]
        if len({t.shape for t in tiles}) > 1:
            _fail(self, "shape agreement", "src0/src1/src2/dst must have the same shape, got " + ", ".join(t.describe() for t in tiles))
        _check_elementwise(self, tiles)


@irdl_op_definition
class TAddCOp(_TernaryOp):
    """d = a + b + c"""

    name = "pto.taddc"
    COL_MAJOR_OK: ClassVar[bool] = True  # ptoas 0.60 compiles it on a [R,1] column


@irdl_op_definition
class TSubCOp(_TernaryOp):
    """d = a - b + c"""

    name = "pto.tsubc"
    COL_MAJOR_OK: ClassVar[bool] = True  # ptoas 0.60 compiles it on a [R,1] column


COL_REDUCE_OPS = (TColMaxOp, TColMinOp, TColProdOp, TColSumOp)
ARG_REDUCE_OPS = (TColArgMaxOp, TColArgMinOp, TRowArgMaxOp, TRowArgMinOp)
OPS = (*COL_REDUCE_OPS, TRowProdOp, TColExpandExpdifOp, *ARG_REDUCE_OPS, TLReluOp, TAxpyOp, TAddCOp, TSubCOp)
