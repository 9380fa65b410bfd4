"""Hand-written synchronization: flags between pipes (`pto.set_flag` / `pto.wait_flag`, their
`_dyn` forms and the op-type spelling `pto.record_event` / `pto.wait_event`), cube-vector
intra-block flags (`pto.set_intra_block` / `pto.wait_intra_block`), the all-core barrier
`pto.syncall`, and the event-id arrays that hold dynamic event ids
(`pto.declare_eventid_array`, `pto.eventid_array_get` / `_set`).

ptoas inserts these itself for ordinary programs; hand-synchronized programs write them.
Syntax and rules follow PTOAS's PTOOps.td and PTO.cpp (parseLegacyOrAttrPipe,
parseSyncEventOpCommon, verifyNamedSyncEventOp, SyncAllOp::verify): a pipe or event is
written `"PIPE_V"`, `<PIPE_V>` or `#pto.pipe<PIPE_V>` and printed `<PIPE_V>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import IndexType, IntAttr, IntegerAttr, IntegerType, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
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
    var_operand_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from ptofa.ir.dialect.base import _fail, _parse_ptr_index
from ptofa.ir.dialect.types import _EnumAttr, PartitionTensorViewType, PtrType, TensorViewType, TileBufType

PIPE_NAMES = ("PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_ALL", "PIPE_MTE4", "PIPE_MTE5",
              "PIPE_V2", "PIPE_FIX", "VIRTUAL_PIPE_MTE2_L1A", "VIRTUAL_PIPE_MTE2_L1B", "PIPE_NUM", "PIPE_UNASSIGNED")
EVENT_NAMES = tuple(f"EVENT_ID{i}" for i in range(8))
SYNC_OP_TYPES = ("TLOAD", "TSTORE_ACC", "TSTORE_VEC", "TMOV_M2L", "TMOV_M2S", "TMOV_M2B", "TMOV_M2V", "TMOV_V2M",
                 "TMATMUL", "TVEC", "TVECWAIT_EVENT")
INTRA_BLOCK_PIPES = ("PIPE_FIX", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_V")
INTRA_BLOCK_MAX_EVENT = 15  # A2/A3 (PTOAS SetIntraBlockOp::verify; A5 allows 31)
SYNCALL_MIN_WORKSPACE = 16  # i32 elements (PTOAS verifySyncAllGmWorkspace)


@irdl_attr_definition
class PipeAttr(_EnumAttr):
    """`#pto.pipe<PIPE_MTE2>`: a hardware pipe."""

    name = "pto.pipe"
    VALUES: ClassVar[tuple[str, ...]] = PIPE_NAMES


@irdl_attr_definition
class EventAttr(_EnumAttr):
    """`#pto.event<EVENT_ID0>`: one of the eight flag ids of a pipe pair."""

    name = "pto.event"
    VALUES: ClassVar[tuple[str, ...]] = EVENT_NAMES


@irdl_attr_definition
class PipeEventTypeAttr(_EnumAttr):
    """`#pto.pipe_event_type<TLOAD>`: an op type that ptoas maps to its pipe."""

    name = "pto.pipe_event_type"
    VALUES: ClassVar[tuple[str, ...]] = SYNC_OP_TYPES


@irdl_attr_definition
class SyncOpTypeAttr(_EnumAttr):
    """`#pto.sync_op_type<TLOAD>`: ptoas's older spelling of `#pto.pipe_event_type`."""

    name = "pto.sync_op_type"
    VALUES: ClassVar[tuple[str, ...]] = SYNC_OP_TYPES


@irdl_attr_definition
class SyncAllModeAttr(_EnumAttr):
    """`#pto.sync_all_mode<hard|soft>`: the hardware barrier or the GM-workspace one."""

    name = "pto.sync_all_mode"
    VALUES: ClassVar[tuple[str, ...]] = ("hard", "soft")


@irdl_attr_definition
class SyncCoreTypeAttr(_EnumAttr):
    """`#pto.sync_core_type<aiv_only|aic_only|mix>`: which cores a syncall waits for."""

    name = "pto.sync_core_type"
    VALUES: ClassVar[tuple[str, ...]] = ("aiv_only", "aic_only", "mix")


@irdl_attr_definition
class EventIdArrayType(ParametrizedAttribute, TypeAttribute):
    """`!pto.eventid_array<4>`: a stack array of dynamic event ids."""

    name = "pto.eventid_array"
    size: IntAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            n = parser.parse_integer(allow_boolean=False, allow_negative=False)
        if n <= 0:
            parser.raise_error(f"!pto.eventid_array: the size must be positive, got {n}", start)
        return (IntAttr(n),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.size.data}>")


def _parse_enum_token(parser: Parser, cls: type[_EnumAttr], *alts: type[_EnumAttr]) -> _EnumAttr:
    """`"NAME"`, `<NAME>` or the full attribute `#pto.x<NAME>` (any of `cls`, `alts`)."""
    start = parser.pos
    text = parser.parse_optional_str_literal()
    if text is None and parser.parse_optional_punctuation("<") is not None:
        text = parser.parse_identifier()
        parser.parse_punctuation(">")
    if text is not None:
        if text not in cls.VALUES:
            parser.raise_error(f"invalid {cls.name[4:]} token '{text}', expected one of {', '.join(cls.VALUES)}", start)
        return cls(text)
    attr = parser.parse_attribute()
    if not isinstance(attr, (cls, *alts)):
        parser.raise_error(f"expected a #{cls.name} attribute, got {attr}", start)
    return attr


class _FlagOp(IRDLOperation):
    """`[src, dst, event]` between two pipes: the flag `dst` waits for after `src` sets it."""

    src_pipe = prop_def(PipeAttr)
    dst_pipe = prop_def(PipeAttr)
    event_id = prop_def(EventAttr)

    @classmethod
    def parse(cls, parser: Parser):
        parser.parse_punctuation("[")
        src = _parse_enum_token(parser, PipeAttr)
        parser.parse_punctuation(",")
        dst = _parse_enum_token(parser, PipeAttr)
        parser.parse_punctuation(",")
        event = _parse_enum_token(parser, EventAttr)
        parser.parse_punctuation("]")
        return cls.build(properties={"src_pipe": src, "dst_pipe": dst, "event_id": event})

    def print(self, printer: Printer) -> None:
        printer.print_string(f"[<{self.src_pipe.value.data}>, <{self.dst_pipe.value.data}>, <{self.event_id.value.data}>]")


@irdl_op_definition
class SetFlagOp(_FlagOp):
    """`pto.set_flag[<PIPE_MTE2>, <PIPE_V>, <EVENT_ID0>]`"""

    name = "pto.set_flag"


@irdl_op_definition
class WaitFlagOp(_FlagOp):
    """`pto.wait_flag[<PIPE_MTE2>, <PIPE_V>, <EVENT_ID0>]`"""

    name = "pto.wait_flag"


class _FlagDynOp(IRDLOperation):
    """`[#pto.pipe<src>, #pto.pipe<dst>, %event]`: the event id is an index value."""

    src_pipe = prop_def(PipeAttr)
    dst_pipe = prop_def(PipeAttr)
    event = operand_def(IndexType)

    @classmethod
    def parse(cls, parser: Parser):
        parser.parse_punctuation("[")
        src = _parse_enum_token(parser, PipeAttr)
        parser.parse_punctuation(",")
        dst = _parse_enum_token(parser, PipeAttr)
        parser.parse_punctuation(",")
        event = parser.resolve_operand(parser.parse_unresolved_operand(), IndexType())
        parser.parse_punctuation("]")
        return cls.build(operands=[event], properties={"src_pipe": src, "dst_pipe": dst})

    def print(self, printer: Printer) -> None:
        printer.print_string(f" [#pto.pipe<{self.src_pipe.value.data}>, #pto.pipe<{self.dst_pipe.value.data}>, ")
        printer.print_operand(self.event)
        printer.print_string("]")


@irdl_op_definition
class SetFlagDynOp(_FlagDynOp):
    """`pto.set_flag_dyn [#pto.pipe<PIPE_MTE2>, #pto.pipe<PIPE_V>, %eid]`"""

    name = "pto.set_flag_dyn"


@irdl_op_definition
class WaitFlagDynOp(_FlagDynOp):
    """`pto.wait_flag_dyn [#pto.pipe<PIPE_MTE2>, #pto.pipe<PIPE_V>, %eid]`"""

    name = "pto.wait_flag_dyn"


class _EventOp(IRDLOperation):
    """`[op type, op type, event]`: a flag between the pipes ptoas maps the two op types to."""

    src_op = prop_def(Attribute)
    dst_op = prop_def(Attribute)
    event_id = prop_def(EventAttr)

    @classmethod
    def parse(cls, parser: Parser):
        parser.parse_punctuation("[")
        src = _parse_enum_token(parser, PipeEventTypeAttr, SyncOpTypeAttr)
        parser.parse_punctuation(",")
        dst = _parse_enum_token(parser, PipeEventTypeAttr, SyncOpTypeAttr)
        parser.parse_punctuation(",")
        event = _parse_enum_token(parser, EventAttr)
        parser.parse_punctuation("]")
        return cls.build(properties={"src_op": src, "dst_op": dst, "event_id": event})

    def print(self, printer: Printer) -> None:
        printer.print_string(" [")
        printer.print_attribute(self.src_op)
        printer.print_string(", ")
        printer.print_attribute(self.dst_op)
        printer.print_string(", ")
        printer.print_attribute(self.event_id)
        printer.print_string("]")

    def verify_(self) -> None:
        for attr in (self.src_op, self.dst_op):
            if not isinstance(attr, (PipeEventTypeAttr, SyncOpTypeAttr)):
                _fail(self, "op type", f"expected #pto.pipe_event_type<...>, got {attr}")


@irdl_op_definition
class RecordEventOp(_EventOp):
    """`pto.record_event [#pto.pipe_event_type<TLOAD>, #pto.pipe_event_type<TVEC>, #pto.event<EVENT_ID0>]`"""

    name = "pto.record_event"


@irdl_op_definition
class WaitEventOp(_EventOp):
    """`pto.wait_event [#pto.pipe_event_type<TLOAD>, #pto.pipe_event_type<TVEC>, #pto.event<EVENT_ID0>]`"""

    name = "pto.wait_event"


class _IntraBlockOp(IRDLOperation):
    """`<PIPE>, 15` or `<PIPE>, %eid`: a cube-vector flag inside one block (ids 0-15 on A2/A3)."""

    pipe = prop_def(PipeAttr)
    event_id = opt_prop_def(IntegerAttr)
    event_id_dyn = opt_operand_def(IndexType)

    @classmethod
    def parse(cls, parser: Parser):
        pipe = _parse_enum_token(parser, PipeAttr)
        parser.parse_punctuation(",")
        unresolved = parser.parse_optional_unresolved_operand()
        if unresolved is not None:
            return cls.build(operands=[[parser.resolve_operand(unresolved, IndexType())]], properties={"pipe": pipe})
        start = parser.pos
        n = parser.parse_integer(allow_boolean=False)
        if not -(2**31) <= n < 2**31:
            parser.raise_error(f"expected a 32-bit integer literal, got {n}", start)
        return cls.build(operands=[[]], properties={"pipe": pipe, "event_id": IntegerAttr(n, IntegerType(32))})

    def print(self, printer: Printer) -> None:
        printer.print_string(f" <{self.pipe.value.data}>, ")
        if self.event_id_dyn is not None:
            printer.print_operand(self.event_id_dyn)
        else:
            printer.print_string(str(self.event_id.value.data))

    def verify_(self) -> None:
        if self.event_id is not None and not 0 <= self.event_id.value.data <= INTRA_BLOCK_MAX_EVENT:
            _fail(self, "event id", f"a static event_id must be in [0, {INTRA_BLOCK_MAX_EVENT}] on A2/A3, got {self.event_id.value.data}")
        if self.pipe.value.data not in INTRA_BLOCK_PIPES:
            _fail(self, "pipe", f"expects one of {', '.join(INTRA_BLOCK_PIPES)}, got {self.pipe.value.data}")


@irdl_op_definition
class SetIntraBlockOp(_IntraBlockOp):
    """`pto.set_intra_block <PIPE_FIX>, 1`"""

    name = "pto.set_intra_block"


@irdl_op_definition
class WaitIntraBlockOp(_IntraBlockOp):
    """`pto.wait_intra_block <PIPE_MTE3>, 1`"""

    name = "pto.wait_intra_block"


@irdl_op_definition
class SyncAllOp(IRDLOperation):
    """`pto.syncall(%ws[, %cores] : T[, i32]) mode = #pto.sync_all_mode<soft>, core_type = #pto.sync_core_type<mix>`:
    every participating core of the launch waits here for the others."""

    name = "pto.syncall"
    gm_workspace = opt_operand_def()
    used_cores = opt_operand_def(IntegerType(32))
    mode = prop_def(SyncAllModeAttr)
    core_type = prop_def(SyncCoreTypeAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser) -> SyncAllOp:
        start = parser.pos
        parser.parse_punctuation("(")
        names, types = [], []
        if parser.parse_optional_punctuation(")") is None:
            names = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
            parser.parse_punctuation(":")
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
            parser.parse_punctuation(")")
        if len(names) != len(types) or len(names) > 2:
            parser.raise_error(f"pto.syncall: expects at most 2 operands with one type each, got {len(names)} and {len(types)}", start)
        parser.parse_keyword("mode")
        parser.parse_punctuation("=")
        mode = _parse_enum_token(parser, SyncAllModeAttr)
        parser.parse_punctuation(",")
        parser.parse_keyword("core_type")
        parser.parse_punctuation("=")
        core = _parse_enum_token(parser, SyncCoreTypeAttr)
        ops = [parser.resolve_operand(n, t) for n, t in zip(names, types)]
        return cls.build(operands=[ops[:1], ops[1:]], properties={"mode": mode, "core_type": core})

    def print(self, printer: Printer) -> None:
        ops = [v for v in (self.gm_workspace, self.used_cores) if v is not None]
        printer.print_string("(")
        if ops:
            printer.print_list(ops, printer.print_operand)
            printer.print_string(" : ")
            printer.print_list([v.type for v in ops], printer.print_attribute)
        printer.print_string(f") mode = #pto.sync_all_mode<{self.mode.value.data}>, "
                             f"core_type = #pto.sync_core_type<{self.core_type.value.data}>")

    def verify_(self) -> None:
        if self.mode.value.data == "hard":
            if self.gm_workspace is not None or self.used_cores is not None:
                _fail(self, "hard syncall", "expects no gm_workspace or used_cores")
            return
        if self.gm_workspace is None:
            _fail(self, "soft syncall", "expects a gm_workspace operand")
        _check_workspace(self, self.gm_workspace.type)


def _check_workspace(op: SyncAllOp, ty: Attribute) -> None:
    """A GM pointer (sized by the runtime) or a view of at least 16 i32 elements."""
    if isinstance(ty, PtrType):
        if ty.space.data != "gm":
            _fail(op, "gm_workspace", f"expects a GM pointer, got space {ty.space.data}")
        elem, shape = ty.elem, None
    elif isinstance(ty, (TensorViewType, PartitionTensorViewType)):
        elem, shape = ty.elem, ty.dims
    else:
        _fail(op, "gm_workspace", f"expects a GM ptr, tensor_view or partition_tensor_view, got {ty}")
    if elem != IntegerType(32):
        _fail(op, "gm_workspace", f"expects i32 elements, got {elem}")
    if shape is None or any(n < 0 for n in shape):
        return
    count = 1
    for n in shape:
        count *= n
    if count < SYNCALL_MIN_WORKSPACE:
        _fail(op, "gm_workspace", f"expects at least {SYNCALL_MIN_WORKSPACE} i32 elements, got {count}")


@irdl_op_definition
class DeclareEventIdArrayOp(IRDLOperation):
    """`%a = pto.declare_eventid_array -> !pto.eventid_array<4>`"""

    name = "pto.declare_eventid_array"
    result = result_def(EventIdArrayType)

    @classmethod
    def parse(cls, parser: Parser) -> DeclareEventIdArrayOp:
        parser.parse_punctuation("->")
        return cls.build(result_types=[parser.parse_type()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)



@irdl_op_definition
class EventIdArrayGetOp(IRDLOperation):
    """`%e = pto.eventid_array_get %a[%i] : !pto.eventid_array<4>`"""

    name = "pto.eventid_array_get"
    array = operand_def(EventIdArrayType)
    index = operand_def(IndexType)
    result = result_def(IndexType)

    @classmethod
    def parse(cls, parser: Parser) -> EventIdArrayGetOp:
        array, index = _parse_ptr_index(parser)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(array, t), parser.resolve_operand(index, IndexType())], result_types=[IndexType()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.array)
        printer.print_string("[")
        printer.print_operand(self.index)
        printer.print_string("] : ")
        printer.print_attribute(self.array.type)


@irdl_op_definition
class EventIdArraySetOp(IRDLOperation):
    """`pto.eventid_array_set %a[%i], %v : !pto.eventid_array<4>`"""

    name = "pto.eventid_array_set"
    array = operand_def(EventIdArrayType)
    index = operand_def(IndexType)
    value = operand_def(IndexType)

    @classmethod
    def parse(cls, parser: Parser) -> EventIdArraySetOp:
        array, index = _parse_ptr_index(parser)
        parser.parse_punctuation(",")
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(array, t), parser.resolve_operand(index, IndexType()),
                                   parser.resolve_operand(value, IndexType())])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.array)
        printer.print_string("[")
        printer.print_operand(self.index)
        printer.print_string("], ")
        printer.print_operand(self.value)
        printer.print_string(" : ")
        printer.print_attribute(self.array.type)


FLAG_OPS = (SetFlagOp, WaitFlagOp, SetFlagDynOp, WaitFlagDynOp, RecordEventOp, WaitEventOp)
INTRA_BLOCK_OPS = (SetIntraBlockOp, WaitIntraBlockOp)
EVENTID_ARRAY_OPS = (DeclareEventIdArrayOp, EventIdArrayGetOp, EventIdArraySetOp)
@irdl_op_definition
class TSyncOp(IRDLOperation):
    """`pto.tsync ins(%a, %b : A, B)`: wait for the operations on these tiles / GM views to finish
    (pto-isa's TSYNC; PTOAS PTOOps.td TSyncOp: any number of tile or view operands)."""

    name = "pto.tsync"
    events = var_operand_def(TileBufType | PartitionTensorViewType | TensorViewType)

    @classmethod
    def parse(cls, parser: Parser) -> TSyncOp:
        start = parser.pos
        parser.parse_keyword("ins")
        parser.parse_punctuation("(")
        names = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
        if len(names) != len(types):
            parser.raise_error(f"{len(names)} operands but {len(types)} types", start)
        extra = parser.parse_optional_attr_dict()
        return cls.build(operands=[[parser.resolve_operand(n, t) for n, t in zip(names, types)]], attributes=extra)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ins(")
        printer.print_list(self.events, printer.print_operand)
        printer.print_string(" : ")
        printer.print_list([v.type for v in self.events], printer.print_attribute)
        printer.print_string(")")
        if self.attributes:
            printer.print_string(" ")
            printer.print_attr_dict(self.attributes)


OPS = (*FLAG_OPS, *INTRA_BLOCK_OPS, SyncAllOp, *EVENTID_ARRAY_OPS, TSyncOp)
ATTRS = (PipeAttr, EventAttr, PipeEventTypeAttr, SyncOpTypeAttr, SyncAllModeAttr, SyncCoreTypeAttr, EventIdArrayType)
