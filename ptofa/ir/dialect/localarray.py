"""Stack-local scalar arrays: `!pto.local_array<D1x...xDkxT>`, `pto.declare_local_array`,
`pto.local_array_get %a[%i, ...]` and `pto.local_array_set %a[%i, ...], %v` (C++ `T a[D1]...`
on the scalar unit, outside tile memory planning).

Rules follow docs/PTO_IR_manual.md 2.6 / 4.22 of PTOAS: a static positive shape of integer
or float elements, one index per dimension, the value / result of the element type.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, BFloat16Type, Float16Type, Float32Type, IndexType, IntAttr, IntegerType
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition, irdl_op_definition, operand_def, result_def, var_operand_def
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from ptofa.ir.dialect.base import _fail, _parse_index_list, _print_index_list


@irdl_attr_definition
class LocalArrayType(ParametrizedAttribute, TypeAttribute):
    """`!pto.local_array<8x8xf32>`"""

    name = "pto.local_array"
    shape: ArrayAttr
    elem: Attribute

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            dims = [parser.parse_shape_dimension(allow_dynamic=False)]
            parser.parse_shape_delimiter()
            while True:
                elem = parser.parse_optional_type()
                if elem is not None:
                    break
                dims.append(parser.parse_shape_dimension(allow_dynamic=False))
                parser.parse_shape_delimiter()
        try:
            t = cls(ArrayAttr([IntAttr(d) for d in dims]), elem)
        except VerifyException as exc:
            parser.raise_error(str(exc), start)
        return tuple(t.parameters)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<" + "".join(f"{d}x" for d in self.dims))
        printer.print_attribute(self.elem)
        printer.print_string(">")

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    def verify(self) -> None:
        if any(d <= 0 for d in self.dims):
            raise VerifyException(f"!pto.local_array: dimensions must be positive, got {self.dims}")
        if not isinstance(self.elem, (IntegerType, Float16Type, Float32Type, BFloat16Type)):
            raise VerifyException(f"!pto.local_array: elements must be integer or float scalars, got {self.elem}")


@irdl_op_definition
class DeclareLocalArrayOp(IRDLOperation):
    """`%a = pto.declare_local_array -> !pto.local_array<...>`"""

    name = "pto.declare_local_array"
    result = result_def(LocalArrayType)

    @classmethod
    def parse(cls, parser: Parser) -> DeclareLocalArrayOp:
        parser.parse_punctuation("->")
        return cls.build(result_types=[parser.parse_type()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


def _check_indices(op: IRDLOperation, array: LocalArrayType, indices: Sequence) -> None:
    if len(indices) != len(array.dims):
        _fail(op, "indices", f"a rank-{len(array.dims)} local array takes {len(array.dims)} indices, got {len(indices)}")


@irdl_op_definition
class LocalArrayGetOp(IRDLOperation):
    """`%v = pto.local_array_get %a[%i, %j] : !pto.local_array<...> -> T`"""

    name = "pto.local_array_get"
    array = operand_def(LocalArrayType)
    indices = var_operand_def(IndexType)
    result = result_def()

    @classmethod
    def parse(cls, parser: Parser) -> LocalArrayGetOp:
        a = parser.parse_unresolved_operand()
        idx = _parse_index_list(parser)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation("->")
        r = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(a, t), [parser.resolve_operand(i, IndexType()) for i in idx]], result_types=[r])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.array)
        _print_index_list(printer, self.indices)
        printer.print_string(" : ")
        printer.print_attribute(self.array.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        _check_indices(self, self.array.type, self.indices)
        if self.result.type != self.array.type.elem:
            _fail(self, "operand type", f"the result must be the element type {self.array.type.elem}, got {self.result.type}")


@irdl_op_definition
class LocalArraySetOp(IRDLOperation):
    """`pto.local_array_set %a[%i, %j], %v : !pto.local_array<...>, T`"""

    name = "pto.local_array_set"
    array = operand_def(LocalArrayType)
    indices = var_operand_def(IndexType)
    value = operand_def()

    @classmethod
    def parse(cls, parser: Parser) -> LocalArraySetOp:
        a = parser.parse_unresolved_operand()
        idx = _parse_index_list(parser)
        parser.parse_punctuation(",")
        v = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation(",")
        vt = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(a, t), [parser.resolve_operand(i, IndexType()) for i in idx], parser.resolve_operand(v, vt)])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.array)
        _print_index_list(printer, self.indices)
        printer.print_string(", ")
        printer.print_operand(self.value)
        printer.print_string(" : ")
        printer.print_attribute(self.array.type)
        printer.print_string(", ")
        printer.print_attribute(self.value.type)

    def verify_(self) -> None:
        _check_indices(self, self.array.type, self.indices)
        if self.value.type != self.array.type.elem:
            _fail(self, "operand type", f"the value must be the element type {self.array.type.elem}, got {self.value.type}")


OPS = (DeclareLocalArrayOp, LocalArrayGetOp, LocalArraySetOp)
ATTRS = (LocalArrayType,)
