"""Shared pieces of the ops' custom syntax and verifiers: the `_fail` rule reporter,
operand lists, `{key = int}` dicts, `[%i, %j]` index lists, and the `ins(...) outs(...)`
base class of the DPS tile ops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, IntegerType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from ptofa.ir.dialect.types import TileBufType


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
