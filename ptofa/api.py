"""The kernel-author API: readable functions over the PTO dialect.

In the spirit of pto-dsl's namespaces: `pto.*` (runtime ids, pointers, views,
tiles, loads/stores, pipes, control flow), `tile.*` (compute on tiles) and
`scalar.*` (index / integer arithmetic). Ops are appended at the current
insertion point (xDSL's implicit builder); `pto.range` and `pto.if_` are
context managers that open an `scf.for` / `scf.if` body:

    with pto.range(c0, num_tiles) as t:
        tile.matmul(q_left, k_right, out=s_acc)

Constants are de-duplicated per function and hoisted to its top.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from xdsl.builder import ImplicitBuilder
from xdsl.dialects import arith, builtin, func, scf
from xdsl.dialects.builtin import Float32Type, FloatAttr, IndexType, IntegerAttr, IntegerType, StringAttr, UnitAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from ptofa import dialect as d

Value = SSAValue
INDEX = IndexType()
F16 = builtin.Float16Type()
F32 = Float32Type()
I64 = IntegerType(64)
_ELEM = {"f16": F16, "f32": F32, "i64": I64, "i8": IntegerType(8)}


# --------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------


def elem_type(name: str) -> Attribute:
    return _ELEM[name]


def ptr_type(elem: str) -> d.PtrType:
    return d.PtrType(elem_type(elem))


def view_type(dims: Sequence[int | None], elem: str) -> d.TensorViewType:
    """`!pto.tensor_view`; None means a dynamic (`?`) dim."""
    return d.TensorViewType([d.DYN if x is None else x for x in dims], elem_type(elem))


def partition_type(dims: Sequence[int], elem: str) -> d.PartitionTensorViewType:
    return d.PartitionTensorViewType(list(dims), elem_type(elem))


def tile_type(loc: str, rows: int, cols: int, elem: str, **overrides) -> d.TileBufType:
    return d.TileBufType(loc, rows, cols, elem_type(elem), **overrides)


def parse_ir_type(text: str) -> Attribute:
    """A type from its PTO IR spelling, e.g. `!pto.ptr<f16>` or `i64`."""
    from xdsl.parser import Parser

    from ptofa.textio import make_context

    return Parser(make_context(), text).parse_type()


# --------------------------------------------------------------------------------------
# Module and function scopes
# --------------------------------------------------------------------------------------


@dataclass
class _FuncScope:
    op: func.FuncOp
    constants: dict[tuple, SSAValue] = field(default_factory=dict)
    const_ops: list[Operation] = field(default_factory=list)


_scopes: list[_FuncScope] = []


class KernelModule:
    """A module under construction: functions are added with `function(...)`."""

    def __init__(self, target_arch: str = "a3"):
        self.module = builtin.ModuleOp([], attributes={"pto.target_arch": StringAttr(target_arch)})

    @contextlib.contextmanager
    def function(
        self,
        name: str,
        args: Sequence[tuple[str, Attribute]],
        *,
        kind: str | None = None,
        entry: bool = False,
    ) -> Iterator[dict[str, SSAValue]]:
        """Open a `func.func`; yields its arguments by name. `kind` is cube / vector."""
        block = Block(arg_types=[t for _, t in args])
        for (arg_name, _), value in zip(args, block.args):
            value.name_hint = arg_name
        fop = func.FuncOp(name, ([t for _, t in args], []), Region(block))
        if kind is not None:
            fop.attributes["pto.kernel_kind"] = d.KernelKindAttr(kind)
        if entry:
            fop.attributes["pto.entry"] = UnitAttr()
        scope = _FuncScope(fop)
        _scopes.append(scope)
        try:
            with ImplicitBuilder(block):
                yield {n: v for (n, _), v in zip(args, block.args)}
                func.ReturnOp()
        finally:
            _scopes.pop()
        # Hoist constants to the top of the function, in creation order.
        for op in reversed(scope.const_ops):
            op.detach()
            if block.first_op is None:
                block.add_op(op)
            else:
                block.insert_op_before(op, block.first_op)
        self.module.body.block.add_op(fop)


def _named(value: SSAValue, name: str | None) -> SSAValue:
    if name:
        value.name_hint = name
    return value


# --------------------------------------------------------------------------------------
# scalar.*
# --------------------------------------------------------------------------------------


class scalar:  # noqa: N801 - a namespace, as in pto-dsl
    """Index / integer / float scalars (`arith` ops)."""

    @staticmethod
    def const(value: int | float, type: Attribute = INDEX, name: str | None = None) -> SSAValue:
        scope = _scopes[-1]
        key = (value, str(type))
        if key in scope.constants:
            return scope.constants[key]
        if isinstance(type, Float32Type):
            op = arith.ConstantOp(FloatAttr(float(value), type))
        else:
            op = arith.ConstantOp(IntegerAttr(int(value), type))
        scope.const_ops.append(op)
        hint = name or (f"c{value}" if isinstance(value, int) and value >= 0 else None)
        scope.constants[key] = _named(op.result, hint)
        return op.result

    @staticmethod
    def index_cast(value: SSAValue, to: Attribute = INDEX, name: str | None = None) -> SSAValue:
        return _named(arith.IndexCastOp(value, to).result, name)

    @staticmethod
    def _bin(cls, a, b, name):
        return _named(cls(_val(a), _val(b)).result, name)

    @staticmethod
    def add(a, b, name: str | None = None) -> SSAValue:
        return scalar._bin(arith.AddiOp, a, b, name)

    @staticmethod
    def sub(a, b, name: str | None = None) -> SSAValue:
        return scalar._bin(arith.SubiOp, a, b, name)

    @staticmethod
    def mul(a, b, name: str | None = None) -> SSAValue:
        return scalar._bin(arith.MuliOp, a, b, name)

    @staticmethod
    def div(a, b, name: str | None = None) -> SSAValue:
        """Unsigned division (all FA indices are non-negative)."""
        return scalar._bin(arith.DivUIOp, a, b, name)

    @staticmethod
    def rem(a, b, name: str | None = None) -> SSAValue:
        return scalar._bin(arith.RemUIOp, a, b, name)

    @staticmethod
    def eq(a, b, name: str | None = None) -> SSAValue:
        return _named(arith.CmpiOp(_val(a), _val(b), "eq").result, name)


def _val(x: SSAValue | int) -> SSAValue:
    return scalar.const(x) if isinstance(x, int) else x


# --------------------------------------------------------------------------------------
# pto.*
# --------------------------------------------------------------------------------------


class pto:  # noqa: N801
    """Runtime ids, pointers, GM views, tiles, loads/stores, pipes and control flow."""

    @staticmethod
    def get_block_idx() -> SSAValue:
        return scalar.index_cast(_named(d.GetBlockIdxOp().result, "block_idx64"), name="block_idx")

    @staticmethod
    def get_block_num() -> SSAValue:
        return scalar.index_cast(_named(d.GetBlockNumOp().result, "block_num64"), name="block_num")

    @staticmethod
    def get_subblock_idx() -> SSAValue:
        return scalar.index_cast(_named(d.GetSubblockIdxOp().result, "subblock_idx64"), name="subblock_idx")

    @staticmethod
    def set_ffts(ptr: SSAValue) -> None:
        d.SetFftsOp(ptr)

    @staticmethod
    def add_ptr(ptr: SSAValue, offset: SSAValue | int, name: str | None = None) -> SSAValue:
        return _named(d.AddPtrOp(ptr, _val(offset)).result, name)

    @staticmethod
    def as_tensor(
        ptr: SSAValue,
        shape: Sequence[SSAValue | int],
        strides: Sequence[SSAValue | int],
        *,
        layout: str | None = None,
        name: str | None = None,
    ) -> SSAValue:
        """A GM tensor view; static dims where the shape operand is an int."""
        assert isinstance(ptr.type, d.PtrType)
        dims = [s if isinstance(s, int) else None for s in shape]
        t = view_type(dims, d.elem_name(ptr.type.elem))
        op = d.MakeTensorViewOp(ptr, [_val(s) for s in shape], [_val(s) for s in strides], t, layout)
        return _named(op.result, name)

    @staticmethod
    def slice_view(view: SSAValue, offsets: Sequence[SSAValue | int], sizes: Sequence[int], name: str | None = None) -> SSAValue:
        """A static-size window of a tensor view (what load/store take)."""
        assert isinstance(view.type, d.TensorViewType)
        t = partition_type(sizes, d.elem_name(view.type.elem))
        op = d.PartitionViewOp(view, [_val(o) for o in offsets], [_val(s) for s in sizes], t)
        return _named(op.result, name)

    @staticmethod
    def alloc_tile(t: d.TileBufType, name: str | None = None) -> SSAValue:
        return _named(d.AllocTileOp(t).result, name)

    @staticmethod
    def load(view: SSAValue, dst: SSAValue) -> None:
        d.TLoadOp.build(operands=[view, dst])

    @staticmethod
    def store(src: SSAValue, view: SSAValue) -> None:
        d.TStoreOp.build(operands=[src, view])

    @staticmethod
    def call(callee: str, args: Sequence[SSAValue]) -> None:
        func.CallOp(callee, list(args), [])

    @staticmethod
    @contextlib.contextmanager
    def range(lo: SSAValue | int, hi: SSAValue | int, step: SSAValue | int = 1, name: str = "i") -> Iterator[SSAValue]:
        """A runtime `scf.for` loop; yields the induction variable."""
        body = Block(arg_types=[INDEX])
        body.args[0].name_hint = name
        scf.ForOp(_val(lo), _val(hi), _val(step), [], body)
        with ImplicitBuilder(body):
            yield body.args[0]
            scf.YieldOp()

    @staticmethod
    @contextlib.contextmanager
    def if_(cond: SSAValue) -> Iterator[None]:
        """An `scf.if` without else."""
        then = Block()
        scf.IfOp(cond, [], Region(then))
        with ImplicitBuilder(then):
            yield
            scf.YieldOp()

    # ---- pipes (global entries) ----

    @staticmethod
    def init_pipe(core: str, pipe_id: int, dir_mask: int, slot_size: int, slot_tensor: SSAValue,
                  slot_num: int | None = None) -> None:
        """A global-entry pipe endpoint; `slot_num` None keeps ptoas's default (8 for one-way pipes)."""
        cls = d.AicInitializePipeOp if core == "cube" else d.AivInitializePipeOp
        props = {
            "id": IntegerAttr(pipe_id, 32),
            "dir_mask": IntegerAttr(dir_mask, 8),
            "slot_size": IntegerAttr(slot_size, 32),
        }
        if slot_num is not None:
            props["slot_num"] = IntegerAttr(slot_num, 32)
        cls.build(operands=[slot_tensor], properties=props)

    @staticmethod
    def _pipe_props(pipe_id: int, split: int) -> dict[str, Attribute]:
        return {"id": IntegerAttr(pipe_id, 32), "split": IntegerAttr(split, 8)}

    @staticmethod
    def talloc(core: str, pipe_id: int, entry_type: d.TensorViewType, split: int = 1, name: str | None = None) -> SSAValue:
        cls = d.TallocToAivOp if core == "cube" else d.TallocToAicOp
        return _named(cls.build(result_types=[entry_type], properties=pto._pipe_props(pipe_id, split)).entry, name)

    @staticmethod
    def tpush(core: str, pipe_id: int, entry: SSAValue, split: int = 1) -> None:
        cls = d.TpushToAivOp if core == "cube" else d.TpushToAicOp
        cls.build(operands=[entry], properties=pto._pipe_props(pipe_id, split))

    @staticmethod
    def tpop(core: str, pipe_id: int, entry_type: d.TensorViewType, split: int = 1, name: str | None = None) -> SSAValue:
        cls = d.TpopFromAivOp if core == "cube" else d.TpopFromAicOp
        return _named(cls.build(result_types=[entry_type], properties=pto._pipe_props(pipe_id, split)).entry, name)

    @staticmethod
    def tfree(core: str, pipe_id: int, entry: SSAValue, split: int = 1) -> None:
        cls = d.TfreeFromAivOp if core == "cube" else d.TfreeFromAicOp
        cls.build(operands=[entry], properties=pto._pipe_props(pipe_id, split))


# --------------------------------------------------------------------------------------
# tile.*
# --------------------------------------------------------------------------------------


def _dps(cls, ins: Sequence[SSAValue], out: SSAValue, tmp: SSAValue | None = None, props: dict | None = None) -> None:
    operands: list = list(ins)
    if cls.HAS_TMP:
        operands.append([tmp] if tmp is not None else [])
    operands.append(out)
    cls.build(operands=operands, properties=props or {})


class tile:  # noqa: N801
    """Compute on tiles; every op writes `out` (destination-passing style)."""

    @staticmethod
    def mov(src: SSAValue, out: SSAValue) -> None:
        _dps(d.TMovOp, [src], out)

    @staticmethod
    def matmul(a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TMatmulOp, [a, b], out)

    @staticmethod
    def matmul_acc(acc: SSAValue, a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TMatmulAccOp, [acc, a, b], out)

    @staticmethod
    def fill(value: SSAValue, out: SSAValue) -> None:
        _dps(d.TExpandsOp, [value], out)

    @staticmethod
    def muls(src: SSAValue, s: SSAValue, out: SSAValue) -> None:
        _dps(d.TMulsOp, [src, s], out)

    @staticmethod
    def adds(src: SSAValue, s: SSAValue, out: SSAValue) -> None:
        _dps(d.TAddsOp, [src, s], out)

    @staticmethod
    def exp(src: SSAValue, out: SSAValue) -> None:
        _dps(d.TExpOp, [src], out)

    @staticmethod
    def add(a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TAddOp, [a, b], out)

    @staticmethod
    def sub(a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TSubOp, [a, b], out)

    @staticmethod
    def mul(a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TMulOp, [a, b], out)

    @staticmethod
    def max(a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TMaxOp, [a, b], out)

    @staticmethod
    def row_max(src: SSAValue, tmp: SSAValue, out: SSAValue) -> None:
        _dps(d.TRowMaxOp, [src], out, tmp)

    @staticmethod
    def row_sum(src: SSAValue, tmp: SSAValue, out: SSAValue) -> None:
        _dps(d.TRowSumOp, [src], out, tmp)

    @staticmethod
    def row_expand_sub(src: SSAValue, col: SSAValue, out: SSAValue) -> None:
        _dps(d.TRowExpandSubOp, [src, col], out)

    @staticmethod
    def row_expand_mul(src: SSAValue, col: SSAValue, out: SSAValue) -> None:
        _dps(d.TRowExpandMulOp, [src, col], out)

    @staticmethod
    def row_expand_div(src: SSAValue, col: SSAValue, out: SSAValue) -> None:
        _dps(d.TRowExpandDivOp, [src, col], out)

    @staticmethod
    def cvt(src: SSAValue, out: SSAValue, rmode: str = "CAST_RINT") -> None:
        _dps(d.TCvtOp, [src], out, props={"rmode": StringAttr(rmode)})

    @staticmethod
    def reshape(src: SSAValue, rows: int, cols: int, name: str | None = None, **overrides) -> SSAValue:
        """A view of the same storage as `rows x cols` (e.g. a [R,1] DN column as a [1,R] row)."""
        t = src.type
        assert isinstance(t, d.TileBufType)
        new = d.TileBufType(t.space, rows, cols, t.dtype, **overrides)
        return _named(d.TReshapeOp(src, new).result, name)

    @staticmethod
    def subview(src: SSAValue, row: SSAValue | int, col: SSAValue | int, rows: int, cols: int, name: str | None = None) -> SSAValue:
        """A `rows x cols` window of `src` at (row, col), same storage."""
        t = src.type
        assert isinstance(t, d.TileBufType)
        new = d.TileBufType(t.space, rows, cols, t.dtype, blayout=t.blayout.data, slayout=t.slayout.data, fractal=t.fractal.data)
        return _named(d.SubviewOp(src, _val(row), _val(col), new).result, name)
