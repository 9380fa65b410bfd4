"""Tile views that share their source's storage: `pto.treshape` (same bytes, new shape)
and `pto.subview` (a window of a tile, optionally with a runtime valid shape). The tile
ptoas materializes for a view, `physical_shape`, is in `base`."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import IndexType
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, result_def, var_operand_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import constant_index, _fail, _parse_index_list, _print_index_list, _tile, _TileViewOp
from ptofa.ir.dialect.types import TileBufType


@irdl_op_definition
class TReshapeOp(_TileViewOp):
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
class SubviewOp(_TileViewOp):
    """`%s = pto.subview %src[%i, %j] sizes [R, C] [valid [%vr, %vc]] : A -> B`: a sub-rectangle
    of a tile, same storage; `valid` gives a result with a dynamic valid shape its runtime size."""

    SUBVIEW: ClassVar[bool] = True
    name = "pto.subview"
    src = operand_def(TileBufType)
    row = operand_def(IndexType)
    col = operand_def(IndexType)
    valid = var_operand_def(IndexType)
    result = result_def(TileBufType)

    def __init__(self, src: SSAValue, row: SSAValue, col: SSAValue, result_type: TileBufType, valid: tuple = ()):
        super().__init__(operands=[src, row, col, list(valid)], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser) -> "SubviewOp":
        start = parser.pos
        src = parser.parse_unresolved_operand()
        offsets = _parse_index_list(parser)
        if len(offsets) != 2:
            parser.raise_error("subview takes two offsets")
        parser.parse_keyword("sizes")
        sizes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False))
        valid = []
        if parser.parse_optional_keyword("valid"):
            valid = _parse_index_list(parser)
            if len(valid) != 2:
                parser.raise_error("subview takes two valid sizes")
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        if not isinstance(res_t, TileBufType) or list(res_t.shape) != sizes:
            parser.raise_error(f"'{cls.name}' sizes: sizes {sizes} must equal the result tile shape {res_t}", start)
        idx = IndexType()
        return cls.build(
            operands=[parser.resolve_operand(src, src_t), parser.resolve_operand(offsets[0], idx), parser.resolve_operand(offsets[1], idx),
                      [parser.resolve_operand(v, idx) for v in valid]],
            result_types=[res_t],
        )

    def print(self, printer: Printer) -> None:
        r = self.result.type
        assert isinstance(r, TileBufType)
        printer.print_string(" ")
        printer.print_operand(self.src)
        _print_index_list(printer, [self.row, self.col])
        printer.print_string(f" sizes [{r.rows.data}, {r.cols.data}]")
        if self.valid:
            printer.print_string(" valid")
            _print_index_list(printer, list(self.valid))
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(r)

    def verify_(self) -> None:
        s, r = _tile(self, self.src, "src"), self.result.type
        assert isinstance(r, TileBufType)
        if isinstance(self.src.owner, TReshapeOp):
            _fail(self, "subview source", "the source is a pto.treshape result; ptoas 0.60 fails to legalize a subview of a "
                  "reshape ('failed to legalize operation pto.subview', ptoas 0.60): slice a tile made by pto.alloc_tile "
                  "(allocate the [1,R] row tile and treshape it to the [R,1] column instead)")
        if (s.space, s.dtype, s.blayout, s.slayout) != (r.space, r.dtype, r.blayout, r.slayout):
            _fail(self, "type agreement", f"subview keeps loc, dtype and layout of its source: {s.describe()} {s.blayout.data}/{s.slayout.data} -> {r.describe()} {r.blayout.data}/{r.slayout.data}")
        if self.valid and len(self.valid) != 2:
            _fail(self, "valid", f"takes two valid sizes, got {len(self.valid)}")
        for name, v, size in zip(("row", "col"), self.valid, (r.rows.data, r.cols.data)):
            const = constant_index(v)
            if const is not None and not 0 <= const <= size:
                _fail(self, "valid", f"valid {name} {const} must be within 0..{size} (the subview's shape)")
        for name, off, size, full in (("row", self.row, r.rows.data, s.rows.data), ("col", self.col, r.cols.data, s.cols.data)):
            const = constant_index(off)
            if size > full or (const is not None and const + size > full):
                _fail(self, "bounds", f"{name} window [{const}, +{size}) exceeds the source's {full}")


OPS = (TReshapeOp, SubviewOp)
