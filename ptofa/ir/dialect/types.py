"""Types and enum attributes of the PTO dialect: `!pto.ptr`, `!pto.tensor_view`,
`!pto.partition_tensor_view`, `!pto.tile_buf`, `#pto.kernel_kind`, `#pto.layout`,
the round modes, and element-type / dims helpers (docs/sources.md §3.1-3.2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import ArrayAttr, BFloat16Type, Float16Type, Float32Type, IndexType, IntAttr, IntegerType, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException


DYN = -1  # a dynamic (`?`) dimension

# --------------------------------------------------------------------------------------
# Element types
# --------------------------------------------------------------------------------------

_ELEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i8": 1, "i16": 2, "i32": 4, "i64": 8}


def elem_name(t: Attribute) -> str:
    """Short spelling of an element type: f16, bf16, f32, i64, ..."""
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, BFloat16Type):
        return "bf16"
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
        if fields.get("loc") == "left":
            # ptoas's parser forces an A2/A3 left tile to blayout=row_major, whatever is written
            # (PTOAS PTOTypeDefs.cpp resolveTileBufBLayout; docs/sources.md §2.12).
            fields["blayout"] = "row_major"
        try:
            t = cls(**fields)  # type: ignore[arg-type]
        except VerifyException as exc:
            # A tile type broken by a verifier rule is reported at its source position.
            parser.raise_error(str(exc), start)
        return tuple(t.parameters)

    @classmethod
    def _parse_compact(cls, parser: AttrParser, loc: str, outer: dict[str, int] | None = None) -> dict:
        """The compact fields after `loc`; integer keys of `outer` (a multi_tile_buf's
        `count`) may follow them and are stored there."""
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
            elif outer is not None and key in outer:
                outer[key] = parser.parse_integer(allow_boolean=False)
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

    def layout_error(self) -> tuple[str, str] | None:
        """(rule, detail) when an allocation of this tile breaks ptoas's layout rules, else None.

        ptoas checks them where a tile is allocated (`pto.alloc_tile`, `pto.alloc_multi_tile`
        slots), not in the type: a `!pto.tile_buf<vec, 32x1xf32>` function argument is fine
        (PTOAS lib/PTO/IR/PTO.cpp, verifyTileBufLayoutConstraints). A none_box tile's row
        (row-major: cols*sizeof(T)) or column (col-major: rows*sizeof(T)) is a multiple of
        32 bytes; a boxed tile's cols are a multiple of the fractal's inner cols and, except
        in vec, with fractal 32 or a single row, its rows of the inner rows (fractal 1024:
        16x16; 32: 16x2; 512: 16 x 32/sizeof(T) row-major boxes, 32/sizeof(T) x 16 col-major).
        """
        rows, cols = self.shape
        esize = elem_bytes(self.dtype)
        if not self.is_boxed:
            if self.is_row_major and (cols * esize) % 32 != 0:
                return "alignment", (f"a row-major none_box tile's row (cols*sizeof(T)) must be a multiple of 32 bytes, "
                                     f"got {cols}*{esize} = {cols * esize} ({self.describe()})")
            if not self.is_row_major and (rows * esize) % 32 != 0:
                return "alignment", (f"a col-major none_box tile's column (rows*sizeof(T)) must be a multiple of 32 bytes, "
                                     f"got {rows}*{esize} = {rows * esize} ({self.describe()})")
            return None
        fractal = self.fractal.data
        if fractal == 1024:
            inner = (16, 16)
        elif fractal == 32:
            inner = (16, 2)
        elif 32 % esize != 0:
            return "boxed layout", f"fractal 512 boxes need an element size that divides 32, got {esize} bytes ({self.describe()})"
        elif self.slayout.data == "row_major":
            inner = (16, 32 // esize)
        else:
            inner = (32 // esize, 16)
        unaligned_rows_ok = self.loc.data == "vec" or fractal == 32 or rows == 1
        if not unaligned_rows_ok and rows % inner[0] != 0:
            return "boxed layout", f"rows {rows} must be a multiple of the box's {inner[0]} rows ({self.describe()}, fractal={fractal})"
        if cols % inner[1] != 0:
            return "boxed layout", f"cols {cols} must be a multiple of the box's {inner[1]} cols ({self.describe()}, fractal={fractal})"
        return None


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

# tile_buf `pad` field (docs/sources.md §3.2): 0 null, 1 zero, 2 max (+inf), 3 min (-inf).
PAD_NAMES = {0: "null", 1: "zero", 2: "max", 3: "min"}


@dataclass(frozen=True, init=False)
class _PtoEnumAttr(ParametrizedAttribute, SpacedOpaqueSyntaxAttribute):
    """`#pto<mnemonic value>`: one of ptoas's enum attributes, in MLIR's opaque spelling.

    The attribute name is `pto.<mnemonic>`, so xDSL's parser hands `#pto<mnemonic value>`
    to `parse_parameters` after the mnemonic, and the printer (`SpacedOpaqueSyntaxAttribute`)
    writes it back the same way. `#pto.mnemonic<value>` is accepted too.
    """

    VALUES: ClassVar[tuple[str, ...]] = ()
    value: StringAttr

    def __init__(self, value: str):
        super().__init__(StringAttr(value))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        if parser.parse_optional_punctuation("<") is not None:
            value = parser.parse_identifier()
            parser.parse_punctuation(">")
        else:
            value = parser.parse_identifier()
        if value not in cls.VALUES:
            parser.raise_error(f"#pto<{cls.name[4:]}>: '{value}' is not one of {', '.join(cls.VALUES)}")
        return (StringAttr(value),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(self.value.data)

    @property
    def text(self) -> str:
        """The attribute as ptoas writes it: `#pto<mnemonic value>`."""
        return f"#pto<{self.name[4:]} {self.value.data}>"


@irdl_attr_definition
class RoundModeAttr(_PtoEnumAttr):
    """`#pto<round_mode CAST_RINT>` (tcvt)."""

    name = "pto.round_mode"
    VALUES: ClassVar[tuple[str, ...]] = ROUND_MODES


@irdl_attr_definition
class CmpModeAttr(_PtoEnumAttr):
    """`#pto<cmp lt>` (tcmp, tcmps)."""

    name = "pto.cmp"
    VALUES: ClassVar[tuple[str, ...]] = ("eq", "ne", "lt", "le", "gt", "ge")


@irdl_attr_definition
class ExpPrecisionAttr(_PtoEnumAttr):
    """`#pto<exp_precision high_precision>` (texp)."""

    name = "pto.exp_precision"
    VALUES: ClassVar[tuple[str, ...]] = ("default", "high_precision")


@irdl_attr_definition
class DivPrecisionAttr(_PtoEnumAttr):
    """`#pto<div_precision high_precision>` (tdiv, trowexpanddiv, tcolexpanddiv)."""

    name = "pto.div_precision"
    VALUES: ClassVar[tuple[str, ...]] = ("default", "high_precision")


@irdl_attr_definition
class LogPrecisionAttr(_PtoEnumAttr):
    """`#pto<log_precision high_precision>` (tlog)."""

    name = "pto.log_precision"
    VALUES: ClassVar[tuple[str, ...]] = ("default", "high_precision")


class _HighPrecisionAttr(_PtoEnumAttr):
    """`#pto<X_precision default|high_precision>`: which pto-isa algorithm an op runs."""

    VALUES: ClassVar[tuple[str, ...]] = ("default", "high_precision")


@irdl_attr_definition
class SqrtPrecisionAttr(_HighPrecisionAttr):
    """`#pto<sqrt_precision high_precision>` (tsqrt)."""

    name = "pto.sqrt_precision"


@irdl_attr_definition
class RsqrtPrecisionAttr(_HighPrecisionAttr):
    """`#pto<rsqrt_precision high_precision>` (trsqrt; high precision needs a tmp)."""

    name = "pto.rsqrt_precision"


@irdl_attr_definition
class RecipPrecisionAttr(_HighPrecisionAttr):
    """`#pto<recip_precision high_precision>` (trecip)."""

    name = "pto.recip_precision"


@irdl_attr_definition
class RemPrecisionAttr(_HighPrecisionAttr):
    """`#pto<rem_precision high_precision>` (trem)."""

    name = "pto.rem_precision"


@irdl_attr_definition
class FmodPrecisionAttr(_HighPrecisionAttr):
    """`#pto<fmod_precision high_precision>` (tfmod)."""

    name = "pto.fmod_precision"


@irdl_attr_definition
class PowPrecisionAttr(_HighPrecisionAttr):
    """`#pto<pow_precision high_precision>` (tpow, tpows; A2/A3 has only the default)."""

    name = "pto.pow_precision"


@irdl_attr_definition
class AccPhaseAttr(_PtoEnumAttr):
    """`#pto<acc_phase partial|final>` (tmatmul, tmatmul.acc): which K-loop step a matmul is, a
    scheduling hint for ptoas's templated TMATMUL; the product is the same."""

    name = "pto.acc_phase"
    VALUES: ClassVar[tuple[str, ...]] = ("unspecified", "partial", "final")


@irdl_attr_definition
class StPhaseAttr(_PtoEnumAttr):
    """`#pto<st_phase partial|final>` (tstore): the store's phase, a scheduling hint for
    ptoas's templated TSTORE; the stored data is the same."""

    name = "pto.st_phase"
    VALUES: ClassVar[tuple[str, ...]] = ("unspecified", "partial", "final")


@irdl_attr_definition
class PrintFormatAttr(_PtoEnumAttr):
    """`#pto<print_format width8_precision2>` (tprint): field width and precision of the printout."""

    name = "pto.print_format"
    VALUES: ClassVar[tuple[str, ...]] = ("width8_precision4", "width8_precision2", "width10_precision6")


@irdl_attr_definition
class AtomicTypeAttr(_PtoEnumAttr):
    """`#pto<atomic_type atomic_add>` (tstore)."""

    name = "pto.atomic_type"
    VALUES: ClassVar[tuple[str, ...]] = ("atomic_none", "atomic_add")


@irdl_attr_definition
class SaturationModeAttr(_PtoEnumAttr):
    """`#pto<saturation_mode ON>` (tcvt)."""

    name = "pto.saturation_mode"
    VALUES: ClassVar[tuple[str, ...]] = ("ON", "OFF")


@irdl_attr_definition
class AddressSpaceAttr(_EnumAttr):
    """`#pto.address_space<vec>`: a memory space (reserve_buffer's `location`)."""

    name = "pto.address_space"
    VALUES: ClassVar[tuple[str, ...]] = ("zero", "gm", "mat", "left", "right", "acc", "vec", "bias", "scaling")


@irdl_attr_definition
class MaskPatternAttr(_EnumAttr):
    """`#pto.mask_pattern<P0101>`: which elements of each group of four a masked tgather keeps
    (the pattern read right to left: P0101 keeps elements 0 and 2)."""

    name = "pto.mask_pattern"
    VALUES: ClassVar[tuple[str, ...]] = ("P0101", "P1010", "P0001", "P0010", "P0100", "P1000", "P1111")


@irdl_attr_definition
class AccToVecModeAttr(_EnumAttr):
    """`#pto.acc_to_vec_mode<dual_mode_split_m>` (tmov / textract / tinsert from ACC to a vector
    tile): which vector core(s) receive the accumulator, whole or split along M or N."""

    name = "pto.acc_to_vec_mode"
    VALUES: ClassVar[tuple[str, ...]] = ("single_mode_vec0", "single_mode_vec1", "dual_mode_split_m", "dual_mode_split_n")


@irdl_attr_definition
class TInsertModeAttr(_EnumAttr):
    """`#pto.tinsert_mode<split2>` (tinsert's A5 FP split mode)."""

    name = "pto.tinsert_mode"
    VALUES: ClassVar[tuple[str, ...]] = ("split2", "split4")


@irdl_attr_definition
class PadModeAttr(_EnumAttr):
    """`#pto.padmode<PadNull>` (tload's `pad_mode`)."""

    name = "pto.padmode"
    VALUES: ClassVar[tuple[str, ...]] = ("PadNull", "PadFirstElem", "PadValue")


FIXPIPE_LAYOUTS = ("nz2nd", "nz2dn", "nz2nz")
# ptoas's FixpipeQuant modes, split as its SET_QUANT_SCALAR / SET_QUANT_VECTOR payloads need them.
FIXPIPE_SCALAR_QUANTS = ("deqf16_scalar", "req8_scalar", "qf322b8_pre_scalar", "qf322f16_pre_scalar", "qf322bf16_pre_scalar",
                         "qs322bf16_pre_scalar", "qf322hif8_pre_scalar", "qf322fp8_pre_scalar")
FIXPIPE_VECTOR_QUANTS = ("deqf16_vec", "req8_vec", "qf322b8_pre_vec", "qs322bf16_pre_vec")
FIXPIPE_QUANTS = ("no_convert", "f32_f16", "f32_bf16") + FIXPIPE_SCALAR_QUANTS + FIXPIPE_VECTOR_QUANTS


@irdl_attr_definition
class AccPushEpilogueAttr(ParametrizedAttribute):
    """`#pto.acc_push_epilogue<layout = nz2nd, quant = deqf16_scalar, relu = no_relu>` on a pipe
    init: the FIX-pipe conversion a cube's ACC tile goes through when it is pushed to the
    vectors (PTOAS PTOAttrs.td AccPushEpilogue)."""

    name = "pto.acc_push_epilogue"
    layout: StringAttr
    quant: StringAttr
    relu: StringAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        values = []
        with parser.in_angle_brackets():
            for i, (key, allowed) in enumerate((("layout", FIXPIPE_LAYOUTS), ("quant", FIXPIPE_QUANTS), ("relu", ("no_relu", "normal_relu")))):
                if i:
                    parser.parse_punctuation(",")
                got = parser.parse_identifier()
                if got != key:
                    parser.raise_error(f"#pto.acc_push_epilogue: expected '{key}', got '{got}'")
                parser.parse_punctuation("=")
                value = parser.parse_identifier()
                if value not in allowed:
                    parser.raise_error(f"#pto.acc_push_epilogue: {key} '{value}' is not one of {', '.join(allowed)}")
                values.append(StringAttr(value))
        return tuple(values)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<layout = {self.layout.data}, quant = {self.quant.data}, relu = {self.relu.data}>")


@irdl_attr_definition
class ReluPreModeAttr(_PtoEnumAttr):
    """`#pto<relu_pre_mode normal_relu>` (textract / tinsert / tstore from ACC)."""

    name = "pto.relu_pre_mode"
    VALUES: ClassVar[tuple[str, ...]] = ("no_relu", "normal_relu", "scalar_relu", "vector_relu", "pwl")


ATTRS = (
    PtrType, TensorViewType, PartitionTensorViewType, TileBufType, KernelKindAttr, LayoutAttr,
    RoundModeAttr, CmpModeAttr, ExpPrecisionAttr, DivPrecisionAttr, LogPrecisionAttr, AccPhaseAttr, StPhaseAttr, PrintFormatAttr, AtomicTypeAttr,
    SaturationModeAttr,
    AddressSpaceAttr, MaskPatternAttr, ReluPreModeAttr,
    SqrtPrecisionAttr, RsqrtPrecisionAttr, RecipPrecisionAttr, RemPrecisionAttr, FmodPrecisionAttr, PowPrecisionAttr,
    AccToVecModeAttr, TInsertModeAttr, PadModeAttr, AccPushEpilogueAttr,
)


@irdl_attr_definition
class AsyncSessionType(ParametrizedAttribute, TypeAttribute):
    """`!pto.async_session`: an async DMA session (build_async_session)."""

    name = "pto.async_session"


@irdl_attr_definition
class AsyncEventType(ParametrizedAttribute, TypeAttribute):
    """`!pto.async_event`: a pending async transfer (tput_async / tget_async)."""

    name = "pto.async_event"
