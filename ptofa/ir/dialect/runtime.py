"""Runtime intrinsics (block / sub-block ids and counts) and `pto.set_ffts`."""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerType, i64
from xdsl.ir import SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail
from ptofa.ir.dialect.types import PtrType, elem_name


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


OPS = (GetBlockIdxOp, GetBlockNumOp, GetSubblockIdxOp, GetSubblockNumOp, SetFftsOp)
