"""Multi-buffer tiles: `!pto.multi_tile_buf<slot, count=N>`, `pto.alloc_multi_tile` (N
physical slots of one tile type) and `pto.multi_tile_get` (a plain `tile_buf` view of
slot k), so a double-buffered loop picks its slot with its own index arithmetic.

Rules follow ptoas (PTOAS include/PTO/IR/PTOOps.td AllocMultiTileOp / MultiTileGetOp,
lib/PTO/IR/PTO.cpp and PTOTypeDefs.cpp): 2 <= count <= 16, no row_plus_one compaction
(slots are laid out at product(shape) * elem bytes), valid_row / valid_col exactly when
the slot's valid shape is dynamic, the result of a get is the slot type, and a constant
slot index lies in [0, count).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, IntAttr, IntegerType, i64
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import IRDLOperation, irdl_attr_definition, irdl_op_definition, operand_def, opt_operand_def, result_def
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from ptofa.ir.dialect.base import _fail, constant_index
from ptofa.ir.dialect.types import DYN, TileBufType, _dims_str

MIN_SLOTS, MAX_SLOTS = 2, 16
ROW_PLUS_ONE = 2  # tile_buf compact=2: one padding element per row


@irdl_attr_definition
class MultiTileBufType(ParametrizedAttribute, TypeAttribute):
    """`!pto.multi_tile_buf<vec, 16x16xf16, count=2>` or `<!pto.tile_buf<...>, count=2>`."""

    name = "pto.multi_tile_buf"
    slot: TileBufType
    count: IntAttr

    def __init__(self, slot: TileBufType, count: int):
        super().__init__(slot, IntAttr(count))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            slot = parser.parse_optional_type()
            outer = {"count": 0}
            if slot is None:
                fields = TileBufType._parse_compact(parser, parser.parse_identifier(), outer)
            elif not isinstance(slot, TileBufType):
                parser.raise_error(f"multi_tile_buf slot type must be `!pto.tile_buf<...>`, got {slot}", start)
            else:
                parser.parse_punctuation(",")
                parser.parse_keyword("count")
                parser.parse_punctuation("=")
                outer["count"] = parser.parse_integer(allow_boolean=False)
        try:
            t = cls(TileBufType(**fields) if slot is None else slot, outer["count"])
        except VerifyException as exc:
            parser.raise_error(str(exc), start)
        return tuple(t.parameters)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_attribute(self.slot)
        printer.print_string(f", count={self.count.data}>")

    def verify(self) -> None:
        n = self.count.data
        if not MIN_SLOTS <= n <= MAX_SLOTS:
            raise VerifyException(f"multi_tile_buf count must be in [{MIN_SLOTS}, {MAX_SLOTS}] (got {n})")

    @property
    def nbytes(self) -> int:
        return self.count.data * self.slot.nbytes


@irdl_op_definition
class AllocMultiTileOp(IRDLOperation):
    """`%m = pto.alloc_multi_tile [addr = %a] [valid_row = %r] [valid_col = %c] : !pto.multi_tile_buf<...>`."""

    name = "pto.alloc_multi_tile"
    addr = opt_operand_def(IntegerType)
    valid_row = opt_operand_def(IndexType)
    valid_col = opt_operand_def(IndexType)
    result = result_def(MultiTileBufType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser) -> AllocMultiTileOp:
        found = {}
        for key in ("addr", "valid_row", "valid_col"):
            if parser.parse_optional_keyword(key):
                parser.parse_punctuation("=")
                found[key] = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        types = {"addr": i64, "valid_row": IndexType(), "valid_col": IndexType()}
        return cls.build(
            operands=[[parser.resolve_operand(found[k], types[k])] if k in found else [] for k in types],
            result_types=[t],
        )

    def print(self, printer: Printer) -> None:
        for key, value in (("addr", self.addr), ("valid_row", self.valid_row), ("valid_col", self.valid_col)):
            if value is not None:
                printer.print_string(f" {key} = ")
                printer.print_operand(value)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @property
    def slot_type(self) -> TileBufType:
        t = self.result.type
        assert isinstance(t, MultiTileBufType)
        return t.slot

    def verify_(self) -> None:
        slot = self.slot_type
        bad = slot.layout_error()
        if bad is not None:
            _fail(self, *bad)
        if slot.compact.data == ROW_PLUS_ONE:
            _fail(self, "compaction", "a multi_tile_buf slot with row_plus_one compaction (compact=2) would overlap the next slot; "
                  "use a compact slot layout or a single pto.alloc_tile")
        for name, value, dim in (("valid_row", self.valid_row, slot.v_row.data), ("valid_col", self.valid_col, slot.v_col.data)):
            if (value is not None) != (dim == DYN):
                need = "is required" if dim == DYN else "must be absent"
                _fail(self, "valid shape", f"{name} operand {need} because the slot's valid shape is {_dims_str(slot.valid)}")


@irdl_op_definition
class MultiTileGetOp(IRDLOperation):
    """`%t = pto.multi_tile_get %m[%k] : !pto.multi_tile_buf<...> -> !pto.tile_buf<...>`."""

    name = "pto.multi_tile_get"
    source = operand_def(MultiTileBufType)
    slot_index = operand_def(IndexType)
    result = result_def(TileBufType)

    @classmethod
    def parse(cls, parser: Parser) -> MultiTileGetOp:
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation("[")
        k = parser.parse_unresolved_operand()
        parser.parse_punctuation("]")
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(src, src_t), parser.resolve_operand(k, IndexType())], result_types=[res_t])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.source)
        printer.print_string("[")
        printer.print_operand(self.slot_index)
        printer.print_string("] : ")
        printer.print_attribute(self.source.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        src = self.source.type
        assert isinstance(src, MultiTileBufType)
        if self.result.type != src.slot:
            _fail(self, "slot type", f"the result {self.result.type} must be the multi_tile_buf slot type {src.slot}")
        k = constant_index(self.slot_index)
        if k is not None and not 0 <= k < src.count.data:
            _fail(self, "slot index", f"constant slot {k} is out of range for multi_tile_buf count={src.count.data}")


OPS = (AllocMultiTileOp, MultiTileGetOp)
ATTRS = (MultiTileBufType,)
