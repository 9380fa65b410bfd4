"""Pointers, GM views and tile memory: addptr, make_tensor_view, partition_view,
alloc_tile, tload, tstore, tmov, treshape, subview, and the layout / shape helpers
their verifiers share."""

from __future__ import annotations

from typing import ClassVar

from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    result_def,
    var_operand_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError

from ptofa.ir.dialect.base import (_GM_TILE_LAYOUTS, _check_scalar_ptr, _check_view_tile, _fail, _fail_build, _InsOutsOp, _parse_index_list,
                                   _parse_ptr_index, _parse_ptr_type, _PipeEntryOp, _print_index_list, _print_typed_list, _ScalarPtrOp, _tile,
                                   _TileViewOp, constant_index, physical_shape, split_discardable, tile_layout)
from ptofa.ir.dialect.types import (
    DYN,
    AccToVecModeAttr,
    AtomicTypeAttr,
    LayoutAttr,
    PartitionTensorViewType,
    PtrType,
    ReluPreModeAttr,
    StPhaseAttr,
    TensorViewType,
    TileBufType,
    _dims_str,
    elem_name,
)


@irdl_op_definition
class AddPtrOp(IRDLOperation):
    """`%q = pto.addptr %p, %off : !pto.ptr<T> -> !pto.ptr<T>`: p + off elements."""

    name = "pto.addptr"
    ptr = operand_def(PtrType)
    offset = operand_def(IndexType)
    result = result_def(PtrType)

    def __init__(self, ptr: SSAValue, offset: SSAValue):
        super().__init__(operands=[ptr, offset], result_types=[ptr.type])

    @classmethod
    def parse(cls, parser: Parser) -> "AddPtrOp":
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        off = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        in_t = _parse_ptr_type(parser)
        parser.parse_punctuation("->")
        out_t = _parse_ptr_type(parser)
        op = cls.build(
            operands=[parser.resolve_operand(ptr, in_t), parser.resolve_operand(off, IndexType())],
            result_types=[out_t],
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string(", ")
        printer.print_operand(self.offset)
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        if self.ptr.type != self.result.type:
            _fail(self, "type agreement", f"result {self.result.type} must equal the pointer type {self.ptr.type}")


@irdl_op_definition
class LoadScalarOp(_ScalarPtrOp):
    """`%v = pto.load_scalar %p[%i] : !pto.ptr<T> -> T`: one GM element (PIPE_S), p + i elements."""

    PTR_OPERAND: ClassVar[int] = 0

    name = "pto.load_scalar"
    ptr = operand_def(PtrType)
    index = operand_def(IndexType)
    result = result_def()

    def __init__(self, ptr: SSAValue, index: SSAValue):
        assert isinstance(ptr.type, PtrType)
        super().__init__(operands=[ptr, index], result_types=[ptr.type.elem])

    @classmethod
    def parse(cls, parser: Parser) -> "LoadScalarOp":
        ptr, index = _parse_ptr_index(parser)
        parser.parse_punctuation(":")
        pt = parser.parse_type()
        parser.parse_punctuation("->")
        rt = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(ptr, pt), parser.resolve_operand(index, IndexType())],
                         result_types=[rt])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string("[")
        printer.print_operand(self.index)
        printer.print_string("] : ")
        printer.print_attribute(self.ptr.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        _check_scalar_ptr(self, self.ptr, self.result.type)


@irdl_op_definition
class StoreScalarOp(_ScalarPtrOp):
    """`pto.store_scalar %v, %p[%i] : !pto.ptr<T>, T`: write one GM element (PIPE_S)."""

    PTR_OPERAND: ClassVar[int] = 1

    name = "pto.store_scalar"
    value = operand_def()
    ptr = operand_def(PtrType)
    index = operand_def(IndexType)

    def __init__(self, value: SSAValue, ptr: SSAValue, index: SSAValue):
        super().__init__(operands=[value, ptr, index])

    @classmethod
    def parse(cls, parser: Parser) -> "StoreScalarOp":
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        ptr, index = _parse_ptr_index(parser)
        parser.parse_punctuation(":")
        pt = parser.parse_type()
        parser.parse_punctuation(",")
        vt = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(value, vt), parser.resolve_operand(ptr, pt),
                                   parser.resolve_operand(index, IndexType())])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.value)
        printer.print_string(", ")
        printer.print_operand(self.ptr)
        printer.print_string("[")
        printer.print_operand(self.index)
        printer.print_string("] : ")
        printer.print_attribute(self.ptr.type)
        printer.print_string(", ")
        printer.print_attribute(self.value.type)

    def verify_(self) -> None:
        _check_scalar_ptr(self, self.ptr, self.value.type)


@irdl_op_definition
class MakeTensorViewOp(IRDLOperation):
    """`%tv = pto.make_tensor_view %p, shape = [...], strides = [...] {layout} : !pto.tensor_view<...>`.

    A strided GM view: tv[i0, ...] = p[sum_k i_k * stride_k] (strides in elements).
    """

    name = "pto.make_tensor_view"
    ptr = operand_def(PtrType)
    shape = var_operand_def(IndexType)
    strides = var_operand_def(IndexType)
    layout = opt_prop_def(LayoutAttr)
    result = result_def(TensorViewType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, shape: Sequence[SSAValue], strides: Sequence[SSAValue], result_type: TensorViewType, layout: str | None = None):
        props = {"layout": LayoutAttr(layout)} if layout else {}
        super().__init__(operands=[ptr, shape, strides], result_types=[result_type], properties=props)

    @classmethod
    def parse(cls, parser: Parser) -> "MakeTensorViewOp":
        start = parser.pos  # errors raised after the last token point back at the op
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        parser.parse_keyword("shape")
        parser.parse_punctuation("=")
        shape = _parse_index_list(parser)
        parser.parse_punctuation(",")
        parser.parse_keyword("strides")
        parser.parse_punctuation("=")
        strides = _parse_index_list(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        result_type = parser.parse_type()
        if not isinstance(result_type, TensorViewType):
            parser.raise_error(f"expected a !pto.tensor_view result type, got {result_type}", start)
        layout = attrs.pop("layout", None)
        if attrs:
            parser.raise_error(f"unexpected attributes {sorted(attrs)}", start)
        idx = IndexType()
        try:
            ptr_val = parser.resolve_operand(ptr, PtrType(result_type.elem))
        except ParseError as exc:
            parser.raise_error(
                f"'{cls.name}' element type: the pointer must be {PtrType(result_type.elem)} for a view of "
                f"{elem_name(result_type.elem)} ({exc.msg})", start)
        op = cls.build(
            operands=[ptr_val, [parser.resolve_operand(s, idx) for s in shape], [parser.resolve_operand(s, idx) for s in strides]],
            result_types=[result_type],
            properties={"layout": layout} if layout is not None else {},
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string(", shape = ")
        _print_index_list(printer, self.shape)
        printer.print_string(", strides = ")
        _print_index_list(printer, self.strides)
        if self.layout is not None:
            printer.print_string(" {layout = ")
            printer.print_attribute(self.layout)
            printer.print_string("}")
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        rt = self.result.type
        assert isinstance(rt, TensorViewType)
        pt = self.ptr.type
        assert isinstance(pt, PtrType)
        if pt.elem != rt.elem:
            _fail(self, "element type", f"pointer element {elem_name(pt.elem)} != view element {elem_name(rt.elem)}")
        rank = len(rt.dims)
        if len(self.shape) != rank or len(self.strides) != rank:
            _fail(self, "rank", f"view rank {rank} needs {rank} shape and {rank} stride operands, got {len(self.shape)} and {len(self.strides)}")
        for i, (dim, value) in enumerate(zip(rt.dims, self.shape)):
            const = constant_index(value)
            if dim != DYN and const is not None and const != dim:
                _fail(self, "static shape", f"dim {i} of the type is {dim} but the shape operand is the constant {const}")
        strides = [constant_index(v) for v in self.strides]
        sizes = [constant_index(v) for v in self.shape]
        if self.layout is None and rank >= 2 and strides[0] == 1 and strides[-1] != 1 and None in strides + sizes:
            _fail(self, "layout inference", f"strides [{', '.join('?' if x is None else str(x) for x in strides)}] describe a DN "
                  "view, but ptoas infers the layout only when every size and stride is a constant and silently makes "
                  "this view ND (docs/sources.md §2.2): write {layout = #pto.layout<dn>}")

    @property
    def view_layout(self) -> str:
        """The layout ptoas gives the view: the attribute, else inferred from constant strides."""
        if self.layout is not None:
            return self.layout.value.data
        strides = [constant_index(v) for v in self.strides]
        if len(strides) >= 2 and strides[0] == 1 and strides[-1] != 1 and None not in strides:
            return "dn"
        return "nd"


@irdl_op_definition
class PartitionViewOp(IRDLOperation):
    """`%pv = pto.partition_view %tv, offsets = [...], sizes = [...] : TV -> PV`: a window of a view."""

    name = "pto.partition_view"
    source = operand_def(TensorViewType)
    offsets = var_operand_def(IndexType)
    sizes = var_operand_def(IndexType)
    result = result_def(PartitionTensorViewType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, source: SSAValue, offsets: Sequence[SSAValue], sizes: Sequence[SSAValue], result_type: PartitionTensorViewType):
        super().__init__(operands=[source, offsets, sizes], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser) -> "PartitionViewOp":
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        parser.parse_keyword("offsets")
        parser.parse_punctuation("=")
        offsets = _parse_index_list(parser)
        parser.parse_punctuation(",")
        parser.parse_keyword("sizes")
        parser.parse_punctuation("=")
        sizes = _parse_index_list(parser)
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        idx = IndexType()
        size_values = [parser.resolve_operand(s, idx) for s in sizes]
        if parser.parse_optional_punctuation("->"):
            res_t = parser.parse_type()
        elif isinstance(src_t, TensorViewType):
            # ptoas infers the result from the sizes: constants give static dims, others `?`.
            consts = [constant_index(v) for v in size_values]
            res_t = PartitionTensorViewType([DYN if c is None else c for c in consts], src_t.elem)
        else:
            parser.raise_error("expected '->' and the result type")
        return cls.build(
            operands=[parser.resolve_operand(src, src_t), [parser.resolve_operand(o, idx) for o in offsets], size_values],
            result_types=[res_t],
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.source)
        printer.print_string(", offsets = ")
        _print_index_list(printer, self.offsets)
        printer.print_string(", sizes = ")
        _print_index_list(printer, self.sizes)
        printer.print_string(" : ")
        printer.print_attribute(self.source.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        """ptoas's rules (PTOAS lib/PTO/IR/PTO.cpp, PartitionViewOp::verify): one offset and one
        size per source dim; a constant offset is >= 0 and a constant size > 0; with a result of
        the source's rank a constant size equals the result dim; against a static source dim a
        constant size, and a constant offset plus size, stay within it."""
        st, rt = self.source.type, self.result.type
        assert isinstance(st, TensorViewType) and isinstance(rt, PartitionTensorViewType)
        if st.elem != rt.elem:
            _fail(self, "element type", f"source {elem_name(st.elem)} != result {elem_name(rt.elem)}")
        rank = len(st.dims)
        if len(self.offsets) != rank or len(self.sizes) != rank:
            _fail(self, "rank", f"source rank {rank} needs {rank} offsets and sizes, got {len(self.offsets)} and {len(self.sizes)}")
        same_rank = len(rt.dims) == rank
        for i, (off_v, size_v) in enumerate(zip(self.offsets, self.sizes)):
            off, size = constant_index(off_v), constant_index(size_v)
            if off is not None and off < 0:
                _fail(self, "bounds", f"offset at dim {i} must be non-negative, got {off}")
            if size is not None and size <= 0:
                _fail(self, "bounds", f"size at dim {i} must be positive, got {size}")
            if same_rank and size is not None and rt.dims[i] != DYN and size != rt.dims[i]:
                _fail(self, "static shape", f"result dim {i} is {rt.dims[i]} but the size operand is the constant {size}")
            src = st.dims[i]
            if src == DYN:
                continue
            if size is not None and size > src:
                _fail(self, "bounds", f"size at dim {i} ({size}) exceeds static source dim ({src})")
            if off is not None and size is not None and off + size > src:
                _fail(self, "bounds", f"offset+size at dim {i} ({off + size}) exceeds static source dim ({src})")


@irdl_op_definition
class AllocTileOp(IRDLOperation):
    """`%t = pto.alloc_tile [valid_row = %r valid_col = %c] : !pto.tile_buf<...>`: a new local buffer.

    `addr = %a` is the explicit UB/L1 address of a `--pto-level=level3` program, where
    every allocation has one; `ptofa.ir.textio.module_errors` checks that a module either
    gives every alloc an address (level3) or none (level1/level2, ptoas plans them).
    """

    name = "pto.alloc_tile"
    addr = opt_operand_def(IntegerType)
    valid_row = opt_operand_def(IndexType)
    valid_col = opt_operand_def(IndexType)
    result = result_def(TileBufType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, result_type: TileBufType, valid_row: SSAValue | None = None, valid_col: SSAValue | None = None):
        super().__init__(
            operands=[[], [valid_row] if valid_row else [], [valid_col] if valid_col else []],
            result_types=[result_type],
        )

    @classmethod
    def parse(cls, parser: Parser) -> "AllocTileOp":
        """`[addr = %a] [valid_row = %r] [valid_col = %c] [{attrs}] : T`, each clause optional
        (PTOAS PTOOps.td AllocTileOp: a dynamic valid dim takes its operand, a static one none)."""
        operands = {}
        for key in ("addr", "valid_row", "valid_col"):
            if parser.parse_optional_keyword(key):
                parser.parse_punctuation("=")
                operands[key] = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        idx = IndexType()
        types = {"addr": i64, "valid_row": idx, "valid_col": idx}
        return cls.build(
            operands=[[parser.resolve_operand(operands[k], types[k])] if k in operands else [] for k in types],
            result_types=[t],
            attributes=attrs,
        )

    def print(self, printer: Printer) -> None:
        for key in ("addr", "valid_row", "valid_col"):
            value = getattr(self, key)
            if value is not None:
                printer.print_string(f" {key} = ")
                printer.print_operand(value)
        if self.attributes:
            printer.print_string(" ")
            printer.print_attr_dict(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, TileBufType)
        bad = t.layout_error()
        if bad is not None:
            _fail(self, *bad)
        for key, dim in (("valid_row", t.valid[0]), ("valid_col", t.valid[1])):
            if (getattr(self, key) is not None) != (dim == DYN):
                need = "is required" if dim == DYN else "must be absent"
                _fail(self, "valid shape", f"{key} operand {need} because the type's valid shape is {_dims_str(t.valid)}")


@irdl_op_definition
class SetValidShapeOp(IRDLOperation):
    """`pto.set_validshape %t, %r, %c : !pto.tile_buf<..., valid=?x?>`: set a dynamic tile's runtime valid shape.

    ptoas's verifier (PTO.cpp SetValidShapeOp::verify): the source has a dynamic valid
    shape in both dims, is a locally bound tile (not a function argument), and constant
    operands lie in 0..the static shape.
    """

    name = "pto.set_validshape"
    source = operand_def(TileBufType)
    valid_row = operand_def(IndexType)
    valid_col = operand_def(IndexType)

    def __init__(self, source: SSAValue, valid_row: SSAValue, valid_col: SSAValue):
        super().__init__(operands=[source, valid_row, valid_col])

    @classmethod
    def parse(cls, parser: Parser) -> "SetValidShapeOp":
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        row = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        col = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}")
        parser.parse_punctuation(":")
        t = parser.parse_type()
        idx = IndexType()
        return cls(parser.resolve_operand(src, t), parser.resolve_operand(row, idx), parser.resolve_operand(col, idx))

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list([self.source, self.valid_row, self.valid_col], printer.print_operand)
        printer.print_string(" : ")
        printer.print_attribute(self.source.type)

    def verify_(self) -> None:
        t = _tile(self, self.source, "source")
        if t.valid != (DYN, DYN):
            _fail(self, "dynamic valid", f"expects source tile_buf to have dynamic validShape (?, ?), got valid={_dims_str(t.valid)}")
        root = self.source
        while isinstance(root.owner, _TileViewOp) and not root.owner.SUBVIEW:  # treshape
            root = root.owner.src
        if not isinstance(root.owner, AllocTileOp):
            what = "a function or block argument" if isinstance(root.owner, Block) else f"a {root.owner.name} result"
            _fail(self, "tile source", f"requires a locally bound tile source (an alloc_tile result or a treshape of one), got {what}")
        for name, value, full in (("row", self.valid_row, t.rows.data), ("col", self.valid_col, t.cols.data)):
            const = constant_index(value)
            if const is not None and not 0 <= const <= full:
                _fail(self, "bounds", f"{name} operand {const} must be within 0..{full} (the static shape)")


def _pop_layout_hint(parser: Parser, attrs: dict[str, Attribute], start: int | None) -> dict[str, Attribute]:
    """ptoas's layout hint on tload / tstore: `{layout = #pto.layout<nd>[, pto.inferred_layout = true]}`."""
    props: dict[str, Attribute] = {}
    layout = attrs.pop("layout", None)
    if layout is not None:
        if not isinstance(layout, LayoutAttr):
            parser.raise_error(f"layout must be #pto.layout<nd|dn|nz>, got {layout}", start)
        props["layout"] = layout
    inferred = attrs.pop("pto.inferred_layout", None)
    if inferred is not None:
        if not (isinstance(inferred, IntegerAttr) and inferred.type == IntegerType(1)):
            parser.raise_error(f"pto.inferred_layout must be true or false, got {inferred}", start)
        props["pto.inferred_layout"] = inferred
    return props


def _layout_hint_items(op: IRDLOperation) -> list[str]:
    items = []
    if op.layout is not None:
        items.append(f"layout = #pto.layout<{op.layout.value.data}>")
    if op.inferred_layout is not None:
        items.append(f"pto.inferred_layout = {'true' if op.inferred_layout.value.data else 'false'}")
    return items


def _print_attr_dict(printer: Printer, items: list[str]) -> None:
    if items:
        printer.print_string(" {" + ", ".join(items) + "}")


@irdl_op_definition
class TLoadOp(_InsOutsOp):
    """`pto.tload ins(%pv : PV) outs(%t : T)`: GM -> UB (vec) or L1 (mat), dst[i,j] = src[i,j]."""

    name = "pto.tload"
    src = operand_def(PartitionTensorViewType)
    dst_ = operand_def(TileBufType)
    layout = opt_prop_def(LayoutAttr)
    inferred_layout = opt_prop_def(IntegerAttr, prop_name="pto.inferred_layout")

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        props = _pop_layout_hint(parser, attrs, start)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        return props

    def _print_attrs(self, printer: Printer) -> None:
        _print_attr_dict(printer, _layout_hint_items(self))

    def verify_(self) -> None:
        t = _tile(self, self.dst, "dst")
        st = self.src.type
        assert isinstance(st, PartitionTensorViewType)
        if t.space not in ("vec", "mat"):
            _fail(self, "memory space", f"dst must be loc=vec or loc=mat on A2/A3, got loc={t.space}")
        _check_view_tile(self, st, t)
        _check_layout_pair(self, self.src, t)


@irdl_op_definition
class TStoreOp(_InsOutsOp):
    """`pto.tstore ins(%t : T [fp %fp : F] [, %q : i64]) outs(%pv : PV)`: tile -> GM (acc f32 ->
    f32/f16 through FIX; with a loc=scaling `fp` tile or an i64 `preQuantScalar`, the FIX pipe
    quantizes, which the simulator does not model). Operands in ptoas's order (src, dst, fp,
    preQuantScalar; PTOAS PTOOps.td TStoreOp)."""

    name = "pto.tstore"
    src = operand_def(TileBufType)
    dst_ = operand_def(PartitionTensorViewType)
    fp = opt_operand_def(TileBufType)
    pre_quant = opt_operand_def(IntegerType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    atomicType = opt_prop_def(AtomicTypeAttr)  # noqa: N815 (ptoas's attribute name)
    stPhase = opt_prop_def(StPhaseAttr)  # noqa: N815 (ptoas's attribute name; a scheduling hint)
    reluPreMode = opt_prop_def(ReluPreModeAttr)  # noqa: N815 (ptoas's attribute name)
    layout = opt_prop_def(LayoutAttr)
    inferred_layout = opt_prop_def(IntegerAttr, prop_name="pto.inferred_layout")

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        atomic = attrs.pop("atomicType", None)
        phase = attrs.pop("stPhase", None)
        relu = attrs.pop("reluPreMode", None)
        props = _pop_layout_hint(parser, attrs, start)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        for key, value, kind in (("stPhase", phase, StPhaseAttr), ("reluPreMode", relu, ReluPreModeAttr)):
            if value is None:
                continue
            if not isinstance(value, kind):
                parser.raise_error(f"{cls.name}: {key} must be #pto<{kind.name[4:]} ...>, got {value}", start)
            if value.value.data != "no_relu":
                props[key] = value
        if atomic is None:
            return props
        if not isinstance(atomic, AtomicTypeAttr):
            parser.raise_error(f"{cls.name}: atomicType must be #pto<atomic_type ...>, got {atomic}", start)
        return props if atomic.value.data == "atomic_none" else {**props, "atomicType": atomic}

    def _print_attrs(self, printer: Printer) -> None:
        items = [f"stPhase = {self.stPhase.text}"] if self.stPhase is not None else []
        items += [f"atomicType = {self.atomicType.text}"] if self.atomicType is not None else []
        items += [f"reluPreMode = {self.reluPreMode.text}"] if self.reluPreMode is not None else []
        _print_attr_dict(printer, items + _layout_hint_items(self))

    @property
    def atomic_add(self) -> bool:
        return self.atomicType is not None and self.atomicType.value.data == "atomic_add"

    @property
    def dst(self) -> SSAValue:
        return self.dst_

    def ins_values(self) -> list[SSAValue]:
        return [v for v in (self.src, self.fp, self.pre_quant) if v is not None]

    @classmethod
    def parse(cls, parser: Parser) -> "TStoreOp":
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        src = parser.resolve_operand(src, parser.parse_type())
        fp = pre = None
        if parser.parse_optional_keyword("fp"):
            fp = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            fp = parser.resolve_operand(fp, parser.parse_type())
        if parser.parse_optional_punctuation(","):
            pre = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            pre = parser.resolve_operand(pre, parser.parse_type())
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        dst = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        dst = parser.resolve_operand(dst, parser.parse_type())
        parser.parse_punctuation(")")
        known, extra = split_discardable(cls, parser.parse_optional_attr_dict())
        return cls.build(operands=[src, dst, [fp] if fp else [], [pre] if pre else []],
                         properties=cls._props_from_attrs(parser, known, start), attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        _print_typed_list(printer, [self.src])
        if self.fp is not None:
            printer.print_string(" fp ")
            _print_typed_list(printer, [self.fp])
        if self.pre_quant is not None:
            printer.print_string(", ")
            _print_typed_list(printer, [self.pre_quant])
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")
        self.print_attr_dict(printer)

    def verify_(self) -> None:
        t = _tile(self, self.src, "src")
        pt = self.dst.type
        assert isinstance(pt, PartitionTensorViewType)
        quant = self.fp is not None or self.pre_quant is not None
        if self.fp is not None and self.pre_quant is not None:
            _fail(self, "operands", "fp and preQuantScalar are mutually exclusive")
        if self.fp is not None:
            if self.stPhase is not None:
                _fail(self, "operands", "the fp form takes the default stPhase")
            if _tile(self, self.fp, "fp").space != "scaling":
                _fail(self, "operands", f"fp must be a loc=scaling tile, got loc={self.fp.type.space}")
        if self.pre_quant is not None and self.pre_quant.type != i64:
            _fail(self, "operands", f"preQuantScalar must be i64, got {self.pre_quant.type}")
        if t.space not in ("vec", "mat", "acc"):
            _fail(self, "memory space", f"src must be loc=vec, mat or acc on A2/A3, got loc={t.space}")
        if self.reluPreMode is not None and t.space != "acc":
            _fail(self, "relu", f"reluPreMode needs a loc=acc src, got loc={t.space}")
        if quant and t.space != "acc":
            _fail(self, "operands", f"the fp / preQuantScalar form needs a loc=acc src, got loc={t.space}")
        if t.space == "acc":
            out = elem_name(pt.elem)
            if t.elem not in ("f32", "i32"):
                _fail(self, "dtype pair", f"acc store {t.elem} -> {out} is not allowed (acc holds i32 or f32)")
            if self.pre_quant is not None:
                allowed = ("i8", "ui8", "f16") if t.elem == "i32" else ("i8", "ui8")
                if out not in allowed:
                    _fail(self, "dtype pair", f"a preQuantScalar acc store {t.elem} -> {out} is not allowed (to {'/'.join(allowed)})")
            elif self.fp is None and out not in ("f32", "i32", "f16", "bf16"):
                _fail(self, "dtype pair", f"acc store {t.elem} -> {out} is not allowed")
            if t.cols.data > 4095:
                _fail(self, "acc cols", f"ACC tile cols {t.cols.data} must be <= 4095 for FIX stores")
            if self.fp is None:
                _check_view_tile(self, pt, t, allow_convert=True)
        else:
            _check_view_tile(self, pt, t)
            _check_layout_pair(self, self.dst, t)


def view_layout(value: SSAValue) -> str | None:
    """GM layout (nd/dn/nz) of a tensor or partition view, traced to its make_tensor_view; None if unknown."""
    owner = value.owner
    if isinstance(owner, PartitionViewOp):
        return view_layout(owner.source)
    if isinstance(owner, MakeTensorViewOp):
        return owner.view_layout
    if isinstance(owner, _PipeEntryOp):
        return "nd"  # pipe slots are row-major
    return None


def _check_layout_pair(op: Operation, view: SSAValue, tile: TileBufType) -> None:
    gm = view_layout(view)
    allowed = _GM_TILE_LAYOUTS.get(tile.space, {}).get(gm or "")
    if gm is None or allowed is None:
        return
    # A single-row or single-column tile is the same bytes in either layout.
    if 1 in tile.shape and not tile.is_boxed:
        return
    if tile_layout(tile) not in allowed:
        _fail_build(op, "layout pairing", f"a {gm.upper()} GM view pairs with loc={tile.space} tiles of layout "
                    f"{' or '.join(allowed)}, got {tile_layout(tile)} (pto-isa's TLOAD/TSTORE static_asserts, or the data is scrambled)")


# ptoas's A2/A3 tmov pairs (PTOAS TMovOp::verify); acc -> vec verifies but does not build on A2/A3.
_TMOV_PAIRS = {("mat", "left"), ("mat", "right"), ("mat", "bias"), ("mat", "scaling"), ("vec", "vec"), ("acc", "mat"), ("acc", "vec")}


@irdl_op_definition
class TMovOp(_InsOutsOp):
    """`pto.tmov ins(%a : A) outs(%b : B) [{accToVecMode = ..., reluPreMode = ...}]`: local copy
    (mat->left/right/bias/scaling, vec->vec, acc->mat; acc->vec verifies in ptoas but does not
    build for A2/A3)."""

    name = "pto.tmov"
    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    fp = opt_operand_def(TileBufType)
    pre_quant = opt_operand_def(IntegerType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    accToVecMode = opt_prop_def(AccToVecModeAttr)  # noqa: N815 (ptoas's attribute name)
    reluPreMode = opt_prop_def(ReluPreModeAttr)  # noqa: N815 (ptoas's attribute name)

    @property
    def dst(self) -> SSAValue:
        return self.dst_

    def ins_values(self) -> list[SSAValue]:
        return [v for v in (self.src, self.fp, self.pre_quant) if v is not None]

    @classmethod
    def parse(cls, parser: Parser) -> "TMovOp":
        """`ins(%src : T[, %fp : F | , %q : i64]) outs(%dst : D) [{...}]` (PTOAS PTOOps.td TMovOp)."""
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        values = []
        while True:
            name = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            values.append(parser.resolve_operand(name, parser.parse_type()))
            if parser.parse_optional_punctuation(",") is None:
                break
        parser.parse_punctuation(")")
        parser.parse_keyword("outs")
        parser.parse_punctuation("(")
        dst = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        dst = parser.resolve_operand(dst, parser.parse_type())
        parser.parse_punctuation(")")
        fp = [v for v in values[1:] if isinstance(v.type, TileBufType)]
        pre = [v for v in values[1:] if not isinstance(v.type, TileBufType)]
        if len(values) > 3 or len(fp) > 1 or len(pre) > 1 or (fp and pre and values.index(fp[0]) > values.index(pre[0])):
            parser.raise_error(f"{cls.name} takes ins(%src : T[, %fp : F][, %preQuantScalar : i64])", start)
        known, extra = split_discardable(cls, parser.parse_optional_attr_dict())
        return cls.build(operands=[values[0], dst, fp, pre], properties=cls._props_from_attrs(parser, known, start), attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        printer.print_list(self.ins_values(), lambda v: _print_typed_list(printer, [v]))
        printer.print_string(") outs(")
        _print_typed_list(printer, [self.dst])
        printer.print_string(")")
        self.print_attr_dict(printer)

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        props: dict[str, Attribute] = {}
        for key, kind in (("accToVecMode", AccToVecModeAttr), ("reluPreMode", ReluPreModeAttr)):
            value = attrs.get(key)
            if value is None:
                continue
            if not isinstance(value, kind):
                parser.raise_error(f"{cls.name}: {key} has the wrong kind of value: {value}", start)
            if not (key == "reluPreMode" and value.value.data == "no_relu"):
                props[key] = value
        return props

    def _print_attrs(self, printer: Printer) -> None:
        items = [f"accToVecMode = #pto.acc_to_vec_mode<{self.accToVecMode.value.data}>"] if self.accToVecMode is not None else []
        items += [f"reluPreMode = {self.reluPreMode.text}"] if self.reluPreMode is not None else []
        _print_attr_dict(printer, items)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if (s.space, d.space) not in _TMOV_PAIRS:
            _fail(self, "memory space", f"{s.space} -> {d.space} is not a legal A2/A3 tmov (legal: mat->left/right/bias/scaling, vec->vec, acc->mat, acc->vec)")
        if s.shape != d.shape:
            _fail(self, "shape agreement", f"src {s.shape[0]}x{s.shape[1]} != dst {d.shape[0]}x{d.shape[1]}")
        if self.accToVecMode is not None and (s.space, d.space) != ("acc", "vec"):
            _fail(self, "attribute", f"accToVecMode goes only with an acc -> vec tmov, got {s.space} -> {d.space}")
        if self.reluPreMode is not None:
            if s.space != "acc":
                _fail(self, "relu", f"reluPreMode needs a loc=acc src, got loc={s.space}")
            if not (s.blayout.data == "col_major" and s.slayout.data == "row_major"):
                _fail(self, "layout", "an acc-source relu tmov takes a blayout=col_major, slayout=row_major src")
        if (s.space, d.space) == ("acc", "mat") and d.fractal.data != 512:
            _fail(self, "layout", f"an A2/A3 acc -> mat tmov writes a fractal=512 dst, got fractal={d.fractal.data}")
        if self.fp is not None or self.pre_quant is not None:
            if s.space != "acc":
                _fail(self, "operands", f"the fp / preQuantScalar form needs a loc=acc src, got loc={s.space}")
            if self.fp is not None:
                if self.fp.type.space != "scaling":
                    _fail(self, "operands", f"fp must be a loc=scaling tile, got loc={self.fp.type.space}")
                if s.elem not in ("f32", "i32"):
                    _fail(self, "dtype", f"the fp form takes an f32 or i32 acc src, got {s.elem}")
                if not (s.blayout.data == "col_major" and s.slayout.data == "row_major"):
                    _fail(self, "layout", "an acc-source fp tmov takes a blayout=col_major, slayout=row_major src")
                if d.space == "mat" and not (d.blayout.data == "col_major" and d.slayout.data == "row_major"):
                    _fail(self, "layout", "an fp acc -> mat tmov writes a blayout=col_major, slayout=row_major dst")
            elif self.pre_quant.type != i64:
                _fail(self, "operands", f"preQuantScalar must be i64, got {self.pre_quant.type}")
            if self.accToVecMode is not None and self.accToVecMode.value.data.startswith("dual"):
                _fail(self, "attribute", "the fp / preQuantScalar acc -> vec forms take a single-mode accToVecMode")
        ps, pd = physical_shape(self.src), physical_shape(self.dst)
        if ps != pd and not (_has_addr(self.src) and _has_addr(self.dst)):
            # ptoas's verifier compares the declared shapes; at level2 its memory planning
            # then fails on a tmov into a subview (docs/sources.md §2.14), at level3 (explicit
            # addresses) it resolves the subview (PTOAS test/lit/pto/tmov_resolved_subview_a3.pto).
            kind = "mat-source" if s.space == "mat" else "A2/A3 non-mat"
            _fail(self, "shape agreement", f"expects {kind} tmov to use matching src/dst shapes: ptoas materializes a "
                  f"subview as its parent's physical tile, so this is {ps[0]}x{ps[1]} -> {pd[0]}x{pd[1]} "
                  "(ptoas 0.60); copy into a subview with `tadds ins(%src, %zero ...)` instead")
        if s.space == "vec" and s.blayout != d.blayout:
            _fail(self, "layout", f"vec->vec tmov needs one blayout on both tiles, got src {s.blayout.data}, dst {d.blayout.data}")
        if (s.space, d.space) == ("acc", "vec"):
            _fail_build(self, "memory space", "acc -> vec: ptoas verifies it, but pto-isa's A2/A3 TMOV has no acc -> vec path")


def _has_addr(value: SSAValue) -> bool:
    """Whether the tile behind `value` (through subviews / reshapes) has an explicit level3 address."""
    while isinstance(value.owner, _TileViewOp):
        value = value.owner.src
    owner = value.owner
    return isinstance(owner, AllocTileOp) and owner.addr is not None


ALLOC_OPS: tuple = (AllocTileOp,)  # ops that take an explicit `addr` at level3

OPS = (AddPtrOp, LoadScalarOp, StoreScalarOp, MakeTensorViewOp, PartitionViewOp, AllocTileOp, SetValidShapeOp, TLoadOp, TStoreOp, TMovOp)
