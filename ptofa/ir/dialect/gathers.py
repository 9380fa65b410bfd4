"""Indexed GM access: `pto.mgather` (gather-load a tile from a GM table through an index
tile) and `pto.mscatter` (scatter-store a tile into a GM table), with their enum attributes
`#pto<coalesce row|elem>`, `#pto<gather_oob ...>`, `#pto<scatter_atomic_op ...>`,
`#pto<scatter_oob ...>`, `#pto<scatter_conflict ...>`.

Rules follow ptoas (PTOAS lib/PTO/IR/PTO.cpp MGatherOp::verify, MScatterOp::verify and
docs/PTO_IR_manual.md): the table is an ND `partition_tensor_view` of the data's element
type, the data tile is loc=vec ND, the index tile is an i32 loc=vec none_box tile whose valid
shape is the data's (elem mode) or one index per data row (row mode: [1, R] row_major or
[R, 1] col_major); mgather names its coalesce mode; `gatherOob` needs a coalesce mode; the
atomic scatter modes take i32 / f16 / f32 (add) or i32 / f32 (max, min); scatter_conflict
is A5-only. The GM -> L1 mgather (a loc=mat dst, a GM index view, a GM scratch for elem
mode) parses and verifies; the simulator rejects it.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.ir import Attribute, Operation
from xdsl.irdl import irdl_attr_definition, irdl_op_definition, operand_def, opt_operand_def, opt_prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail, _InsOutsOp, _tile
from ptofa.ir.dialect.types import DYN, PartitionTensorViewType, TileBufType, _dims_str, _PtoEnumAttr, elem_name

_PAYLOAD = ("i8", "i16", "i32", "f16", "bf16", "f32")


@irdl_attr_definition
class CoalesceAttr(_PtoEnumAttr):
    """`#pto<coalesce row>`: one index per row (whole rows move) or per element."""

    name = "pto.coalesce"
    VALUES: ClassVar[tuple[str, ...]] = ("row", "elem")


@irdl_attr_definition
class GatherOobAttr(_PtoEnumAttr):
    """`#pto<gather_oob zero>`: what an out-of-range gather index reads."""

    name = "pto.gather_oob"
    VALUES: ClassVar[tuple[str, ...]] = ("undefined", "clamp", "wrap", "zero")


@irdl_attr_definition
class ScatterAtomicOpAttr(_PtoEnumAttr):
    """`#pto<scatter_atomic_op add>`: how a scatter combines with the table."""

    name = "pto.scatter_atomic_op"
    VALUES: ClassVar[tuple[str, ...]] = ("none", "add", "max", "min")


@irdl_attr_definition
class ScatterOobAttr(_PtoEnumAttr):
    """`#pto<scatter_oob skip>`: what an out-of-range scatter index does."""

    name = "pto.scatter_oob"
    VALUES: ClassVar[tuple[str, ...]] = ("undefined", "skip", "clamp", "wrap")


@irdl_attr_definition
class ScatterConflictAttr(_PtoEnumAttr):
    """`#pto<scatter_conflict last>` (A5 only)."""

    name = "pto.scatter_conflict"
    VALUES: ClassVar[tuple[str, ...]] = ("default", "last")


def _check_index_tile(op: Operation, idx: TileBufType, data: TileBufType, coalesce: str | None, role: str) -> None:
    if idx.space != "vec" or idx.is_boxed:
        _fail(op, "index", f"idx must be a loc=vec none_box tile, got {idx.describe()} slayout={idx.slayout.data}")
    if idx.elem != "i32":
        _fail(op, "index", f"idx element type must be i32, got {idx.elem}")
    rows = data.valid[0]
    unit = lambda n: n in (0, 1, DYN)  # noqa: E731
    fits = lambda a, b: a == DYN or b == DYN or a == b  # noqa: E731
    row_1xr = idx.is_row_major and unit(idx.valid[0]) and fits(idx.valid[1], rows)
    row_rx1 = not idx.is_row_major and fits(idx.valid[0], rows) and unit(idx.valid[1])
    base_row = idx.is_row_major and fits(idx.valid[0], rows) and unit(idx.valid[1])
    elem = fits(idx.valid[0], data.valid[0]) and fits(idx.valid[1], data.valid[1])
    ok = {"row": row_1xr or row_rx1, "elem": elem, None: base_row or elem}[coalesce]
    if not ok:
        want = {"row": f"[1, {role}.valid_row] row_major or [{role}.valid_row, 1] col_major",
                "elem": f"{role}'s valid shape", None: f"[{role}.valid_row, 0|1] or {role}'s valid shape"}[coalesce]
        _fail(op, "shape agreement", f"idx valid shape {_dims_str(idx.valid)} must be {want} ({role} valid {_dims_str(data.valid)})")


def _check_table(op: Operation, mem: PartitionTensorViewType, data: TileBufType) -> None:
    if elem_name(mem.elem) != data.elem:
        _fail(op, "dtype", f"the GM table's element type {elem_name(mem.elem)} must be the tile's {data.elem}")


def _enum(parser: Parser, attrs: dict[str, Attribute], key: str, cls: type, start: int | None) -> dict[str, Attribute]:
    value = attrs.pop(key, None)
    if value is None:
        return {}
    if not isinstance(value, cls):
        parser.raise_error(f"{key} must be a #pto<{cls.name[4:]} ...>, got {value}", start)
    return {key: value}


class _IndexedOp(_InsOutsOp):
    """Shared attribute syntax: the op's `{key = #pto<...>, ...}` after `outs(...)`."""

    KEYS: ClassVar[tuple[tuple[str, type], ...]] = ()

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        props: dict[str, Attribute] = {}
        for key, attr_cls in cls.KEYS:
            props.update(_enum(parser, attrs, key, attr_cls, start))
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        return props

    def _print_attrs(self, printer: Printer) -> None:
        parts = [f"{key} = {self.properties[key].text}" for key, _ in self.KEYS if key in self.properties]
        if parts:
            printer.print_string(" {" + ", ".join(parts) + "}")

    def mode(self, key: str, default: str | None = None) -> str | None:
        attr = self.properties.get(key)
        return attr.value.data if attr is not None else default


@irdl_op_definition
class MGatherOp(_IndexedOp):
    """`ins(%mem, %idx[, %scratch] : PV, I[, PV]) outs(%dst : T) {coalesce = ..., gatherOob = ...}`:
    row mode dst[r, j] = mem[idx[r], j], elem mode dst[i, j] = mem[idx[i, j]] (mem flattened)."""

    name = "pto.mgather"
    N_INS: ClassVar[int] = 2
    HAS_TMP: ClassVar[bool] = True
    KEYS: ClassVar[tuple[tuple[str, type], ...]] = (("coalesce", CoalesceAttr), ("gatherOob", GatherOobAttr))
    mem = operand_def(PartitionTensorViewType)
    idx = operand_def(TileBufType | PartitionTensorViewType)
    scratch = opt_operand_def(PartitionTensorViewType)
    dst_ = operand_def(TileBufType)
    coalesce = opt_prop_def(CoalesceAttr)
    gatherOob = opt_prop_def(GatherOobAttr)  # noqa: N815 (ptoas's attribute name)

    def verify_(self) -> None:
        d = _tile(self, self.dst, "dst")
        coalesce = self.mode("coalesce")
        if coalesce is None:
            _fail(self, "coalesce", "mgather needs an explicit coalesce = #pto<coalesce row|elem>")
        _check_table(self, self.mem.type, d)
        if d.space == "mat":
            self._verify_to_l1(d, coalesce)
            return
        if self.scratch is not None:
            _fail(self, "operands", "a scratch operand belongs only to the GM -> L1 (loc=mat) mgather")
        if d.space != "vec" or not d.is_row_major or d.is_boxed:
            _fail(self, "layout", f"dst must be a loc=vec ND tile (row_major, none_box), got {d.describe()}")
        if d.elem not in _PAYLOAD:
            _fail(self, "dtype", f"dst element type must be one of {_PAYLOAD}, got {d.elem}")
        if not isinstance(self.idx.type, TileBufType):
            _fail(self, "index", f"a loc=vec mgather takes a UB index tile, got {self.idx.type}")
        _check_index_tile(self, self.idx.type, d, coalesce, "dst")

    def _verify_to_l1(self, d: TileBufType, coalesce: str) -> None:
        if not isinstance(self.idx.type, PartitionTensorViewType) or elem_name(self.idx.type.elem) != "i32":
            _fail(self, "index", f"a loc=mat mgather reads its i32 indices from GM (a partition_tensor_view), got {self.idx.type}")
        if (d.blayout.data, d.slayout.data, d.fractal.data) != ("col_major", "row_major", 512):
            _fail(self, "layout", f"a loc=mat dst must be NZ (blayout=col_major, slayout=row_major, fractal=512), got {d.describe()}")
        if (coalesce == "elem") != (self.scratch is not None):
            _fail(self, "operands", f"coalesce={coalesce} on a loc=mat dst {'needs' if coalesce == 'elem' else 'takes no'} GM scratch operand")


@irdl_op_definition
class MScatterOp(_IndexedOp):
    """`ins(%src, %idx : T, I) outs(%mem : PV) {coalesce, scatterAtomicOp, scatterOob}`:
    row mode mem[idx[r], j] = src[r, j], elem mode mem[idx[i, j]] = src[i, j]."""

    name = "pto.mscatter"
    N_INS: ClassVar[int] = 2
    KEYS: ClassVar[tuple[tuple[str, type], ...]] = (
        ("coalesce", CoalesceAttr), ("scatterAtomicOp", ScatterAtomicOpAttr), ("scatterOob", ScatterOobAttr),
        ("scatterConflict", ScatterConflictAttr),
    )
    src = operand_def(TileBufType)
    idx = operand_def(TileBufType)
    mem = operand_def(PartitionTensorViewType)
    coalesce = opt_prop_def(CoalesceAttr)
    scatterAtomicOp = opt_prop_def(ScatterAtomicOpAttr)  # noqa: N815
    scatterOob = opt_prop_def(ScatterOobAttr)  # noqa: N815
    scatterConflict = opt_prop_def(ScatterConflictAttr)  # noqa: N815

    def verify_(self) -> None:
        s = _tile(self, self.src, "src")
        if self.scatterConflict is not None:
            _fail(self, "A5 only", "scatterConflict is an A5 attribute; A2/A3 ptoas rejects it")
        if s.space != "vec" or not s.is_row_major or s.is_boxed:
            _fail(self, "layout", f"src must be a loc=vec ND tile (row_major, none_box), got {s.describe()}")
        if s.elem not in _PAYLOAD:
            _fail(self, "dtype", f"src element type must be one of {_PAYLOAD}, got {s.elem}")
        _check_table(self, self.mem.type, s)
        _check_index_tile(self, _tile(self, self.idx, "idx"), s, self.mode("coalesce"), "src")
        atomic = self.mode("scatterAtomicOp", "none")
        allowed = {"none": _PAYLOAD, "add": ("i32", "f16", "f32"), "max": ("i32", "f32"), "min": ("i32", "f32")}[atomic]
        if s.elem not in allowed:
            _fail(self, "dtype", f"scatterAtomicOp={atomic} takes {'/'.join(allowed)} data, got {s.elem}")


OPS = (MGatherOp, MScatterOp)
ATTRS = (CoalesceAttr, GatherOobAttr, ScatterAtomicOpAttr, ScatterOobAttr, ScatterConflictAttr)
