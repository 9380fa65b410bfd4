"""Vector (AIV) elementwise tile ops: tcvt, binary / unary / scalar ops and texpands.

The vector checks and the op base classes (`_BinaryOp`, `_UnaryOp`, `_ScalarOp`,
`_PrecisionAttrOp`) these ops share with the other vector families live in `base`."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import (_BinaryOp, _check_vec, _fail, _InsOutsOp, _parse_typed_list, _PrecisionAttrOp, _print_typed_list,
                                   _ScalarOp, _tile, _UnaryOp, _valid_compatible, print_merged_attrs)
from ptofa.ir.dialect.types import (
    ROUND_MODES,
    DivPrecisionAttr,
    ExpPrecisionAttr,
    LogPrecisionAttr,
    RecipPrecisionAttr,
    RoundModeAttr,
    RsqrtPrecisionAttr,
    SqrtPrecisionAttr,
    SaturationModeAttr,
    TileBufType,
    _dims_str,
)


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
    sat_mode = opt_prop_def(SaturationModeAttr)  # written `satmode` in the custom form
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
        sat = None
        extra: dict[str, Attribute] = {}  # discardable attributes (ptoas keeps them, its lowering ignores them)
        if parser.parse_optional_punctuation("{"):
            while True:
                key = parser.parse_identifier()
                parser.parse_punctuation("=")
                if key == "rmode":
                    rmode = _parse_round_mode(parser)
                elif key in ("satmode", "sat_mode"):
                    sat = parser.parse_attribute()
                    if not isinstance(sat, SaturationModeAttr):
                        parser.raise_error(f"pto.tcvt: satmode must be #pto<saturation_mode ON|OFF>, got {sat}", start)
                elif key in extra:
                    parser.raise_error(f"pto.tcvt: duplicate attribute '{key}'", start)
                else:
                    extra[key] = parser.parse_attribute()
                if parser.parse_optional_punctuation(",") is None:
                    break
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
        op = cls._from_parsed(parser, ins, in_types, outs, out_types, extra, start)
        op.properties["rmode"] = StringAttr(rmode)
        if sat is not None:
            op.properties["sat_mode"] = sat
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        printer.print_list(self.ins_values(), printer.print_operand)
        sat = f", satmode = {self.sat_mode.text}" if self.sat_mode is not None else ""

        def own(p: Printer) -> None:
            p.print_string(f" {{rmode = #pto<round_mode {self.round_mode}>{sat}}}")

        print_merged_attrs(printer, self, own)
        printer.print_string(" : ")
        printer.print_list([v.type for v in self.ins_values()], printer.print_attribute)
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, d])
        if self.round_mode not in ROUND_MODES:
            _fail(self, "round mode", f"'{self.round_mode}' is not one of {ROUND_MODES}")
        if not _valid_compatible(s.shape, d.shape):  # ptoas TCvtOp::verify, the physical shapes
            _fail(self, "shape agreement", f"src and dst need the same shape, got {_dims_str(s.shape)} and {_dims_str(d.shape)} "
                                           "(ptoas: 'expects src and dst to have compatible shapes'; convert into a tile of "
                                           "the source's shape)")
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


@irdl_op_definition
class TExpOp(_UnaryOp, _PrecisionAttrOp):
    """d = exp(a) (optional `{precisionType = #pto<exp_precision high_precision>}`)"""

    name = "pto.texp"
    FLOAT_ONLY: ClassVar[bool] = True
    precisionType = opt_prop_def(ExpPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = ExpPrecisionAttr


@irdl_op_definition
class TLogOp(_UnaryOp, _PrecisionAttrOp):
    """d = ln(a) (optional `{precisionType = #pto<log_precision high_precision>}`)"""

    name = "pto.tlog"
    FLOAT_ONLY: ClassVar[bool] = True
    precisionType = opt_prop_def(LogPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = LogPrecisionAttr


@irdl_op_definition
class TSqrtOp(_UnaryOp, _PrecisionAttrOp):
    """d = sqrt(a)"""

    name = "pto.tsqrt"
    FLOAT_ONLY: ClassVar[bool] = True
    precisionType = opt_prop_def(SqrtPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = SqrtPrecisionAttr


@irdl_op_definition
class TRsqrtOp(_UnaryOp, _PrecisionAttrOp):
    """d = 1/sqrt(a); ptoas also takes a scratch tile: `ins(%a, %tmp : A, T)`."""

    name = "pto.trsqrt"
    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    FLOAT_ONLY: ClassVar[bool] = True
    HAS_TMP: ClassVar[bool] = True
    precisionType = opt_prop_def(RsqrtPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = RsqrtPrecisionAttr

    def verify_(self) -> None:
        super().verify_()
        if self.tmp is not None:
            _check_vec(self, [_tile(self, self.tmp, "tmp")])
        if self.precisionType is not None and self.precisionType.value.data == "high_precision" and self.tmp is None:
            _fail(self, "tmp", "precisionType = high_precision needs a tmp tile (PTOAS TRsqrtOp::verify)")


@irdl_op_definition
class TRecipOp(_UnaryOp, _PrecisionAttrOp):
    """d = 1/a (not in place on a3)"""

    name = "pto.trecip"
    FLOAT_ONLY: ClassVar[bool] = True
    precisionType = opt_prop_def(RecipPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = RecipPrecisionAttr

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
    COL_MAJOR_OK: ClassVar[bool] = True  # ptoas 0.60 compiles it on a [R,1] column (the other unary ops not)


@irdl_op_definition
class TReluOp(_UnaryOp):
    """d = max(0, a)"""

    name = "pto.trelu"


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
class TDivsOp(_ScalarOp, _PrecisionAttrOp):
    """d = a / s, or d = s / a when the scalar comes first (optional `{precisionType = #pto<div_precision ...>}`)"""

    name = "pto.tdivs"
    SCALAR_FIRST_OK: ClassVar[bool] = True
    precisionType = opt_prop_def(DivPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = DivPrecisionAttr


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


OPS = (
    TCvtOp,
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
    TExpandsOp,
)
