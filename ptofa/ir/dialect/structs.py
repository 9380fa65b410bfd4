"""Stack-local structs: `!pto.struct<T1, T2, ...>` (scalar fields or nested structs),
`pto.declare_struct`, `pto.struct_get %s[i, j] : S -> T` and `pto.struct_set %s[i, j], %v : S, T`
(a C++ aggregate on the scalar unit, outside tile memory planning).

Rules follow PTOAS's PTOOps.td and PTO.cpp (DeclareStructOp / StructGetOp / StructSetOp
verifiers): fields are 8/16/32/64-bit integers, f16/bf16/f32/f64 or structs; a path indexes
fields from the outer struct in and ends at a scalar of the value's type; a declared struct
is never handed to a terminator (its storage dies with the scope).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, BFloat16Type, DenseArrayBase, Float16Type, Float32Type, Float64Type, IntegerType, i64
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition, irdl_op_definition, operand_def, prop_def, result_def
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import VerifyException

from ptofa.ir.dialect.base import _fail


def _is_scalar_field(t: Attribute) -> bool:
    if isinstance(t, IntegerType):
        return t.width.data in (8, 16, 32, 64)
    return isinstance(t, (Float16Type, BFloat16Type, Float32Type, Float64Type))


@irdl_attr_definition
class StructType(ParametrizedAttribute, TypeAttribute):
    """`!pto.struct<f16, i8>`, `!pto.struct<!pto.struct<f32, i8>, i16>`"""

    name = "pto.struct"
    fields: ArrayAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        types = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, parser.parse_type)
        return (ArrayAttr(types),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_list(self.fields.data, printer.print_attribute)
        printer.print_string(">")

    def verify(self) -> None:
        if not self.fields.data:
            raise VerifyException("!pto.struct: needs at least one field")
        for t in self.fields.data:
            if not (_is_scalar_field(t) or isinstance(t, StructType)):
                raise VerifyException(f"!pto.struct: fields must be 8/16/32/64-bit integers, f16/bf16/f32/f64 or structs, got {t}")


@irdl_op_definition
class DeclareStructOp(IRDLOperation):
    """`%s = pto.declare_struct -> !pto.struct<...>`"""

    name = "pto.declare_struct"
    s = result_def(StructType)

    @classmethod
    def parse(cls, parser: Parser) -> DeclareStructOp:
        parser.parse_punctuation("->")
        return cls.build(result_types=[parser.parse_type()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" -> ")
        printer.print_attribute(self.s.type)

    def verify_(self) -> None:
        for use in self.s.uses:
            if use.operation.has_trait(IsTerminator):
                _fail(self, "escape", f"a stack-local struct must not be passed to '{use.operation.name}': its storage "
                      "dies with the scope that declares it (declare it outside and struct_set it in place)")


def _parse_path(parser: Parser) -> DenseArrayBase:
    ints = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False))
    return DenseArrayBase.from_list(i64, ints)


def field_at(op: IRDLOperation, struct: StructType, path: Sequence[int]) -> Attribute:
    """The scalar field type `path` reaches (a `_fail` when out of range or not a scalar)."""
    t: Attribute = struct
    for depth, i in enumerate(path):
        if not isinstance(t, StructType):
            _fail(op, "path", f"index {depth} of path {list(path)} descends into the scalar {t}")
        if not 0 <= i < len(t.fields.data):
            _fail(op, "path", f"field {i} at depth {depth} is outside a struct of {len(t.fields.data)} fields")
        t = t.fields.data[i]
    if not path or isinstance(t, StructType):
        _fail(op, "path", f"the path {list(path)} must end at a scalar field, but ends at {t}")
    return t


class _StructAccessOp(IRDLOperation):
    """Shared path access of struct_get / struct_set (each declares `s` first: operand order)."""

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(self.path.get_values())

    def _print_head(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.s)
        printer.print_string("[" + ", ".join(map(str, self.indices)) + "]")


@irdl_op_definition
class StructGetOp(_StructAccessOp):
    """`%v = pto.struct_get %s[0, 1] : !pto.struct<...> -> T`"""

    name = "pto.struct_get"
    s = operand_def(StructType)
    path = prop_def(DenseArrayBase)
    value = result_def()

    @classmethod
    def parse(cls, parser: Parser) -> StructGetOp:
        s = parser.parse_unresolved_operand()
        path = _parse_path(parser)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation("->")
        r = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(s, t)], result_types=[r], properties={"path": path})

    def print(self, printer: Printer) -> None:
        self._print_head(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.s.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.value.type)

    def verify_(self) -> None:
        field = field_at(self, self.s.type, self.indices)
        if self.value.type != field:
            _fail(self, "operand type", f"the result type {self.value.type} must be the field type {field}")


@irdl_op_definition
class StructSetOp(_StructAccessOp):
    """`pto.struct_set %s[0, 1], %v : !pto.struct<...>, T`"""

    name = "pto.struct_set"
    s = operand_def(StructType)
    value = operand_def()
    path = prop_def(DenseArrayBase)

    @classmethod
    def parse(cls, parser: Parser) -> StructSetOp:
        s = parser.parse_unresolved_operand()
        path = _parse_path(parser)
        parser.parse_punctuation(",")
        v = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation(",")
        vt = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(s, t), parser.resolve_operand(v, vt)], properties={"path": path})

    def print(self, printer: Printer) -> None:
        self._print_head(printer)
        printer.print_string(", ")
        printer.print_operand(self.value)
        printer.print_string(" : ")
        printer.print_attribute(self.s.type)
        printer.print_string(", ")
        printer.print_attribute(self.value.type)

    def verify_(self) -> None:
        field = field_at(self, self.s.type, self.indices)
        if self.value.type != field:
            _fail(self, "operand type", f"the value type {self.value.type} must be the field type {field}")


OPS = (DeclareStructOp, StructGetOp, StructSetOp)
ATTRS = (StructType,)
