"""Sorting: `pto.tsort32` (sort 32-element blocks into value-index pairs) and `pto.tmrgsort`
(merge sorted lists of such pairs: one list in blocks of `blockLen`, or 2-4 lists with a
tmp and a `vector<4xi16>` count of the elements each list gave).

Rules follow docs/PTO_IR_manual.md (4.11) of PTOAS and TMrgSortOp's parser: f16 / f32
values; tsort32's 32-bit integer index tile and loc=vec row-major operands; tmrgsort's single-row
tiles of one element type, tmp at least as wide as dst, an executed-count result of
`vector<4xi16>`. The packed value-index layout is the hardware's, so the simulator refuses
both ops rather than guess it.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import BoolAttr, IntegerAttr, IntegerType, VectorType, i1, i16
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, var_operand_def
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail, _InsOutsOp, _tile
from ptofa.ir.dialect.types import DYN, TileBufType

_SORT_DTYPES = ("f16", "f32")


@irdl_op_definition
class TSort32Op(_InsOutsOp):
    """`ins(%src, %idx[, %tmp] : S, ui32 tile[, T]) outs(%dst : D)`."""

    name = "pto.tsort32"
    N_INS: ClassVar[int] = 2
    HAS_TMP: ClassVar[bool] = True
    src = operand_def(TileBufType)
    idx = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, i, d = _tile(self, self.src, "src"), _tile(self, self.idx, "idx"), _tile(self, self.dst, "dst")
        for t, role in ((s, "src"), (i, "idx"), (d, "dst")):
            if t.space != "vec" or not t.is_row_major:
                _fail(self, "layout", f"{role} must be a loc=vec row_major tile, got {t.describe()}")
        if d.elem not in _SORT_DTYPES or s.dtype != d.dtype:
            _fail(self, "dtype", f"src and dst must share f16 or f32, got {s.elem} and {d.elem}")
        if not (isinstance(i.dtype, IntegerType) and i.dtype.width.data == 32):
            _fail(self, "index", f"idx element type must be i32 / ui32, got {i.dtype}")
        if self.tmp is not None and _tile(self, self.tmp, "tmp").space != "vec":
            _fail(self, "layout", "tmp must be a loc=vec tile")


def _single_row(op: IRDLOperation, t: TileBufType, role: str) -> None:
    if t.rows.data != 1:
        _fail(op, "shape agreement", f"{role} must be a single-row tile, got {t.describe()}")


@irdl_op_definition
class TMrgSortOp(IRDLOperation):
    """Format 1 `ins(%src, %blockLen : S, i32) outs(%dst : D)`; format 2
    `ins(%s0, %s1[, %s2[, %s3]], %tmp | no_tmp {exhausted = b} : ...) outs(%dst, %executed : D, vector<4xi16>)`."""

    name = "pto.tmrgsort"
    srcs = var_operand_def(TileBufType)
    block_len = opt_operand_def(IntegerType)
    tmp = opt_operand_def(TileBufType)
    dst = operand_def(TileBufType)
    executed = opt_operand_def(VectorType)
    exhausted = opt_prop_def(BoolAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser) -> TMrgSortOp:
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        names = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        no_tmp = parser.parse_optional_keyword("no_tmp") is not None
        attrs = dict(parser.parse_optional_attr_dict())
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        out_names = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        out_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
        if len(types) != len(names) or len(out_types) != len(out_names):
            parser.raise_error(f"{cls.name}: operand and type counts differ", start)
        ins = [parser.resolve_operand(n, t) for n, t in zip(names, types)]
        outs = [parser.resolve_operand(n, t) for n, t in zip(out_names, out_types)]
        exhausted = attrs.pop("exhausted", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        props: dict[str, Attribute] = {}
        if exhausted is not None:
            if not (isinstance(exhausted, IntegerAttr) and exhausted.type == i1):
                parser.raise_error(f"{cls.name}: exhausted must be true or false, got {exhausted}", start)
            props["exhausted"] = exhausted
        if len(outs) == 1:
            if len(ins) != 2 or no_tmp or exhausted is not None:
                parser.raise_error(f"{cls.name}: format 1 is ins(%src, %blockLen : S, i32) outs(%dst : D)", start)
            return cls.build(operands=[[ins[0]], [ins[1]], [], outs[0], []], properties=props)
        if len(outs) != 2 or exhausted is None:
            parser.raise_error(f"{cls.name}: format 2 is ins(%s0, %s1[, ...], %tmp | no_tmp {{exhausted = b}} : ...) outs(%dst, %executed : D, vector<4xi16>)", start)
        srcs, tmp = (ins, []) if no_tmp else (ins[:-1], ins[-1:])
        return cls.build(operands=[srcs, [], tmp, outs[0], [outs[1]]], properties=props)

    def print(self, printer: Printer) -> None:
        ins: list[SSAValue] = [*self.srcs, *([self.block_len] if self.block_len is not None else []), *([self.tmp] if self.tmp is not None else [])]
        printer.print_string(" ins(")
        printer.print_list(ins, printer.print_operand)
        if self.executed is not None:
            if self.tmp is None:
                printer.print_string(" no_tmp")
            printer.print_string(f" {{exhausted = {'true' if self.exhausted.value.data else 'false'}}}")
        printer.print_string(" : ")
        printer.print_list([v.type for v in ins], printer.print_attribute)
        outs = [self.dst, *([self.executed] if self.executed is not None else [])]
        printer.print_string(") outs(")
        printer.print_list(outs, printer.print_operand)
        printer.print_string(" : ")
        printer.print_list([v.type for v in outs], printer.print_attribute)
        printer.print_string(")")

    def verify_(self) -> None:
        d = _tile(self, self.dst, "dst")
        srcs = [_tile(self, v, f"src{i}") for i, v in enumerate(self.srcs)]
        if d.elem not in _SORT_DTYPES:
            _fail(self, "dtype", f"tmrgsort sorts f16 or f32, got {d.elem}")
        for i, s in enumerate(srcs):
            if s.dtype != d.dtype:
                _fail(self, "dtype", f"src{i} {s.elem} != dst {d.elem}")
            _single_row(self, s, f"src{i}")
        _single_row(self, d, "dst")
        if self.executed is None:
            if len(srcs) != 1 or self.block_len is None:
                _fail(self, "operands", "format 1 takes one src and a blockLen")
            return
        if not 2 <= len(srcs) <= 4:
            _fail(self, "operands", f"format 2 merges 2 to 4 lists, got {len(srcs)}")
        if self.executed.type != VectorType(i16, [4]):
            _fail(self, "operands", f"executed must be vector<4xi16>, got {self.executed.type}")
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            _single_row(self, t, "tmp")
            if t.dtype != d.dtype:
                _fail(self, "dtype", f"tmp {t.elem} != dst {d.elem}")
            if DYN not in (t.cols.data, d.cols.data) and t.cols.data < d.cols.data:
                _fail(self, "tmp size", f"tmp has {t.cols.data} columns, dst {d.cols.data}")


OPS = (TSort32Op, TMrgSortOp)
