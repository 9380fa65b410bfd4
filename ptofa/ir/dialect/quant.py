"""Integer quantization of vec tiles: `pto.tquant` (f32 -> i8 / ui8 with a per-row scale and,
for the asymmetric form, offset) and `pto.tdequant` (i8 / i16 -> f32,
dst = (src - offset[i, 0]) * scale[i, 0]).

Rules follow docs/PTO_IR_manual.md (tquant) and PTOAS's TDequantOp::verify / description:
tquant's f32 src, 8-bit integer dst (ptoas ignores its signedness), an offset exactly for
INT8_ASYM, per-row (col_major, one valid column) fp / offset tiles, row-major src / dst, a tmp
of src's type; tdequant's i8 / i16 src, f32 dst, scale and offset, row-major src and dst.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import Float32Type, IntegerAttr, i32
from xdsl.irdl import IRDLOperation, irdl_attr_definition, irdl_op_definition, operand_def, opt_operand_def, prop_def
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail, _InsOutsOp, _parse_brace_ints, _parse_typed_list, _PipeInitOp, _print_typed_list, _tile
from ptofa.ir.dialect.types import DYN, FIXPIPE_SCALAR_QUANTS, FIXPIPE_VECTOR_QUANTS, TileBufType, _dims_str, _PtoEnumAttr


@irdl_attr_definition
class QuantTypeAttr(_PtoEnumAttr):
    """`#pto<quant_type INT8_SYM>`"""

    name = "pto.quant_type"
    VALUES: ClassVar[tuple[str, ...]] = ("INT8_SYM", "INT8_ASYM")


def _per_row(op, t: TileBufType, rows: int, role: str) -> None:
    if t.is_row_major or t.valid[1] not in (1, DYN) or (DYN not in (t.valid[0], rows) and t.valid[0] != rows):
        _fail(op, "shape agreement", f"{role} must be a per-row (col_major, {rows}x1 valid) tile, got {t.describe()} valid {_dims_str(t.valid)}")


@irdl_op_definition
class TQuantOp(_InsOutsOp):
    """`ins(%src, %fp[, %offset] : S, F[, O]) outs(%dst[, %tmp] : D[, T]) {quant_type = #pto<quant_type ...>}`."""

    name = "pto.tquant"
    src = operand_def(TileBufType)
    fp = operand_def(TileBufType)
    offset = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    quant_type = prop_def(QuantTypeAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @property
    def dst(self):
        return self.dst_

    @classmethod
    def parse(cls, parser: Parser) -> TQuantOp:
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        ins, in_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        outs, out_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        attrs = dict(parser.parse_optional_attr_dict())
        qt = attrs.pop("quant_type", None)
        if attrs or not isinstance(qt, QuantTypeAttr):
            parser.raise_error(f"{cls.name} takes {{quant_type = #pto<quant_type INT8_SYM|INT8_ASYM>}} only, got {sorted(attrs) or qt}", start)
        if not 2 <= len(ins) <= 3 or not 1 <= len(outs) <= 2:
            parser.raise_error(f"{cls.name} takes ins(%src, %fp[, %offset]) outs(%dst[, %tmp]), got {len(ins)} ins and {len(outs)} outs", start)
        i = [parser.resolve_operand(v, t) for v, t in zip(ins, in_types)]
        o = [parser.resolve_operand(v, t) for v, t in zip(outs, out_types)]
        return cls.build(operands=[i[0], i[1], i[2:], o[0], o[1:]], properties={"quant_type": qt})

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, [v for v in (self.src, self.fp, self.offset) if v is not None])
        printer.print_string(") outs(")
        _print_typed_list(printer, [v for v in (self.dst_, self.tmp) if v is not None])
        printer.print_string(f") {{quant_type = {self.quant_type.text}}}")

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst_, "dst")
        asym = self.quant_type.value.data == "INT8_ASYM"
        if s.elem != "f32":
            _fail(self, "dtype", f"src must be f32, got {s.elem}")
        if d.elem != "i8":
            _fail(self, "dtype", f"{self.quant_type.value.data} writes an 8-bit integer dst (i8 / ui8; ptoas ignores the signedness), got {d.dtype}")
        if (self.offset is not None) != asym:
            _fail(self, "operands", f"{self.quant_type.value.data} {'needs' if asym else 'takes no'} offset operand")
        if s.valid != d.valid:
            _fail(self, "shape agreement", f"src valid {_dims_str(s.valid)} != dst valid {_dims_str(d.valid)}")
        for t, role in ((s, "src"), (d, "dst")):
            if t.space != "vec" or not t.is_row_major:
                _fail(self, "layout", f"{role} must be a loc=vec row_major tile, got {t.describe()}")
        for v, role in ((self.fp, "fp"), (self.offset, "offset")):
            if v is not None:
                _per_row(self, _tile(self, v, role), d.valid[0], role)
        if self.tmp is not None and self.tmp.type != self.src.type:
            _fail(self, "tmp", f"tmp must have src's type {self.src.type}, got {self.tmp.type}")


@irdl_op_definition
class TDequantOp(_InsOutsOp):
    """`ins(%src, %scale, %offset : S, F, F) outs(%dst : D)`: dst = (src - offset[i, 0]) * scale[i, 0]."""

    name = "pto.tdequant"
    N_INS: ClassVar[int] = 3
    src = operand_def(TileBufType)
    scale = operand_def(TileBufType)
    offset = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if s.elem not in ("i8", "i16"):
            _fail(self, "dtype", f"src must be i8 or i16, got {s.elem}")
        for t, role in ((d, "dst"), (_tile(self, self.scale, "scale"), "scale"), (_tile(self, self.offset, "offset"), "offset")):
            if t.elem != "f32":
                _fail(self, "dtype", f"{role} must be f32, got {t.elem}")
        if not s.is_row_major or not d.is_row_major:
            _fail(self, "layout", f"A2/A3 src and dst must be row_major, got {s.describe()} and {d.describe()}")


class _SetQuantOp(IRDLOperation):
    """`pto.set_quant_scalar(%scale : f32) {id = N}` / `pto.set_quant_vector(%tile : T) {id = N}`:
    the quantization payload of the FIX conversion that a pipe's `acc_push_epilogue` names,
    bound to the pipe until set again (PTOAS SetQuantScalarOp / SetQuantVectorOp::verify):
    the id names a pipe init earlier in the function whose epilogue has a scalar (resp.
    vector) quant mode; the scalar is f32, the vector payload a loc=scaling tile of packed
    i64 / ui64 on A3."""

    pipe_id = prop_def(IntegerAttr, prop_name="id")
    KIND: ClassVar[str] = ""

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        parser.parse_punctuation("(")
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        value = parser.resolve_operand(value, parser.parse_type())
        parser.parse_punctuation(")")
        props = _parse_brace_ints(parser, {"id": i32})
        if "id" not in props:
            parser.raise_error(f"{cls.name} needs {{id = N}}", start)
        extra = parser.parse_optional_attr_dict()
        return cls.build(operands=[value], properties=props, attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        printer.print_operand(self.operands[0])
        printer.print_string(" : ")
        printer.print_attribute(self.operands[0].type)
        printer.print_string(f") {{id = {self.id_value}}}")
        if self.attributes:
            printer.print_string(" ")
            printer.print_attr_dict(self.attributes)

    @property
    def id_value(self) -> int:
        return self.pipe_id.value.data

    def verify_(self) -> None:
        from xdsl.dialects.func import FuncOp

        func = self.parent_op()
        while func is not None and not isinstance(func, FuncOp):
            func = func.parent_op()
        if func is None:
            _fail(self, "pipe", "must be nested under a func.func")
        inits = [op for op in func.walk() if isinstance(op, _PipeInitOp) and op.id_value == self.id_value and op.CORE == "cube"]
        if not inits:
            _fail(self, "pipe", f"'id' = {self.id_value} names no aic_initialize_pipe in this function")
        epilogue = inits[0].acc_push_epilogue
        if epilogue is None:
            _fail(self, "pipe", f"'id' = {self.id_value} must name a fixpipe pipe (with acc_push_epilogue)")
        want = FIXPIPE_SCALAR_QUANTS if self.KIND == "scalar" else FIXPIPE_VECTOR_QUANTS
        if epilogue.quant.data not in want:
            _fail(self, "pipe", f"'id' = {self.id_value} must name a pipe with {self.KIND} quantization, its quant is {epilogue.quant.data}")
        self._verify_payload()

    def _verify_payload(self) -> None:
        raise NotImplementedError


@irdl_op_definition
class SetQuantScalarOp(_SetQuantOp):
    """`pto.set_quant_scalar(%scale : f32) {id = N}`"""

    name = "pto.set_quant_scalar"
    scale = operand_def()
    KIND: ClassVar[str] = "scalar"

    def _verify_payload(self) -> None:
        if not isinstance(self.scale.type, Float32Type):
            _fail(self, "operand type", f"'scale' must be f32, got {self.scale.type}")


@irdl_op_definition
class SetQuantVectorOp(_SetQuantOp):
    """`pto.set_quant_vector(%fp : !pto.tile_buf<scaling, ...xui64>) {id = N}`"""

    name = "pto.set_quant_vector"
    scaling_tile = operand_def(TileBufType)
    KIND: ClassVar[str] = "vector"

    def _verify_payload(self) -> None:
        t = _tile(self, self.scaling_tile, "scaling_tile")
        if t.space != "scaling":
            _fail(self, "memory space", f"'scaling_tile' must be loc=scaling, got loc={t.space}")
        if t.elem not in ("i64", "ui64"):
            _fail(self, "dtype", f"'scaling_tile' holds packed i64 / ui64 on A3, got {t.elem}")


OPS = (TQuantOp, TDequantOp, SetQuantScalarOp, SetQuantVectorOp)
ATTRS = (QuantTypeAttr,)
