"""The PTO dialect on xDSL: the subset of ptoas 0.60's PTO IR the FA kernel uses.

Types, attributes and ops are written in ptoas's *custom* assembly syntax
(pto-ir.md sections 5-10), so that a module printed here is what ptoas reads,
and a `.pto` written by ptoas's own tests parses here. Every op verifies the
rules of pto-ir.md it can check locally (memory spaces, dtypes, shapes,
alignment); rules spanning a function (pipe init / use pairing) live in
`verify_pipes`, called from `ptofa.textio.verify_module`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    Float16Type,
    Float32Type,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from ptofa.target import HIDDEN_ROWEXPAND_TMP_BYTES

DYN = -1  # a dynamic (`?`) dimension

# --------------------------------------------------------------------------------------
# Element types
# --------------------------------------------------------------------------------------

_ELEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i8": 1, "i16": 2, "i32": 4, "i64": 8}


def elem_name(t: Attribute) -> str:
    """Short spelling of an element type: f16, f32, i64, ..."""
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, Float32Type):
        return "f32"
    if isinstance(t, IntegerType):
        return f"i{t.width.data}"
    if isinstance(t, IndexType):
        return "index"
    return str(t)


def elem_bytes(t: Attribute) -> int:
    name = elem_name(t)
    if name not in _ELEM_BYTES:
        raise VerifyException(f"unsupported element type {name}")
    return _ELEM_BYTES[name]


def _dims_str(dims: Sequence[int]) -> str:
    return "x".join("?" if d == DYN else str(d) for d in dims)


# --------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------

MEMORY_SPACES = ("gm", "ub", "mat", "l1", "left", "l0a", "right", "l0b", "acc", "l0c", "vec", "bias", "bt", "scaling", "fb")


@irdl_attr_definition
class PtrType(ParametrizedAttribute, TypeAttribute):
    """`!pto.ptr<T[, space]>`: a typed pointer (space defaults to gm); `addptr` counts elements."""

    name = "pto.ptr"
    elem: Attribute
    space: StringAttr

    def __init__(self, elem: Attribute, space: str = "gm"):
        super().__init__(elem, StringAttr(space))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            elem = parser.parse_type()
            space = "gm"
            if parser.parse_optional_punctuation(","):
                space = parser.parse_identifier()
                if space not in MEMORY_SPACES:
                    parser.raise_error(f"unknown pointer memory space '{space}'")
        return (elem, StringAttr(space))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_attribute(self.elem)
        if self.space.data != "gm":
            printer.print_string(f", {self.space.data}")
        printer.print_string(">")


def _parse_shaped(parser: AttrParser) -> tuple[list[int], Attribute]:
    dims: list[int] = []
    with parser.in_angle_brackets():
        while True:
            if parser.parse_optional_punctuation("?") is not None:
                dims.append(DYN)
            else:
                value = parser.parse_optional_integer(allow_boolean=False, allow_negative=False)
                if value is None:
                    break
                dims.append(value)
            parser.parse_shape_delimiter()
        elem = parser.parse_type()
    if not dims:
        parser.raise_error("a view type needs rank >= 1")
    return dims, elem


# Shared bases declare their parameters as dataclass fields so that the generated
# __eq__/__hash__ of the concrete attribute compare them (without the decorator a
# subclass's dataclass sees no fields, and every !pto.tensor_view<...> compares equal).
@dataclass(frozen=True, init=False)
class _ViewType(ParametrizedAttribute, TypeAttribute):
    shape: ArrayAttr[IntAttr]
    elem: Attribute

    def __init__(self, shape: Sequence[int], elem: Attribute):
        super().__init__(ArrayAttr(IntAttr(d) for d in shape), elem)

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    @property
    def nbytes(self) -> int | None:
        if DYN in self.dims:
            return None
        n = elem_bytes(self.elem)
        for d in self.dims:
            n *= d
        return n

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        dims, elem = _parse_shaped(parser)
        return (ArrayAttr(IntAttr(d) for d in dims), elem)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{_dims_str(self.dims)}x")
        printer.print_attribute(self.elem)
        printer.print_string(">")


@irdl_attr_definition
class TensorViewType(_ViewType):
    """`!pto.tensor_view<d0 x ... x T>`: a strided GM tensor descriptor."""

    name = "pto.tensor_view"


@irdl_attr_definition
class PartitionTensorViewType(_ViewType):
    """`!pto.partition_tensor_view<d0 x ... x T>`: a window of a tensor_view (what tload/tstore take)."""

    name = "pto.partition_tensor_view"


TILE_LOCS = ("mat", "left", "right", "acc", "vec", "bias", "scaling")
BLAYOUTS = ("row_major", "col_major")
SLAYOUTS = ("none_box", "row_major", "col_major")
FRACTALS = (32, 512, 1024)


@irdl_attr_definition
class TileBufType(ParametrizedAttribute, TypeAttribute):
    """`!pto.tile_buf<loc, RxCxT, overrides...>`: a local on-chip buffer (compact or legacy spelling)."""

    name = "pto.tile_buf"
    loc: StringAttr
    dtype: Attribute
    rows: IntAttr
    cols: IntAttr
    v_row: IntAttr  # DYN for `?`
    v_col: IntAttr
    blayout: StringAttr
    slayout: StringAttr
    fractal: IntAttr
    pad: IntAttr
    compact: IntAttr

    def __init__(
        self,
        loc: str,
        rows: int,
        cols: int,
        dtype: Attribute,
        *,
        v_row: int | None = None,
        v_col: int | None = None,
        blayout: str = "row_major",
        slayout: str = "none_box",
        fractal: int = 512,
        pad: int = 0,
        compact: int = 0,
    ):
        super().__init__(
            StringAttr(loc),
            dtype,
            IntAttr(rows),
            IntAttr(cols),
            IntAttr(rows if v_row is None else v_row),
            IntAttr(cols if v_col is None else v_col),
            StringAttr(blayout),
            StringAttr(slayout),
            IntAttr(fractal),
            IntAttr(pad),
            IntAttr(compact),
        )

    # Convenient plain-value accessors.
    @property
    def space(self) -> str:
        return self.loc.data

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows.data, self.cols.data)

    @property
    def valid(self) -> tuple[int, int]:
        return (self.v_row.data, self.v_col.data)

    @property
    def elem(self) -> str:
        return elem_name(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.rows.data * self.cols.data * elem_bytes(self.dtype)

    @property
    def is_row_major(self) -> bool:
        return self.blayout.data == "row_major"

    @property
    def is_boxed(self) -> bool:
        return self.slayout.data != "none_box"

    def describe(self) -> str:
        return f"{self.loc.data} {self.rows.data}x{self.cols.data}x{self.elem}"

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            first = parser.parse_identifier()
            if first == "loc":
                fields = cls._parse_legacy(parser)
            else:
                fields = cls._parse_compact(parser, first)
        try:
            t = cls(**fields)  # type: ignore[arg-type]
        except VerifyException as exc:
            # A tile type broken by a verifier rule is reported at its source position.
            parser.raise_error(str(exc), start)
        return tuple(t.parameters)

    @classmethod
    def _parse_compact(cls, parser: AttrParser, loc: str) -> dict:
        if loc not in TILE_LOCS:
            parser.raise_error(f"unknown tile_buf loc '{loc}', expected one of {', '.join(TILE_LOCS)}")
        parser.parse_punctuation(",")
        # parse_shape_dimension splits hex-looking tokens: `0x16` is `0` `x` `16` in a shape.
        rows = parser.parse_shape_dimension(allow_dynamic=False)
        parser.parse_shape_delimiter()
        cols = parser.parse_shape_dimension(allow_dynamic=False)
        parser.parse_shape_delimiter()
        dtype = parser.parse_type()
        fields: dict = dict(loc=loc, rows=rows, cols=cols, dtype=dtype)
        while parser.parse_optional_punctuation(","):
            key = parser.parse_identifier()
            parser.parse_punctuation("=")
            if key == "valid":
                fields["v_row"] = cls._parse_valid_dim(parser)
                parser.parse_shape_delimiter()
                fields["v_col"] = cls._parse_valid_dim(parser)
            elif key in ("blayout", "slayout"):
                fields[key] = parser.parse_identifier()
            elif key in ("fractal", "pad", "compact"):
                fields[key] = parser.parse_integer(allow_boolean=False)
            else:
                parser.raise_error(f"unknown tile_buf field '{key}'")
        return fields

    @classmethod
    def _parse_legacy(cls, parser: AttrParser) -> dict:
        def field(name: str) -> None:
            parser.parse_punctuation(",")
            got = parser.parse_identifier()
            if got != name:
                parser.raise_error(f"legacy tile_buf: expected field '{name}', got '{got}'")
            parser.parse_punctuation("=")

        parser.parse_punctuation("=")
        fields: dict = dict(loc=parser.parse_identifier())
        field("dtype")
        fields["dtype"] = parser.parse_type()
        for name in ("rows", "cols"):
            field(name)
            fields[name] = parser.parse_integer(allow_boolean=False, allow_negative=False)
        for name in ("v_row", "v_col"):
            field(name)
            fields[name] = cls._parse_dim(parser)
        for name in ("blayout", "slayout"):
            field(name)
            fields[name] = parser.parse_identifier()
        for name in ("fractal", "pad"):
            field(name)
            fields[name] = parser.parse_integer(allow_boolean=False)
        if parser.parse_optional_punctuation(","):
            got = parser.parse_identifier()
            if got != "compact":
                parser.raise_error(f"legacy tile_buf: unexpected field '{got}'")
            parser.parse_punctuation("=")
            fields["compact"] = parser.parse_integer(allow_boolean=False)
        return fields

    @staticmethod
    def _parse_valid_dim(parser: AttrParser) -> int:
        """A compact `valid=RxC` dimension: `?` or a decimal (hex-looking `0x16` splits)."""
        if parser.parse_optional_punctuation("?") is not None:
            return DYN
        return parser.parse_shape_dimension(allow_dynamic=False)

    @staticmethod
    def _parse_dim(parser: AttrParser) -> int:
        if parser.parse_optional_punctuation("?") is not None:
            return DYN
        value = parser.parse_integer(allow_boolean=False)
        return DYN if value == -1 else value

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.loc.data}, {self.rows.data}x{self.cols.data}x")
        printer.print_attribute(self.dtype)
        if self.valid != self.shape:
            printer.print_string(f", valid={_dims_str(self.valid)}")
        if self.blayout.data != "row_major":
            printer.print_string(f", blayout={self.blayout.data}")
        if self.slayout.data != "none_box":
            printer.print_string(f", slayout={self.slayout.data}")
        if self.fractal.data != 512:
            printer.print_string(f", fractal={self.fractal.data}")
        if self.pad.data != 0:
            printer.print_string(f", pad={self.pad.data}")
        if self.compact.data != 0:
            printer.print_string(f", compact={self.compact.data}")
        printer.print_string(">")

    def verify(self) -> None:
        where = f"!pto.tile_buf<{self.describe()}>"
        rows, cols = self.shape
        if rows <= 0 or cols <= 0:
            raise VerifyException(f"{where}: shape {rows}x{cols} must be positive")
        if self.loc.data not in TILE_LOCS:
            raise VerifyException(f"{where}: unknown loc '{self.loc.data}'")
        if self.blayout.data not in BLAYOUTS:
            raise VerifyException(f"{where}: blayout '{self.blayout.data}' not in {BLAYOUTS}")
        if self.slayout.data not in SLAYOUTS:
            raise VerifyException(f"{where}: slayout '{self.slayout.data}' not in {SLAYOUTS}")
        if self.fractal.data not in FRACTALS:
            raise VerifyException(f"{where}: fractal={self.fractal.data} must be one of {FRACTALS}")
        if not 0 <= self.pad.data <= 3:
            raise VerifyException(f"{where}: pad={self.pad.data} must be 0..3")
        for name, v, full in (("v_row", self.v_row.data, rows), ("v_col", self.v_col.data, cols)):
            if v != DYN and not 0 <= v <= full:
                raise VerifyException(f"{where}: valid shape {name}={v} must be within 0..{full}")
        esize = elem_bytes(self.dtype)
        if self.loc.data == "vec" and not self.is_boxed:
            if self.is_row_major and (cols * esize) % 32 != 0:
                raise VerifyException(
                    f"{where}: vector tile alignment: ND tile needs cols*sizeof(T) % 32 == 0, "
                    f"got {cols}*{esize} = {cols * esize}"
                )
            if not self.is_row_major and (rows * esize) % 32 != 0:
                raise VerifyException(
                    f"{where}: vector tile alignment: DN tile needs rows*sizeof(T) % 32 == 0, "
                    f"got {rows}*{esize} = {rows * esize}"
                )


# --------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, init=False)
class _EnumAttr(ParametrizedAttribute):
    """`#pto.<name><value>` with one identifier parameter."""

    VALUES: ClassVar[tuple[str, ...]] = ()
    value: StringAttr

    def __init__(self, value: str):
        super().__init__(StringAttr(value))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            value = parser.parse_identifier()
        if value not in cls.VALUES:
            parser.raise_error(f"#{cls.name}: '{value}' is not one of {', '.join(cls.VALUES)}")
        return (StringAttr(value),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.value.data}>")


@irdl_attr_definition
class KernelKindAttr(_EnumAttr):
    """`#pto.kernel_kind<cube|vector>` on a function: which core type runs its body."""

    name = "pto.kernel_kind"
    VALUES: ClassVar[tuple[str, ...]] = ("cube", "vector")


@irdl_attr_definition
class LayoutAttr(_EnumAttr):
    """`#pto.layout<nd|dn|nz>`: GM layout of a tensor view."""

    name = "pto.layout"
    VALUES: ClassVar[tuple[str, ...]] = ("nd", "dn", "nz")


ROUND_MODES = ("NONE", "RINT", "ROUND", "FLOOR", "CEIL", "TRUNC", "ODD", "CAST_RINT")


# --------------------------------------------------------------------------------------
# Helpers for custom syntax
# --------------------------------------------------------------------------------------


def _fail(op: Operation, rule: str, detail: str) -> None:
    raise VerifyException(f"'{op.name}' {rule}: {detail}")


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


def _parse_brace_ints(parser: Parser, allowed: dict[str, Attribute]) -> dict[str, Attribute]:
    """Parse `{key = int, ...}` into IntegerAttrs of the given widths."""
    out: dict[str, Attribute] = {}
    parser.parse_punctuation("{")
    if parser.parse_optional_punctuation("}") is None:
        while True:
            key = parser.parse_identifier()
            if key not in allowed:
                parser.raise_error(f"unexpected keyword '{key}', expected one of {', '.join(allowed)}")
            if key in out:
                parser.raise_error(f"duplicate keyword '{key}'")
            parser.parse_punctuation("=")
            if key == "nosplit":
                value = parser.parse_boolean()
                out[key] = IntegerAttr(int(value), IntegerType(1))
            else:
                out[key] = IntegerAttr(parser.parse_integer(allow_boolean=False), allowed[key])
            if parser.parse_optional_punctuation(",") is None:
                break
        parser.parse_punctuation("}")
    return out


# --------------------------------------------------------------------------------------
# Runtime intrinsics, set_ffts, pointer and view ops
# --------------------------------------------------------------------------------------


class _RuntimeIdOp(IRDLOperation):
    result = result_def(IntegerType)

    def __init__(self):
        super().__init__(result_types=[i64])

    @classmethod
    def parse(cls, parser: Parser) -> "_RuntimeIdOp":
        return cls()

    def print(self, printer: Printer) -> None:
        pass


@irdl_op_definition
class GetBlockIdxOp(_RuntimeIdOp):
    """`%i = pto.get_block_idx`: block id in [0, blockDim), same on the AIC and its AIVs."""

    name = "pto.get_block_idx"


@irdl_op_definition
class GetBlockNumOp(_RuntimeIdOp):
    """`%n = pto.get_block_num`: blockDim."""

    name = "pto.get_block_num"


@irdl_op_definition
class GetSubblockIdxOp(_RuntimeIdOp):
    """`%s = pto.get_subblock_idx`: AIV index 0/1 (0 on the AIC)."""

    name = "pto.get_subblock_idx"


@irdl_op_definition
class GetSubblockNumOp(_RuntimeIdOp):
    """`%s = pto.get_subblock_num`: vector sub-blocks per block (2)."""

    name = "pto.get_subblock_num"


@irdl_op_definition
class SetFftsOp(IRDLOperation):
    """`pto.set_ffts %p : !pto.ptr<i64>`: set the FFTS base address (first thing in the entry)."""

    name = "pto.set_ffts"
    ptr = operand_def(PtrType)

    def __init__(self, ptr: SSAValue):
        super().__init__(operands=[ptr])

    @classmethod
    def parse(cls, parser: Parser) -> "SetFftsOp":
        operand = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        return cls(parser.resolve_operand(operand, parser.parse_type()))

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)

    def verify_(self) -> None:
        t = self.ptr.type
        assert isinstance(t, PtrType)
        if elem_name(t.elem) not in ("i64", "i8"):
            _fail(self, "operand type", f"set_ffts takes !pto.ptr<i64> or !pto.ptr<i8>, got {t}")


@irdl_op_definition
class AddPtrOp(IRDLOperation):
    """`%q = pto.addptr %p, %off : !pto.ptr<T> -> !pto.ptr<T>`: p + off elements."""

    name = "pto.addptr"
    ptr = operand_def(PtrType)
    offset = operand_def(IndexType)
    result = result_def(PtrType)

    def __init__(self, ptr: SSAValue, offset: SSAValue):
        super().__init__(operands=[ptr, offset], result_types=[ptr.type])

    @classmethod
    def parse(cls, parser: Parser) -> "AddPtrOp":
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        off = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        in_t = parser.parse_type()
        parser.parse_punctuation("->")
        out_t = parser.parse_type()
        op = cls.build(
            operands=[parser.resolve_operand(ptr, in_t), parser.resolve_operand(off, IndexType())],
            result_types=[out_t],
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string(", ")
        printer.print_operand(self.offset)
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        if self.ptr.type != self.result.type:
            _fail(self, "type agreement", f"result {self.result.type} must equal the pointer type {self.ptr.type}")


def _parse_index_list(parser: Parser) -> list:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_unresolved_operand)


def _print_index_list(printer: Printer, values: Sequence[SSAValue]) -> None:
    printer.print_string("[")
    printer.print_list(values, printer.print_operand)
    printer.print_string("]")


@irdl_op_definition
class MakeTensorViewOp(IRDLOperation):
    """`%tv = pto.make_tensor_view %p, shape = [...], strides = [...] {layout} : !pto.tensor_view<...>`.

    A strided GM view: tv[i0, ...] = p[sum_k i_k * stride_k] (strides in elements).
    """

    name = "pto.make_tensor_view"
    ptr = operand_def(PtrType)
    shape = var_operand_def(IndexType)
    strides = var_operand_def(IndexType)
    layout = opt_prop_def(LayoutAttr)
    result = result_def(TensorViewType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, shape: Sequence[SSAValue], strides: Sequence[SSAValue], result_type: TensorViewType, layout: str | None = None):
        props = {"layout": LayoutAttr(layout)} if layout else {}
        super().__init__(operands=[ptr, shape, strides], result_types=[result_type], properties=props)

    @classmethod
    def parse(cls, parser: Parser) -> "MakeTensorViewOp":
        start = parser.pos  # errors raised after the last token point back at the op
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        parser.parse_keyword("shape")
        parser.parse_punctuation("=")
        shape = _parse_index_list(parser)
        parser.parse_punctuation(",")
        parser.parse_keyword("strides")
        parser.parse_punctuation("=")
        strides = _parse_index_list(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        result_type = parser.parse_type()
        if not isinstance(result_type, TensorViewType):
            parser.raise_error(f"expected a !pto.tensor_view result type, got {result_type}", start)
        layout = attrs.pop("layout", None)
        if attrs:
            parser.raise_error(f"unexpected attributes {sorted(attrs)}", start)
        idx = IndexType()
        try:
            ptr_val = parser.resolve_operand(ptr, PtrType(result_type.elem))
        except ParseError as exc:
            parser.raise_error(
                f"'{cls.name}' element type: the pointer must be {PtrType(result_type.elem)} for a view of "
                f"{elem_name(result_type.elem)} ({exc.msg})", start)
        op = cls.build(
            operands=[ptr_val, [parser.resolve_operand(s, idx) for s in shape], [parser.resolve_operand(s, idx) for s in strides]],
            result_types=[result_type],
            properties={"layout": layout} if layout is not None else {},
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string(", shape = ")
        _print_index_list(printer, self.shape)
        printer.print_string(", strides = ")
        _print_index_list(printer, self.strides)
        if self.layout is not None:
            printer.print_string(" {layout = ")
            printer.print_attribute(self.layout)
            printer.print_string("}")
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        rt = self.result.type
        assert isinstance(rt, TensorViewType)
        pt = self.ptr.type
        assert isinstance(pt, PtrType)
        if pt.elem != rt.elem:
            _fail(self, "element type", f"pointer element {elem_name(pt.elem)} != view element {elem_name(rt.elem)}")
        rank = len(rt.dims)
        if len(self.shape) != rank or len(self.strides) != rank:
            _fail(self, "rank", f"view rank {rank} needs {rank} shape and {rank} stride operands, got {len(self.shape)} and {len(self.strides)}")
        for i, (dim, value) in enumerate(zip(rt.dims, self.shape)):
            const = constant_index(value)
            if dim != DYN and const is not None and const != dim:
                _fail(self, "static shape", f"dim {i} of the type is {dim} but the shape operand is the constant {const}")
        strides = [constant_index(v) for v in self.strides]
        sizes = [constant_index(v) for v in self.shape]
        if self.layout is None and rank >= 2 and strides[0] == 1 and strides[-1] != 1 and None in strides + sizes:
            _fail(self, "layout inference", f"strides [{', '.join('?' if x is None else str(x) for x in strides)}] describe a DN "
                  "view, but ptoas infers the layout only when every size and stride is a constant and silently makes "
                  "this view ND (pto-ir.md 0.2): write {layout = #pto.layout<dn>}")

    @property
    def view_layout(self) -> str:
        """The layout ptoas gives the view: the attribute, else inferred from constant strides."""
        if self.layout is not None:
            return self.layout.value.data
        strides = [constant_index(v) for v in self.strides]
        if len(strides) >= 2 and strides[0] == 1 and strides[-1] != 1 and None not in strides:
            return "dn"
        return "nd"


@irdl_op_definition
class PartitionViewOp(IRDLOperation):
    """`%pv = pto.partition_view %tv, offsets = [...], sizes = [...] : TV -> PV`: a window of a view."""

    name = "pto.partition_view"
    source = operand_def(TensorViewType)
    offsets = var_operand_def(IndexType)
    sizes = var_operand_def(IndexType)
    result = result_def(PartitionTensorViewType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, source: SSAValue, offsets: Sequence[SSAValue], sizes: Sequence[SSAValue], result_type: PartitionTensorViewType):
        super().__init__(operands=[source, offsets, sizes], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser) -> "PartitionViewOp":
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        parser.parse_keyword("offsets")
        parser.parse_punctuation("=")
        offsets = _parse_index_list(parser)
        parser.parse_punctuation(",")
        parser.parse_keyword("sizes")
        parser.parse_punctuation("=")
        sizes = _parse_index_list(parser)
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        idx = IndexType()
        return cls.build(
            operands=[parser.resolve_operand(src, src_t), [parser.resolve_operand(o, idx) for o in offsets], [parser.resolve_operand(s, idx) for s in sizes]],
            result_types=[res_t],
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.source)
        printer.print_string(", offsets = ")
        _print_index_list(printer, self.offsets)
        printer.print_string(", sizes = ")
        _print_index_list(printer, self.sizes)
        printer.print_string(" : ")
        printer.print_attribute(self.source.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        st, rt = self.source.type, self.result.type
        assert isinstance(st, TensorViewType) and isinstance(rt, PartitionTensorViewType)
        if st.elem != rt.elem:
            _fail(self, "element type", f"source {elem_name(st.elem)} != result {elem_name(rt.elem)}")
        rank = len(st.dims)
        if len(self.offsets) != rank or len(self.sizes) != rank or len(rt.dims) != rank:
            _fail(self, "rank", f"source rank {rank} needs {rank} offsets, sizes and result dims")
        for i, (dim, value) in enumerate(zip(rt.dims, self.sizes)):
            const = constant_index(value)
            if dim != DYN and const is not None and const != dim:
                _fail(self, "static shape", f"result dim {i} is {dim} but the size operand is the constant {const}")
            if st.dims[i] != DYN and dim != DYN and dim > st.dims[i]:
                _fail(self, "bounds", f"size {dim} of dim {i} exceeds the source dim {st.dims[i]}")


def constant_index(value: SSAValue) -> int | None:
    """The integer value of an `arith.constant`, or None when not a constant."""
    from xdsl.dialects.arith import ConstantOp

    owner = value.owner
    if isinstance(owner, ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


# --------------------------------------------------------------------------------------
# Tiles
# --------------------------------------------------------------------------------------


@irdl_op_definition
class AllocTileOp(IRDLOperation):
    """`%t = pto.alloc_tile [valid_row = %r valid_col = %c] : !pto.tile_buf<...>`: a new local buffer.

    `addr = %a` is parsed so that the verifier can reject it: ptofa targets level2,
    where ptoas plans addresses and rejects explicit ones.
    """

    name = "pto.alloc_tile"
    addr = opt_operand_def(IntegerType)
    valid_row = opt_operand_def(IndexType)
    valid_col = opt_operand_def(IndexType)
    result = result_def(TileBufType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, result_type: TileBufType, valid_row: SSAValue | None = None, valid_col: SSAValue | None = None):
        super().__init__(
            operands=[[], [valid_row] if valid_row else [], [valid_col] if valid_col else []],
            result_types=[result_type],
        )

    @classmethod
    def parse(cls, parser: Parser) -> "AllocTileOp":
        addr = vr = vc = None
        if parser.parse_optional_keyword("addr"):
            parser.parse_punctuation("=")
            addr = parser.parse_unresolved_operand()
        if parser.parse_optional_keyword("valid_row"):
            parser.parse_punctuation("=")
            vr = parser.parse_unresolved_operand()
            parser.parse_keyword("valid_col")
            parser.parse_punctuation("=")
            vc = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        idx = IndexType()
        return cls.build(
            operands=[
                [parser.resolve_operand(addr, i64)] if addr else [],
                [parser.resolve_operand(vr, idx)] if vr else [],
                [parser.resolve_operand(vc, idx)] if vc else [],
            ],
            result_types=[t],
        )

    def print(self, printer: Printer) -> None:
        if self.addr is not None:
            printer.print_string(" addr = ")
            printer.print_operand(self.addr)
        if self.valid_row is not None and self.valid_col is not None:
            printer.print_string(" valid_row = ")
            printer.print_operand(self.valid_row)
            printer.print_string(" valid_col = ")
            printer.print_operand(self.valid_col)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, TileBufType)
        if self.addr is not None:
            _fail(self, "level2", "'addr' is rejected at --pto-level=level2 (ptoas plans local addresses); remove it")
        dynamic = DYN in t.valid
        if dynamic != (self.valid_row is not None):
            _fail(self, "valid shape", f"a dynamic valid shape ({_dims_str(t.valid)}) needs valid_row/valid_col operands, and only then")


class _InsOutsOp(IRDLOperation):
    """Base of DPS ops written `ins(%a, ... : A, ...) outs(%d : D)`.

    Subclasses declare their operands in textual order (ins first, outs last);
    an optional `tmp` operand may follow the required ins.
    """

    N_INS: ClassVar[int] = 1  # required ins operands
    HAS_TMP: ClassVar[bool] = False

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
        ins, in_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        outs, out_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
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
        return cls.build(operands=operands, properties=cls._props_from_attrs(parser, attrs, start))

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        return {}

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, self.ins_values())
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")
        self._print_attrs(printer)

    def _print_attrs(self, printer: Printer) -> None:
        pass


@irdl_op_definition
class TLoadOp(_InsOutsOp):
    """`pto.tload ins(%pv : PV) outs(%t : T)`: GM -> UB (vec) or L1 (mat), dst[i,j] = src[i,j]."""

    name = "pto.tload"
    src = operand_def(PartitionTensorViewType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        t = _tile(self, self.dst, "dst")
        st = self.src.type
        assert isinstance(st, PartitionTensorViewType)
        if t.space not in ("vec", "mat"):
            _fail(self, "memory space", f"dst must be loc=vec or loc=mat on A2/A3, got loc={t.space}")
        _check_view_tile(self, st, t)
        _check_layout_pair(self, self.src, t)


@irdl_op_definition
class TStoreOp(_InsOutsOp):
    """`pto.tstore ins(%t : T) outs(%pv : PV)`: tile -> GM (acc f32 -> f32/f16 through FIX)."""

    name = "pto.tstore"
    src = operand_def(TileBufType)
    dst_ = operand_def(PartitionTensorViewType)

    def verify_(self) -> None:
        t = _tile(self, self.src, "src")
        pt = self.dst.type
        assert isinstance(pt, PartitionTensorViewType)
        if t.space not in ("vec", "mat", "acc"):
            _fail(self, "memory space", f"src must be loc=vec, mat or acc on A2/A3, got loc={t.space}")
        if t.space == "acc":
            if t.elem not in ("f32", "i32") or elem_name(pt.elem) not in ("f32", "i32", "f16", "bf16"):
                _fail(self, "dtype pair", f"acc store {t.elem} -> {elem_name(pt.elem)} is not allowed")
            if t.cols.data > 4095:
                _fail(self, "acc cols", f"ACC tile cols {t.cols.data} must be <= 4095 for FIX stores")
            _check_view_tile(self, pt, t, allow_convert=True)
        else:
            _check_view_tile(self, pt, t)
            _check_layout_pair(self, self.dst, t)


def view_layout(value: SSAValue) -> str | None:
    """GM layout (nd/dn/nz) of a tensor or partition view, traced to its make_tensor_view; None if unknown."""
    owner = value.owner
    if isinstance(owner, PartitionViewOp):
        return view_layout(owner.source)
    if isinstance(owner, MakeTensorViewOp):
        return owner.view_layout
    if isinstance(owner, _ProducesEntry):
        return "nd"  # pipe slots are row-major
    return None


def tile_layout(t: TileBufType) -> str:
    """ND, DN, NZ or ZN (pto-ir.md 6.4), or the raw `blayout/slayout` pair for other boxed layouts."""
    return {
        ("row_major", "none_box"): "ND", ("col_major", "none_box"): "DN",
        ("col_major", "row_major"): "NZ", ("row_major", "col_major"): "ZN",
    }.get((t.blayout.data, t.slayout.data), f"{t.blayout.data}/{t.slayout.data}")


# GM layout -> tile layouts a TLOAD/TSTORE can pair it with (pto-isa docs/isa/TLOAD: Vec tiles
# only ND->ND, DN->DN, NZ->NZ; Mat tiles also ND->NZ and DN->ZN).
_GM_TILE_LAYOUTS = {
    "vec": {"nd": ("ND",), "dn": ("DN",), "nz": ("NZ",)},
    "mat": {"nd": ("ND", "NZ"), "dn": ("DN", "ZN"), "nz": ("NZ",)},
}


def _check_layout_pair(op: Operation, view: SSAValue, tile: TileBufType) -> None:
    gm = view_layout(view)
    allowed = _GM_TILE_LAYOUTS.get(tile.space, {}).get(gm or "")
    if gm is None or allowed is None:
        return
    # A single-row or single-column tile is the same bytes in either layout.
    if 1 in tile.shape and not tile.is_boxed:
        return
    if tile_layout(tile) not in allowed:
        _fail(op, "layout pairing", f"a {gm.upper()} GM view pairs with loc={tile.space} tiles of layout "
              f"{' or '.join(allowed)}, got {tile_layout(tile)} (ptoas does not check this, pto-ir.md 0.8; "
              "the C++ build fails or the data is scrambled)")


def _check_view_tile(op: Operation, view: PartitionTensorViewType, tile: TileBufType, allow_convert: bool = False) -> None:
    if not allow_convert and elem_bytes(view.elem) != elem_bytes(tile.dtype):
        _fail(op, "dtype", f"view element {elem_name(view.elem)} and tile element {tile.elem} differ in size")
    dims = view.dims
    if DYN in dims:
        return
    rows = 1
    for d in dims[:-1]:
        rows *= d
    vr, vc = tile.valid
    if DYN in (vr, vc):
        return
    if (rows, dims[-1]) != (vr, vc):
        _fail(op, "shape agreement", f"view {_dims_str(dims)} (as {rows}x{dims[-1]}) must equal the tile valid shape {vr}x{vc}")


_TMOV_PAIRS = {("mat", "left"), ("mat", "right"), ("mat", "bias"), ("mat", "scaling"), ("vec", "vec"), ("acc", "mat")}


@irdl_op_definition
class TMovOp(_InsOutsOp):
    """`pto.tmov ins(%a : A) outs(%b : B)`: local copy (mat->left/right, vec->vec, acc->mat)."""

    name = "pto.tmov"
    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if (s.space, d.space) not in _TMOV_PAIRS:
            _fail(self, "memory space", f"{s.space} -> {d.space} is not a legal A2/A3 tmov (legal: mat->left/right/bias/scaling, vec->vec, acc->mat)")
        if s.shape != d.shape:
            _fail(self, "shape agreement", f"src {s.shape[0]}x{s.shape[1]} != dst {d.shape[0]}x{d.shape[1]}")
        ps, pd = physical_shape(self.src), physical_shape(self.dst)
        if ps != pd:
            kind = "mat-source" if s.space == "mat" else "A2/A3 non-mat"
            _fail(self, "shape agreement", f"expects {kind} tmov to use matching src/dst shapes: ptoas materializes a "
                  f"subview as its parent's physical tile, so this is {ps[0]}x{ps[1]} -> {pd[0]}x{pd[1]} "
                  "(pto-ir.md 0.14); copy into a subview with `tadds ins(%src, %zero ...)` instead")
        if s.space == "vec" and not (s.is_row_major and d.is_row_major):
            _fail(self, "layout", f"vec->vec tmov needs blayout=row_major tiles, got src {s.blayout.data}, dst {d.blayout.data}")


def physical_shape(value: SSAValue) -> tuple[int, int]:
    """The tile shape ptoas materializes for `value`: a subview is its parent's physical tile."""
    while isinstance(value.owner, SubviewOp):
        value = value.owner.src
    t = value.type
    assert isinstance(t, TileBufType)
    return t.shape


@irdl_op_definition
class TReshapeOp(IRDLOperation):
    """`%r = pto.treshape %t : A -> B`: alias of the same storage with another shape."""

    name = "pto.treshape"
    src = operand_def(TileBufType)
    result = result_def(TileBufType)

    def __init__(self, src: SSAValue, result_type: TileBufType):
        super().__init__(operands=[src], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser) -> "TReshapeOp":
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(src, src_t)], result_types=[res_t])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.src)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        s, r = _tile(self, self.src, "src"), self.result.type
        assert isinstance(r, TileBufType)
        if s.space != r.space:
            _fail(self, "memory space", f"loc {s.space} -> {r.space}: treshape keeps the memory space")
        if s.nbytes != r.nbytes:
            _fail(self, "size", f"{s.nbytes} bytes -> {r.nbytes} bytes: treshape keeps the byte size")
        if s.is_boxed != r.is_boxed:
            _fail(self, "layout", f"slayout {s.slayout.data} -> {r.slayout.data}: treshape cannot switch between boxed and non-boxed layouts")


@irdl_op_definition
class SubviewOp(IRDLOperation):
    """`%s = pto.subview %src[%i, %j] sizes [R, C] : A -> B`: a sub-rectangle of a tile, same storage."""

    name = "pto.subview"
    src = operand_def(TileBufType)
    row = operand_def(IndexType)
    col = operand_def(IndexType)
    result = result_def(TileBufType)

    def __init__(self, src: SSAValue, row: SSAValue, col: SSAValue, result_type: TileBufType):
        super().__init__(operands=[src, row, col], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser) -> "SubviewOp":
        start = parser.pos
        src = parser.parse_unresolved_operand()
        offsets = _parse_index_list(parser)
        if len(offsets) != 2:
            parser.raise_error("subview takes two offsets")
        parser.parse_keyword("sizes")
        sizes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False))
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        if not isinstance(res_t, TileBufType) or list(res_t.shape) != sizes:
            parser.raise_error(f"'{cls.name}' sizes: sizes {sizes} must equal the result tile shape {res_t}", start)
        idx = IndexType()
        return cls.build(
            operands=[parser.resolve_operand(src, src_t), parser.resolve_operand(offsets[0], idx), parser.resolve_operand(offsets[1], idx)],
            result_types=[res_t],
        )

    def print(self, printer: Printer) -> None:
        r = self.result.type
        assert isinstance(r, TileBufType)
        printer.print_string(" ")
        printer.print_operand(self.src)
        _print_index_list(printer, [self.row, self.col])
        printer.print_string(f" sizes [{r.rows.data}, {r.cols.data}] : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(r)

    def verify_(self) -> None:
        s, r = _tile(self, self.src, "src"), self.result.type
        assert isinstance(r, TileBufType)
        if isinstance(self.src.owner, TReshapeOp):
            _fail(self, "subview source", "the source is a pto.treshape result; ptoas 0.60 fails to legalize a subview of a "
                  "reshape ('failed to legalize operation pto.subview', pto-ir.md 0.13): slice a tile made by pto.alloc_tile "
                  "(allocate the [1,R] row tile and treshape it to the [R,1] column instead)")
        if (s.space, s.dtype, s.blayout, s.slayout) != (r.space, r.dtype, r.blayout, r.slayout):
            _fail(self, "type agreement", f"subview keeps loc, dtype and layout of its source: {s.describe()} {s.blayout.data}/{s.slayout.data} -> {r.describe()} {r.blayout.data}/{r.slayout.data}")
        for name, off, size, full in (("row", self.row, r.rows.data, s.rows.data), ("col", self.col, r.cols.data, s.cols.data)):
            const = constant_index(off)
            if size > full or (const is not None and const + size > full):
                _fail(self, "bounds", f"{name} window [{const}, +{size}) exceeds the source's {full}")


@irdl_op_definition
class TCvtOp(_InsOutsOp):
    """`pto.tcvt ins(%a {rmode = #pto<round_mode CAST_RINT>} : A) outs(%d : D)`: dtype cast.

    The attribute dict sits after the source operand, inside `ins(...)`.
    """

    name = "pto.tcvt"
    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    rmode = prop_def(StringAttr)
    HAS_TMP: ClassVar[bool] = True

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
        printer.print_string(f" {{rmode = #pto<round_mode {self.rmode.data}>}} : ")
        printer.print_list([v.type for v in self.ins_values()], printer.print_attribute)
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, d])
        if self.rmode.data not in ROUND_MODES:
            _fail(self, "round mode", f"'{self.rmode.data}' is not one of {ROUND_MODES}")
        if s.valid != d.valid:
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
        if t.valid != first.valid:
            _fail(op, "shape agreement", f"valid shapes {_dims_str(first.valid)} and {_dims_str(t.valid)} differ")


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
class TDivOp(_BinaryOp):
    """d = a / b"""

    name = "pto.tdiv"


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
class TExpOp(_UnaryOp):
    """d = exp(a)"""

    name = "pto.texp"
    FLOAT_ONLY: ClassVar[bool] = True


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
        if s.valid != d.valid:
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
class TRowExpandDivOp(_RowExpandOp):
    """d = a / col"""

    name = "pto.trowexpanddiv"


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


@irdl_op_definition
class TMatmulOp(_InsOutsOp):
    """`pto.tmatmul ins(%a, %b : L, R) outs(%c : C)`: C = A @ B with f32 accumulation."""

    name = "pto.tmatmul"
    N_INS: ClassVar[int] = 2
    lhs = operand_def(TileBufType)
    rhs = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        _check_matmul(self, _tile(self, self.lhs, "lhs"), _tile(self, self.rhs, "rhs"), _tile(self, self.dst, "dst"))


@irdl_op_definition
class TMatmulAccOp(_InsOutsOp):
    """`pto.tmatmul.acc ins(%c, %a, %b : C, L, R) outs(%c : C)`: C_out = C_in + A @ B."""

    name = "pto.tmatmul.acc"
    N_INS: ClassVar[int] = 3
    acc_in = operand_def(TileBufType)
    lhs = operand_def(TileBufType)
    rhs = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        c = _tile(self, self.dst, "dst")
        _check_matmul(self, _tile(self, self.lhs, "lhs"), _tile(self, self.rhs, "rhs"), c)
        if self.acc_in.type != c:
            _fail(self, "type agreement", f"acc_in {self.acc_in.type} and dst {c} must have the same tile type")


# --------------------------------------------------------------------------------------
# Pipes (frontend, global entries)
# --------------------------------------------------------------------------------------

_PIPE_INIT_KEYS: dict[str, Attribute] = {
    "id": i32,
    "dir_mask": i8,
    "slot_size": i32,
    "slot_num": i32,
    "local_slot_num": i32,
    "nosplit": IntegerType(1),
}
_PIPE_INIT_ORDER = ("id", "dir_mask", "slot_size", "slot_num", "local_slot_num", "nosplit")


def _check_prop_types(op: Operation, widths: dict[str, Attribute]) -> None:
    """The generic form must spell each pipe attribute with its storage type (pto-ir.md 4.1)."""
    for key, want in widths.items():
        attr = op.properties.get(key)
        if isinstance(attr, IntegerAttr) and attr.type != want:
            _fail(op, "attribute type", f"'{key}' must be {want}, got {attr.type} (e.g. `{key} = {attr.value.data} : {want}`)")


class _InitPipeOp(IRDLOperation):
    """`pto.aic_initialize_pipe {id = 0, dir_mask = 1, slot_size = N} (gm_slot_tensor = %tv : TV)`."""

    gm_slot_tensor = operand_def(TensorViewType)
    pipe_id = prop_def(IntegerAttr, prop_name="id")
    dir_mask = prop_def(IntegerAttr)
    slot_size = prop_def(IntegerAttr)
    slot_num = opt_prop_def(IntegerAttr)
    local_slot_num = opt_prop_def(IntegerAttr)
    nosplit = opt_prop_def(IntegerAttr)
    CORE: ClassVar[str] = ""

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        props = _parse_brace_ints(parser, _PIPE_INIT_KEYS)
        for required in ("dir_mask", "slot_size"):
            if required not in props:
                parser.raise_error(f"{cls.name} needs '{required}'")
        props.setdefault("id", IntegerAttr(0, i32))
        parser.parse_punctuation("(")
        operands = {}
        while True:
            key = parser.parse_identifier()
            if key not in ("gm_slot_tensor", "gm_slot_buffer", "c2v_consumer_buf", "v2c_consumer_buf"):
                parser.raise_error(f"unknown pipe init operand '{key}'")
            parser.parse_punctuation("=")
            value = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            operands[key] = (value, parser.parse_type())
            if parser.parse_optional_punctuation(",") is None:
                break
        parser.parse_punctuation(")")
        if set(operands) != {"gm_slot_tensor"}:
            parser.raise_error(
                f"'{cls.name}' operands: ptofa supports global-only pipes: give exactly 'gm_slot_tensor', got {sorted(operands)}",
                start,
            )
        value, t = operands["gm_slot_tensor"]
        return cls.build(operands=[parser.resolve_operand(value, t)], properties=props)

    def print(self, printer: Printer) -> None:
        parts = []
        for key in _PIPE_INIT_ORDER:
            attr = self.properties.get(key)
            if attr is None:
                continue
            assert isinstance(attr, IntegerAttr)
            value = attr.value.data
            parts.append(f"{key} = {('true' if value else 'false') if key == 'nosplit' else value}")
        printer.print_string(" {" + ", ".join(parts) + "} (gm_slot_tensor = ")
        printer.print_operand(self.gm_slot_tensor)
        printer.print_string(" : ")
        printer.print_attribute(self.gm_slot_tensor.type)
        printer.print_string(")")

    @property
    def id_value(self) -> int:
        return self.pipe_id.value.data

    @property
    def dir_value(self) -> int:
        return self.dir_mask.value.data

    @property
    def slot_num_value(self) -> int:
        if self.slot_num is not None:
            return self.slot_num.value.data
        return 4 if self.dir_value == 3 else 8

    def verify_(self) -> None:
        _check_prop_types(self, _PIPE_INIT_KEYS)
        t = self.gm_slot_tensor.type
        assert isinstance(t, TensorViewType)
        if self.dir_value not in (1, 2, 3):
            _fail(self, "dir_mask", f"dir_mask={self.dir_value} must be 1 (C2V), 2 (V2C) or 3")
        if self.dir_value == 3:
            _fail(self, "dir_mask", "dir_mask=3: global entries on a bidirectional pipe would share slots in both directions; use two one-way pipes")
        if self.local_slot_num is not None:
            _fail(self, "local_slot_num", f"globaltensor pipe init does not use 'local_slot_num' (got local_slot_num={self.local_slot_num.value.data} with gm_slot_tensor)")
        nbytes = t.nbytes
        size = self.slot_size.value.data
        if nbytes is None:
            _fail(self, "slot descriptor", f"gm_slot_tensor {t} must have a static shape")
        if size not in (nbytes, 2 * nbytes):
            _fail(self, "slot_size", f"slot_size={size} must equal the descriptor's {nbytes} bytes or twice them ({2 * nbytes})")
        if not 1 <= self.slot_num_value <= 64:
            _fail(self, "slot_num", f"slot_num={self.slot_num_value} must be in 1..64")
        slots = self.slot_num_value
        period = slots if slots <= 2 else slots // 2
        if slots % period != 0:
            _fail(self, "slot ring reuse", f"slot_num={slots} is not a multiple of its sync period {period}: "
                  f"TALLOC waits for a free credit only when t % {period} == 0, so the talloc at t={slots} "
                  f"re-binds slot 0 before its entry is freed (use slot_num <= 2 or even)")


@irdl_op_definition
class AicInitializePipeOp(_InitPipeOp):
    """Cube-side pipe endpoint (in a cube kernel function)."""

    name = "pto.aic_initialize_pipe"
    CORE: ClassVar[str] = "cube"


@irdl_op_definition
class AivInitializePipeOp(_InitPipeOp):
    """Vector-side pipe endpoint (in a vector kernel function)."""

    name = "pto.aiv_initialize_pipe"
    CORE: ClassVar[str] = "vector"


def _parse_id_split(parser: Parser) -> dict[str, Attribute]:
    """`{id = N, split = S}` (fixed order; `id =` may be omitted when 0)."""
    parser.parse_punctuation("{")
    props: dict[str, Attribute] = {"id": IntegerAttr(0, i32)}
    key = parser.parse_identifier()
    if key == "id":
        parser.parse_punctuation("=")
        props["id"] = IntegerAttr(parser.parse_integer(allow_boolean=False), i32)
        parser.parse_punctuation(",")
        key = parser.parse_identifier()
    if key != "split":
        parser.raise_error(f"expected 'split' (attribute order is fixed: {{id = N, split = S}}), got '{key}'")
    parser.parse_punctuation("=")
    props["split"] = IntegerAttr(parser.parse_integer(allow_boolean=False), i8)
    if parser.parse_optional_punctuation("}") is None:
        parser.raise_error("expected '}' (attribute order is fixed: {id = N, split = S}; ptoas rejects 'id' after 'split')")
    return props


class _PipeDataOp(IRDLOperation):
    """Shared accessors and checks of talloc / tpush / tpop / tfree."""

    pipe_id = prop_def(IntegerAttr, prop_name="id")
    split = prop_def(IntegerAttr)
    CORE: ClassVar[str] = ""  # "cube" or "vector"
    DIRECTION: ClassVar[int] = 0  # dir_mask of the pipe this op may use
    ROLE: ClassVar[str] = ""  # talloc / tpush / tpop / tfree

    @property
    def id_value(self) -> int:
        return self.pipe_id.value.data

    @property
    def split_value(self) -> int:
        return self.split.value.data

    def _print_id_split(self, printer: Printer) -> None:
        printer.print_string(f" {{id = {self.id_value}, split = {self.split_value}}}")

    def verify_(self) -> None:
        _check_prop_types(self, {"id": i32, "split": i8})
        if self.split_value not in (0, 1, 2):
            _fail(self, "split", f"split={self.split_value} must be 0 (no split), 1 (up/down) or 2 (left/right) for global entries")

    @property
    def entry_type(self) -> TensorViewType:
        raise NotImplementedError


class _ProducesEntry(_PipeDataOp):
    """`%e = pto.<op> {id = N, split = S} -> TV` (talloc, tpop)."""

    entry = result_def(TensorViewType)

    @classmethod
    def parse(cls, parser: Parser):
        props = _parse_id_split(parser)
        parser.parse_punctuation("->")
        t = parser.parse_type()
        return cls.build(result_types=[t], properties=props)

    def print(self, printer: Printer) -> None:
        self._print_id_split(printer)
        printer.print_string(" -> ")
        printer.print_attribute(self.entry.type)

    @property
    def entry_type(self) -> TensorViewType:
        return self.entry.type  # type: ignore[return-value]


class _TakesEntry(_PipeDataOp):
    """`pto.<op>(%e : TV) {id = N, split = S}` (tpush, tfree)."""

    entry_value = operand_def(TensorViewType)

    @classmethod
    def parse(cls, parser: Parser):
        parser.parse_punctuation("(")
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation(")")
        props = _parse_id_split(parser)
        return cls.build(operands=[parser.resolve_operand(value, t)], properties=props)

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        printer.print_operand(self.entry_value)
        printer.print_string(" : ")
        printer.print_attribute(self.entry_value.type)
        printer.print_string(")")
        self._print_id_split(printer)

    @property
    def entry_type(self) -> TensorViewType:
        return self.entry_value.type  # type: ignore[return-value]


@irdl_op_definition
class TallocToAivOp(_ProducesEntry):
    """Cube, C2V producer: wait for a free slot if needed, bind the entry to the next slot."""

    name = "pto.talloc_to_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "talloc"


@irdl_op_definition
class TallocToAicOp(_ProducesEntry):
    """Vector, V2C producer: wait for a free slot if needed, bind the entry (plus sub-block offset)."""

    name = "pto.talloc_to_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "talloc"


@irdl_op_definition
class TpushToAivOp(_TakesEntry):
    """Cube, C2V producer: set the ready flag after the stores on FIX."""

    name = "pto.tpush_to_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "tpush"


@irdl_op_definition
class TpushToAicOp(_TakesEntry):
    """Vector, V2C producer: set the ready flag after the stores on MTE3."""

    name = "pto.tpush_to_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "tpush"


@irdl_op_definition
class TpopFromAicOp(_ProducesEntry):
    """Vector, C2V consumer: wait for data, bind the entry to the slot half of this sub-block."""

    name = "pto.tpop_from_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "tpop"


@irdl_op_definition
class TpopFromAivOp(_ProducesEntry):
    """Cube, V2C consumer: wait for data from both vector cores, bind the entry to the slot."""

    name = "pto.tpop_from_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "tpop"


@irdl_op_definition
class TfreeFromAicOp(_TakesEntry):
    """Vector, C2V consumer: release the slot (a free credit every SyncPeriod pops)."""

    name = "pto.tfree_from_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "tfree"


@irdl_op_definition
class TfreeFromAivOp(_TakesEntry):
    """Cube, V2C consumer: release the slot (a free credit every SyncPeriod pops)."""

    name = "pto.tfree_from_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "tfree"


def hidden_scratch(op: Operation) -> tuple[str, str, int] | None:
    """The UB scratch ptoas allocates for `op` written without a tmp operand: (space, shape, bytes)."""
    if isinstance(op, _RowExpandOp) and op.tmp is None:
        return ("vec", "1x2048xf32", HIDDEN_ROWEXPAND_TMP_BYTES)
    if isinstance(op, _RowReduceOp) and op.tmp is None:
        t = op.src.type
        assert isinstance(t, TileBufType)
        return ("vec", f"{t.rows.data}x{t.cols.data}x{t.elem}", t.nbytes)
    return None


PIPE_INIT_OPS = (AicInitializePipeOp, AivInitializePipeOp)
PIPE_DATA_OPS = (
    TallocToAivOp,
    TallocToAicOp,
    TpushToAivOp,
    TpushToAicOp,
    TpopFromAicOp,
    TpopFromAivOp,
    TfreeFromAicOp,
    TfreeFromAivOp,
)

CUBE_ONLY_OPS = (TMatmulOp, TMatmulAccOp)

PTO = Dialect(
    "pto",
    [
        GetBlockIdxOp,
        GetBlockNumOp,
        GetSubblockIdxOp,
        GetSubblockNumOp,
        SetFftsOp,
        AddPtrOp,
        MakeTensorViewOp,
        PartitionViewOp,
        AllocTileOp,
        TLoadOp,
        TStoreOp,
        TMovOp,
        TReshapeOp,
        SubviewOp,
        TCvtOp,
        TExpandsOp,
        TMatmulOp,
        TMatmulAccOp,
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
        AicInitializePipeOp,
        AivInitializePipeOp,
        *PIPE_DATA_OPS,
    ],
    [PtrType, TensorViewType, PartitionTensorViewType, TileBufType, KernelKindAttr, LayoutAttr],
)
