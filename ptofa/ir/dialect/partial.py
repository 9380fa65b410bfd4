"""Partial elementwise ops and the scalar select: `pto.tpartadd` / `tpartmul` / `tpartmax` /
`tpartmin` (d = f(a, b) where sources' valid regions may be smaller than dst's),
`pto.tpartargmax` / `tpartargmin` (the same with index tiles carried along) and `pto.tsels`
(d = mask ? src : scalar).

Rules follow PTOAS (docs/PTO_IR_manual.md; lib/PTO/IR/PTO.cpp verifyPartialValidPattern,
verifyTPartArgOpCommon, TSelSOp::verify) for A2/A3: i16/i32/f16/f32 elements, row-major vec
tiles, equal shapes, each source's valid region within dst's and one of them equal to it.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def
from xdsl.parser import Parser

from ptofa.ir.dialect.base import _check_vec_row_major, _fail, _InsOutsOp, _parse_typed_list, _print_typed_list, _same_extent, _tile
from ptofa.ir.dialect.types import DYN, TileBufType, _dims_str

PART_DTYPES = ("i16", "i32", "f16", "f32")


def _check_part(op: _InsOutsOp, a: TileBufType, b: TileBufType, d: TileBufType) -> None:
    """Same dtype (i16/i32/f16/f32) and shape, row-major vec tiles, the partial valid pattern."""
    for t, role in ((a, "src0"), (b, "src1"), (d, "dst")):
        _check_vec_row_major(op, t, role)
    if not a.dtype == b.dtype == d.dtype:
        _fail(op, "dtype", f"expects src0/src1/dst to have the same element type, got {a.elem}, {b.elem}, {d.elem}")
    if a.elem not in PART_DTYPES:
        _fail(op, "dtype", f"expects an A2/A3 element type in {PART_DTYPES}, got {a.elem}")
    if not a.shape == b.shape == d.shape:
        _fail(op, "shape agreement", f"expects src0/src1/dst to have the same shape, got {_dims_str(a.shape)}, "
              f"{_dims_str(b.shape)}, {_dims_str(d.shape)}")
    for s in (a, b):
        if any(x != DYN and y != DYN and x > y for x, y in zip(s.valid, d.valid)):
            _fail(op, "partial valid", f"source valid shape {_dims_str(s.valid)} exceeds dst's {_dims_str(d.valid)}")
    if not any(all(_same_extent(x, y) for x, y in zip(s.valid, d.valid)) for s in (a, b)):
        _fail(op, "partial valid", f"one of src0 {_dims_str(a.valid)} / src1 {_dims_str(b.valid)} valid shapes must equal dst's {_dims_str(d.valid)}")


class _PartBinaryOp(_InsOutsOp):
    """`ins(%a, %b : T, T) outs(%d : T)`"""

    N_INS: ClassVar[int] = 2
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        _check_part(self, _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst, "dst"))


@irdl_op_definition
class TPartAddOp(_PartBinaryOp):
    """d = a + b"""

    name = "pto.tpartadd"


@irdl_op_definition
class TPartMulOp(_PartBinaryOp):
    """d = a * b"""

    name = "pto.tpartmul"


@irdl_op_definition
class TPartMaxOp(_PartBinaryOp):
    """d = max(a, b)"""

    name = "pto.tpartmax"


@irdl_op_definition
class TPartMinOp(_PartBinaryOp):
    """d = min(a, b)"""

    name = "pto.tpartmin"


class _PartArgOp(_InsOutsOp):
    """`ins(%a, %b, %ai, %bi : T, T, I, I) outs(%d, %di : T, I)`: the selected value and its index."""

    N_INS: ClassVar[int] = 4
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    src0_idx = operand_def(TileBufType)
    src1_idx = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    dst_idx = operand_def(TileBufType)

    def ins_values(self) -> list:
        return list(self.operands[:4])

    @property
    def dst(self):
        return self.dst_

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        ins, in_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        outs, out_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        if len(ins) != 4 or len(outs) != 2:
            parser.raise_error(f"{cls.name} takes ins(%src0, %src1, %src0Idx, %src1Idx) outs(%dst, %dstIdx), got {len(ins)} ins and {len(outs)} outs", start)
        values = [parser.resolve_operand(v, t) for v, t in zip(ins + outs, in_types + out_types)]
        return cls.build(operands=values)

    def print(self, printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, self.ins_values())
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst_, self.dst_idx])
        printer.print_string(")")

    def verify_(self) -> None:
        a, b, d = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst_, "dst")
        _check_part(self, a, b, d)
        idx = [(_tile(self, v, n), t) for v, n, t in ((self.src0_idx, "src0Idx", a), (self.src1_idx, "src1Idx", b), (self.dst_idx, "dstIdx", d))]
        for it, data in idx:
            if it.elem not in ("i32", "ui32") or it.dtype != idx[0][0].dtype:
                _fail(self, "index", f"expects src0Idx/src1Idx/dstIdx to share an i32 or ui32 element type, got {it.elem}")
            if it.shape != data.shape or it.valid != data.valid:
                _fail(self, "index", f"each index tile must have its data tile's shape and valid shape, got {it.describe()} for {data.describe()}")


@irdl_op_definition
class TPartArgMaxOp(_PartArgOp):
    """The larger of a, b and its index."""

    name = "pto.tpartargmax"


@irdl_op_definition
class TPartArgMinOp(_PartArgOp):
    """The smaller of a, b and its index."""

    name = "pto.tpartargmin"


@irdl_op_definition
class TSelSOp(_InsOutsOp):
    """`pto.tsels ins(%mask, %src[, %tmp], %scalar : M, T[, T], S) outs(%dst : T)`: dst = mask bit ? src : scalar."""

    name = "pto.tsels"
    N_INS: ClassVar[int] = 3
    HAS_TMP: ClassVar[bool] = True
    mask = operand_def(TileBufType)
    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    scalar = operand_def()
    dst_ = operand_def(TileBufType)

    @classmethod
    def _from_parsed(cls, parser: Parser, ins, in_types, outs, out_types, attrs, start: int | None = None):
        if len(ins) not in (3, 4) or len(outs) != 1:
            parser.raise_error(f"{cls.name} takes ins(%mask, %src[, %tmp], %scalar) outs(%dst), got {len(ins)} ins and {len(outs)} outs", start)
        values = [parser.resolve_operand(v, t) for v, t in zip(ins, in_types)]
        dst = parser.resolve_operand(outs[0], out_types[0])
        cls._props_from_attrs(parser, attrs, start)
        return cls.build(operands=[values[0], values[1], values[2:-1], values[-1], dst])

    def verify_(self) -> None:
        m, s, d = _tile(self, self.mask, "mask"), _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        for t, role in ((s, "src"), (d, "dst")):
            _check_vec_row_major(self, t, role)
        if m.space != "vec":
            _fail(self, "mask", f"mask must be a loc=vec tile, got {m.describe()}")
        if s.dtype != d.dtype:
            _fail(self, "dtype", f"expects src and dst to have the same element type, got {s.elem} and {d.elem}")
        if s.elem not in PART_DTYPES:
            _fail(self, "dtype", f"expects an A2/A3 tsels element type in {PART_DTYPES}, got {s.elem}")
        if not all(_same_extent(x, y) for x, y in zip(s.valid, d.valid)):
            _fail(self, "shape agreement", f"src {_dims_str(s.valid)} and dst {_dims_str(d.valid)} valid shapes differ")
        if self.scalar.type != d.dtype:
            _fail(self, "operand type", f"the scalar must be the element type {d.elem}, got {self.scalar.type}")
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            _check_vec_row_major(self, t, "tmp")
            if t.dtype != d.dtype:
                _fail(self, "tmp", f"expects A2/A3 tsels tmp to have the element type of src and dst, got {t.elem}")


PART_BINARY_OPS = (TPartAddOp, TPartMulOp, TPartMaxOp, TPartMinOp)
PART_ARG_OPS = (TPartArgMaxOp, TPartArgMinOp)
OPS = (*PART_BINARY_OPS, *PART_ARG_OPS, TSelSOp)
