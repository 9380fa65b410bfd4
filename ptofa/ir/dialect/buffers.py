"""Core sections, reserved local buffers, pointer casts and pipe barriers:

* `pto.section.cube { ... }` / `pto.section.vector { ... }`: code that only one core type
  runs (ptoas wraps it in `#if defined(__DAV_CUBE__)` / `__DAV_VEC__`), the in-function
  alternative to a `pto.kernel_kind` function;
* `pto.reserve_buffer {name, size, location, auto[, base]} -> i32` and
  `pto.import_reserved_buffer {name, peer_func} -> i32`: a named local buffer (the consumer
  side of a local pipe) and its address seen from the peer kernel;
* `pto.castptr %addr : i64 -> !pto.ptr<T, space>`: an integer address as a pointer;
* `pto.barrier <PIPE_X>`: wait until the named hardware pipe has drained.

Rules from ptoas (PTOAS tools/ptoas/ptoas.cpp `validateReserveBufferBase` and its level
rules, lib/PTO/IR/PTO.cpp): a reserved buffer lives in vec or mat, its explicit base is
256-byte aligned and the range fits the space (A2/A3: vec 192 KiB, mat 512 KiB).
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, IntegerType, StringAttr, SymbolRefAttr, i32
from xdsl.ir import Attribute, Block, Region
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, opt_prop_def, prop_def, region_def, result_def, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import NoTerminator

from ptofa.ir.dialect.base import _fail
from ptofa.ir.dialect.types import AddressSpaceAttr, PtrType

# A2/A3 capacity of the spaces a reserved buffer may live in (bytes), and its alignment.
RESERVE_CAPACITY = {"vec": 196608, "mat": 524288}
RESERVE_ALIGN = 256


class _SectionOp(IRDLOperation):
    """`pto.section.<kind> { ... }`: one block, no terminator."""

    body = region_def("single_block")
    traits = traits_def(NoTerminator())
    KIND: ClassVar[str] = ""

    def __init__(self, body: Region):
        super().__init__(regions=[body])

    @classmethod
    def parse(cls, parser: Parser):
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        attrs = parser.parse_optional_attr_dict()
        op = cls(region)
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)
        if self.attributes:
            printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        parent = self.parent_op()
        while parent is not None:
            if isinstance(parent, _SectionOp):
                _fail(self, "placement", f"sections do not nest (inside {parent.name})")
            parent = parent.parent_op()


@irdl_op_definition
class SectionCubeOp(_SectionOp):
    """Code only the cube core runs."""

    name = "pto.section.cube"
    KIND: ClassVar[str] = "cube"


@irdl_op_definition
class SectionVectorOp(_SectionOp):
    """Code only the vector cores run."""

    name = "pto.section.vector"
    KIND: ClassVar[str] = "vector"


def _brace_dict(parser: Parser, allowed: tuple[str, ...], start: int) -> dict[str, Attribute]:
    attrs = dict(parser.parse_optional_attr_dict())
    unknown = sorted(set(attrs) - set(allowed))
    if unknown:
        parser.raise_error(f"unexpected attributes {unknown}, expected {', '.join(allowed)}", start)
    return attrs


def _reserve_dict(parser: Parser, start: int) -> dict[str, Attribute]:
    """reserve_buffer's `{...}`, where ptoas also takes the elided `location = <vec>`."""
    allowed = ("name", "size", "location", "auto", "base")
    attrs: dict[str, Attribute] = {}
    parser.parse_punctuation("{")
    while parser.parse_optional_punctuation("}") is None:
        if attrs:
            parser.parse_punctuation(",")
        key = parser.parse_identifier()
        if key not in allowed:
            parser.raise_error(f"unexpected attributes ['{key}'], expected {', '.join(allowed)}", start)
        parser.parse_punctuation("=")
        if key == "location" and parser.parse_optional_punctuation("<") is not None:
            space = parser.parse_identifier()
            parser.parse_punctuation(">")
            if space not in AddressSpaceAttr.VALUES:
                parser.raise_error(f"location: '{space}' is not one of {', '.join(AddressSpaceAttr.VALUES)}", start)
            attrs[key] = AddressSpaceAttr(space)
        else:
            attrs[key] = parser.parse_attribute()
    return attrs


def _int(attr: Attribute | None) -> int | None:
    return attr.value.data if isinstance(attr, IntegerAttr) else None


@irdl_op_definition
class ReserveBufferOp(IRDLOperation):
    """`%a = pto.reserve_buffer {name = "fifo", size = 4096, location = #pto.address_space<vec>,
    auto = true[, base = 0]} -> i32`: a named local buffer; the result is its address."""

    name = "pto.reserve_buffer"
    buf_name = prop_def(StringAttr, prop_name="name")
    size = prop_def(IntegerAttr)
    space = prop_def(AddressSpaceAttr, prop_name="location")
    auto = prop_def(IntegerAttr)
    base = opt_prop_def(IntegerAttr)
    result = result_def(IntegerType)

    @classmethod
    def parse(cls, parser: Parser) -> "ReserveBufferOp":
        start = parser.pos
        attrs = _reserve_dict(parser, start)
        for key in ("name", "size", "location"):
            if key not in attrs:
                parser.raise_error(f"pto.reserve_buffer needs '{key}'", start)
        parser.parse_punctuation("->")
        t = parser.parse_type()
        auto = attrs.get("auto", IntegerAttr(0, IntegerType(1)))
        props = {"name": attrs["name"], "size": attrs["size"], "location": attrs["location"],
                 "auto": IntegerAttr(int(bool(_int(auto))), IntegerType(1))}
        if "base" in attrs:
            props["base"] = attrs["base"]
        bad = [k for k in ("name", "size", "location", "base") if k in props and not isinstance(props[k], {"name": StringAttr, "location": AddressSpaceAttr}.get(k, IntegerAttr))]
        if bad:
            parser.raise_error(f"pto.reserve_buffer: bad value for {bad}", start)
        return cls.build(properties=props, result_types=[t])

    def print(self, printer: Printer) -> None:
        parts = [f'name = "{self.buf_name.data}"', f"size = {self.size.value.data}",
                 f"location = #pto.address_space<{self.space.value.data}>",
                 f"auto = {'true' if self.auto.value.data else 'false'}"]
        if self.base is not None:
            parts.append(f"base = {self.base.value.data}")
        printer.print_string(" {" + ", ".join(parts) + "} -> ")
        printer.print_attribute(self.result.type)

    @property
    def is_auto(self) -> bool:
        return bool(self.auto.value.data)

    def verify_(self) -> None:
        if self.result.type != i32:
            _fail(self, "result type", f"the address is i32, got {self.result.type}")
        size = self.size.value.data
        space = self.space.value.data
        if size <= 0:
            _fail(self, "size", f"size must be positive, got {size}")
        if space not in RESERVE_CAPACITY:
            _fail(self, "location", f"a reserved buffer lives in vec or mat, got {space}")
        if self.base is not None:
            base, cap = self.base.value.data, RESERVE_CAPACITY[space]
            if self.is_auto:
                _fail(self, "base", "unexpected 'base' on auto reserve_buffer: ptoas assigns it (give auto = false)")
            if base < 0 or base % RESERVE_ALIGN:
                _fail(self, "base", f"base {base} must be non-negative and aligned to {RESERVE_ALIGN} bytes for {space}")
            if base + size > cap:
                _fail(self, "base", f"reserved range exceeds {space} capacity: base {base} + size {size} > {cap} bytes")
        elif not self.is_auto:
            _fail(self, "base", "auto = false needs an explicit 'base'")


@irdl_op_definition
class ImportReservedBufferOp(IRDLOperation):
    """`%a = pto.import_reserved_buffer {name = "fifo", peer_func = @vector_kernel} -> i32`:
    the address of a buffer that `peer_func` reserves (checked in `ptofa.ir.textio`)."""

    name = "pto.import_reserved_buffer"
    buf_name = prop_def(StringAttr, prop_name="name")
    peer_func = prop_def(SymbolRefAttr)
    result = result_def(IntegerType)

    @classmethod
    def parse(cls, parser: Parser) -> "ImportReservedBufferOp":
        start = parser.pos
        attrs = _brace_dict(parser, ("name", "peer_func"), start)
        if not isinstance(attrs.get("name"), StringAttr) or not isinstance(attrs.get("peer_func"), SymbolRefAttr):
            parser.raise_error('pto.import_reserved_buffer needs {name = "...", peer_func = @f}', start)
        parser.parse_punctuation("->")
        return cls.build(properties={"name": attrs["name"], "peer_func": attrs["peer_func"]}, result_types=[parser.parse_type()])

    def print(self, printer: Printer) -> None:
        printer.print_string(f' {{name = "{self.buf_name.data}", peer_func = @{self.peer_func.root_reference.data}}} -> ')
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        if self.result.type != i32:
            _fail(self, "result type", f"the address is i32, got {self.result.type}")


@irdl_op_definition
class CastPtrOp(IRDLOperation):
    """`%p = pto.castptr %addr : i64 -> !pto.ptr<f32, ub>`: an integer address as a typed pointer."""

    name = "pto.castptr"
    addr = operand_def(IntegerType)
    result = result_def(PtrType)

    @classmethod
    def parse(cls, parser: Parser) -> "CastPtrOp":
        v = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation("->")
        r = parser.parse_type()
        return cls.build(operands=[parser.resolve_operand(v, t)], result_types=[r])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.addr)
        printer.print_string(" : ")
        printer.print_attribute(self.addr.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self) -> None:
        t = self.addr.type
        if not isinstance(t, IntegerType) or t.width.data not in (32, 64):
            _fail(self, "operand type", f"the address must be i32 or i64, got {t}")


PIPES = ("PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_FIX", "PIPE_ALL")


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """`pto.barrier <PIPE_ALL>`: wait until the pipe has finished all issued work."""

    name = "pto.barrier"
    pipe = prop_def(StringAttr)

    @classmethod
    def parse(cls, parser: Parser) -> "BarrierOp":
        start = parser.pos
        parser.parse_punctuation("<")
        pipe = parser.parse_identifier()
        parser.parse_punctuation(">")
        if pipe not in PIPES:
            parser.raise_error(f"pto.barrier: unknown pipe '{pipe}', expected one of {', '.join(PIPES)}", start)
        return cls.build(properties={"pipe": StringAttr(pipe)})

    def print(self, printer: Printer) -> None:
        printer.print_string(f" <{self.pipe.data}>")


OPS = (SectionCubeOp, SectionVectorOp, ReserveBufferOp, ImportReservedBufferOp, CastPtrOp, BarrierOp)
SECTION_OPS = (SectionCubeOp, SectionVectorOp)
