"""Vector (AIV) tile ops: tcvt, elementwise binary / unary / scalar ops, texpands,
row reductions and row broadcasts, and the hidden UB scratch ptoas gives some of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, IndexType, IntegerAttr, IntegerType, StringAttr, i32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.dialect.base import _fail, _InsOutsOp, _parse_typed_list, _print_typed_list, _tile
from ptofa.dialect.types import (
    DYN,
    ROUND_MODES,
    CmpModeAttr,
    DivPrecisionAttr,
    ExpPrecisionAttr,
    RoundModeAttr,
    TileBufType,
    _dims_str,
    elem_bytes,
)
from ptofa.target import HIDDEN_ROWEXPAND_TMP_BYTES

# Hidden UB scratch ptoas materializes (PTOAS lib/PTO/Transforms/PTOMaterializeImplicitTmp.cpp,
# A2/A3): tci an f32 1x192 (i32 dst) or 1x448 (i16 dst) tile, tsel an i32 1x16 tile.
HIDDEN_TCI_TMP = {32: ("1x192xf32", 768), 16: ("1x448xf32", 1792)}
HIDDEN_TSEL_TMP = ("1x16xi32", 64)


@irdl_op_definition
class TCvtOp(_InsOutsOp):
    """`pto.tcvt ins(%a {rmode = #pto<round_mode CAST_RINT>} : A) outs(%d : D)`: dtype cast.

    The attribute dict sits after the source operand, inside `ins(...)`.
    """

    name = "pto.tcvt"
    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    # A StringAttr from the custom form and the api; the generic form
    # `<{rmode = #pto<round_mode CAST_RINT>}>` gives a RoundModeAttr.
    rmode = prop_def(StringAttr | RoundModeAttr)
    HAS_TMP: ClassVar[bool] = True

    @property
    def round_mode(self) -> str:
        r = self.rmode
        return r.value.data if isinstance(r, RoundModeAttr) else r.data

    @classmethod
    def parse(cls, parser: Parser) -> "TCvtOp":
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        ins = [parser.parse_unresolved_operand()]
        if parser.parse_optional_punctuation(","):
            ins.append(parser.parse_unresolved_operand())
        rmode = "CAST_RINT"
        if parser.parse_optional_punctuation("{"):
            parser.parse_keyword("rmode")
            parser.parse_punctuation("=")
            rmode = _parse_round_mode(parser)
            parser.parse_punctuation("}")
        parser.parse_punctuation(":")
        in_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        outs, out_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        if len(in_types) != len(ins):
            parser.raise_error(f"{len(ins)} operands but {len(in_types)} types", start)
        op = cls._from_parsed(parser, ins, in_types, outs, out_types, {}, start)
        op.properties["rmode"] = StringAttr(rmode)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        printer.print_list(self.ins_values(), printer.print_operand)
        printer.print_string(f" {{rmode = #pto<round_mode {self.round_mode}>}} : ")
        printer.print_list([v.type for v in self.ins_values()], printer.print_attribute)
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, d])
        if self.round_mode not in ROUND_MODES:
            _fail(self, "round mode", f"'{self.round_mode}' is not one of {ROUND_MODES}")
        if not _valid_compatible(s.valid, d.valid):
            _fail(self, "shape agreement", f"src valid {_dims_str(s.valid)} != dst valid {_dims_str(d.valid)}")


def _parse_round_mode(parser: Parser) -> str:
    """Parse `#pto<round_mode X>` token by token (the dialect-attribute pretty form)."""
    start = parser.pos
    text = parser.lexer.input.content
    end = text.find(">", start)
    body = text[start:end + 1] if end >= 0 else ""
    compact = body.replace(" ", "")
    prefix = "#pto<round_mode"
    if not compact.startswith(prefix) or not compact.endswith(">"):
        parser.raise_error("expected #pto<round_mode MODE>")
    mode = compact[len(prefix):-1]
    if mode not in ROUND_MODES:
        parser.raise_error(f"'pto.tcvt' round mode: '{mode}' is not one of {', '.join(ROUND_MODES)}")
    parser._resume_from(end + 1)
    return mode


def _check_vec(op: Operation, tiles: Sequence[TileBufType]) -> None:
    for t in tiles:
        if t.space != "vec":
            _fail(op, "memory space", f"vector ops take loc=vec tiles, got {t.describe()}")


_VEC_DTYPES = ("f16", "f32", "i16", "i32")


def _valid_compatible(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Valid shapes that may agree at run time: equal where both dims are static (a `?` matches
    anything; the simulator checks the runtime sizes)."""
    return all(x == DYN or y == DYN or x == y for x, y in zip(a, b))


def _check_elementwise(op: Operation, tiles: Sequence[TileBufType]) -> None:
    _check_vec(op, tiles)
    for t in tiles:
        if not t.is_row_major:
            _fail(op, "layout", f"elementwise ops need blayout=row_major tiles, got {t.describe()} col_major")
        if t.elem not in _VEC_DTYPES:
            _fail(op, "dtype", f"{t.elem} is not a vector arithmetic type {_VEC_DTYPES}")
    first = tiles[0]
    for t in tiles[1:]:
        if t.dtype != first.dtype:
            _fail(op, "dtype", f"operands must share one dtype, got {first.elem} and {t.elem}")
        if not _valid_compatible(t.valid, first.valid):
            _fail(op, "shape agreement", f"valid shapes {_dims_str(first.valid)} and {_dims_str(t.valid)} differ")


class _PrecisionAttrOp(_InsOutsOp):
    """An op with ptoas's optional `{precisionType = #pto<..._precision X>}` after `outs(...)`.

    The attribute selects a pto-isa algorithm; the simulator computes in full precision either way.
    """

    PRECISION: ClassVar[type | None] = None

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        precision = attrs.pop("precisionType", None)
        if attrs or (precision is not None and cls.PRECISION is None):
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs) or ['precisionType']}", start)
        if precision is None:
            return {}
        if not isinstance(precision, cls.PRECISION):  # type: ignore[arg-type]
            parser.raise_error(f"{cls.name}: precisionType must be a #pto<{cls.PRECISION.name[4:]} ...>, got {precision}", start)  # type: ignore[union-attr]
        return {"precisionType": precision}

    def _print_attrs(self, printer: Printer) -> None:
        precision = self.properties.get("precisionType")
        if precision is not None:
            printer.print_string(f" {{precisionType = {precision.text}}}")


class _BinaryOp(_InsOutsOp):
    """`ins(%a, %b : T, T) outs(%d : T)`: elementwise d = f(a, b)."""

    N_INS: ClassVar[int] = 2
    lhs = operand_def(TileBufType)
    rhs = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        _check_elementwise(self, [_tile(self, v, n) for v, n in ((self.lhs, "lhs"), (self.rhs, "rhs"), (self.dst, "dst"))])


@irdl_op_definition
class TAddOp(_BinaryOp):
    """d = a + b"""

    name = "pto.tadd"


@irdl_op_definition
class TSubOp(_BinaryOp):
    """d = a - b"""

    name = "pto.tsub"


@irdl_op_definition
class TMulOp(_BinaryOp):
    """d = a * b"""

    name = "pto.tmul"


@irdl_op_definition
class TDivOp(_BinaryOp, _PrecisionAttrOp):
    """d = a / b (optional `{precisionType = #pto<div_precision high_precision>}`)"""

    name = "pto.tdiv"
    precisionType = opt_prop_def(DivPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = DivPrecisionAttr


@irdl_op_definition
class TMaxOp(_BinaryOp):
    """d = max(a, b)"""

    name = "pto.tmax"


@irdl_op_definition
class TMinOp(_BinaryOp):
    """d = min(a, b)"""

    name = "pto.tmin"


class _UnaryOp(_InsOutsOp):
    """`ins(%a : T) outs(%d : T)`: elementwise d = f(a)."""

    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    FLOAT_ONLY: ClassVar[bool] = False

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_elementwise(self, [s, d])
        if self.FLOAT_ONLY and s.elem not in ("f16", "f32"):
            _fail(self, "dtype", f"{self.name} takes f16/f32 tiles, got {s.elem}")


@irdl_op_definition
class TExpOp(_UnaryOp, _PrecisionAttrOp):
    """d = exp(a) (optional `{precisionType = #pto<exp_precision high_precision>}`)"""

    name = "pto.texp"
    FLOAT_ONLY: ClassVar[bool] = True
    precisionType = opt_prop_def(ExpPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = ExpPrecisionAttr


@irdl_op_definition
class TLogOp(_UnaryOp):
    """d = ln(a)"""

    name = "pto.tlog"
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class TSqrtOp(_UnaryOp):
    """d = sqrt(a)"""

    name = "pto.tsqrt"
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class TRsqrtOp(_UnaryOp):
    """d = 1/sqrt(a)"""

    name = "pto.trsqrt"
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class TRecipOp(_UnaryOp):
    """d = 1/a (not in place on a3)"""

    name = "pto.trecip"
    FLOAT_ONLY: ClassVar[bool] = True

    def verify_(self) -> None:
        super().verify_()
        if self.src == self.dst:
            _fail(self, "in place", "trecip cannot run in place on a3 (src == dst)")


@irdl_op_definition
class TAbsOp(_UnaryOp):
    """d = |a|"""

    name = "pto.tabs"


@irdl_op_definition
class TNegOp(_UnaryOp):
    """d = -a"""

    name = "pto.tneg"


@irdl_op_definition
class TReluOp(_UnaryOp):
    """d = max(0, a)"""

    name = "pto.trelu"


class _ScalarOp(_InsOutsOp):
    """`ins(%a, %s : T, f32) outs(%d : T)`: elementwise with a scalar, operands in textual order.

    Only `tdivs` also takes the scalar first (`ins(%s, %a : f32, T)`, d = s / a).
    """

    N_INS: ClassVar[int] = 2
    SCALAR_FIRST_OK: ClassVar[bool] = False
    first = operand_def()
    second = operand_def()
    dst_ = operand_def(TileBufType)

    @property
    def scalar_first(self) -> bool:
        return not isinstance(self.first.type, TileBufType)

    @property
    def src(self) -> SSAValue:
        return self.second if self.scalar_first else self.first

    @property
    def scalar(self) -> SSAValue:
        return self.first if self.scalar_first else self.second

    def verify_(self) -> None:
        if self.scalar_first and not self.SCALAR_FIRST_OK:
            _fail(self, "operand order", f"the tile comes first (ins(%tile, %scalar)); only pto.tdivs takes the scalar first, got {self.first.type}")
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_elementwise(self, [s, d])
        if not isinstance(self.scalar.type, (Float16Type, Float32Type, IntegerType)):
            _fail(self, "operand type", f"scalar must be an int or float, got {self.scalar.type}")


@irdl_op_definition
class TAddsOp(_ScalarOp):
    """d = a + s"""

    name = "pto.tadds"


@irdl_op_definition
class TSubsOp(_ScalarOp):
    """d = a - s"""

    name = "pto.tsubs"


@irdl_op_definition
class TMulsOp(_ScalarOp):
    """d = a * s"""

    name = "pto.tmuls"


@irdl_op_definition
class TDivsOp(_ScalarOp):
    """d = a / s, or d = s / a when the scalar comes first"""

    name = "pto.tdivs"
    SCALAR_FIRST_OK: ClassVar[bool] = True


@irdl_op_definition
class TMaxsOp(_ScalarOp):
    """d = max(a, s)"""

    name = "pto.tmaxs"


@irdl_op_definition
class TMinsOp(_ScalarOp):
    """d = min(a, s)"""

    name = "pto.tmins"


@irdl_op_definition
class TExpandsOp(_InsOutsOp):
    """`pto.texpands ins(%s : f32) outs(%d : T)`: fill the valid region with a scalar."""

    name = "pto.texpands"
    scalar = operand_def()
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        d = _tile(self, self.dst, "dst")
        if d.space == "vec" and not d.is_row_major:
            _fail(self, "layout", f"a loc=vec destination must be blayout=row_major, got {d.describe()} col_major (fill its [1,R] treshape view)")
        if d.space not in ("vec", "mat"):
            _fail(self, "memory space", f"texpands writes loc=vec or loc=mat, got {d.space}")


def _check_col_vector(op: Operation, col: TileBufType, rows: int, role: str, nd_valid_cols: int | None = None) -> None:
    """A per-row vector: DN [R,1], or ND with `nd_valid_cols` valid columns (default 32 bytes' worth)."""
    if nd_valid_cols is None:
        nd_valid_cols = 32 // elem_bytes(col.dtype)
    if col.space != "vec":
        _fail(op, "memory space", f"{role} must be loc=vec, got loc={col.space}")
    if not col.is_row_major:
        if col.valid[1] != 1:
            _fail(op, "shape agreement", f"{role} DN column vector needs 1 valid column, got {col.valid[1]}")
    elif col.valid[1] != nd_valid_cols:
        _fail(op, "shape agreement", f"{role} row_major per-row vector needs {nd_valid_cols} valid columns, got {col.valid[1]}")
    if col.valid[0] != DYN and rows != DYN and col.valid[0] != rows:
        _fail(op, "shape agreement", f"{role} valid rows {col.valid[0]} != {rows} rows of the tile")


class _RowReduceOp(_InsOutsOp):
    """`ins(%src[, %tmp] : S[, T]) outs(%dst : D)`: per-row reduction to [R,1]."""

    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, d])
        if not s.is_row_major or s.is_boxed:
            _fail(self, "layout", f"src must be ND (row_major, none_box), got {s.blayout.data}, {s.slayout.data}")
        if s.dtype != d.dtype:
            _fail(self, "dtype", f"src {s.elem} != dst {d.elem}")
        if 0 in s.valid:
            _fail(self, "shape agreement", f"src valid dims must be non-zero, got {_dims_str(s.valid)}")
        _check_col_vector(self, d, s.valid[0], "dst", nd_valid_cols=1)  # ND dst: valid cols = 1 (pto-ir.md 9)
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            if t.space != "vec" or t.dtype != s.dtype:
                _fail(self, "operand type", f"tmp must be a loc=vec {s.elem} tile, got {t.describe()}")
            if s.elem in ("f16", "f32") and t.nbytes < s.nbytes:
                _fail(self, "tmp size", f"tmp of {t.nbytes} bytes is smaller than the src ({s.nbytes} bytes)")


@irdl_op_definition
class TRowMaxOp(_RowReduceOp):
    """dst[i,0] = max_j src[i,j]"""

    name = "pto.trowmax"


@irdl_op_definition
class TRowSumOp(_RowReduceOp):
    """dst[i,0] = sum_j src[i,j]"""

    name = "pto.trowsum"


@irdl_op_definition
class TRowMinOp(_RowReduceOp):
    """dst[i,0] = min_j src[i,j]"""

    name = "pto.trowmin"


class _RowExpandOp(_InsOutsOp):
    """`ins(%a, %col[, %tmp] : T, C[, Tt]) outs(%d : T)`: per-row broadcast d[i,j] = f(a[i,j], col[i,0])."""

    N_INS: ClassVar[int] = 2
    src = operand_def(TileBufType)
    col = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True

    def verify_(self) -> None:
        s, c, d = _tile(self, self.src, "src0"), _tile(self, self.col, "src1"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, c, d])
        if not s.is_row_major or not d.is_row_major:
            _fail(self, "layout", f"src0 and dst must be blayout=row_major, got src0 {s.blayout.data}, dst {d.blayout.data}")
        if not _valid_compatible(s.valid, d.valid):
            _fail(self, "shape agreement", f"src0 valid {_dims_str(s.valid)} != dst valid {_dims_str(d.valid)}")
        if not (s.dtype == c.dtype == d.dtype) or s.elem not in ("f16", "f32"):
            _fail(self, "dtype", f"src0/src1/dst must share f16 or f32, got {s.elem}, {c.elem}, {d.elem}")
        _check_col_vector(self, c, d.valid[0], "src1")


@irdl_op_definition
class TRowExpandSubOp(_RowExpandOp):
    """d = a - col"""

    name = "pto.trowexpandsub"


@irdl_op_definition
class TRowExpandMulOp(_RowExpandOp):
    """d = a * col"""

    name = "pto.trowexpandmul"


@irdl_op_definition
class TRowExpandDivOp(_RowExpandOp, _PrecisionAttrOp):
    """d = a / col (optional `{precisionType = #pto<div_precision high_precision>}`)"""

    name = "pto.trowexpanddiv"
    precisionType = opt_prop_def(DivPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = DivPrecisionAttr


@irdl_op_definition
class TRowExpandAddOp(_RowExpandOp):
    """d = a + col"""

    name = "pto.trowexpandadd"


@irdl_op_definition
class TRowExpandMaxOp(_RowExpandOp):
    """d = max(a, col)"""

    name = "pto.trowexpandmax"


@irdl_op_definition
class TRowExpandMinOp(_RowExpandOp):
    """d = min(a, col)"""

    name = "pto.trowexpandmin"


@irdl_op_definition
class TRowExpandExpdifOp(_RowExpandOp):
    """d = exp(a - col)"""

    name = "pto.trowexpandexpdif"


# --------------------------------------------------------------------------------------
# Masks, iota, column broadcasts and padding (pto-ir.md 7.10, 7.13)
# --------------------------------------------------------------------------------------

_MASK_SRC_DTYPES = ("i16", "i32", "f16", "f32")  # tcmps on A2/A3
_TCMP_DTYPES = ("i32", "f16", "f32")  # tcmp on A2/A3
_TSEL_DTYPES = ("i16", "i32", "f16", "bf16", "f32")  # tsel on A2/A3


def _check_vec_row_major(op: Operation, t: TileBufType, role: str) -> None:
    """ptoas's verifyVecTileCommon: loc=vec and blayout=row_major."""
    if t.space != "vec":
        _fail(op, "memory space", f"{role} must be loc=vec, got {t.describe()}")
    if not t.is_row_major:
        _fail(op, "layout", f"{role} must be blayout=row_major, got {t.describe()} col_major")


def _same_extent(a: int, b: int) -> bool:
    return a == DYN or b == DYN or a == b


def _is_scalar_type(t: Attribute) -> bool:
    return isinstance(t, (Float16Type, Float32Type, BFloat16Type, IntegerType, IndexType))


@irdl_op_definition
class TTriOp(_InsOutsOp):
    """`pto.ttri ins(%diag {upperOrLower = 1 : i32} : i32) outs(%m : T)`: a 0/1 triangular tile.

    Lower (upperOrLower = 0, the default) sets 1 where col <= row + diag, upper (1) where
    col >= row + diag (pto-ir.md 7.13).
    """

    name = "pto.ttri"
    INNER_ATTRS: ClassVar[bool] = True
    diagonal = operand_def()
    dst_ = operand_def(TileBufType)
    upperOrLower = prop_def(IntegerAttr)  # noqa: N815

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        which = attrs.pop("upperOrLower", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if which is None:
            return {"upperOrLower": IntegerAttr(0, i32)}
        if not isinstance(which, IntegerAttr):
            parser.raise_error(f"{cls.name}: upperOrLower must be an integer, got {which}", start)
        return {"upperOrLower": IntegerAttr(which.value.data, i32)}

    def _print_attrs(self, printer: Printer) -> None:
        if self.upper_or_lower != 0:
            printer.print_string(f" {{upperOrLower = {self.upper_or_lower} : i32}}")

    @property
    def upper_or_lower(self) -> int:
        return self.upperOrLower.value.data

    def verify_(self) -> None:
        d = _tile(self, self.dst, "dst")
        _check_vec_row_major(self, d, "dst")
        if not isinstance(self.diagonal.type, IntegerType):
            _fail(self, "operand type", f"expects diagonal to be an integer operand, got {self.diagonal.type}")
        if self.upper_or_lower not in (0, 1):
            _fail(self, "upperOrLower", f"expects upperOrLower to be 0 (lower) or 1 (upper), got {self.upper_or_lower}")
        if d.elem not in _VEC_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 dst element type to be f16/f32/i16/i32, got {d.elem}")


class _CmpOp(_InsOutsOp):
    """Shared parts of tcmps / tcmp: `{cmpMode = #pto<cmp lt>}` inside `ins(...)`, an i8 packed-predicate dst."""

    INNER_ATTRS: ClassVar[bool] = True
    DEFAULT_MODE: ClassVar[str | None] = None

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        mode = attrs.pop("cmpMode", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if mode is None:
            return {"cmpMode": CmpModeAttr(cls.DEFAULT_MODE)} if cls.DEFAULT_MODE else {}
        if not isinstance(mode, CmpModeAttr):
            parser.raise_error(f"{cls.name}: cmpMode must be #pto<cmp eq|ne|lt|le|gt|ge>, got {mode}", start)
        return {"cmpMode": mode}

    def _print_attrs(self, printer: Printer) -> None:
        mode = self.properties.get("cmpMode")
        if mode is not None:
            printer.print_string(f" {{cmpMode = {mode.text}}}")

    @property
    def mode(self) -> str:
        mode = self.properties.get("cmpMode")
        return mode.value.data if mode is not None else "eq"

    def _check_mask_dst(self, src: TileBufType) -> TileBufType:
        d = _tile(self, self.dst, "dst")
        if d.space != "vec":
            _fail(self, "memory space", f"dst must be loc=vec, got {d.describe()}")
        if d.elem != "i8":
            _fail(self, "dtype", f"expects dst element type to be i8 (a packed predicate, one bit per element), got {d.elem}")
        if not _same_extent(src.valid[0], d.valid[0]):
            _fail(self, "shape agreement", f"expects src and dst to have the same valid rows, got {src.valid[0]} and {d.valid[0]}")
        if not d.is_row_major:
            _fail(self, "layout", f"dst must be blayout=row_major, got {d.describe()} col_major")
        return d


@irdl_op_definition
class TCmpSOp(_CmpOp):
    """`pto.tcmps ins(%src, %s {cmpMode = #pto<cmp lt>} : T, f32) outs(%mask : Ti8)`: compare with a scalar.

    The i8 dst holds one bit per element, LSB first, rows packed densely (pto-ir.md 7.13).
    """

    name = "pto.tcmps"
    N_INS: ClassVar[int] = 2
    DEFAULT_MODE: ClassVar[str | None] = "eq"
    src = operand_def(TileBufType)
    scalar = operand_def()
    dst_ = operand_def(TileBufType)
    cmpMode = opt_prop_def(CmpModeAttr)  # noqa: N815

    def verify_(self) -> None:
        s = _tile(self, self.src, "src")
        if s.space != "vec":
            _fail(self, "memory space", f"src must be loc=vec, got {s.describe()}")
        if s.elem not in _MASK_SRC_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 tcmps input element type to be i16/i32/f16/f32, got {s.elem}")
        if not _is_scalar_type(self.scalar.type):
            _fail(self, "operand type", f"expects scalar to be integer, index, or float, got {self.scalar.type}")
        self._check_mask_dst(s)


@irdl_op_definition
class TCmpOp(_CmpOp):
    """`pto.tcmp ins(%a, %b {cmpMode = #pto<cmp gt>} : T, T) outs(%mask : Ti8)`: compare two tiles."""

    name = "pto.tcmp"
    N_INS: ClassVar[int] = 2
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    cmpMode = opt_prop_def(CmpModeAttr)  # noqa: N815

    def verify_(self) -> None:
        a, b = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1")
        for t, role in ((a, "src0"), (b, "src1")):
            if t.space != "vec":
                _fail(self, "memory space", f"{role} must be loc=vec, got {t.describe()}")
        if a.dtype != b.dtype:
            _fail(self, "dtype", f"expects src0 and src1 to have the same element type, got {a.elem} and {b.elem}")
        if a.elem not in _TCMP_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 tcmp input element type to be i32/f16/f32, got {a.elem}")
        if not (_same_extent(a.valid[0], b.valid[0]) and _same_extent(a.valid[1], b.valid[1])):
            _fail(self, "shape agreement", f"expects src0 and src1 to have the same valid shape, got {_dims_str(a.valid)} and {_dims_str(b.valid)}")
        self._check_mask_dst(a)


@irdl_op_definition
class TSelOp(_InsOutsOp):
    """`pto.tsel ins(%mask, %a, %b[, %tmp] : M, T, T[, Tt]) outs(%d : T)`: d = mask bit ? a : b.

    Without a tmp ptoas allocates a hidden i32 1x16 UB tile (`hidden_scratch`).
    """

    name = "pto.tsel"
    N_INS: ClassVar[int] = 3
    HAS_TMP: ClassVar[bool] = True
    mask = operand_def(TileBufType)
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        m = _tile(self, self.mask, "mask")
        a, b, d = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst, "dst")
        for t, role in ((a, "src0"), (b, "src1"), (d, "dst")):
            _check_vec_row_major(self, t, role)
        if not (a.dtype == b.dtype == d.dtype):
            _fail(self, "dtype", f"expects src0, src1, and dst to have the same element type, got {a.elem}, {b.elem}, {d.elem}")
        if a.elem not in _TSEL_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 tsel src0, src1, and dst element type to be i16/i32/f16/bf16/f32, got {a.elem}")
        if m.space != "vec" or m.elem != "i8":
            _fail(self, "mask", f"mask must be a loc=vec i8 tile (the packed predicate of tcmp/tcmps), got {m.describe()}")
        if not (_same_extent(a.valid[0], d.valid[0]) and _same_extent(a.valid[1], d.valid[1])
                and _same_extent(b.valid[0], d.valid[0]) and _same_extent(b.valid[1], d.valid[1])):
            _fail(self, "shape agreement", f"src0 {_dims_str(a.valid)}, src1 {_dims_str(b.valid)} and dst {_dims_str(d.valid)} valid shapes differ")
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            if t.space != "vec" or elem_bytes(t.dtype) != 4:
                _fail(self, "tmp", f"expects A2/A3 tsel tmp to be a loc=vec tile of a 4-byte element type, got {t.describe()}")


@irdl_op_definition
class TCIOp(_InsOutsOp):
    """`pto.tci ins(%start[, %tmp] : i32[, Tt]) outs(%ci : !pto.tile_buf<vec, 1xNxi32>)`: dst[0][j] = start + j.

    `{descending = true}` after `outs(...)` gives start - j. On A2/A3 ptoas adds a hidden f32
    tmp tile when none is given (`hidden_scratch`).
    """

    name = "pto.tci"
    HAS_TMP: ClassVar[bool] = True
    start = operand_def(IntegerType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    descending = opt_prop_def(IntegerAttr)

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        desc = attrs.pop("descending", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if desc is None:
            return {}
        if not isinstance(desc, IntegerAttr) or desc.value.data not in (0, 1, -1):  # i1 true parses as -1
            parser.raise_error(f"{cls.name}: descending must be true or false, got {desc}", start)
        return {"descending": IntegerAttr(1, IntegerType(1))} if desc.value.data else {}

    def _print_attrs(self, printer: Printer) -> None:
        if self.is_descending:
            printer.print_string(" {descending = true}")

    @property
    def is_descending(self) -> bool:
        return self.descending is not None and bool(self.descending.value.data)

    def verify_(self) -> None:
        d = _tile(self, self.dst, "dst")
        if d.space != "vec":
            _fail(self, "memory space", f"dst must be loc=vec, got {d.describe()}")
        if d.elem not in ("i16", "i32"):
            _fail(self, "dtype", f"expects dst element type to be i16/i32, got {d.elem}")
        if self.start.type != d.dtype:
            _fail(self, "dtype", f"expects S and dst element type to be exactly the same type, got {self.start.type} and {d.elem}")
        if d.cols.data == 1:
            _fail(self, "shape", "expects dst cols to be different from 1")
        if d.rows.data != 1:
            _fail(self, "shape", f"tci fills one row (dst[0][j] = start + j, pto-ir.md 7.13): dst must be 1xN, got {d.rows.data}x{d.cols.data}")
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            need = HIDDEN_TCI_TMP[int(d.elem[1:])][1]
            if t.space != "vec" or elem_bytes(t.dtype) != 4 or not t.is_row_major or t.is_boxed:
                _fail(self, "tmp", f"expects A2/A3 tmp to be a loc=vec ND tile of a 4-byte element type, got {t.describe()}")
            if t.nbytes < need:
                _fail(self, "tmp", f"expects A2/A3 tmp capacity to be at least {need} bytes for a {d.elem} dst, got {t.nbytes}")


class _ColExpandOp(_PrecisionAttrOp):
    """`ins(%a, %row : T, Tr) outs(%d : T)`: per-column broadcast d[r,c] = f(a[r,c], row[0,c])."""

    N_INS: ClassVar[int] = 2
    src = operand_def(TileBufType)
    row = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    DTYPES: ClassVar[tuple[str, ...]] = ("i16", "i32", "f16", "f32")

    def verify_(self) -> None:
        s, r, d = _tile(self, self.src, "src0"), _tile(self, self.row, "src1"), _tile(self, self.dst, "dst")
        for t, role in ((s, "src0"), (r, "src1"), (d, "dst")):
            _check_vec_row_major(self, t, role)
        if not (s.dtype == r.dtype == d.dtype) or s.elem not in self.DTYPES:
            _fail(self, "dtype", f"expects A2/A3 {self.name[4:]} element type to be {'/'.join(self.DTYPES)} (one dtype), got {s.elem}, {r.elem}, {d.elem}")
        if s.shape != d.shape:
            _fail(self, "shape agreement", f"expects src0/dst to have same shape, got {s.shape[0]}x{s.shape[1]} and {d.shape[0]}x{d.shape[1]}")
        if not _valid_compatible(s.valid, d.valid):
            _fail(self, "shape agreement", f"src0 valid {_dims_str(s.valid)} != dst valid {_dims_str(d.valid)}")
        if not _same_extent(r.valid[1], d.valid[1]):
            _fail(self, "shape agreement", f"expects src1 valid_shape[1] to equal dst valid_shape[1], got {r.valid[1]} and {d.valid[1]}")


@irdl_op_definition
class TColExpandAddOp(_ColExpandOp):
    """d = a + row"""

    name = "pto.tcolexpandadd"


@irdl_op_definition
class TColExpandSubOp(_ColExpandOp):
    """d = a - row"""

    name = "pto.tcolexpandsub"


@irdl_op_definition
class TColExpandMulOp(_ColExpandOp):
    """d = a * row"""

    name = "pto.tcolexpandmul"


@irdl_op_definition
class TColExpandDivOp(_ColExpandOp):
    """d = a / row (f16/f32 on A2/A3; optional `{precisionType = #pto<div_precision ...>}`)"""

    name = "pto.tcolexpanddiv"
    DTYPES: ClassVar[tuple[str, ...]] = ("f16", "f32")
    precisionType = opt_prop_def(DivPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = DivPrecisionAttr


@irdl_op_definition
class TColExpandMaxOp(_ColExpandOp):
    """d = max(a, row)"""

    name = "pto.tcolexpandmax"


@irdl_op_definition
class TColExpandMinOp(_ColExpandOp):
    """d = min(a, row)"""

    name = "pto.tcolexpandmin"


@irdl_op_definition
class TFillPadOp(_InsOutsOp):
    """`pto.tfillpad ins(%src : S) outs(%dst : D)`: copy src's valid region, fill the rest of dst.

    The fill value is dst's `pad` field: 1 zero, 2 max (+inf), 3 min (-inf); 0 (null) is rejected.
    """

    name = "pto.tfillpad"
    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if elem_bytes(s.dtype) != elem_bytes(d.dtype):
            _fail(self, "dtype", f"expects sizeof(src element) == sizeof(dst element), got {s.elem} and {d.elem}")
        expanded = s.shape != d.shape
        if s.rows.data > d.rows.data or s.cols.data > d.cols.data:
            _fail(self, "shape agreement", f"expects each dst physical shape dimension to be >= src, got src {s.shape[0]}x{s.shape[1]}, dst {d.shape[0]}x{d.shape[1]}")
        if expanded and (s.space != "vec" or d.space != "vec"):
            _fail(self, "memory space", "expects expanded TFILLPAD only for loc=vec")
        if s.space == "mat" and d.space == "mat" and s != d:
            _fail(self, "type agreement", "expects src/dst tile types to be lowerable to TFILLPAD for loc=mat (identical types)")
        if d.pad.data == 0:
            _fail(self, "pad value", f"expects dst PadVal != Null for tfillpad (dst {d.describe()} has pad=0; give it pad=1 zero, 2 max or 3 min)")


def hidden_scratch(op: Operation) -> tuple[str, str, int] | None:
    """The UB scratch ptoas allocates for `op` written without a tmp operand: (space, shape, bytes)."""
    if isinstance(op, _RowExpandOp) and op.tmp is None:
        return ("vec", "1x2048xf32", HIDDEN_ROWEXPAND_TMP_BYTES)
    if isinstance(op, _RowReduceOp) and op.tmp is None:
        t = op.src.type
        assert isinstance(t, TileBufType)
        return ("vec", f"{t.rows.data}x{t.cols.data}x{t.elem}", t.nbytes)
    if isinstance(op, TSelOp) and op.tmp is None:
        return ("vec", *HIDDEN_TSEL_TMP)
    if isinstance(op, TCIOp) and op.tmp is None:
        t = op.dst.type
        assert isinstance(t, TileBufType)
        width = t.dtype.width.data if isinstance(t.dtype, IntegerType) else 32
        return ("vec", *HIDDEN_TCI_TMP.get(width, HIDDEN_TCI_TMP[32]))
    return None


OPS = (
    TCvtOp,
    TExpandsOp,
    TAddOp,
    TSubOp,
    TMulOp,
    TDivOp,
    TMaxOp,
    TMinOp,
    TExpOp,
    TLogOp,
    TSqrtOp,
    TRsqrtOp,
    TRecipOp,
    TAbsOp,
    TNegOp,
    TReluOp,
    TAddsOp,
    TSubsOp,
    TMulsOp,
    TDivsOp,
    TMaxsOp,
    TMinsOp,
    TRowMaxOp,
    TRowSumOp,
    TRowMinOp,
    TRowExpandSubOp,
    TRowExpandMulOp,
    TRowExpandDivOp,
    TRowExpandAddOp,
    TRowExpandMaxOp,
    TRowExpandMinOp,
    TRowExpandExpdifOp,
    TTriOp,
    TCmpSOp,
    TCmpOp,
    TSelOp,
    TCIOp,
    TColExpandAddOp,
    TColExpandSubOp,
    TColExpandMulOp,
    TColExpandDivOp,
    TColExpandMaxOp,
    TColExpandMinOp,
    TFillPadOp,
)
