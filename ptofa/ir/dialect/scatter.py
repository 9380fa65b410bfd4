"""`pto.tscatter`: the inverse of tgather's two tile forms. Index mode,
`ins(%src, %idx : S, I) outs(%dst : D)`, writes dst[i, idx[i, j]] = src[i, j]; mask-pattern
mode, `ins(%src, {maskPattern = #pto.mask_pattern<P0101>} : S, "row"|"col") outs(%dst : D)`,
spreads src along the axis by the pattern's factor.

Rules follow PTOAS's docs/PTO_IR_manual.md (pto.tscatter constraints).
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute
from xdsl.irdl import AttrSizedOperandSegments, IRDLOperation, irdl_op_definition, operand_def, opt_operand_def, opt_prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _check_vec_row_major, _fail, _print_typed_list, _tile
from ptofa.ir.dialect.types import DYN, MaskPatternAttr, TileBufType, elem_bytes

SCATTER_DTYPES = ("i8", "i16", "i32", "f16", "f32", "bf16")


def pattern_factor(pattern: str) -> int:
    """How far a pattern spreads src: P1111 -> 1, P0101 / P1010 -> 2, one bit set -> 4."""
    return 4 // pattern[1:].count("1")


@irdl_op_definition
class TScatterOp(IRDLOperation):
    """`pto.tscatter ins(%src, %idx : S, I) outs(%dst : D)` or
    `pto.tscatter ins(%src, {maskPattern = #pto.mask_pattern<P0101>} : S, "row") outs(%dst : D)`"""

    name = "pto.tscatter"
    src = operand_def(TileBufType)
    indexes = opt_operand_def(TileBufType)
    dst = operand_def(TileBufType)
    maskPattern = opt_prop_def(MaskPatternAttr)  # noqa: N815 (ptoas's attribute name)
    axis = opt_prop_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser) -> TScatterOp:
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        ops = [parser.parse_unresolved_operand()]
        parser.parse_punctuation(",")
        attrs: dict[str, Attribute] = dict(parser.parse_optional_attr_dict())
        if not attrs:
            ops.append(parser.parse_unresolved_operand())
        parser.parse_punctuation(":")
        types = [parser.parse_type()]
        parser.parse_punctuation(",")
        axis = parser.parse_optional_str_literal() if attrs else None
        if not attrs:
            types.append(parser.parse_type())
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        dst = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        dst = parser.resolve_operand(dst, parser.parse_type())
        parser.parse_punctuation(")")
        props: dict[str, Attribute] = {}
        if attrs:
            mask = attrs.pop("maskPattern", None)
            if attrs or not isinstance(mask, MaskPatternAttr) or axis is None:
                parser.raise_error(f'{cls.name}: the mask form is ins(%src, {{maskPattern = #pto.mask_pattern<...>}} : S, "row"|"col")', start)
            props = {"maskPattern": mask, "axis": StringAttr(axis)}
        values = [parser.resolve_operand(o, t) for o, t in zip(ops, types)]
        return cls.build(operands=[values[0], values[1:], dst], properties=props)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        printer.print_operand(self.src)
        if self.indexes is not None:
            printer.print_string(", ")
            printer.print_operand(self.indexes)
            printer.print_string(" : ")
            printer.print_list([self.src.type, self.indexes.type], printer.print_attribute)
        else:
            printer.print_string(f", {{maskPattern = #pto.mask_pattern<{self.maskPattern.value.data}>}} : ")
            printer.print_attribute(self.src.type)
            printer.print_string(f', "{self.axis.data}"')
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if s.elem != d.elem or s.elem not in SCATTER_DTYPES:
            _fail(self, "dtype", f"src and dst must share one of {SCATTER_DTYPES}, got {s.elem} and {d.elem}")
        if self.indexes is not None:
            self._verify_index(s, d, _tile(self, self.indexes, "indexes"))
        else:
            self._verify_mask(s, d)

    def _verify_index(self, s: TileBufType, d: TileBufType, i: TileBufType) -> None:
        for t, role in ((s, "src"), (d, "dst"), (i, "indexes")):
            if t.space != "vec":
                _fail(self, "memory space", f"{role} must be loc=vec, got {t.describe()}")
        if i.elem not in ("i16", "i32"):
            _fail(self, "dtype", f"indexes must be i16 or i32, got {i.elem}")
        want = 4 if elem_bytes(d.dtype) == 4 else 2
        if elem_bytes(i.dtype) != want:
            _fail(self, "dtype", f"a {elem_bytes(d.dtype)}-byte dst takes {want}-byte indexes, got {i.elem}")
        if any(x != DYN and y != DYN and x < y for x, y in zip(d.valid, s.valid)):
            _fail(self, "shape agreement", f"dst valid shape {d.valid} must cover src's {s.valid}")

    def _verify_mask(self, s: TileBufType, d: TileBufType) -> None:
        for t, role in ((s, "src"), (d, "dst")):
            _check_vec_row_major(self, t, role)
        axis, times = self.axis.data, pattern_factor(self.maskPattern.value.data)
        if axis not in ("row", "col"):
            _fail(self, "axis", f'axis must be "row" or "col", got "{axis}"')
        same, spread = (0, 1) if axis == "row" else (1, 0)
        known = DYN not in (s.valid[same], d.valid[same], s.valid[spread], d.valid[spread])
        if known and (d.valid[same] != s.valid[same] or d.valid[spread] != s.valid[spread] * times):
            _fail(self, "shape agreement", f"axis {axis} with {self.maskPattern.value.data} (x{times}) needs dst valid "
                  f"{'rows' if axis == 'row' else 'cols'} = src's and the other extent x{times}, got src {s.valid}, dst {d.valid}")


OPS = (TScatterOp,)
