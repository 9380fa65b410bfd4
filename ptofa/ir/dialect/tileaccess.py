"""Tile windows, single elements, transposes, gathers and printing:
`textract` / `tinsert` (copy a window out of / into a larger tile, across memory spaces),
`tsetval` / `tgetval` (one element, on the scalar unit), `ttrans`, `tgather` (index form
and mask-pattern form), `tcolexpand` (broadcast a row down the columns) and `tprint`.

Rules follow ptoas's A2/A3 verifiers (PTOAS lib/PTO/IR/PTO.cpp, TExtractOp::verify,
TInsertOp::verify and their neighbours): the accepted memory-space pairs and layouts,
element types, non-negative indices and static window bounds.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import AnyFloat, IndexType, IntegerAttr, IntegerType, StringAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, result_def
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _check_vec, _fail, _InsOutsOp, _parse_typed_list, _print_typed_list, _tile, constant_index, print_merged_attrs, split_discardable, _valid_compatible
from ptofa.ir.dialect.types import (
    DYN,
    CmpModeAttr,
    MaskPatternAttr,
    PartitionTensorViewType,
    PrintFormatAttr,
    ReluPreModeAttr,
    TileBufType,
    _dims_str,
    elem_bytes,
    elem_name,
)

_A3_WINDOW_ELEMS = ("i8", "f16", "bf16", "f32")


def _check_window(op: Operation, row: SSAValue, col: SSAValue, big: TileBufType, small: TileBufType) -> None:
    """Constant indices are >= 0 and the small tile's window fits inside the big one."""
    for name, v, size, full in (("row", row, small.rows.data, big.rows.data), ("col", col, small.cols.data, big.cols.data)):
        const = constant_index(v)
        if const is not None and const < 0:
            _fail(op, "index", f"index{name.capitalize()} must be non-negative, got {const}")
        if size > full or (const is not None and const + size > full):
            _fail(op, "bounds", f"{name} window [{const if const is not None else '?'}, +{size}) exceeds the {full} {name}s of the larger tile")


def _layout(t: TileBufType) -> tuple[str, str]:
    return t.blayout.data, t.slayout.data


class _WindowOp(IRDLOperation):
    """Shared syntax of textract / tinsert:
    `ins(%src, %row, %col : S, index, index [fp %fp : F]) outs(%dst : D) [{reluPreMode = ...}]`."""

    src = operand_def(TileBufType)
    index_row = operand_def(IndexType)
    index_col = operand_def(IndexType)
    fp = opt_operand_def(TileBufType)
    dst = operand_def(TileBufType)
    reluPreMode = opt_prop_def(ReluPreModeAttr)  # noqa: N815 (ptoas's attribute name)

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        ops = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        if len(ops) != 3 or len(types) != 3:
            parser.raise_error(f"{cls.name} takes ins(%src, %row, %col : S, index, index), got {len(ops)} operands and {len(types)} types "
                               "(the preQuantScalar form is not supported on A2/A3 by ptofa)", start)
        fp = None
        if parser.parse_optional_keyword("fp"):
            fp_op = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            fp = parser.resolve_operand(fp_op, parser.parse_type())
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        dst_op = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        dst = parser.resolve_operand(dst_op, parser.parse_type())
        parser.parse_punctuation(")")
        attrs = dict(parser.parse_optional_attr_dict())
        props: dict[str, Attribute] = {}
        relu = attrs.pop("reluPreMode", None)
        if relu is not None:
            if not isinstance(relu, ReluPreModeAttr):
                parser.raise_error(f"{cls.name}: reluPreMode must be #pto<relu_pre_mode ...>, got {relu}", start)
            if relu.value.data != "no_relu":
                props["reluPreMode"] = relu
        # The rest stay as attributes: ptoas's A5 modes (accToVecMode, tinsertMode), which the
        # simulator refuses, and discardable ones.
        values = [parser.resolve_operand(o, t) for o, t in zip(ops, types)]
        return cls.build(operands=[values[0], values[1], values[2], [fp] if fp else [], dst], properties=props, attributes=attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, [self.src, self.index_row, self.index_col])
        if self.fp is not None:
            printer.print_string(" fp ")
            printer.print_operand(self.fp)
            printer.print_string(" : ")
            printer.print_attribute(self.fp.type)
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")

        def own(p: Printer) -> None:
            if self.reluPreMode is not None:
                p.print_string(f" {{reluPreMode = {self.reluPreMode.text}}}")

        print_merged_attrs(printer, self, own)

    def _check_acc_forms(self, s: TileBufType, d: TileBufType) -> None:
        if self.fp is not None:
            f = _tile(self, self.fp, "fp")
            if f.space != "scaling":
                _fail(self, "fp", f"expects fp to use loc=scaling, got loc={f.space}")
            if s.space != "acc":
                _fail(self, "fp", f"the fp form needs a loc=acc src, got loc={s.space}")
        if self.reluPreMode is not None and s.space != "acc":
            _fail(self, "relu", f"reluPreMode needs a loc=acc src, got loc={s.space}")

    def _check_acc_pair(self, acc: TileBufType, other: TileBufType) -> None:
        """ACC -> MAT through the FIX pipe: NZ layouts, and a cast or quantizing type pair."""
        if other.space != "mat":
            _fail(self, "memory space", f"an A2/A3 acc {self.ROLE} pairs with loc=mat, got loc={other.space}")
        for role, t in (("acc", acc), ("mat", other)):
            if _layout(t) != ("col_major", "row_major"):
                _fail(self, "layout", f"the {role} tile must be blayout=col_major, slayout=row_major, got {t.blayout.data}/{t.slayout.data}")
        if other.fractal.data != 512:
            _fail(self, "layout", f"the mat tile's fractal must be 512, got {other.fractal.data}")
        if self.fp is not None:
            ok = (acc.elem, other.elem) in (("f32", "i8"), ("i32", "i8"), ("i32", "f16"), ("i32", "i16"))
            want = "(f32 -> i8) or (i32 -> i8/f16/i16)"
        else:
            ok = acc.elem == "f32" and other.elem in ("f16", "bf16")
            want = "f32 -> f16/bf16"
        if not ok:
            _fail(self, "dtype pair", f"acc {acc.elem} -> {other.elem}; A2/A3 takes {want}")


@irdl_op_definition
class TExtractOp(_WindowOp):
    """`pto.textract ins(%src, %r, %c : S, index, index) outs(%dst : D)`: dst = src[r:r+R, c:c+C].

    A2/A3 pairs: vec -> vec (vector unit), mat -> left / right (MTE1, the cube's operand
    load), acc -> mat (FIX, with an f32 -> f16/bf16 cast or, with `fp`, quantization)."""

    name = "pto.textract"
    ROLE: ClassVar[str] = "textract src"

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_window(self, self.index_row, self.index_col, s, d)
        self._check_acc_forms(s, d)
        if s.space != "acc" and s.elem != d.elem:
            _fail(self, "dtype", f"src and dst must share the element type, got {s.elem} and {d.elem}")
        if d.elem not in _A3_WINDOW_ELEMS and not (self.fp is not None and d.elem == "i16"):
            _fail(self, "dtype", f"A2/A3 textract element type must be one of {_A3_WINDOW_ELEMS}, got {d.elem}")
        pair = (s.space, d.space)
        if pair == ("vec", "vec"):
            if self.reluPreMode is not None:
                _fail(self, "relu", "vec -> vec textract takes the base form without reluPreMode")
            return
        if s.space == "acc":
            self._check_acc_pair(s, d)
            return
        if s.space != "mat" or d.space not in ("left", "right"):
            _fail(self, "memory space", f"A2/A3 textract takes vec -> vec, mat -> left/right or acc -> mat, got {s.space} -> {d.space}")
        if not (s.blayout.data == "row_major" or s.slayout.data == "row_major"):
            _fail(self, "layout", f"the mat src must be blayout=row_major or slayout=row_major, got {s.blayout.data}/{s.slayout.data}")
        want = ("row_major", "row_major") if d.space == "left" else ("row_major", "col_major")
        if _layout(d) != want:
            _fail(self, "layout", f"a {d.space} dst must be blayout={want[0]}, slayout={want[1]}, got {d.blayout.data}/{d.slayout.data}")


@irdl_op_definition
class TInsertOp(_WindowOp):
    """`pto.tinsert ins(%src, %r, %c : S, index, index) outs(%dst : D)`: dst[r:r+R, c:c+C] = src.

    A2/A3 pairs: vec -> vec (vector unit) and acc -> mat (FIX, cast or quantize)."""

    name = "pto.tinsert"
    ROLE: ClassVar[str] = "tinsert src"

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_window(self, self.index_row, self.index_col, d, s)
        self._check_acc_forms(s, d)
        if s.space == "acc":
            self._check_acc_pair(s, d)
            return
        if (s.space, d.space) != ("vec", "vec"):
            _fail(self, "memory space", f"A2/A3 tinsert takes vec -> vec or acc -> mat, got {s.space} -> {d.space}")
        if s.elem != d.elem:
            _fail(self, "dtype", f"src and dst must share the element type, got {s.elem} and {d.elem}")
        if d.elem not in _A3_WINDOW_ELEMS:
            _fail(self, "dtype", f"A2/A3 vec tinsert element type must be one of {_A3_WINDOW_ELEMS}, got {d.elem}")
        if self.reluPreMode is not None:
            _fail(self, "relu", "vec -> vec tinsert takes the base form without reluPreMode")


_SCALAR_ELEMS = ("f16", "bf16", "f32", "i8", "i16", "i32", "i64")


def _scalar_matches(op: Operation, t: TileBufType, scalar: Attribute, role: str) -> None:
    from ptofa.ir.dialect.types import elem_name

    try:
        name = elem_name(scalar)
    except Exception:  # noqa: BLE001 - not an element type at all
        name = str(scalar)
    if name != t.elem:
        _fail(op, "type agreement", f"{role} {name} must be the tile's element type {t.elem}")
    if t.elem not in _SCALAR_ELEMS:
        _fail(op, "dtype", f"element type {t.elem} is not a scalar type {_SCALAR_ELEMS}")


def _check_offset(op: Operation, offset: SSAValue, t: TileBufType) -> None:
    const = constant_index(offset)
    if const is not None and not 0 <= const < t.rows.data * t.cols.data:
        _fail(op, "bounds", f"offset {const} is outside the {t.rows.data}x{t.cols.data} tile")


@irdl_op_definition
class TSetValOp(IRDLOperation):
    """`pto.tsetval ins(%off, %v : index, T) outs(%dst : D)`: dst's element at linear offset
    `off` (row-major over the tile's storage) = v; runs on the scalar unit."""

    name = "pto.tsetval"
    offset = operand_def(IndexType)
    value = operand_def()
    dst = operand_def(TileBufType)

    @classmethod
    def parse(cls, parser: Parser) -> "TSetValOp":
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        off, val = parser.parse_unresolved_operand(), None
        parser.parse_punctuation(",")
        val = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        off_t = parser.parse_type()
        parser.parse_punctuation(",")
        val_t = parser.parse_type()
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        dst = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        dst_t = parser.parse_type()
        parser.parse_punctuation(")")
        return cls.build(operands=[parser.resolve_operand(off, off_t), parser.resolve_operand(val, val_t), parser.resolve_operand(dst, dst_t)])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, [self.offset, self.value])
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")

    def verify_(self) -> None:
        t = _tile(self, self.dst, "dst")
        if t.space != "vec":
            _fail(self, "memory space", f"dst must be loc=vec, got loc={t.space}")
        _scalar_matches(self, t, self.value.type, "value")
        _check_offset(self, self.offset, t)


@irdl_op_definition
class TGetValOp(IRDLOperation):
    """`%v = pto.tgetval ins(%src, %off : S, index) outs : T`: the element at linear offset `off`."""

    name = "pto.tgetval"
    src = operand_def(TileBufType)
    offset = operand_def(IndexType)
    result = result_def()

    @classmethod
    def parse(cls, parser: Parser) -> "TGetValOp":
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        off = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation(",")
        off_t = parser.parse_type()
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation(":")
        res_t = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(src, src_t), parser.resolve_operand(off, off_t)], result_types=[res_t])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, [self.src, self.offset])
        printer.print_string(") outs : ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        t = _tile(self, self.src, "src")
        if t.space != "vec":
            _fail(self, "memory space", f"src must be loc=vec, got loc={t.space}")
        _scalar_matches(self, t, self.result.type, "result")
        _check_offset(self, self.offset, t)


def _ttrans_uses_tmp(src: TileBufType, dst: TileBufType) -> bool:
    """PTOAS ttransUsesTmp: the A2/A3 transpose goes through its tmp tile when the strides allow
    the vnchwconv path (dst row stride a multiple of 16 (32 for 1-byte), src rows whole 32-byte
    blocks, at most 255 of them)."""
    width = elem_bytes(src.dtype)
    per_block = 32 // width
    return (dst.cols.data % (32 if width == 1 else 16) == 0 and src.cols.data % per_block == 0
            and src.cols.data // per_block <= 255)


@irdl_op_definition
class TTransOp(_InsOutsOp):
    """`pto.ttrans ins(%src[, %tmp] : S[, T]) outs(%dst : D)`: dst = src^T (valid region).

    The rules are PTOAS TTransOp::verify's for A2/A3: src blayout=row_major, one element type
    of 1, 2 or 4 bytes for all tiles, and a tmp of at least the src's bytes when the transpose
    goes through it (else 32 bytes). ptoas does not relate the two valid shapes; the simulator
    runs only a dst whose valid shape is src's transposed."""

    name = "pto.ttrans"
    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        t = _tile(self, self.tmp, "tmp") if self.tmp is not None else None
        _check_vec(self, [s, d] + ([t] if t is not None else []))
        if not s.is_row_major:
            _fail(self, "layout", f"expects A2/A3 transpose src to use the row_major blayout, got {s.describe()} col_major")
        for role, other in (("dst", d), ("tmp", t)):
            if other is not None and other.elem != s.elem:
                _fail(self, "dtype", f"src and {role} must share the element type, got {s.elem} and {other.elem}")
        if s.elem not in ("i8", "i16", "i32", "f16", "bf16", "f32"):
            _fail(self, "dtype", f"A2/A3 ttrans takes 8-, 16- or 32-bit elements, got {s.elem}")
        if t is not None:
            need = s.nbytes if _ttrans_uses_tmp(s, d) else 32
            if t.nbytes < need:
                _fail(self, "tmp size", f"expects the A2/A3 transpose tmp to hold at least {need} bytes "
                                        f"(the src's {s.rows.data}x{s.cols.data}x{s.elem}), got {t.nbytes}")


# Mask patterns: how many src elements per dst element (PTOAS TGatherOp::verify).
_MASK_TIMES = {"P1111": 1, "P0101": 2, "P1010": 2}


@irdl_op_definition
class TGatherOp(IRDLOperation):
    """`pto.tgather`, ptoas's three A2/A3 forms (PTOAS TGatherOp::parse / ::verify):

    * index: `ins(%src, %idx, %tmp : S, I, T) outs(%dst : D)`: dst[i, j] = src's element at
      flat index idx[i, j] (i32 indices, a tmp tile like the indices);
    * mask: `ins(%src, {maskPattern = #pto.mask_pattern<P0101>} : S, "row"|"col") outs(%dst : D)`:
      along the axis, the elements of each group of four that the pattern keeps, packed;
    * compare: `ins(%src, %k, %tmp : S, T, U) outs(%dst, %cdst : D, D) {cmpMode = eq|gt, offset = N}`:
      i32 results of comparing src with the scalar k (checked, not simulated).
    """

    name = "pto.tgather"
    src = operand_def(TileBufType)
    dst = operand_def(TileBufType)
    cdst = opt_operand_def(TileBufType)
    indices = opt_operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    k_value = opt_operand_def(AnyFloat | IntegerType)
    maskPattern = opt_prop_def(MaskPatternAttr)  # noqa: N815
    axis = opt_prop_def(StringAttr)
    cmpMode = opt_prop_def(CmpModeAttr)  # noqa: N815
    offset = opt_prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser) -> "TGatherOp":
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        ops = [parser.parse_unresolved_operand()]
        mask_attrs: dict[str, Attribute] = {}
        while parser.parse_optional_punctuation(","):
            if parser._current_token.text == "{":
                mask_attrs = dict(parser.parse_optional_attr_dict())
                break
            ops.append(parser.parse_unresolved_operand())
        parser.parse_punctuation(":")
        types = [parser.parse_type()]
        axis = None
        while parser.parse_optional_punctuation(","):
            text = parser.parse_optional_str_literal()
            if text is not None:
                axis = text
                break
            types.append(parser.parse_type())
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        outs, out_types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        if len(types) != len(ops):
            parser.raise_error(f"{len(ops)} operands but {len(types)} types", start)
        if len(outs) not in (1, 2):
            parser.raise_error(f"{cls.name} takes outs(%dst[, %cdst]), got {len(outs)} operands", start)
        known, extra = split_discardable(cls, {**mask_attrs, **parser.parse_optional_attr_dict()})
        for key, kind in (("maskPattern", MaskPatternAttr), ("cmpMode", CmpModeAttr), ("offset", IntegerAttr)):
            if key in known and not isinstance(known[key], kind):
                parser.raise_error(f"{cls.name}: {key} has the wrong kind of value: {known[key]}", start)
        if "axis" in known:
            parser.raise_error(f"{cls.name}: the axis is written after the src type (\"row\" or \"col\")", start)
        if axis is not None:
            if axis not in ("row", "col"):
                parser.raise_error(f'{cls.name}: axis must be "row" or "col", got "{axis}"', start)
            known["axis"] = StringAttr(axis)
        values = [parser.resolve_operand(o, t) for o, t in zip(ops, types)]
        dst = [parser.resolve_operand(o, t) for o, t in zip(outs, out_types)]
        rest = values[1:]
        if "maskPattern" in known:
            if rest or len(dst) != 1:
                parser.raise_error("the mask form of pto.tgather takes ins(%src, {maskPattern = ...} : S, \"row\"|\"col\") outs(%dst)", start)
            operands = [values[0], dst[0], [], [], [], []]
        elif len(dst) == 2:  # compare form: ins(%src, %k[, %tmp])
            if not rest or isinstance(rest[0].type, TileBufType) or len(rest) > 2:
                parser.raise_error("the compare form of pto.tgather takes ins(%src, %k, %tmp : S, scalar, T) outs(%dst, %cdst)", start)
            operands = [values[0], dst[0], [dst[1]], [], rest[1:2], [rest[0]]]
        else:
            if len(rest) > 2 or any(not isinstance(v.type, TileBufType) for v in rest):
                parser.raise_error("the index form of pto.tgather takes ins(%src, %indices, %tmp : S, I, T) outs(%dst)", start)
            operands = [values[0], dst[0], [], rest[0:1], rest[1:2], []]
        return cls.build(operands=operands, properties=known, attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        printer.print_operand(self.src)
        ins = [v for v in (self.indices, self.k_value, self.tmp) if v is not None]
        for v in ins:
            printer.print_string(", ")
            printer.print_operand(v)
        if self.maskPattern is not None:
            printer.print_string(f", {{maskPattern = #pto.mask_pattern<{self.maskPattern.value.data}>}}")
        printer.print_string(" : ")
        printer.print_list([v.type for v in [self.src] + ins], printer.print_attribute)
        if self.axis is not None:
            printer.print_string(f', "{self.axis.data}"')
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst] + ([self.cdst] if self.cdst is not None else []))
        printer.print_string(")")

        def own(p: Printer) -> None:
            items = []
            if self.cmpMode is not None:
                items.append(f"cmpMode = {self.cmpMode.text}")
            if self.offset is not None:
                items.append(f"offset = {self.offset.value.data} : i32")
            if items:
                p.print_string(" {" + ", ".join(items) + "}")

        print_merged_attrs(printer, self, own)

    @property
    def form(self) -> str:
        if self.maskPattern is not None:
            return "mask"
        return "compare" if self.cdst is not None or self.k_value is not None else "index"

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if self.form != "mask" and self.axis is not None:
            _fail(self, "operand type", "the axis goes only with a maskPattern")
        if self.form == "mask":
            self._verify_mask(s, d)
        elif self.form == "compare":
            self._verify_compare(s, d)
        else:
            self._verify_index(s, d)

    def _verify_mask(self, s: TileBufType, d: TileBufType) -> None:
        _check_vec(self, [s, d])
        if not s.is_row_major or not d.is_row_major:
            _fail(self, "layout", "the mask form takes blayout=row_major src and dst")
        if elem_bytes(s.dtype) != elem_bytes(d.dtype):
            _fail(self, "dtype", f"src and dst element sizes must match, got {s.elem} and {d.elem}")
        if elem_bytes(s.dtype) not in (2, 4):
            _fail(self, "dtype", f"A2/A3 mask-pattern gather takes 2- or 4-byte elements, got {s.elem}")
        if d.valid[1] != DYN and d.valid[1] != d.shape[1]:
            _fail(self, "shape agreement", f"dst valid cols {d.valid[1]} must equal its {d.shape[1]} cols")
        if self.axis is None:
            _fail(self, "operand type", 'the mask form needs an axis ("row" or "col") after the src type')
        pattern = self.maskPattern.value.data
        times = _MASK_TIMES.get(pattern, 4)
        along, across = (1, 0) if self.axis.data == "row" else (0, 1)
        if DYN not in (s.valid[across], d.valid[across]) and s.valid[across] != d.valid[across]:
            _fail(self, "shape agreement", f"{self.axis.data} mask form: dst valid {_dims_str(d.valid)} and src valid "
                  f"{_dims_str(s.valid)} must agree across the axis")
        if DYN not in (s.valid[along], d.valid[along]) and s.valid[along] != d.valid[along] * times:
            what = "columns" if along == 1 else "rows"
            _fail(self, "shape agreement", f"mask {pattern} keeps 1 of every {times} of src's {s.valid[along]} valid {what}, "
                  f"dst has {d.valid[along]}")

    def _verify_index(self, s: TileBufType, d: TileBufType) -> None:
        if self.indices is None or self.tmp is None:
            _fail(self, "operand type", "the A2/A3 index form takes both indices and a tmp tile")
        i, t = _tile(self, self.indices, "indices"), _tile(self, self.tmp, "tmp")
        _check_vec(self, [s, d, i, t])
        if s.elem != d.elem:
            _fail(self, "dtype", f"src and dst must share the element type, got {s.elem} and {d.elem}")
        if s.elem not in ("i16", "i32", "f16", "f32"):
            _fail(self, "dtype", f"A2/A3 gather takes i16, i32, f16 or f32, got {s.elem}")
        if i.elem != "i32":
            _fail(self, "dtype", f"indices must be i32, got {i.elem}")
        if t.elem != i.elem:
            _fail(self, "dtype", f"tmp must share the indices' element type, got {t.elem}")
        for tile, role in ((d, "dst"), (i, "indices")):
            if tile.valid[1] != DYN and tile.valid[1] != tile.shape[1]:
                _fail(self, "shape agreement", f"{role} valid cols {tile.valid[1]} must equal its {tile.shape[1]} cols")
        if not _valid_compatible(i.valid, t.valid):
            _fail(self, "shape agreement", f"indices valid {_dims_str(i.valid)} != tmp valid {_dims_str(t.valid)}")

    def _verify_compare(self, s: TileBufType, d: TileBufType) -> None:
        if self.cdst is None or self.k_value is None or self.tmp is None:
            _fail(self, "operand type", "the compare form takes dst, cdst, a scalar k and a tmp tile")
        c, t = _tile(self, self.cdst, "cdst"), _tile(self, self.tmp, "tmp")
        _check_vec(self, [s, d, c, t])
        if d.elem != "i32" or c.elem != d.elem:
            _fail(self, "dtype", f"the compare form writes i32 dst and cdst, got {d.elem} and {c.elem}")
        if self.k_value.type != s.dtype:
            _fail(self, "dtype", f"k must have src's element type {s.elem}, got {self.k_value.type}")
        mode = self.cmpMode.value.data if self.cmpMode is not None else "eq"
        if mode not in ("eq", "gt"):
            _fail(self, "cmpMode", f"the compare form takes cmpMode eq or gt, got {mode}")
        if not (s.elem in ("f16", "f32") or (s.elem == "i32" and mode == "eq")):
            _fail(self, "dtype", f"A2/A3 compare-form src is f16 or f32, or i32 with cmpMode eq; got {s.elem} with {mode}")


@irdl_op_definition
class TGatherBOp(_InsOutsOp):
    """`pto.tgatherb ins(%src, %offsets : S, O) outs(%dst : D)`: dst[i, j] = the dst-typed element at
    byte offset offsets[i, j] (read as uint32) of src's storage (pto-isa TGATHERB; PTOAS
    TGatherBOp::verify, A2/A3: a row-major dst of 1-, 2- or 4-byte elements)."""

    name = "pto.tgatherb"
    N_INS: ClassVar[int] = 2
    src = operand_def(TileBufType)
    offsets = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, o, d = _tile(self, self.src, "src"), _tile(self, self.offsets, "offsets"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, o, d])
        if not d.is_row_major:
            _fail(self, "layout", f"dst must be blayout=row_major, got {d.blayout.data}")
        if elem_bytes(d.dtype) not in (1, 2, 4):
            _fail(self, "dtype", f"dst elements must be 1, 2 or 4 bytes, got {d.elem}")


@irdl_op_definition
class TColExpandOp(_InsOutsOp):
    """`pto.tcolexpand ins(%row : R) outs(%d : D)`: d[i, j] = row[0, j] (a 1xC row down every row)."""

    name = "pto.tcolexpand"
    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, d])
        if s.elem != d.elem:
            _fail(self, "dtype", f"src and dst must share the element type, got {s.elem} and {d.elem}")
        if not s.is_row_major or not d.is_row_major:
            _fail(self, "layout", "tcolexpand takes blayout=row_major tiles")
        if s.valid[1] != DYN and d.valid[1] != DYN and s.valid[1] != d.valid[1]:
            _fail(self, "shape agreement", f"src valid cols {s.valid[1]} != dst valid cols {d.valid[1]}")


@irdl_op_definition
class TPrintOp(IRDLOperation):
    """`pto.tprint ins(%src[, %tmp] : S[, PV]) [{printFormat = #pto<print_format ...>}]`: print a
    tile or a GM partition from device code (debugging). A vec tile prints without `tmp`; a
    mat / acc tile goes through a GM scratch partition `tmp` (PTOAS TPrintOp::verify)."""

    name = "pto.tprint"
    src = operand_def(TileBufType | PartitionTensorViewType)
    tmp = opt_operand_def(PartitionTensorViewType)
    printFormat = opt_prop_def(PrintFormatAttr)  # noqa: N815 (ptoas's attribute name)

    @classmethod
    def parse(cls, parser: Parser) -> "TPrintOp":
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        names, types = _parse_typed_list(parser)
        parser.parse_punctuation(")")
        if len(names) not in (1, 2):
            parser.raise_error(f"{cls.name} takes ins(%src[, %tmp] : S[, PV]), got {len(names)} operands", start)
        known, extra = split_discardable(cls, parser.parse_optional_attr_dict())
        fmt = known.get("printFormat")
        if fmt is not None and not isinstance(fmt, PrintFormatAttr):
            parser.raise_error(f"{cls.name}: printFormat must be #pto<print_format ...>, got {fmt}", start)
        values = [parser.resolve_operand(n, t) for n, t in zip(names, types)]
        return cls.build(operands=[values[0], values[1:]], properties=known, attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, [self.src] + ([self.tmp] if self.tmp is not None else []))
        printer.print_string(")")

        def own(p: Printer) -> None:
            if self.printFormat is not None:
                p.print_string(f" {{printFormat = {self.printFormat.text}}}")

        print_merged_attrs(printer, self, own)

    def verify_(self) -> None:
        t = self.src.type
        if not isinstance(t, TileBufType):
            if self.tmp is not None:
                _fail(self, "operand type", "tmp goes only with a tile_buf src")
            return
        if t.elem not in ("f16", "f32", "i8", "i16", "i32"):
            _fail(self, "dtype", f"a printable tile holds f16, f32, i8, i16 or i32, got {t.elem}")
        if self.tmp is None and t.space != "vec":
            _fail(self, "memory space", f"a tile printed without tmp must be loc=vec (mat / acc need a GM scratch tmp), got loc={t.space}")
        if self.tmp is not None:
            if t.space not in ("vec", "mat", "acc"):
                _fail(self, "memory space", f"a tile printed through tmp must be loc=vec, mat or acc, got loc={t.space}")
            tt = self.tmp.type
            assert isinstance(tt, PartitionTensorViewType)
            if elem_name(tt.elem) != t.elem:
                _fail(self, "dtype", f"tmp element type {elem_name(tt.elem)} must match the tile's {t.elem}")


OPS = (TExtractOp, TInsertOp, TSetValOp, TGetValOp, TTransOp, TGatherOp, TGatherBOp, TColExpandOp, TPrintOp)
