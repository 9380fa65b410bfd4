"""View and tile queries and prefetch: `pto.get_tensor_view_dim` / `_stride` (a dimension's size
or stride, in elements, of a tensor_view or partition, e.g. a dynamic one),
`pto.get_validshape` (a tile's runtime valid rows and columns, as set_validshape left them) and `pto.tprefetch` (GM -> a temporary vec / mat tile, a
cache hint without the implicit syncs of tload).

Syntax and rules follow PTOAS's PTOOps.td and PTO.cpp (TPrefetchOp::verify, A2/A3).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IndexType
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _InsOutsOp, _fail, _tile
from ptofa.ir.dialect.types import DYN, PartitionTensorViewType, TensorViewType, TileBufType, elem_bytes, elem_name


class _ViewQueryOp(IRDLOperation):
    """`%n = pto.<op> %tv, %i : !pto.tensor_view<?x?xf32> -> index`"""

    tensor_view = operand_def(TensorViewType | PartitionTensorViewType)
    dim_index = operand_def(IndexType)
    result = result_def(IndexType)

    @classmethod
    def parse(cls, parser: Parser):
        view = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        index = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation("->")
        r = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(view, t), parser.resolve_operand(index, IndexType())], result_types=[r])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.tensor_view)
        printer.print_string(", ")
        printer.print_operand(self.dim_index)
        printer.print_string(" : ")
        printer.print_attribute(self.tensor_view.type)
        printer.print_string(" -> index")


@irdl_op_definition
class GetTensorViewDimOp(_ViewQueryOp):
    """The size of dimension %i."""

    name = "pto.get_tensor_view_dim"


@irdl_op_definition
class GetTensorViewStrideOp(_ViewQueryOp):
    """The stride of dimension %i, in elements."""

    name = "pto.get_tensor_view_stride"


@irdl_op_definition
class GetValidShapeOp(IRDLOperation):
    """`%r, %c = pto.get_validshape %t : !pto.tile_buf<...>`"""

    name = "pto.get_validshape"
    source = operand_def(TileBufType)
    valid_row = result_def(IndexType)
    valid_col = result_def(IndexType)

    @classmethod
    def parse(cls, parser: Parser) -> GetValidShapeOp:
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(src, t)], result_types=[IndexType(), IndexType()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.source)
        printer.print_string(" : ")
        printer.print_attribute(self.source.type)


@irdl_op_definition
class TPrefetchOp(_InsOutsOp):
    """`pto.tprefetch ins(%pv : PV) outs(%t : T)`: prefetch a partition into a vec / mat tile."""

    name = "pto.tprefetch"
    src = operand_def(PartitionTensorViewType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        t = _tile(self, self.dst, "dst")
        pv = self.src.type
        if any(n != DYN and n <= 0 for n in pv.dims):
            _fail(self, "shape", f"expects a positive src shape, got {list(pv.dims)}")
        if t.space not in ("vec", "mat"):
            _fail(self, "memory space", f"dst must be loc=vec or loc=mat, got loc={t.space}")
        if elem_bytes(pv.elem) != elem_bytes(t.dtype):
            _fail(self, "dtype", f"expects src and dst element types of one size, got {elem_name(pv.elem)} and {t.elem}")


VIEW_QUERY_OPS = (GetTensorViewDimOp, GetTensorViewStrideOp, GetValidShapeOp)
OPS = (*VIEW_QUERY_OPS, TPrefetchOp)
