"""View and tile queries and prefetch: `pto.get_tensor_view_dim` / `_stride` (a dimension's size
or stride, in elements, of a tensor_view or partition, e.g. a dynamic one),
`pto.get_validshape` (a tile's runtime valid rows and columns, as set_validshape left them), `pto.tprefetch` (GM -> a temporary vec / mat tile, a
cache hint without the implicit syncs of tload) and the asynchronous L2 prefetch
(`pto.make_prefetch_async_context`, `pto.get_prefetch_async_session`, `pto.tprefetch_async`,
whose event `pto.comm.wait_async_event` / `test_async_event` take).

Syntax and rules follow PTOAS's PTOOps.td and PTO.cpp (TPrefetchOp::verify, A2/A3).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IndexType
from xdsl.ir import ParametrizedAttribute, TypeAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition, irdl_op_definition, operand_def, result_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _InsOutsOp, _fail, _tile
from ptofa.ir.dialect.types import AsyncEventType, AsyncSessionType, _dims_str, DYN, elem_bytes, elem_name, PartitionTensorViewType, PtrType, TensorViewType, TileBufType


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


@irdl_attr_definition
class PrefetchAsyncContextType(ParametrizedAttribute, TypeAttribute):
    """`!pto.prefetch_async_context`: the SDMA context of asynchronous L2 prefetches."""

    name = "pto.prefetch_async_context"


@irdl_op_definition
class MakePrefetchAsyncContextOp(IRDLOperation):
    """`%ctx = pto.make_prefetch_async_context(%ws : !pto.ptr<i8>) -> !pto.prefetch_async_context`:
    a prefetch context on a GM workspace of bytes (PTOAS MakePrefetchAsyncContextOp::verify)."""

    name = "pto.make_prefetch_async_context"
    workspace = operand_def(PtrType)
    ctx = result_def(PrefetchAsyncContextType)

    @classmethod
    def parse(cls, parser: Parser) -> MakePrefetchAsyncContextOp:
        parser.parse_punctuation("(")
        ws = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        ws = parser.resolve_operand(ws, parser.parse_type())
        parser.parse_punctuation(")")
        extra = parser.parse_optional_attr_dict()
        parser.parse_punctuation("->")
        return cls.build(operands=[ws], result_types=[parser.parse_type()], attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        printer.print_operand(self.workspace)
        printer.print_string(" : ")
        printer.print_attribute(self.workspace.type)
        printer.print_string(")")
        _print_extra(printer, self)
        printer.print_string(" -> ")
        printer.print_attribute(self.ctx.type)

    def verify_(self) -> None:
        t = self.workspace.type
        assert isinstance(t, PtrType)
        if elem_name(t.elem) not in ("i8", "ui8"):
            _fail(self, "operand type", f"the workspace is a !pto.ptr of 8-bit integers, got {t}")


@irdl_op_definition
class GetPrefetchAsyncSessionOp(IRDLOperation):
    """`%s = pto.get_prefetch_async_session %ctx : !pto.prefetch_async_context -> !pto.async_session`"""

    name = "pto.get_prefetch_async_session"
    ctx = operand_def(PrefetchAsyncContextType)
    session = result_def()

    @classmethod
    def parse(cls, parser: Parser) -> GetPrefetchAsyncSessionOp:
        ctx = parser.parse_unresolved_operand()
        extra = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ctx = parser.resolve_operand(ctx, parser.parse_type())
        parser.parse_punctuation("->")
        return cls.build(operands=[ctx], result_types=[parser.parse_type()], attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ctx)
        _print_extra(printer, self)
        printer.print_string(" : ")
        printer.print_attribute(self.ctx.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.session.type)

    def verify_(self) -> None:
        if not isinstance(self.session.type, AsyncSessionType):
            _fail(self, "result type", f"the result is a !pto.async_session, got {self.session.type}")


@irdl_op_definition
class TPrefetchAsyncOp(IRDLOperation):
    """`%e = pto.tprefetch_async(%src, %ctx : PV, !pto.prefetch_async_context) -> !pto.async_event`:
    start an SDMA prefetch of a static, flat (all leading dims 1) GM view into L2
    (PTOAS TPrefetchAsyncOp::verify)."""

    name = "pto.tprefetch_async"
    src = operand_def(TensorViewType | PartitionTensorViewType)
    ctx = operand_def(PrefetchAsyncContextType)
    event = result_def()

    @classmethod
    def parse(cls, parser: Parser) -> TPrefetchAsyncOp:
        parser.parse_punctuation("(")
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        ctx = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        src = parser.resolve_operand(src, parser.parse_type())
        parser.parse_punctuation(",")
        ctx = parser.resolve_operand(ctx, parser.parse_type())
        parser.parse_punctuation(")")
        extra = parser.parse_optional_attr_dict()
        parser.parse_punctuation("->")
        return cls.build(operands=[src, ctx], result_types=[parser.parse_type()], attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        printer.print_operand(self.src)
        printer.print_string(", ")
        printer.print_operand(self.ctx)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(", ")
        printer.print_attribute(self.ctx.type)
        printer.print_string(")")
        _print_extra(printer, self)
        printer.print_string(" -> ")
        printer.print_attribute(self.event.type)

    def verify_(self) -> None:

        dims = self.src.type.dims
        if DYN in dims:
            _fail(self, "shape", f"src must have a static shape, got {_dims_str(dims)}")
        if any(n != 1 for n in dims[:-1]):
            _fail(self, "shape", f"src must be a static flat contiguous logical 1D GM view (leading dims 1), got {_dims_str(dims)}")
        if not isinstance(self.event.type, AsyncEventType):
            _fail(self, "result type", f"the result is a !pto.async_event, got {self.event.type}")


def _print_extra(printer: Printer, op: IRDLOperation) -> None:
    if op.attributes:
        printer.print_string(" ")
        printer.print_attr_dict(op.attributes)


VIEW_QUERY_OPS = (GetTensorViewDimOp, GetTensorViewStrideOp, GetValidShapeOp)
PREFETCH_ASYNC_OPS = (MakePrefetchAsyncContextOp, GetPrefetchAsyncSessionOp, TPrefetchAsyncOp)
OPS = (*VIEW_QUERY_OPS, TPrefetchOp, *PREFETCH_ASYNC_OPS)
ATTRS = (PrefetchAsyncContextType,)
