"""ptoas's internal pipe form: a `!pto.pipe` handle from `pto.initialize_l2g2l_pipe` (slots in
GM, optionally staged through local consumer buffers) or `pto.initialize_l2l_pipe` (local
buffers only), used by the handle-taking `pto.talloc` / `pto.tpush` / `pto.tpop` /
`pto.tfree`, with entries declared by `pto.declare_tile` / `pto.declare_global` (the address
is bound by the pipe op).

This is what ptoas lowers the frontend pipes (`pipes.py`) to; programs may also write it.
Syntax and rules follow PTOAS's PTOOps.td and PTO.cpp (verifyPipeShape,
InitializeL2G2LPipeOp::verify, verifyPipeHandleProducer, verifySplitAttr). The simulator
refuses it: its slot protocol and flag ids are ptoas's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, IntegerType, i8, i32, i64
from xdsl.ir import Attribute, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail, _parse_brace_ints
from ptofa.ir.dialect.types import TensorViewType, TileBufType

MAX_FLAG_IDS = 16  # hardware flag ids a pipe's flag_base + width must fit (PTOAS verifyPipeShape)


@irdl_attr_definition
class PipeHandleType(ParametrizedAttribute, TypeAttribute):
    """`!pto.pipe`: a pipe handle (a type; `#pto.pipe<PIPE_V>` is the pipe-name attribute of sync.py)."""

    name = "pto.pipe"

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return ()

    def print_parameters(self, printer: Printer) -> None:
        return None


_COMMON_KEYS: dict[str, Attribute] = {"dir_mask": i8, "slot_size": i32, "slot_num": i32}


class _InternalInitOp(IRDLOperation):
    """`{dir_mask = D, slot_size = S, slot_num = N, ...}(%addr : T, ...) -> !pto.pipe`"""

    dir_mask = prop_def(IntegerAttr)
    slot_size = prop_def(IntegerAttr)
    slot_num = prop_def(IntegerAttr)
    flag_base = opt_prop_def(IntegerAttr)
    nosplit = opt_prop_def(IntegerAttr)
    pipe = result_def(PipeHandleType)
    KEYS: ClassVar[dict[str, Attribute]] = {}
    OPERANDS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        props = _parse_brace_ints(parser, cls.KEYS)
        missing = [k for k in _COMMON_KEYS if k not in props]
        if missing:
            parser.raise_error(f"{cls.name} needs {', '.join(repr(k) for k in missing)}", start)
        values = parser.parse_comma_separated_list(parser.Delimiter.PAREN, lambda: _parse_typed_operand(parser))
        if not 1 <= len(values) <= len(cls.OPERANDS):
            parser.raise_error(f"{cls.name} takes {', '.join(cls.OPERANDS)} (1 to {len(cls.OPERANDS)} operands), got {len(values)}", start)
        parser.parse_punctuation("->")
        t = parser.parse_type()
        groups = [[v] for v in values] + [[] for _ in range(len(cls.OPERANDS) - len(values))]
        return cls.build(operands=groups, result_types=[t], properties=props)

    def print(self, printer: Printer) -> None:
        parts = [f"{k} = {self.properties[k].value.data}" for k in self.KEYS if k in self.properties and k != "nosplit"]
        if self.nosplit is not None:
            parts.append(f"nosplit = {'true' if self.nosplit.value.data else 'false'}")
        printer.print_string(" {" + ", ".join(parts) + "}(")
        present = [v for v in self.addr_operands if v is not None]
        for i, value in enumerate(present):
            printer.print_string(", " if i else "")
            printer.print_operand(value)
            printer.print_string(" : ")
            printer.print_attribute(value.type)
        printer.print_string(") -> ")
        printer.print_attribute(self.pipe.type)

    @property
    def addr_operands(self) -> tuple[SSAValue | None, ...]:
        raise NotImplementedError

    @property
    def peer_local_addr(self) -> SSAValue | None:
        raise NotImplementedError

    def verify_(self) -> None:
        d, size, num = self.dir_mask.value.data, self.slot_size.value.data, self.slot_num.value.data
        if d not in (1, 2, 3):
            _fail(self, "dir_mask", f"expects 'dir_mask' to be 1, 2, or 3, got {d}")
        if size <= 0:
            _fail(self, "slot_size", f"expects 'slot_size' to be greater than 0, got {size}")
        if num <= 0:
            _fail(self, "slot_num", f"expects 'slot_num' to be greater than 0, got {num}")
        if self.flag_base is not None:
            base, width = self.flag_base.value.data, 4 if d == 3 else 2
            if base < 0 or base + width > MAX_FLAG_IDS:
                _fail(self, "flag_base", f"flag_base={base} with dir_mask={d} needs flag ids [{base}, {base + width}) within 0..{MAX_FLAG_IDS - 1}")
        if (d == 3) != (self.peer_local_addr is not None):
            _fail(self, "peer_local_addr", f"a peer local address goes with dir_mask 3 and only with it (dir_mask={d})")


def _parse_typed_operand(parser: Parser) -> SSAValue:
    value = parser.parse_unresolved_operand()
    parser.parse_punctuation(":")
    return parser.resolve_operand(value, parser.parse_type())


@irdl_op_definition
class InitializeL2G2LPipeOp(_InternalInitOp):
    """`%p = pto.initialize_l2g2l_pipe {dir_mask = 1, slot_size = 1024, slot_num = 8[, local_slot_num = 8][, flag_base = 0]}
    (%gm : T[, %local : i32[, %peer : i32]]) -> !pto.pipe`"""

    name = "pto.initialize_l2g2l_pipe"
    gm_addr = operand_def()
    local_addr = opt_operand_def()
    peer_local_addr_ = opt_operand_def()
    local_slot_num = opt_prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    KEYS: ClassVar[dict[str, Attribute]] = {**_COMMON_KEYS, "local_slot_num": i32, "flag_base": i32, "nosplit": IntegerType(1)}
    OPERANDS: ClassVar[tuple[str, ...]] = ("gm_addr", "local_addr", "peer_local_addr")

    @property
    def addr_operands(self) -> tuple[SSAValue | None, ...]:
        return (self.gm_addr, self.local_addr, self.peer_local_addr_)

    @property
    def peer_local_addr(self) -> SSAValue | None:
        return self.peer_local_addr_

    def verify_(self) -> None:
        if self.local_addr is None:
            if self.local_slot_num is not None:
                _fail(self, "local_slot_num", "'local_slot_num' is only allowed when 'local_addr' is present")
            if self.peer_local_addr_ is not None:
                _fail(self, "peer_local_addr", "'peer_local_addr' requires 'local_addr'")
            d, size, num = self.dir_mask.value.data, self.slot_size.value.data, self.slot_num.value.data
            if d not in (1, 2, 3) or size <= 0 or num <= 0:
                super().verify_()
            return
        if self.local_slot_num is not None and not 1 <= self.local_slot_num.value.data <= self.slot_num.value.data:
            _fail(self, "local_slot_num", f"local_slot_num={self.local_slot_num.value.data} must be in 1..slot_num ({self.slot_num.value.data})")
        super().verify_()


@irdl_op_definition
class InitializeL2LPipeOp(_InternalInitOp):
    """`%p = pto.initialize_l2l_pipe {dir_mask = 1, slot_size = 1024, slot_num = 8[, flag_base = 0]}(%local : i32[, %peer : i32]) -> !pto.pipe`"""

    name = "pto.initialize_l2l_pipe"
    local_addr = operand_def()
    peer_local_addr_ = opt_operand_def()
    KEYS: ClassVar[dict[str, Attribute]] = {**_COMMON_KEYS, "flag_base": i32, "nosplit": IntegerType(1)}
    OPERANDS: ClassVar[tuple[str, ...]] = ("local_addr", "peer_local_addr")

    @property
    def addr_operands(self) -> tuple[SSAValue | None, ...]:
        return (self.local_addr, self.peer_local_addr_)

    @property
    def peer_local_addr(self) -> SSAValue | None:
        return self.peer_local_addr_


INTERNAL_INIT_OPS = (InitializeL2G2LPipeOp, InitializeL2LPipeOp)


class _HandleDataOp(IRDLOperation):
    """`pto.<op>(%entry, %pipe : T, !pto.pipe) {split = S} [aiv_subblockid(%b)]`"""

    entry = opt_operand_def(TensorViewType | TileBufType)
    pipe_handle = operand_def(PipeHandleType)
    aiv_subblockid = opt_operand_def(i64)
    split = prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    ENTRY_OPTIONAL: ClassVar[bool] = False

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        parser.parse_punctuation("(")
        names = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
        if len(names) != len(types) or not (len(names) == 2 or (cls.ENTRY_OPTIONAL and len(names) == 1)):
            parser.raise_error(f"{cls.name} takes ({'[entry, ]' if cls.ENTRY_OPTIONAL else 'entry, '}pipe : types), got "
                               f"{len(names)} operands and {len(types)} types", start)
        props = _parse_brace_ints(parser, {"split": i8})
        if "split" not in props:
            parser.raise_error(f"{cls.name} needs {{split = S}}", start)
        sub: list = []
        if parser.parse_optional_keyword("aiv_subblockid") is not None:
            parser.parse_punctuation("(")
            sub = [parser.resolve_operand(parser.parse_unresolved_operand(), i64)]
            parser.parse_punctuation(")")
        values = [parser.resolve_operand(n, t) for n, t in zip(names, types)]
        return cls.build(operands=[values[:-1], values[-1:], sub], properties=props)

    def print(self, printer: Printer) -> None:
        values = [v for v in (self.entry, self.pipe_handle) if v is not None]
        printer.print_string("(")
        printer.print_list(values, printer.print_operand)
        printer.print_string(" : ")
        printer.print_list([v.type for v in values], printer.print_attribute)
        printer.print_string(f") {{split = {self.split.value.data}}}")
        if self.aiv_subblockid is not None:
            printer.print_string(" aiv_subblockid(")
            printer.print_operand(self.aiv_subblockid)
            printer.print_string(")")

    def verify_(self) -> None:
        if not 0 <= self.split.value.data <= 4:
            _fail(self, "split", f"expects 'split' to be 0, 1, 2, 3, or 4, got {self.split.value.data}")
        owner = self.pipe_handle.owner
        if not isinstance(owner, INTERNAL_INIT_OPS):
            _fail(self, "pipe handle", "pipe_handle must be produced by pto.initialize_l2l_pipe or pto.initialize_l2g2l_pipe")
        if self.entry is None and not self.ENTRY_OPTIONAL:
            _fail(self, "entry", f"{self.name} needs an entry operand")


@irdl_op_definition
class TAllocOp(_HandleDataOp):
    """`pto.talloc(%entry, %pipe : !pto.tensor_view<...>, !pto.pipe) {split = 0}`: bind a declared
    GlobalTensor to the next producer slot."""

    name = "pto.talloc"


@irdl_op_definition
class TPushOp(_HandleDataOp):
    """`pto.tpush(%tile, %pipe : T, !pto.pipe) {split = 0}`"""

    name = "pto.tpush"


@irdl_op_definition
class TPopOp(_HandleDataOp):
    """`pto.tpop(%tile, %pipe : T, !pto.pipe) {split = 1}`: bind a declared tile to the next filled slot."""

    name = "pto.tpop"


@irdl_op_definition
class TFreeOp(_HandleDataOp):
    """`pto.tfree([%entry, ]%pipe : [T, ]!pto.pipe) {split = 2}`: release the current consumer slot."""

    name = "pto.tfree"
    ENTRY_OPTIONAL: ClassVar[bool] = True


@irdl_op_definition
class DeclareTileOp(IRDLOperation):
    """`%t = pto.declare_tile -> !pto.tile_buf<...>`: a tile whose address a tpop binds."""

    name = "pto.declare_tile"
    tile = result_def(TileBufType)

    @classmethod
    def parse(cls, parser: Parser) -> DeclareTileOp:
        parser.parse_punctuation("->")
        return cls.build(result_types=[parser.parse_type()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" -> ")
        printer.print_attribute(self.tile.type)


@irdl_op_definition
class DeclareGlobalOp(IRDLOperation):
    """`%g = pto.declare_global -> !pto.tensor_view<...>`: a GlobalTensor whose address a talloc / tpop binds."""

    name = "pto.declare_global"
    entry = result_def(TensorViewType)

    @classmethod
    def parse(cls, parser: Parser) -> DeclareGlobalOp:
        parser.parse_punctuation("->")
        return cls.build(result_types=[parser.parse_type()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" -> ")
        printer.print_attribute(self.entry.type)


HANDLE_DATA_OPS = (TAllocOp, TPushOp, TPopOp, TFreeOp)
OPS = (*INTERNAL_INIT_OPS, *HANDLE_DATA_OPS, DeclareTileOp, DeclareGlobalOp)
ATTRS = (PipeHandleType,)
