"""The dialect's shared core, which every op family builds on (a family imports `types`, this
module and `ptofa.ir.target`, never another family): the custom syntax and verifier helpers
(the `_fail` rule reporter, operand lists, `{key = int}` dicts, `[%i, %j]` index lists), the
`ins(...) outs(...)` base class of the DPS tile ops, the vector checks and the base classes of
the elementwise, row and column ops, the matmul dtype rule, the memory family's view / tile
rules, and the marker classes by which one family's verifier recognises another family's ops
(a tile view, a pipe entry, a pipe init, a scalar pointer access) without importing it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import Float16Type, Float32Type, IntegerAttr, IntegerType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, operand_def, opt_operand_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from ptofa.ir.dialect.types import DYN, PartitionTensorViewType, PtrType, TileBufType, _dims_str, elem_bytes, elem_name
from ptofa.ir.target import rowexpand_tmp_min_bytes


def _fail(op: Operation, rule: str, detail: str) -> None:
    raise VerifyException(f"'{op.name}' {rule}: {detail}")


class BuildRuleError(VerifyException):
    """A rule of the C++ build (pto-isa's headers under bisheng) or of pto-isa's behaviour on the
    NPU that ptoas's verifier does not check: ptoas compiles the op, the kernel then fails to
    build, scrambles data or overwrites other tiles.
    `run_fa check` reports it; `--ptoas-only` (`launch_rules=False`) leaves it out."""


def _fail_build(op: Operation, rule: str, detail: str, consequence: str = "the C++ build does not") -> None:
    """Report a rule of the C++ build or of pto-isa's behaviour on the NPU that ptoas does not
    check; verifiers call it after their ptoas rules (it ends the op's checks)."""
    raise BuildRuleError(f"'{op.name}' {rule}: {detail} (ptofa rule: ptoas compiles it, {consequence})")


def _tile(op: Operation, value: SSAValue, role: str) -> TileBufType:
    if not isinstance(value.type, TileBufType):
        _fail(op, "operand type", f"{role} must be a !pto.tile_buf, got {value.type}")
    return value.type  # type: ignore[return-value]


def _parse_typed_list(parser: Parser) -> tuple[list, list[Attribute]]:
    """Parse `%a, %b : T1, T2` (inside parens already opened)."""
    operands = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
    parser.parse_punctuation(":")
    types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
    if len(types) != len(operands):
        parser.raise_error(f"{len(operands)} operands but {len(types)} types")
    return operands, types


def _print_typed_list(printer: Printer, values: Sequence[SSAValue]) -> None:
    printer.print_list(values, printer.print_operand)
    printer.print_string(" : ")
    printer.print_list([v.type for v in values], printer.print_attribute)


def _parse_brace_ints(parser: Parser, allowed: dict[str, Attribute], attr_keys: dict[str, type] | None = None) -> dict[str, Attribute]:
    """Parse `{key = int, ...}` into IntegerAttrs of the given widths; a key of `attr_keys`
    takes an attribute of the given class instead (`acc_push_epilogue = #pto.acc_push_epilogue<...>`)."""
    out: dict[str, Attribute] = {}
    attr_keys = attr_keys or {}
    parser.parse_punctuation("{")
    if parser.parse_optional_punctuation("}") is None:
        while True:
            key = parser.parse_identifier()
            if key not in allowed and key not in attr_keys:
                parser.raise_error(f"unexpected keyword '{key}', expected one of {', '.join([*allowed, *attr_keys])}")
            if key in out:
                parser.raise_error(f"duplicate keyword '{key}'")
            parser.parse_punctuation("=")
            if key in attr_keys:
                value = parser.parse_attribute()
                if not isinstance(value, attr_keys[key]):
                    parser.raise_error(f"'{key}' takes a #{attr_keys[key].name}<...>, got {value}")
                out[key] = value
            elif key == "nosplit":
                value = parser.parse_boolean()
                out[key] = IntegerAttr(int(value), IntegerType(1))
            else:
                out[key] = IntegerAttr(parser.parse_integer(allow_boolean=False), allowed[key])
            if parser.parse_optional_punctuation(",") is None:
                break
        parser.parse_punctuation("}")
    return out


def _parse_index_list(parser: Parser) -> list:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_unresolved_operand)


def _print_index_list(printer: Printer, values: Sequence[SSAValue]) -> None:
    printer.print_string("[")
    printer.print_list(values, printer.print_operand)
    printer.print_string("]")


def split_discardable(op_cls: type[IRDLOperation], attrs: dict[str, Attribute]) -> tuple[dict[str, Attribute], dict[str, Attribute]]:
    """(the op's own attributes, the rest). MLIR ops keep any other attribute of their dict as
    a discardable attribute, which ptoas's A2/A3 lowering does not read (e.g. the
    `pto.fusion.group_id` / `pto.fusion.order` marks of A5's fusion passes, or `src0eqdst`
    on a `trowexpand*`): they parse and verify, and the simulator ignores them."""
    own = op_cls.get_irdl_definition().properties
    known = {k: v for k, v in attrs.items() if k in own}
    extra = {k: v for k, v in attrs.items() if k not in own}
    return known, extra


def print_merged_attrs(printer: Printer, op: Operation, print_own) -> None:
    """Print ` {...}` holding what `print_own(printer)` prints (the op's own attribute dict, or
    nothing) and the op's discardable attributes, as one dict."""
    from io import StringIO

    if not op.attributes:
        print_own(printer)
        return
    own = StringIO()
    print_own(Printer(stream=own))
    text = own.getvalue().strip()
    extra = StringIO()
    Printer(stream=extra).print_attr_dict(op.attributes)
    extra_text = extra.getvalue().strip()
    if text:
        printer.print_string(" " + text[:-1] + ", " + extra_text[1:])
    else:
        printer.print_string(" " + extra_text)


def constant_index(value: SSAValue) -> int | None:
    """The integer value of an `arith.constant`, or None when not a constant."""
    from xdsl.dialects.arith import ConstantOp

    owner = value.owner
    if isinstance(owner, ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


class _InsOutsOp(IRDLOperation):
    """Base of DPS ops written `ins(%a, ... : A, ...) outs(%d : D)`.

    Subclasses declare their operands in textual order (ins first, outs last);
    an optional `tmp` operand may follow the required ins.
    """

    N_INS: ClassVar[int] = 1  # required ins operands
    HAS_TMP: ClassVar[bool] = False
    # The op's attribute dict sits inside `ins(...)` before the colon (ptoas's
    # `ins(%a, %b {cmpMode = ...} : A, B)`), instead of after `outs(...)`.
    INNER_ATTRS: ClassVar[bool] = False

    def ins_values(self) -> list[SSAValue]:
        return list(self.operands[:-1])

    @property
    def dst(self) -> SSAValue:
        return self.operands[-1]

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        if cls.INNER_ATTRS:
            ins = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
            attrs = parser.parse_optional_attr_dict()
            parser.parse_punctuation(":")
            in_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
            if len(in_types) != len(ins):
                parser.raise_error(f"{len(ins)} operands but {len(in_types)} types", start)
        else:
            ins, in_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        outs, out_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        if not cls.INNER_ATTRS:
            attrs = parser.parse_optional_attr_dict()
        return cls._from_parsed(parser, ins, in_types, outs, out_types, attrs, start)

    @classmethod
    def _from_parsed(cls, parser: Parser, ins, in_types, outs, out_types, attrs, start: int | None = None):
        allowed = cls.N_INS + (1 if cls.HAS_TMP else 0)
        if not cls.N_INS <= len(ins) <= allowed or len(outs) != 1:
            parser.raise_error(
                f"{cls.name} takes {cls.N_INS}{'-' + str(allowed) if cls.HAS_TMP else ''} ins and 1 outs operand, "
                f"got {len(ins)} ins and {len(outs)} outs", start)
        values = [parser.resolve_operand(o, t) for o, t in zip(ins, in_types)]
        dst = parser.resolve_operand(outs[0], out_types[0])
        operands: list = values[: cls.N_INS]
        if cls.HAS_TMP:
            operands.append(values[cls.N_INS :])
        operands.append(dst)
        known, extra = split_discardable(cls, attrs)
        return cls.build(operands=operands, properties=cls._props_from_attrs(parser, known, start), attributes=extra)

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        return {}

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        if self.INNER_ATTRS:
            printer.print_list(self.ins_values(), printer.print_operand)
            self.print_attr_dict(printer)
            printer.print_string(" : ")
            printer.print_list([v.type for v in self.ins_values()], printer.print_attribute)
            printer.print_string(") outs(")
            _print_typed_list(printer, [self.dst])
            printer.print_string(")")
            return
        _print_typed_list(printer, self.ins_values())
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")
        self.print_attr_dict(printer)

    def print_attr_dict(self, printer: Printer) -> None:
        """The op's one attribute dict: its properties (`_print_attrs`) and its discardable attributes."""
        print_merged_attrs(printer, self, self._print_attrs)

    def _print_attrs(self, printer: Printer) -> None:
        """Print the op's attribute dict (` {...}`, or nothing); after `outs(...)` or, with
        INNER_ATTRS, inside `ins(...)` before the colon."""


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
    """Vector tiles of one dtype and agreeing valid shapes; blayout=row_major unless the op's class
    says ptoas takes a col_major tile too (`COL_MAJOR_OK`: the tile-scalar ops and tneg, which
    ptoas 0.60 compiles on a [R,1] column; the tile-tile and the other unary ops it refuses)."""
    _check_vec(op, tiles)
    for t in tiles:
        if not t.is_row_major and not getattr(op, "COL_MAJOR_OK", False):
            _fail(op, "layout", f"elementwise ops need blayout=row_major tiles, got {t.describe()} col_major")
        if t.elem not in _VEC_DTYPES:
            _fail(op, "dtype", f"{t.elem} is not a vector arithmetic type {_VEC_DTYPES}")
    first = tiles[0]
    for t in tiles[1:]:
        if t.dtype != first.dtype:
            _fail(op, "dtype", f"operands must share one dtype, got {first.elem} and {t.elem}")
        if not _valid_compatible(t.valid, first.valid):
            _fail(op, "shape agreement", f"valid shapes {_dims_str(first.valid)} and {_dims_str(t.valid)} differ")


def _check_vec_row_major(op: Operation, t: TileBufType, role: str) -> None:
    """ptoas's verifyVecTileCommon: loc=vec and blayout=row_major."""
    if t.space != "vec":
        _fail(op, "memory space", f"{role} must be loc=vec, got {t.describe()}")
    if not t.is_row_major:
        _fail(op, "layout", f"{role} must be blayout=row_major, got {t.describe()} col_major")


def _same_extent(a: int, b: int) -> bool:
    return a == DYN or b == DYN or a == b


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


class _ScalarOp(_InsOutsOp):
    """`ins(%a, %s : T, f32) outs(%d : T)`: elementwise with a scalar, operands in textual order.

    Only `tdivs` also takes the scalar first (`ins(%s, %a : f32, T)`, d = s / a).
    """

    N_INS: ClassVar[int] = 2
    SCALAR_FIRST_OK: ClassVar[bool] = False
    COL_MAJOR_OK: ClassVar[bool] = True
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


def _check_col_vector(op: Operation, col: TileBufType, rows: int, role: str, nd_valid_cols: int | None = None) -> None:
    """A per-row vector: DN [R,1], or ND with `nd_valid_cols` valid columns (default 32 bytes' worth)."""
    if nd_valid_cols is None:
        nd_valid_cols = 32 // elem_bytes(col.dtype)
    if col.space != "vec":
        _fail(op, "memory space", f"{role} must be loc=vec, got loc={col.space}")
    if not col.is_row_major:
        if col.valid[1] not in (1, DYN):
            _fail(op, "shape agreement", f"{role} DN column vector needs 1 valid column, got {col.valid[1]}")
    elif col.valid[1] not in (nd_valid_cols, DYN):
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
        _check_col_vector(self, d, s.valid[0], "dst", nd_valid_cols=1)  # ND dst: valid cols = 1 (docs/sources.md §3.4)
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            if t.space != "vec" or t.dtype != s.dtype:
                _fail(self, "operand type", f"tmp must be a loc=vec {s.elem} tile, got {t.describe()}")
            if s.elem in ("f16", "f32") and t.nbytes < s.nbytes:
                _fail(self, "tmp size", f"tmp of {t.nbytes} bytes is smaller than the src ({s.nbytes} bytes)")


def _rowexpand_tmp_min_bytes(valid_rows: int) -> int:
    """ptoas's minimum tmp of an A2/A3 trowexpand (PTOAS getTRowExpandTmpMinBytes): one 32-byte
    block per valid row, 256 bytes per 8 rows, 7680 from 256 rows on, 8 KiB for a dynamic count."""
    if valid_rows == DYN:
        return 8192
    return rowexpand_tmp_min_bytes(valid_rows) if valid_rows < 256 else 30 * 256


class _RowExpandOp(_InsOutsOp):
    """`ins(%a, %col[, %tmp] : T, C[, Tt]) outs(%d : T)`: per-row broadcast d[i,j] = f(a[i,j], col[i,0]).

    ptoas's A2/A3 verifiers differ by op (PTOAS PTO.cpp, TRowExpand*Op::verify), and `RULES`
    says which: "binary" (sub, mul, div) checks element types and a row-major dst only;
    "add" also src0 = dst valid shape, a row-major src0 and the per-row operand's shape;
    "reduce" (max, min, expdif) that one of src0 / src1 matches dst and the other is a per-row
    vector (DN [R,1], or ND with 32 bytes of valid columns). With a tmp (not expdif) the
    per-row operand is a DN column (mode 1) and the tmp holds at least a 32-byte block per
    valid row.
    """

    N_INS: ClassVar[int] = 2
    src = operand_def(TileBufType)
    col = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True
    RULES: ClassVar[str] = "binary"
    DTYPES: ClassVar[tuple[str, ...]] = ("i16", "i32", "f16", "f32")
    TMP_CONTRACT: ClassVar[bool] = True

    def verify_(self) -> None:
        s, c, d = _tile(self, self.src, "src0"), _tile(self, self.col, "src1"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, c, d])
        if not (s.dtype == c.dtype == d.dtype) or s.elem not in self.DTYPES:
            _fail(self, "dtype", f"src0/src1/dst must share one of {'/'.join(self.DTYPES)}, got {s.elem}, {c.elem}, {d.elem}")
        if not d.is_row_major:
            _fail(self, "layout", f"dst must be blayout=row_major, got {d.blayout.data}")
        if self.RULES == "add":
            if not s.is_row_major:
                _fail(self, "layout", f"src0 must be blayout=row_major, got {s.blayout.data}")
            if not _valid_compatible(s.valid, d.valid):
                _fail(self, "shape agreement", f"src0 valid {_dims_str(s.valid)} != dst valid {_dims_str(d.valid)}")
            _check_col_vector(self, c, d.valid[0], "src1")
        elif self.RULES == "reduce":
            self._verify_full_and_broadcast(s, c, d)
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            _check_vec(self, [t])
            if t.dtype != d.dtype:
                _fail(self, "dtype", f"tmp and dst must have the same element type, got tmp {t.elem}, dst {d.elem}")
            if self.TMP_CONTRACT:
                expanded = c if _valid_compatible(s.valid, d.valid) else s
                if expanded.is_row_major or expanded.valid[1] not in (1, DYN):
                    _fail(self, "layout", "with a tmp, the per-row operand must be a DN [R,1] column (mode 1)")
                need = _rowexpand_tmp_min_bytes(d.valid[0])
                if t.nbytes < need:
                    _fail(self, "scratch", f"tmp holds {t.nbytes} bytes; the column broadcast of {d.valid[0]} valid rows "
                                           f"writes {need} (one 32-byte block per row, 256 bytes per 8 rows)")

    def _verify_full_and_broadcast(self, s: TileBufType, c: TileBufType, d: TileBufType) -> None:
        if DYN not in d.valid and 0 in d.valid:
            if d.valid == (0, 0):
                return
            _fail(self, "shape agreement", f"dst valid dims must be non-zero, got {_dims_str(d.valid)}")
        for full, bcast, names in ((s, c, ("src0", "src1")), (c, s, ("src1", "src0"))):
            if not _valid_compatible(full.valid, d.valid) or not full.is_row_major:
                continue
            try:
                _check_col_vector(self, bcast, d.valid[0], names[1])
                if self.tmp is not None and self.TMP_CONTRACT and bcast.is_row_major:
                    _fail(self, "layout", f"{names[1]} must be a DN column when a tmp is given")
            except VerifyException:
                if full is c or not _valid_compatible(c.valid, d.valid):
                    raise
                continue
            return
        _fail(self, "shape agreement", f"one of src0 / src1 must match dst valid {_dims_str(d.valid)} and the other be a "
                                       f"per-row vector, got {_dims_str(s.valid)} and {_dims_str(c.valid)}")


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


_MATMUL_DTYPES = {("f32", "f16", "f16"), ("f32", "bf16", "bf16"), ("f32", "f32", "f32"), ("i32", "i8", "i8")}


def _check_matmul(op: Operation, a: TileBufType, b: TileBufType, c: TileBufType) -> None:
    for t, loc, role in ((a, "left", "lhs"), (b, "right", "rhs"), (c, "acc", "dst")):
        if t.space != loc:
            _fail(op, "memory space", f"{role} must be loc={loc}, got loc={t.space}")
    if (c.elem, a.elem, b.elem) not in _MATMUL_DTYPES:
        _fail(op, "dtype triple", f"(dst {c.elem}; lhs {a.elem}, rhs {b.elem}) is not one of {sorted(_MATMUL_DTYPES)}")
    (m, k), (k2, n), (m2, n2) = a.shape, b.shape, c.shape
    if k != k2 or m != m2 or n != n2:
        _fail(op, "shape agreement", f"lhs {m}x{k} @ rhs {k2}x{n} -> dst {m2}x{n2}: need lhs[M,K], rhs[K,N], dst[M,N]")
    for name, v in (("m", m), ("k", k), ("n", n)):
        if v > 4095:
            _fail(op, "matmul dims", f"{name}={v} must be <= 4095")


def physical_shape(value: SSAValue) -> tuple[int, int]:
    """The tile shape ptoas materializes for `value`: a subview is its parent's physical tile."""
    while isinstance(value.owner, _TileViewOp) and value.owner.SUBVIEW:
        value = value.owner.src
    t = value.type
    assert isinstance(t, TileBufType)
    return t.shape


def tile_layout(t: TileBufType) -> str:
    """ND, DN, NZ or ZN (docs/sources.md §3.2), or the raw `blayout/slayout` pair for other boxed layouts."""
    return {
        ("row_major", "none_box"): "ND", ("col_major", "none_box"): "DN",
        ("col_major", "row_major"): "NZ", ("row_major", "col_major"): "ZN",
    }.get((t.blayout.data, t.slayout.data), f"{t.blayout.data}/{t.slayout.data}")


_GM_TILE_LAYOUTS = {
    "vec": {"nd": ("ND",), "dn": ("DN",), "nz": ("NZ",)},
    "mat": {"nd": ("ND", "NZ"), "dn": ("DN", "ZN"), "nz": ("NZ",)},
}


_LOAD_STORE_ELEMS = ("i8", "ui8", "i16", "ui16", "i32", "ui32", "i64", "ui64", "f16", "bf16", "f32")


def _check_view_tile(op: Operation, view: PartitionTensorViewType, tile: TileBufType, allow_convert: bool = False) -> None:
    """ptoas's A2/A3 tload / tstore rules between the view and the tile (PTOAS TLoadOp::verify,
    TStoreOp::verify): positive static view dims, a loadable element type of the same size
    (an acc store converts), and for a store equal static element counts (a 1x1024 view
    may take a 32x32 tile). A load leaves the shapes unrelated: pto-isa asserts at run time
    that the tile's valid shape is the view's, which the simulator checks."""
    if any(dim != DYN and dim <= 0 for dim in view.dims):
        _fail(op, "shape agreement", f"view dims {_dims_str(view.dims)} must be positive")
    if DYN not in tile.valid and min(tile.valid) < 0:
        _fail(op, "shape agreement", f"tile valid shape {_dims_str(tile.valid)} must be non-negative")
    if not allow_convert:
        if tile.elem not in _LOAD_STORE_ELEMS:
            _fail(op, "dtype", f"A2/A3 {op.name[4:]} moves i8/i16/i32/i64/f16/bf16/f32 tiles, got {tile.elem}")
        if elem_bytes(view.elem) != elem_bytes(tile.dtype):
            _fail(op, "dtype", f"view element {elem_name(view.elem)} and tile element {tile.elem} differ in size")
    if op.name != "pto.tstore" or DYN in view.dims or DYN in tile.valid:
        return
    count = 1
    for dim in view.dims:
        count *= dim
    if count != tile.valid[0] * tile.valid[1]:
        _fail(op, "shape agreement", f"view {_dims_str(view.dims)} holds {count} elements, the tile's valid "
              f"{_dims_str(tile.valid)} {tile.valid[0] * tile.valid[1]}; a store needs equal counts")


def _parse_ptr_type(parser: Parser) -> Attribute:
    """`!pto.ptr<T>`, or ptoas's elided `<T>` (its addptr prints the pointer types unqualified)."""
    if parser._current_token.text == "<":
        return PtrType.new(PtrType.parse_parameters(parser))
    return parser.parse_type()


def _parse_ptr_index(parser: Parser) -> tuple:
    """`%base[%index]` (a pointer and an offset, or a local array and an index)."""
    ptr = parser.parse_unresolved_operand()
    parser.parse_punctuation("[")
    index = parser.parse_unresolved_operand()
    parser.parse_punctuation("]")
    return ptr, index


_SCALAR_ELEMS = ("f16", "bf16", "f32", "i8", "i16", "i32", "i64", "index")


def _check_scalar_ptr(op: Operation, ptr: SSAValue, value_type: Attribute) -> None:
    pt = ptr.type
    assert isinstance(pt, PtrType)
    if elem_name(pt.elem) != elem_name(value_type):
        _fail(op, "type agreement", f"pointer {pt} and scalar {value_type} differ in element type")
    if elem_name(value_type) not in _SCALAR_ELEMS:
        _fail(op, "element type", f"{elem_name(value_type)} is not a scalar type ptoas loads ({', '.join(_SCALAR_ELEMS)})")


# Markers: a family's verifier recognises another family's ops by these base classes.


class _TileViewOp(IRDLOperation):
    """An op whose result views the storage of its `src` tile (`views`: treshape, subview).
    `SUBVIEW`: ptoas materializes the result as its parent's physical tile (a subview)."""

    SUBVIEW: ClassVar[bool] = False


class _PipeEntryOp(IRDLOperation):
    """An op whose result is a pipe slot's entry (`pipes`: talloc, tpop); entries are row-major."""


class _PipeInitOp(IRDLOperation):
    """A pipe's initialization (`pipes`: aic / aiv_initialize_pipe): `id_value`, `CORE`, `acc_push_epilogue`."""


class _ScalarPtrOp(IRDLOperation):
    """A scalar access through a pointer (`memory`: load_scalar, store_scalar): `PTR_OPERAND` is
    the index of its pointer operand."""

    PTR_OPERAND: ClassVar[int]
