"""Inter-device communication (`pto.comm.*`), cache maintenance (`pto.cmo.cacheinvalid`)
and the memory fence (`pto.fence.barrier_all`).

The comm ops share ptoas's call-like syntax: `pto.comm.<op>(%a, %b, kw(%c, ...), ... :
T_a, T_b, T_c, ...) {attrs} [-> R]`, the keyword groups being `buf(...)` (tput / tget
staging tiles), `recv(...)` (collective staging tiles) and `group(...)` (the collective's
members). Rules follow docs/PTO_IR_manual.md section 4.21 of PTOAS and its verifiers
(lib/PTO/IR/PTO.cpp): GM-shaped transfer operands of one element type, one or two loc=vec
staging tiles of that element type (a pong of the ping's type), i32 GM signals with integer
values, a non-empty group of one type and `root` inside it. The simulator runs one device
and refuses these ops.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, IntegerType, i1, i32, i64
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_operand_def,
    opt_prop_def,
    opt_result_def,
    prop_def,
    var_operand_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail, print_merged_attrs
from ptofa.ir.dialect.types import (  # noqa: F401 (AsyncSessionType, AsyncEventType: re-exported)
    AsyncEventType,
    AsyncSessionType,
    AddressSpaceAttr,
    AtomicTypeAttr,
    PartitionTensorViewType,
    PtrType,
    TensorViewType,
    TileBufType,
    _EnumAttr,
    _PtoEnumAttr,
    elem_name,
)

_GM_TYPES = (TensorViewType, PartitionTensorViewType)


@irdl_attr_definition
class NotifyOpAttr(_PtoEnumAttr):
    """`#pto<notify_op set>`"""

    name = "pto.notify_op"
    VALUES: ClassVar[tuple[str, ...]] = ("atomic_add", "set")


@irdl_attr_definition
class WaitCmpAttr(_PtoEnumAttr):
    """`#pto<wait_cmp ge>`"""

    name = "pto.wait_cmp"
    VALUES: ClassVar[tuple[str, ...]] = ("eq", "ne", "gt", "ge", "lt", "le")


@irdl_attr_definition
class ReduceOpAttr(_PtoEnumAttr):
    """`#pto<reduce_op sum>`"""

    name = "pto.reduce_op"
    VALUES: ClassVar[tuple[str, ...]] = ("sum", "max", "min")


@irdl_attr_definition
class FenceScopeAttr(_EnumAttr):
    """`#pto.fence_scope<gm>`"""

    name = "pto.fence_scope"
    VALUES: ClassVar[tuple[str, ...]] = ("local_memory", "gm", "all")


def _gm(op: IRDLOperation, v: SSAValue, role: str) -> None:
    if not isinstance(v.type, _GM_TYPES):
        _fail(op, "operand type", f"{role} must be a GM tensor_view / partition_tensor_view, got {v.type}")


def _staging(op: IRDLOperation, tiles: tuple[SSAValue, ...], elem: str, role: str) -> None:
    for i, v in enumerate(tiles):
        t = v.type
        if not isinstance(t, TileBufType) or t.space != "vec":
            _fail(op, "staging", f"{role} tiles must be loc=vec tile_bufs, got {t}")
        if t.elem != elem:
            _fail(op, "staging", f"{role} tile element type {t.elem} must be the transfer's {elem}")
        if i and t != tiles[0].type:
            _fail(op, "staging", f"the pong tile {t} must have the ping's type {tiles[0].type}")


class _CommOp(IRDLOperation):
    """The call-like syntax. `GROUPS` lists (operand field, keyword or "", max count or 0 for any)."""

    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = ()
    ATTRS: ClassVar[dict[str, type]] = {}
    RESULT: ClassVar[bool] = False
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        parser.parse_punctuation("(")
        groups: list[list] = []
        for i, (_field, kw, _most) in enumerate(cls.GROUPS):
            if i:
                parser.parse_punctuation(",")
            if kw:
                parser.parse_keyword(kw)
                groups.append(parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand))
            else:
                groups.append([parser.parse_unresolved_operand()])
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
        n = sum(len(g) for g in groups)
        if len(types) != n:
            parser.raise_error(f"{cls.name}: {n} operands but {len(types)} types", start)
        for (field, kw, most), g in zip(cls.GROUPS, groups):
            if most and len(g) > most:
                parser.raise_error(f"{cls.name}: {kw}(...) takes at most {most} operands, got {len(g)}", start)
        it = iter(types)
        operands = [[parser.resolve_operand(v, next(it)) for v in g] for g in groups]
        attrs = dict(parser.parse_optional_attr_dict())
        props: dict[str, Attribute] = {}
        for key, kind in cls.ATTRS.items():
            value = attrs.pop(key, None)
            if value is None:
                continue
            if not isinstance(value, kind):
                parser.raise_error(f"{cls.name}: {key} must be {kind.__name__}, got {value}", start)
            props[key] = value
        result_types = []
        if cls.RESULT:
            parser.parse_punctuation("->")
            result_types = [parser.parse_type()]
        # The rest are discardable attributes: ptoas's attr-dict keeps them and its lowering ignores them.
        return cls.build(operands=operands, properties=props, result_types=result_types, attributes=attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        values: list[SSAValue] = []
        for i, (field, kw, _most) in enumerate(self.GROUPS):
            group = self._group(field)
            printer.print_string(", " if i else "")
            if kw:
                printer.print_string(f"{kw}(")
            printer.print_list(group, printer.print_operand)
            if kw:
                printer.print_string(")")
            values += group
        printer.print_string(" : ")
        printer.print_list([v.type for v in values], printer.print_attribute)
        printer.print_string(")")
        parts = []
        for key in self.ATTRS:
            value = self.properties.get(key)
            if value is not None:
                parts.append(f"{key} = {value.text if hasattr(value, 'text') else _int_text(value)}")

        def own(p: Printer) -> None:
            if parts:
                p.print_string(" {" + ", ".join(parts) + "}")

        print_merged_attrs(printer, self, own)
        if self.RESULT:
            printer.print_string(" -> ")
            printer.print_attribute(self.results[0].type)

    def _group(self, field: str) -> tuple[SSAValue, ...]:
        value = getattr(self, field)
        if value is None:
            return ()
        return (value,) if isinstance(value, SSAValue) else tuple(value)

    def attr_int(self, key: str) -> int | None:
        value = self.properties.get(key)
        return value.value.data if isinstance(value, IntegerAttr) else None


def _int_text(value: IntegerAttr) -> str:
    return f"{value.value.data} : {value.type}"


class _TransferOp(_CommOp):
    """tput / tget: `(%dst, %src, buf(%ping[, %pong]) : D, S, T[, T]) {atomicType = ...}`."""

    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = (("dst", "", 1), ("src", "", 1), ("buf", "buf", 2))
    dst = var_operand_def()
    src = var_operand_def()
    buf = var_operand_def()

    def verify_(self) -> None:
        (d,), (s,) = self.dst, self.src
        _gm(self, d, "dst")
        _gm(self, s, "src")
        if d.type.elem != s.type.elem or d.type.dims != s.type.dims:
            _fail(self, "operand type", f"dst {d.type} and src {s.type} need one element type and shape signature")
        if not self.buf:
            _fail(self, "staging", "buf(...) needs a ping tile")
        _staging(self, tuple(self.buf), elem_name(s.type.elem), "buf")


@irdl_op_definition
class CommTPutOp(_TransferOp):
    """Local GM src -> remote GM dst through the staging tiles (atomic_add combines)."""

    name = "pto.comm.tput"
    ATTRS: ClassVar[dict[str, type]] = {"atomicType": AtomicTypeAttr}
    atomicType = opt_prop_def(AtomicTypeAttr)  # noqa: N815


@irdl_op_definition
class CommTGetOp(_TransferOp):
    """Remote GM src -> local GM dst through the staging tiles."""

    name = "pto.comm.tget"


class _SignalOp(_CommOp):
    """`(%signal, %value : PV, i32)`: an i32 GM signal and an integer scalar."""

    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = (("signal", "", 1), ("value", "", 1))
    signal = var_operand_def()
    value = var_operand_def()

    def verify_(self) -> None:
        (sig,), (val,) = self.signal, self.value
        _gm(self, sig, "signal")
        if elem_name(sig.type.elem) != "i32":
            _fail(self, "operand type", f"the signal must hold i32, got {elem_name(sig.type.elem)}")
        if not isinstance(val.type, IntegerType):
            _fail(self, "operand type", f"the value must be an integer scalar, got {val.type}")


@irdl_op_definition
class CommTNotifyOp(_SignalOp):
    """Write (set) or atomically add the value into the remote signal."""

    name = "pto.comm.tnotify"
    ATTRS: ClassVar[dict[str, type]] = {"notifyOp": NotifyOpAttr}
    notifyOp = opt_prop_def(NotifyOpAttr)  # noqa: N815


@irdl_op_definition
class CommTWaitOp(_SignalOp):
    """Block until `signal cmp value` holds."""

    name = "pto.comm.twait"
    ATTRS: ClassVar[dict[str, type]] = {"cmp": WaitCmpAttr}
    cmp = prop_def(WaitCmpAttr)


@irdl_op_definition
class CommTTestOp(_SignalOp):
    """`-> i1`: whether `signal cmp value` holds now."""

    name = "pto.comm.ttest"
    ATTRS: ClassVar[dict[str, type]] = {"cmp": WaitCmpAttr}
    RESULT: ClassVar[bool] = True
    cmp = prop_def(WaitCmpAttr)
    result = opt_result_def(IntegerType)


def _verify_collective(op: _CommOp) -> None:
    """The buffer and the group share one element type, the group one type, root indexes it."""
    (x,) = op.x
    _gm(op, x, "the buffer")
    members = tuple(op.group)
    if not members:
        _fail(op, "group", "group(...) must not be empty")
    for g in members:
        _gm(op, g, "a group member")
        if g.type != members[0].type:
            _fail(op, "group", f"group members must share one type, got {members[0].type} and {g.type}")
    if x.type.elem != members[0].type.elem:
        _fail(op, "operand type", f"the buffer's element type {elem_name(x.type.elem)} must be the group's {elem_name(members[0].type.elem)}")
    root = op.attr_int("root")
    if op.root.type != i32 or not 0 <= root < len(members):
        _fail(op, "root", f"root = {root} : {op.root.type} must be an i32 in [0, {len(members)})")
    _staging(op, tuple(op.recv), elem_name(x.type.elem), "recv")


class _CollectiveOp(_CommOp):
    """`(%x, recv(%ping[, %pong]), group(%g0, ...) : X, T[, T], G...) {root = r : i32}`."""

    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = (("x", "", 1), ("recv", "recv", 2), ("group", "group", 0))
    ATTRS: ClassVar[dict[str, type]] = {"root": IntegerAttr}
    x = var_operand_def()
    recv = var_operand_def()
    group = var_operand_def()
    root = prop_def(IntegerAttr)

    def verify_(self) -> None:
        _verify_collective(self)


@irdl_op_definition
class CommTBroadcastOp(_CollectiveOp):
    name = "pto.comm.tbroadcast"


@irdl_op_definition
class CommTGatherOp(_CollectiveOp):
    name = "pto.comm.tgather"


@irdl_op_definition
class CommTScatterOp(_CollectiveOp):
    name = "pto.comm.tscatter"


@irdl_op_definition
class CommTReduceOp(_CommOp):
    """`(%dst, %acc, recv(...), group(...) : ...) {reduceOp = #pto<reduce_op sum>, root = r : i32}`."""

    name = "pto.comm.treduce"
    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = (("x", "", 1), ("acc", "", 1), ("recv", "recv", 2), ("group", "group", 0))
    ATTRS: ClassVar[dict[str, type]] = {"reduceOp": ReduceOpAttr, "root": IntegerAttr}
    x = var_operand_def()
    acc = var_operand_def()
    recv = var_operand_def()
    group = var_operand_def()
    root = prop_def(IntegerAttr)
    reduceOp = prop_def(ReduceOpAttr)  # noqa: N815

    def verify_(self) -> None:
        _verify_collective(self)
        (x,) = self.x
        _staging(self, tuple(self.acc), elem_name(x.type.elem), "acc")


@irdl_op_definition
class CommBuildAsyncSessionOp(_CommOp):
    """`(%scratch, %workspace : T, !pto.ptr<i8>) {sync_id = 0 : i32, ...} -> !pto.async_session`."""

    name = "pto.comm.build_async_session"
    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = (("scratch", "", 1), ("workspace", "", 1))
    ATTRS: ClassVar[dict[str, type]] = {key: IntegerAttr for key in ("sync_id", "block_bytes", "comm_block_offset", "queue_num", "channel_group_idx")}
    RESULT: ClassVar[bool] = True
    WIDTHS: ClassVar[dict[str, Attribute]] = {"sync_id": i32, "block_bytes": i64, "comm_block_offset": i64, "queue_num": i32, "channel_group_idx": i64}
    scratch = var_operand_def()
    workspace = var_operand_def()
    sync_id = opt_prop_def(IntegerAttr)
    block_bytes = opt_prop_def(IntegerAttr)
    comm_block_offset = opt_prop_def(IntegerAttr)
    queue_num = opt_prop_def(IntegerAttr)
    channel_group_idx = opt_prop_def(IntegerAttr)
    result = opt_result_def(AsyncSessionType)

    def verify_(self) -> None:
        (scratch,), (ws,) = self.scratch, self.workspace
        if not isinstance(scratch.type, TileBufType):
            _fail(self, "operand type", f"scratch must be a local tile_buf, got {scratch.type}")
        if not isinstance(ws.type, PtrType) or ws.type.space.data != "gm":
            _fail(self, "operand type", f"workspace must be a GM pointer, got {ws.type}")
        for key, width in self.WIDTHS.items():
            value = self.properties.get(key)
            if value is not None and value.type != width:
                _fail(self, "attribute type", f"'{key}' must be {width}, got {value.type}")


class _AsyncTransferOp(_CommOp):
    """`(%dst, %src, %session : D, S, !pto.async_session) -> !pto.async_event`."""

    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = (("dst", "", 1), ("src", "", 1), ("session", "", 1))
    RESULT: ClassVar[bool] = True
    dst = var_operand_def()
    src = var_operand_def()
    session = var_operand_def()
    result = opt_result_def(AsyncEventType)

    def verify_(self) -> None:
        (d,), (s,), (ses,) = self.dst, self.src, self.session
        _gm(self, d, "dst")
        _gm(self, s, "src")
        if d.type.elem != s.type.elem or d.type.dims != s.type.dims or None in (d.type.nbytes, s.type.nbytes):
            _fail(self, "operand type", f"dst {d.type} and src {s.type} need one element type and one static shape")
        if not isinstance(ses.type, AsyncSessionType):
            _fail(self, "operand type", f"session must be !pto.async_session, got {ses.type}")


@irdl_op_definition
class CommTPutAsyncOp(_AsyncTransferOp):
    name = "pto.comm.tput_async"


@irdl_op_definition
class CommTGetAsyncOp(_AsyncTransferOp):
    name = "pto.comm.tget_async"


class _AsyncEventOp(_CommOp):
    """`(%event, %session : !pto.async_event, !pto.async_session) -> i1`."""

    GROUPS: ClassVar[tuple[tuple[str, str, int], ...]] = (("event", "", 1), ("session", "", 1))
    RESULT: ClassVar[bool] = True
    event = var_operand_def()
    session = var_operand_def()
    result = opt_result_def(IntegerType)

    def verify_(self) -> None:
        (ev,), (ses,) = self.event, self.session
        if not isinstance(ev.type, AsyncEventType) or not isinstance(ses.type, AsyncSessionType):
            _fail(self, "operand type", f"takes (!pto.async_event, !pto.async_session), got ({ev.type}, {ses.type})")
        if self.result is None or self.result.type != i1:
            _fail(self, "operand type", "the result is an i1")


@irdl_op_definition
class CommWaitAsyncEventOp(_AsyncEventOp):
    name = "pto.comm.wait_async_event"


@irdl_op_definition
class CommTestAsyncEventOp(_AsyncEventOp):
    name = "pto.comm.test_async_event"


@irdl_op_definition
class CmoCacheInvalidOp(IRDLOperation):
    """`pto.cmo.cacheinvalid %addr single_cache_line : T` or `pto.cmo.cacheinvalid all #pto.address_space<gm>`:
    drop the data cache line of a GM address (or the whole data cache)."""

    name = "pto.cmo.cacheinvalid"
    addr = opt_operand_def()
    space = prop_def(AddressSpaceAttr)

    @classmethod
    def parse(cls, parser: Parser) -> CmoCacheInvalidOp:
        if parser.parse_optional_keyword("all") is not None:
            space = parser.parse_attribute()
            if not isinstance(space, AddressSpaceAttr):
                parser.raise_error(f"cmo.cacheinvalid all takes a #pto.address_space<...>, got {space}")
            return cls.build(operands=[[]], properties={"space": space})
        v = parser.parse_unresolved_operand()
        parser.parse_keyword("single_cache_line")
        parser.parse_punctuation(":")
        return cls.build(operands=[[parser.resolve_operand(v, parser.parse_type())]], properties={"space": AddressSpaceAttr("gm")})

    def print(self, printer: Printer) -> None:
        if self.addr is None:
            printer.print_string(" all ")
            printer.print_attribute(self.space)
            return
        printer.print_string(" ")
        printer.print_operand(self.addr)
        printer.print_string(" single_cache_line : ")
        printer.print_attribute(self.addr.type)

    def verify_(self) -> None:
        if self.space.value.data != "gm":
            _fail(self, "memory space", f"only GM cache maintenance is supported, got {self.space.value.data}")
        t = self.addr.type if self.addr is not None else None
        if t is not None and not (isinstance(t, _GM_TYPES) or (isinstance(t, PtrType) and t.space.data == "gm")):
            _fail(self, "operand type", f"the single_cache_line address must be a GM pointer or GM tensor view, got {t}")


@irdl_op_definition
class FenceBarrierAllOp(IRDLOperation):
    """`pto.fence.barrier_all #pto.fence_scope<gm>`: make earlier writes visible in the scope."""

    name = "pto.fence.barrier_all"
    scope = prop_def(FenceScopeAttr)

    @classmethod
    def parse(cls, parser: Parser) -> FenceBarrierAllOp:
        scope = parser.parse_attribute()
        if not isinstance(scope, FenceScopeAttr):
            parser.raise_error(f"fence.barrier_all takes a #pto.fence_scope<...>, got {scope}")
        return cls.build(properties={"scope": scope})

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.scope)


COMM_OPS = (
    CommTPutOp, CommTGetOp, CommTNotifyOp, CommTWaitOp, CommTTestOp, CommTBroadcastOp, CommTGatherOp, CommTScatterOp,
    CommTReduceOp, CommBuildAsyncSessionOp, CommTPutAsyncOp, CommTGetAsyncOp, CommWaitAsyncEventOp, CommTestAsyncEventOp,
)
OPS = (*COMM_OPS, CmoCacheInvalidOp, FenceBarrierAllOp)
ATTRS = (AsyncSessionType, AsyncEventType, NotifyOpAttr, WaitCmpAttr, ReduceOpAttr, FenceScopeAttr)
