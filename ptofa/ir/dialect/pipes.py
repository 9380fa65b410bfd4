"""Cube-vector pipes (docs/sources.md §3.5): the initialize_pipe ops and talloc / tpush / tpop /
tfree, on global (GM tensor_view) entries, and in ptoas's local form (reserved consumer
buffers, tile entries) which ptofa checks but does not simulate."""

from __future__ import annotations

from typing import ClassVar

from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType, i8, i32, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_operand_def, opt_prop_def, prop_def, result_def, var_operand_def
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail, _parse_brace_ints, _PipeEntryOp, _PipeInitOp
from ptofa.ir.dialect.types import DYN, AccPushEpilogueAttr, PtrType, TensorViewType, TileBufType


_PIPE_INIT_KEYS: dict[str, Attribute] = {
    "id": i32,
    "dir_mask": i8,
    "slot_size": i32,
    "slot_num": i32,
    "local_slot_num": i32,
    "nosplit": IntegerType(1),
}
_PIPE_INIT_ORDER = ("id", "dir_mask", "slot_size", "slot_num", "local_slot_num", "nosplit")


def _check_prop_types(op: Operation, widths: dict[str, Attribute]) -> None:
    """The generic form must spell each pipe attribute with its storage type (docs/sources.md §2.1)."""
    for key, want in widths.items():
        attr = op.properties.get(key)
        if isinstance(attr, IntegerAttr) and attr.type != want:
            _fail(op, "attribute type", f"'{key}' must be {want}, got {attr.type} (e.g. `{key} = {attr.value.data} : {want}`)")


_INIT_OPERANDS = ("gm_slot_tensor", "gm_slot_buffer", "c2v_consumer_buf", "v2c_consumer_buf")


class _InitPipeOp(_PipeInitOp):
    """`pto.aic_initialize_pipe {id = 0, dir_mask = 1, slot_size = N} (gm_slot_tensor = %tv : TV)`: a
    global-entry pipe; or the local (reserved-buffer) form, `(gm_slot_buffer = %p : !pto.ptr<T>,
    c2v_consumer_buf = %b : i32, v2c_consumer_buf = %b2 : i32)`, whose entries are tiles.

    Operand rules of the local form follow ptoas's verifyFrontendInitCommon (PTOAS
    lib/PTO/IR/PTO.cpp): no gm_slot_tensor with gm_slot_buffer, the consumer buffers
    dir_mask needs (c2v for 1, v2c for 2, both for 3), local_slot_num in 1..slot_num.
    """

    gm_slot_tensor = opt_operand_def(TensorViewType)
    gm_slot_buffer = opt_operand_def(PtrType)
    c2v_consumer_buf = opt_operand_def(IntegerType)
    v2c_consumer_buf = opt_operand_def(IntegerType)
    pipe_id = prop_def(IntegerAttr, prop_name="id")
    dir_mask = prop_def(IntegerAttr)
    slot_size = prop_def(IntegerAttr)
    slot_num = opt_prop_def(IntegerAttr)
    local_slot_num = opt_prop_def(IntegerAttr)
    nosplit = opt_prop_def(IntegerAttr)
    acc_push_epilogue = opt_prop_def(AccPushEpilogueAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    CORE: ClassVar[str] = ""

    @classmethod
    def build(cls, *, operands: Sequence = (), **kwargs):
        """`operands=[tensor_view]` builds the global-entry form; otherwise one group per operand key."""
        if len(operands) == 1:
            operands = [operands[0], [], [], []]
        return super().build(operands=operands, **kwargs)

    @classmethod
    def parse(cls, parser: Parser):
        start = parser.pos
        props = _parse_brace_ints(parser, _PIPE_INIT_KEYS, {"acc_push_epilogue": AccPushEpilogueAttr})
        for required in ("dir_mask", "slot_size"):
            if required not in props:
                parser.raise_error(f"{cls.name} needs '{required}'")
        props.setdefault("id", IntegerAttr(0, i32))
        parser.parse_punctuation("(")
        operands: dict[str, SSAValue] = {}
        while True:
            key = parser.parse_identifier()
            if key not in _INIT_OPERANDS:
                parser.raise_error(f"unknown pipe init operand '{key}', expected one of {', '.join(_INIT_OPERANDS)}")
            if key in operands:
                parser.raise_error(f"duplicate '{key}' operand", start)
            parser.parse_punctuation("=")
            value = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            operands[key] = parser.resolve_operand(value, parser.parse_type())
            if parser.parse_optional_punctuation(",") is None:
                break
        parser.parse_punctuation(")")
        return cls.build(operands=[[operands[k]] if k in operands else [] for k in _INIT_OPERANDS], properties=props)

    def print(self, printer: Printer) -> None:
        parts = []
        for key in _PIPE_INIT_ORDER:
            attr = self.properties.get(key)
            if attr is None:
                continue
            assert isinstance(attr, IntegerAttr)
            value = attr.value.data
            parts.append(f"{key} = {('true' if value else 'false') if key == 'nosplit' else value}")
        if self.acc_push_epilogue is not None:
            e = self.acc_push_epilogue
            parts.append(f"acc_push_epilogue = #pto.acc_push_epilogue<layout = {e.layout.data}, quant = {e.quant.data}, relu = {e.relu.data}>")
        printer.print_string(" {" + ", ".join(parts) + "} (")
        present = [(k, v) for k, v in zip(_INIT_OPERANDS, self.init_operands) if v is not None]
        for i, (key, value) in enumerate(present):
            printer.print_string(f"{', ' if i else ''}{key} = ")
            printer.print_operand(value)
            printer.print_string(" : ")
            printer.print_attribute(value.type)
        printer.print_string(")")

    @property
    def init_operands(self) -> tuple[SSAValue | None, ...]:
        return (self.gm_slot_tensor, self.gm_slot_buffer, self.c2v_consumer_buf, self.v2c_consumer_buf)

    @property
    def is_local(self) -> bool:
        """Tile entries through reserved consumer buffers (the simulator runs only global entries)."""
        return self.c2v_consumer_buf is not None or self.v2c_consumer_buf is not None or self.gm_slot_tensor is None

    @property
    def id_value(self) -> int:
        return self.pipe_id.value.data

    @property
    def dir_value(self) -> int:
        return self.dir_mask.value.data

    @property
    def slot_num_value(self) -> int:
        if self.slot_num is not None:
            return self.slot_num.value.data
        return 4 if self.dir_value == 3 else 8

    def verify_(self) -> None:
        _check_prop_types(self, _PIPE_INIT_KEYS)
        if self.dir_value not in (1, 2, 3):
            _fail(self, "dir_mask", f"dir_mask={self.dir_value} must be 1 (C2V), 2 (V2C) or 3")
        if self.slot_size.value.data <= 0:
            _fail(self, "slot_size", f"slot_size={self.slot_size.value.data} must be greater than 0")
        if not 1 <= self.slot_num_value <= 64:
            _fail(self, "slot_num", f"slot_num={self.slot_num_value} must be in 1..64")
        if self.acc_push_epilogue is not None and self.CORE == "vector" and self.c2v_consumer_buf is None:
            _fail(self, "operands", "a fixpipe consumer pipe (acc_push_epilogue) needs 'c2v_consumer_buf'")
        if self.is_local:
            self._verify_local()
        else:
            self._verify_global()

    def _verify_local(self) -> None:
        has_c2v, has_v2c = self.c2v_consumer_buf is not None, self.v2c_consumer_buf is not None
        for key, value in zip(_INIT_OPERANDS[2:], (self.c2v_consumer_buf, self.v2c_consumer_buf)):
            if value is not None and value.type != i32:
                _fail(self, "operands", f"'{key}' must be an i32 buffer address, got {value.type}")
        if self.gm_slot_tensor is not None:
            if self.gm_slot_buffer is not None:
                _fail(self, "operands", "'gm_slot_tensor' cannot be combined with 'gm_slot_buffer'")
            if self.dir_value != 1 or not has_c2v or has_v2c:
                _fail(self, "operands", "a GM-backed tile pipe (gm_slot_tensor with a consumer buffer) supports only dir_mask = 1 "
                      "with 'gm_slot_tensor' and 'c2v_consumer_buf'")
        if not has_c2v and not has_v2c:
            _fail(self, "operands", "a local pipe init needs at least one consumer buffer operand; use 'gm_slot_tensor' for global entries")
        need = {1: (True, False), 2: (False, True), 3: (True, True)}[self.dir_value]
        for key, wanted, got in (("c2v_consumer_buf", need[0], has_c2v), ("v2c_consumer_buf", need[1], has_v2c)):
            if wanted and not got:
                _fail(self, "operands", f"dir_mask={self.dir_value} needs '{key}'")
        if self.local_slot_num is not None and not 1 <= self.local_slot_num.value.data <= self.slot_num_value:
            _fail(self, "local_slot_num", f"local_slot_num={self.local_slot_num.value.data} must be in 1..slot_num ({self.slot_num_value})")

    def _verify_global(self) -> None:
        t = self.gm_slot_tensor.type
        assert isinstance(t, TensorViewType)
        if self.gm_slot_buffer is not None:
            _fail(self, "operands", "'gm_slot_tensor' cannot be combined with 'gm_slot_buffer'")
        if self.dir_value == 3:
            _fail(self, "dir_mask", "dir_mask=3: global entries on a bidirectional pipe would share slots in both directions; use two one-way pipes")
        if self.local_slot_num is not None:
            _fail(self, "local_slot_num", f"globaltensor pipe init does not use 'local_slot_num' (got local_slot_num={self.local_slot_num.value.data} with gm_slot_tensor)")
        nbytes = t.nbytes
        size = self.slot_size.value.data
        if nbytes is None:
            _fail(self, "slot descriptor", f"gm_slot_tensor {t} must have a static shape")
        if size not in (nbytes, 2 * nbytes):
            _fail(self, "slot_size", f"slot_size={size} must equal the descriptor's {nbytes} bytes or twice them ({2 * nbytes})")
        slots = self.slot_num_value
        period = slots if slots <= 2 else slots // 2
        if slots % period != 0:
            _fail(self, "slot ring reuse", f"slot_num={slots} is not a multiple of its sync period {period}: "
                  f"TALLOC waits for a free credit only when t % {period} == 0, so the talloc at t={slots} "
                  f"re-binds slot 0 before its entry is freed (use slot_num <= 2 or even)")


@irdl_op_definition
class AicInitializePipeOp(_InitPipeOp):
    """Cube-side pipe endpoint (in a cube kernel function)."""

    name = "pto.aic_initialize_pipe"
    CORE: ClassVar[str] = "cube"


@irdl_op_definition
class AivInitializePipeOp(_InitPipeOp):
    """Vector-side pipe endpoint (in a vector kernel function)."""

    name = "pto.aiv_initialize_pipe"
    CORE: ClassVar[str] = "vector"


def _parse_id_split(parser: Parser) -> dict[str, Attribute]:
    """`{id = N, split = S}` (fixed order; `id =` may be omitted when 0)."""
    parser.parse_punctuation("{")
    props: dict[str, Attribute] = {"id": IntegerAttr(0, i32)}
    key = parser.parse_identifier()
    if key == "id":
        parser.parse_punctuation("=")
        props["id"] = IntegerAttr(parser.parse_integer(allow_boolean=False), i32)
        parser.parse_punctuation(",")
        key = parser.parse_identifier()
    if key != "split":
        parser.raise_error(f"expected 'split' (attribute order is fixed: {{id = N, split = S}}), got '{key}'")
    parser.parse_punctuation("=")
    props["split"] = IntegerAttr(parser.parse_integer(allow_boolean=False), i8)
    if parser.parse_optional_punctuation("}") is None:
        parser.raise_error("expected '}' (attribute order is fixed: {id = N, split = S}; ptoas rejects 'id' after 'split')")
    return props


class _PipeDataOp(IRDLOperation):
    """Shared accessors and checks of talloc / tpush / tpop / tfree."""

    pipe_id = prop_def(IntegerAttr, prop_name="id")
    split = prop_def(IntegerAttr)
    CORE: ClassVar[str] = ""  # "cube" or "vector"
    DIRECTION: ClassVar[int] = 0  # dir_mask of the pipe this op may use
    ROLE: ClassVar[str] = ""  # talloc / tpush / tpop / tfree

    @property
    def id_value(self) -> int:
        return self.pipe_id.value.data

    @property
    def split_value(self) -> int:
        return self.split.value.data

    def _print_id_split(self, printer: Printer) -> None:
        printer.print_string(f" {{id = {self.id_value}, split = {self.split_value}}}")

    def verify_(self) -> None:
        _check_prop_types(self, {"id": i32, "split": i8})
        if self.split_value not in (0, 1, 2):
            _fail(self, "split", f"split={self.split_value} must be 0 (no split), 1 (up/down) or 2 (left/right) for global entries")

    @property
    def entry_type(self) -> TensorViewType | TileBufType | None:
        raise NotImplementedError


class _ProducesEntry(_PipeDataOp, _PipeEntryOp):
    """`%e = pto.<op> [(%valid_row, %valid_col)] {id = N, split = S} [aiv_subblockid(%b)] -> TV` (talloc,
    tpop); a local pipe's entry is a tile, whose dynamic valid shape a tpop may set."""

    extra = var_operand_def()  # [valid_row, valid_col (index)] [aiv_subblockid (i64)]
    entry = result_def(TensorViewType | TileBufType)

    @classmethod
    def build(cls, *, operands: Sequence = (), **kwargs):
        """No operands (the global-entry form the builder emits) or the list of extra operands."""
        return super().build(operands=operands or [[]], **kwargs)

    @property
    def valid_row(self) -> SSAValue | None:
        return self.extra[0] if len(self.extra) >= 2 and isinstance(self.extra[0].type, IndexType) else None

    @property
    def valid_col(self) -> SSAValue | None:
        return self.extra[1] if self.valid_row is not None else None

    @property
    def aiv_subblockid(self) -> SSAValue | None:
        return self.extra[-1] if self.extra and isinstance(self.extra[-1].type, IntegerType) else None

    @classmethod
    def parse(cls, parser: Parser):
        valid: list = []
        if parser.parse_optional_punctuation("(") is not None:
            valid = [parser.parse_unresolved_operand()]
            parser.parse_punctuation(",")
            valid.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        props = _parse_id_split(parser)
        sub: list = []
        if parser.parse_optional_keyword("aiv_subblockid") is not None:
            parser.parse_punctuation("(")
            sub = [parser.resolve_operand(parser.parse_unresolved_operand(), i64)]
            parser.parse_punctuation(")")
        parser.parse_punctuation("->")
        t = parser.parse_type()
        extra = [parser.resolve_operand(v, IndexType()) for v in valid] + sub
        return cls.build(operands=[extra], result_types=[t], properties=props)

    def print(self, printer: Printer) -> None:
        if self.valid_row is not None and self.valid_col is not None:
            printer.print_string(" (")
            printer.print_operand(self.valid_row)
            printer.print_string(", ")
            printer.print_operand(self.valid_col)
            printer.print_string(")")
        self._print_id_split(printer)
        if self.aiv_subblockid is not None:
            printer.print_string(" aiv_subblockid(")
            printer.print_operand(self.aiv_subblockid)
            printer.print_string(")")
        printer.print_string(" -> ")
        printer.print_attribute(self.entry.type)

    def verify_(self) -> None:
        super().verify_()
        kinds = [type(v.type) for v in self.extra]
        if kinds not in ([], [IndexType, IndexType], [IndexType, IndexType, IntegerType], [IntegerType]):
            _fail(self, "operands", f"takes (valid_row, valid_col : index) and / or aiv_subblockid (i64), got {[str(v.type) for v in self.extra]}")
        t = self.entry.type
        if self.valid_row is not None:
            if self.ROLE != "tpop" or not isinstance(t, TileBufType) or DYN not in t.valid:
                _fail(self, "valid shape", f"(valid_row, valid_col) operands need a tpop of a tile entry with a dynamic valid shape, got {t}")
        if self.aiv_subblockid is not None and not (self.ROLE == "tpop" and self.CORE == "vector"):
            _fail(self, "aiv_subblockid", "only tpop_from_aic takes aiv_subblockid")

    @property
    def entry_type(self) -> TensorViewType | TileBufType:
        return self.entry.type  # type: ignore[return-value]


class _TakesEntry(_PipeDataOp):
    """`pto.<op>(%e : TV) {id = N, split = S}` (tpush, tfree); a local pipe pushes a tile and its
    tfree names no entry (`pto.tfree_from_aic {id = N, split = S}`)."""

    args = var_operand_def()  # [entry] [aiv_subblockid (i64)]

    @classmethod
    def build(cls, *, operands: Sequence = (), **kwargs):
        """`operands=[entry]` (the form the builder emits) or the list of operands."""
        if operands and isinstance(operands[0], SSAValue):
            operands = [list(operands)]
        return super().build(operands=operands or [[]], **kwargs)

    @property
    def entry_value(self) -> SSAValue | None:
        return self.args[0] if self.args and isinstance(self.args[0].type, (TensorViewType, TileBufType)) else None

    @property
    def aiv_subblockid(self) -> SSAValue | None:
        return self.args[-1] if self.args and isinstance(self.args[-1].type, IntegerType) else None

    @classmethod
    def parse(cls, parser: Parser):
        operands: list = []
        if parser.parse_optional_punctuation("(") is not None:
            value = parser.parse_unresolved_operand()
            parser.parse_punctuation(":")
            t = parser.parse_type()
            parser.parse_punctuation(")")
            operands = [parser.resolve_operand(value, t)]
        props = _parse_id_split(parser)
        sub: list = []
        if parser.parse_optional_keyword("aiv_subblockid") is not None:
            parser.parse_punctuation("(")
            sub = [parser.resolve_operand(parser.parse_unresolved_operand(), i64)]
            parser.parse_punctuation(")")
        return cls.build(operands=[operands + sub], properties=props)

    def print(self, printer: Printer) -> None:
        if self.entry_value is not None:
            printer.print_string("(")
            printer.print_operand(self.entry_value)
            printer.print_string(" : ")
            printer.print_attribute(self.entry_value.type)
            printer.print_string(")")
        self._print_id_split(printer)
        if self.aiv_subblockid is not None:
            printer.print_string(" aiv_subblockid(")
            printer.print_operand(self.aiv_subblockid)
            printer.print_string(")")

    def verify_(self) -> None:
        super().verify_()
        kinds = [type(v.type) for v in self.args]
        if len(self.args) > 2 or (self.args and self.entry_value is None and kinds != [IntegerType]):
            _fail(self, "operands", f"takes an entry and / or aiv_subblockid (i64), got {[str(v.type) for v in self.args]}")
        if self.entry_value is None and self.ROLE == "tpush":
            _fail(self, "entry", "tpush needs the entry it publishes: pto.tpush_to_aiv(%e : T) {id = N, split = S}")
        if self.aiv_subblockid is not None and not (self.ROLE == "tpush" and self.CORE == "vector"):
            _fail(self, "aiv_subblockid", "only tpush_to_aic and tpop_from_aic take aiv_subblockid")

    @property
    def entry_type(self) -> TensorViewType | TileBufType | None:
        return self.entry_value.type if self.entry_value is not None else None  # type: ignore[return-value]


@irdl_op_definition
class TallocToAivOp(_ProducesEntry):
    """Cube, C2V producer: wait for a free slot if needed, bind the entry to the next slot."""

    name = "pto.talloc_to_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "talloc"


@irdl_op_definition
class TallocToAicOp(_ProducesEntry):
    """Vector, V2C producer: wait for a free slot if needed, bind the entry (plus sub-block offset)."""

    name = "pto.talloc_to_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "talloc"


@irdl_op_definition
class TpushToAivOp(_TakesEntry):
    """Cube, C2V producer: set the ready flag after the stores on FIX."""

    name = "pto.tpush_to_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "tpush"


@irdl_op_definition
class TpushToAicOp(_TakesEntry):
    """Vector, V2C producer: set the ready flag after the stores on MTE3."""

    name = "pto.tpush_to_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "tpush"


@irdl_op_definition
class TpopFromAicOp(_ProducesEntry):
    """Vector, C2V consumer: wait for data, bind the entry to the slot half of this sub-block."""

    name = "pto.tpop_from_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "tpop"


@irdl_op_definition
class TpopFromAivOp(_ProducesEntry):
    """Cube, V2C consumer: wait for data from both vector cores, bind the entry to the slot."""

    name = "pto.tpop_from_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "tpop"


@irdl_op_definition
class TfreeFromAicOp(_TakesEntry):
    """Vector, C2V consumer: release the slot (a free credit every SyncPeriod pops)."""

    name = "pto.tfree_from_aic"
    CORE: ClassVar[str] = "vector"
    DIRECTION: ClassVar[int] = 1
    ROLE: ClassVar[str] = "tfree"


@irdl_op_definition
class TfreeFromAivOp(_TakesEntry):
    """Cube, V2C consumer: release the slot (a free credit every SyncPeriod pops)."""

    name = "pto.tfree_from_aiv"
    CORE: ClassVar[str] = "cube"
    DIRECTION: ClassVar[int] = 2
    ROLE: ClassVar[str] = "tfree"


PIPE_INIT_OPS = (AicInitializePipeOp, AivInitializePipeOp)
PIPE_DATA_OPS = (
    TallocToAivOp,
    TallocToAicOp,
    TpushToAivOp,
    TpushToAicOp,
    TpopFromAicOp,
    TpopFromAivOp,
    TfreeFromAicOp,
    TfreeFromAivOp,
)

OPS = (*PIPE_INIT_OPS, *PIPE_DATA_OPS)
