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
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from ptofa.ir import dialect as d

Value = SSAValue
INDEX = IndexType()
F16 = builtin.Float16Type()
BF16 = BFloat16Type()
F32 = Float32Type()
I8 = IntegerType(8)
I16 = IntegerType(16)
I32 = IntegerType(32)
I64 = IntegerType(64)
_ELEM = {"f16": F16, "bf16": BF16, "f32": F32, "i8": I8, "i16": I16, "i32": I32, "i64": I64}
_FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type)
_PADS = {"null": 0, "zero": 1, "max": 2, "min": 3}


# --------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------


def elem_type(name: str) -> Attribute:
    """f16, bf16, f32, i8, i16, i32 or i64."""
    if name not in _ELEM:
        raise ValueError(f"unknown element type {name!r}; expected one of {', '.join(_ELEM)}")
    return _ELEM[name]


def ptr_type(elem: str) -> d.PtrType:
    return d.PtrType(elem_type(elem))


def view_type(dims: Sequence[int | None], elem: str) -> d.TensorViewType:
    """`!pto.tensor_view`; None means a dynamic (`?`) dim."""
    return d.TensorViewType([d.DYN if x is None else x for x in dims], elem_type(elem))


def partition_type(dims: Sequence[int | None], elem: str) -> d.PartitionTensorViewType:
    """`!pto.partition_tensor_view`; None means a dynamic (`?`) dim."""
    return d.PartitionTensorViewType([d.DYN if x is None else x for x in dims], elem_type(elem))


def tile_type(
    loc: str,
    rows: int,
    cols: int,
    elem: str,
    *,
    valid: str | tuple[int | None, int | None] | None = None,
    pad: int | str | None = None,
    **overrides,
) -> d.TileBufType:
    """`!pto.tile_buf<loc, RxCxT, ...>`. `valid="dynamic"` gives `valid=?x?` (allocate it with
    `pto.alloc_tile(t, valid=(r, c))`); `valid=(r, c)` a static or partly dynamic (None) valid
    shape; `pad` 0..3 or "null" / "zero" / "max" / "min" (the value tfillpad fills with);
    other overrides (blayout, slayout, fractal, compact, v_row, v_col) go to `TileBufType`."""
    if valid == "dynamic":
        overrides["v_row"] = overrides["v_col"] = d.DYN
    elif valid is not None:
        overrides["v_row"], overrides["v_col"] = (d.DYN if v is None else v for v in valid)
    if pad is not None:
        overrides["pad"] = _PADS[pad] if isinstance(pad, str) else pad
    return d.TileBufType(loc, rows, cols, elem_type(elem), **overrides)


def _with_valid(t: d.TileBufType, v_row: int, v_col: int) -> d.TileBufType:
    """`t` with another valid shape (DYN for `?`), every other parameter kept."""
    return d.TileBufType(t.loc.data, *t.shape, t.dtype, v_row=v_row, v_col=v_col, blayout=t.blayout.data,
                         slayout=t.slayout.data, fractal=t.fractal.data, pad=t.pad.data, compact=t.compact.data)


def parse_ir_type(text: str) -> Attribute:
    """A type from its PTO IR spelling, e.g. `!pto.ptr<f16>` or `i64`."""
    from xdsl.parser import Parser

    return Parser(d.make_context(), text).parse_type()


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
        """A constant of `type` (index by default; I32, I64, F32, F16, ...), one per value and type."""
        scope = _scopes[-1]
        key = (value, str(type))
        if key in scope.constants:
            return scope.constants[key]
        if isinstance(type, _FLOAT_TYPES):
            op = arith.ConstantOp(FloatAttr(float(value), type))
        else:
            op = arith.ConstantOp(IntegerAttr(int(value), type))
        scope.const_ops.append(op)
        if name:
            hint = name
        elif isinstance(value, int) and value >= 0:
            hint = f"c{value}" if isinstance(type, IndexType) or not isinstance(type, IntegerType) else f"c{value}_{type}"
        else:
            hint = None
        scope.constants[key] = _named(op.result, hint)
        return op.result

    @staticmethod
    def index_cast(value: SSAValue, to: Attribute = INDEX, name: str | None = None) -> SSAValue:
        """index <-> i32 / i64 (`arith.index_cast`)."""
        return _named(arith.IndexCastOp(value, to).result, name)

    @staticmethod
    def to_float(value: SSAValue, to: Attribute = F32, name: str | None = None) -> SSAValue:
        """Signed integer -> float (`arith.sitofp`)."""
        return _named(arith.SIToFPOp(value, to).result, name)

    @staticmethod
    def _bin(cls, a, b, name):
        a, b = _vals(a, b)
        return _named(cls(a, b).result, name)

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
    def sdiv(a, b, name: str | None = None) -> SSAValue:
        """Signed division rounding toward zero (`arith.divsi`)."""
        return scalar._bin(arith.DivSIOp, a, b, name)

    @staticmethod
    def srem(a, b, name: str | None = None) -> SSAValue:
        """Signed remainder, the sign of the dividend (`arith.remsi`)."""
        return scalar._bin(arith.RemSIOp, a, b, name)

    @staticmethod
    def ceildiv(a, b, name: str | None = None) -> SSAValue:
        """Signed division rounding up (`arith.ceildivsi`)."""
        return scalar._bin(arith.CeilDivSIOp, a, b, name)

    @staticmethod
    def floordiv(a, b, name: str | None = None) -> SSAValue:
        """Signed division rounding down (`arith.floordivsi`)."""
        return scalar._bin(arith.FloorDivSIOp, a, b, name)

    @staticmethod
    def max(a, b, name: str | None = None) -> SSAValue:
        """Signed max (`arith.maxsi`)."""
        return scalar._bin(arith.MaxSIOp, a, b, name)

    @staticmethod
    def min(a, b, name: str | None = None) -> SSAValue:
        """Signed min (`arith.minsi`)."""
        return scalar._bin(arith.MinSIOp, a, b, name)

    @staticmethod
    def and_(a, b, name: str | None = None) -> SSAValue:
        return scalar._bin(arith.AndIOp, a, b, name)

    @staticmethod
    def or_(a, b, name: str | None = None) -> SSAValue:
        return scalar._bin(arith.OrIOp, a, b, name)

    @staticmethod
    def select(cond: SSAValue, a, b, name: str | None = None) -> SSAValue:
        """cond ? a : b (`arith.select`; int operands become constants of the other's type)."""
        a, b = _vals(a, b)
        return _named(arith.SelectOp(cond, a, b).result, name)

    @staticmethod
    def cmp(pred: str, a, b, name: str | None = None) -> SSAValue:
        """`arith.cmpi` with predicate eq, ne, slt, sle, sgt, sge, ult, ule, ugt or uge (an i1)."""
        a, b = _vals(a, b)
        return _named(arith.CmpiOp(a, b, pred).result, name)

    @staticmethod
    def eq(a, b, name: str | None = None) -> SSAValue:
        return _named(arith.CmpiOp(_val(a), _val(b), "eq").result, name)

    @staticmethod
    def ne(a, b, name: str | None = None) -> SSAValue:
        return scalar.cmp("ne", a, b, name)

    @staticmethod
    def lt(a, b, name: str | None = None) -> SSAValue:
        """Signed a < b."""
        return scalar.cmp("slt", a, b, name)

    @staticmethod
    def le(a, b, name: str | None = None) -> SSAValue:
        return scalar.cmp("sle", a, b, name)

    @staticmethod
    def gt(a, b, name: str | None = None) -> SSAValue:
        return scalar.cmp("sgt", a, b, name)

    @staticmethod
    def ge(a, b, name: str | None = None) -> SSAValue:
        return scalar.cmp("sge", a, b, name)


def _val(x: SSAValue | int, type: Attribute = INDEX) -> SSAValue:
    return scalar.const(x, type) if isinstance(x, int) else x


def _vals(a: SSAValue | int, b: SSAValue | int) -> tuple[SSAValue, SSAValue]:
    """Both operands as values: an int becomes a constant of the other operand's type (index if both are ints)."""
    if isinstance(a, int) and not isinstance(b, int):
        return scalar.const(a, b.type), b
    if isinstance(b, int) and not isinstance(a, int):
        return a, scalar.const(b, a.type)
    return _val(a), _val(b)


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
    def slice_view(view: SSAValue, offsets: Sequence[SSAValue | int], sizes: Sequence[SSAValue | int], name: str | None = None) -> SSAValue:
        """A window of a tensor view (what load/store take); a size given as a value is a dynamic (`?`) dim."""
        assert isinstance(view.type, d.TensorViewType)
        t = partition_type([s if isinstance(s, int) else None for s in sizes], d.elem_name(view.type.elem))
        op = d.PartitionViewOp(view, [_val(o) for o in offsets], [_val(s) for s in sizes], t)
        return _named(op.result, name)

    @staticmethod
    def load_scalar(ptr: SSAValue, index: SSAValue | int, name: str | None = None) -> SSAValue:
        """One element of a GM array (PIPE_S)."""
        return _named(d.LoadScalarOp(ptr, _val(index)).result, name)

    @staticmethod
    def alloc_tile(t: d.TileBufType, name: str | None = None,
                   valid: tuple[SSAValue | int, SSAValue | int] | None = None) -> SSAValue:
        """A tile of type `t`. Its valid shape is said once, in either place:

        * here: `valid=(rows, cols)`, where a dim given as an SSA value is set at run time (it
          becomes `?` in the tile's type, and `tile.set_valid` may change it later) and an int
          is static (it must equal the type's valid dim, or be its start value for a `?` dim);
        * or in the type: `tile_type(..., valid="dynamic")` (or a `None` dim); such a tile starts
          with its full shape unless `valid` gives the start values.

        Only the dynamic dims become operands of `pto.alloc_tile` (as ptoas requires)."""
        if valid is None:
            if d.DYN not in t.valid:
                return _named(d.AllocTileOp(t).result, name)
            valid = t.shape
        dims = []
        for axis, (given, declared, full) in enumerate(zip(valid, t.valid, t.shape)):
            if isinstance(given, SSAValue):
                dims.append(d.DYN)
            elif declared != d.DYN and given != declared:
                raise ValueError(f"alloc_tile {name or ''}: valid {('rows', 'cols')[axis]} {given} != the type's "
                                 f"static {declared}; pass an SSA value to make that dim dynamic")
            elif not 0 <= given <= full:
                raise ValueError(f"alloc_tile {name or ''}: valid {('rows', 'cols')[axis]} {given} is outside "
                                 f"the tile's 0..{full}")
            else:
                dims.append(declared)
        if tuple(dims) != t.valid:
            t = _with_valid(t, *dims)
        rows, cols = (_val(v) if dim == d.DYN else None for v, dim in zip(valid, dims))
        return _named(d.AllocTileOp(t, rows, cols).result, name)

    @staticmethod
    def load(view: SSAValue, dst: SSAValue) -> None:
        d.TLoadOp.build(operands=[view, dst])

    @staticmethod
    def store(src: SSAValue, view: SSAValue, atomic: str | None = None) -> None:
        """tile -> GM; `atomic="add"` adds into GM (`{atomicType = #pto<atomic_type atomic_add>}`)."""
        props = {}
        if atomic is not None:
            if atomic != "add":
                raise ValueError(f"atomic={atomic!r}: only 'add' is supported")
            props["atomicType"] = d.AtomicTypeAttr("atomic_add")
        d.TStoreOp.build(operands=[src, view, [], []], properties=props)

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
    """Compute on tiles; every op writes `out` (destination-passing style).

    Operands come first, then `out`; a scratch tile is always the keyword argument `tmp=`
    (required where the A2/A3 lowering needs one: row_max, row_sum, row_expand_expdif, trans;
    optional wherever ptoas accepts one), so a call can never bind a scratch tile to `out`."""

    @staticmethod
    def mov(src: SSAValue, out: SSAValue) -> None:
        d.TMovOp.build(operands=[src, out, [], []])

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
    def exp(src: SSAValue, out: SSAValue, high_precision: bool = False) -> None:
        props = {"precisionType": d.ExpPrecisionAttr("high_precision")} if high_precision else None
        _dps(d.TExpOp, [src], out, props=props)

    @staticmethod
    def log(src: SSAValue, out: SSAValue) -> None:
        _dps(d.TLogOp, [src], out)

    @staticmethod
    def abs(src: SSAValue, out: SSAValue) -> None:
        _dps(d.TAbsOp, [src], out)

    @staticmethod
    def div(a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TDivOp, [a, b], out)

    @staticmethod
    def min(a: SSAValue, b: SSAValue, out: SSAValue) -> None:
        _dps(d.TMinOp, [a, b], out)

    @staticmethod
    def subs(src: SSAValue, s: SSAValue, out: SSAValue) -> None:
        _dps(d.TSubsOp, [src, s], out)

    @staticmethod
    def divs(src: SSAValue, s: SSAValue, out: SSAValue) -> None:
        """out = src / s"""
        _dps(d.TDivsOp, [src, s], out)

    @staticmethod
    def rdivs(s: SSAValue, src: SSAValue, out: SSAValue) -> None:
        """out = s / src (tdivs with the scalar first)"""
        _dps(d.TDivsOp, [s, src], out)

    @staticmethod
    def maxs(src: SSAValue, s: SSAValue, out: SSAValue) -> None:
        _dps(d.TMaxsOp, [src, s], out)

    @staticmethod
    def mins(src: SSAValue, s: SSAValue, out: SSAValue) -> None:
        _dps(d.TMinsOp, [src, s], out)

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
    def row_max(src: SSAValue, out: SSAValue, *, tmp: SSAValue) -> None:
        """out[i] = max_j src[i][j]; `tmp` (src's shape) holds the folds (required on A2/A3)."""
        _dps(d.TRowMaxOp, [src], out, tmp)

    @staticmethod
    def row_sum(src: SSAValue, out: SSAValue, *, tmp: SSAValue) -> None:
        """out[i] = sum_j src[i][j]; `tmp` (src's shape) holds the folds (required on A2/A3)."""
        _dps(d.TRowSumOp, [src], out, tmp)

    @staticmethod
    def row_expand_sub(src: SSAValue, col: SSAValue, out: SSAValue, *, tmp: SSAValue | None = None) -> None:
        """out = src - col[i] (trowexpandsub); with `tmp` the column broadcast goes there instead of
        ptoas's hidden 8 KiB UB scratch."""
        _dps(d.TRowExpandSubOp, [src, col], out, tmp)

    @staticmethod
    def row_expand_add(src: SSAValue, col: SSAValue, out: SSAValue, *, tmp: SSAValue | None = None) -> None:
        """out = src + col[i] (trowexpandadd); with `tmp` the column broadcast goes there instead of
        ptoas's hidden 8 KiB UB scratch."""
        _dps(d.TRowExpandAddOp, [src, col], out, tmp)

    @staticmethod
    def row_expand_expdif(src: SSAValue, col: SSAValue, out: SSAValue, *, tmp: SSAValue) -> None:
        """out = exp(src - col[i]) (trowexpandexpdif); `tmp` receives the broadcast column
        (required: see `ptofa.ir.target.EXPDIF_TMP_BYTES`)."""
        _dps(d.TRowExpandExpdifOp, [src, col], out, tmp)

    @staticmethod
    def row_expand_mul(src: SSAValue, col: SSAValue, out: SSAValue, *, tmp: SSAValue | None = None) -> None:
        """out = src * col[i] (trowexpandmul); with `tmp` the column broadcast goes there instead of
        ptoas's hidden 8 KiB UB scratch."""
        _dps(d.TRowExpandMulOp, [src, col], out, tmp)

    @staticmethod
    def row_expand_div(src: SSAValue, col: SSAValue, out: SSAValue, *, tmp: SSAValue | None = None) -> None:
        """out = src / col[i] (trowexpanddiv); with `tmp` the column broadcast goes there instead of
        ptoas's hidden 8 KiB UB scratch."""
        _dps(d.TRowExpandDivOp, [src, col], out, tmp)

    @staticmethod
    def trans(src: SSAValue, out: SSAValue, *, tmp: SSAValue) -> None:
        """out = src^T (`ttrans`; the A2/A3 lowering needs a scratch tile of src's size)."""
        _dps(d.TTransOp, [src], out, tmp=tmp)

    @staticmethod
    def cvt(src: SSAValue, out: SSAValue, rmode: str = "CAST_RINT", *, tmp: SSAValue | None = None) -> None:
        """out = src converted to out's element type, rounded by `rmode`."""
        _dps(d.TCvtOp, [src], out, tmp, props={"rmode": StringAttr(rmode)})

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

    # ---- masks, iota, column broadcasts, padding, valid shapes (pto-ir.md 7.13) ----

    @staticmethod
    def tri(diag: SSAValue | int, out: SSAValue, upper: bool = False) -> None:
        """out = 1 where col <= row + diag (lower) / col >= row + diag (upper), else 0.
        An index `diag` is cast to i32 (ttri takes an integer, not an index)."""
        diag = _int_operand(diag)
        _dps(d.TTriOp, [diag], out, props={"upperOrLower": IntegerAttr(1 if upper else 0, I32)})

    @staticmethod
    def cmps(src: SSAValue, s: SSAValue | int | float, mode: str, out: SSAValue) -> None:
        """out (an i8 packed predicate) = src <mode> s, mode eq/ne/lt/le/gt/ge; a Python number
        becomes a constant of src's element type."""
        if isinstance(s, (int, float)):
            s = scalar.const(s, src.type.dtype)
        _dps(d.TCmpSOp, [src, s], out, props={"cmpMode": d.CmpModeAttr(mode)})

    @staticmethod
    def cmp(a: SSAValue, b: SSAValue, mode: str, out: SSAValue) -> None:
        """out (an i8 packed predicate) = a <mode> b."""
        _dps(d.TCmpOp, [a, b], out, props={"cmpMode": d.CmpModeAttr(mode)})

    @staticmethod
    def sel(mask: SSAValue, a: SSAValue, b: SSAValue, out: SSAValue, *, tmp: SSAValue | None = None) -> None:
        """out = a where the mask bit is 1, else b."""
        _dps(d.TSelOp, [mask, a, b], out, tmp)

    @staticmethod
    def ci(start: SSAValue | int, out: SSAValue, *, descending: bool = False, tmp: SSAValue | None = None) -> None:
        """out[0][j] = start + j (descending: start - j); `out` is a 1xN i16/i32 tile."""
        dtype = out.type.dtype
        if isinstance(start, int):
            start = scalar.const(start, dtype)
        elif isinstance(start.type, IndexType):
            start = scalar.index_cast(start, dtype)
        props = {"descending": IntegerAttr(1, IntegerType(1))} if descending else None
        _dps(d.TCIOp, [start], out, tmp, props=props)

    @staticmethod
    def col_expand_add(src: SSAValue, row: SSAValue, out: SSAValue) -> None:
        """out[r][c] = src[r][c] + row[0][c]"""
        _dps(d.TColExpandAddOp, [src, row], out)

    @staticmethod
    def col_expand_sub(src: SSAValue, row: SSAValue, out: SSAValue) -> None:
        _dps(d.TColExpandSubOp, [src, row], out)

    @staticmethod
    def col_expand_mul(src: SSAValue, row: SSAValue, out: SSAValue) -> None:
        _dps(d.TColExpandMulOp, [src, row], out)

    @staticmethod
    def col_expand_div(src: SSAValue, row: SSAValue, out: SSAValue) -> None:
        _dps(d.TColExpandDivOp, [src, row], out)

    @staticmethod
    def col_expand_max(src: SSAValue, row: SSAValue, out: SSAValue) -> None:
        _dps(d.TColExpandMaxOp, [src, row], out)

    @staticmethod
    def col_expand_min(src: SSAValue, row: SSAValue, out: SSAValue) -> None:
        _dps(d.TColExpandMinOp, [src, row], out)

    @staticmethod
    def fillpad(src: SSAValue, out: SSAValue) -> None:
        """out = src's valid region, the rest of out's physical tile = out's pad value (its type's `pad`)."""
        _dps(d.TFillPadOp, [src], out)

    @staticmethod
    def set_valid(t: SSAValue, rows: SSAValue | int, cols: SSAValue | int) -> None:
        """Set the runtime valid shape of a `valid=?x?` tile (`pto.set_validshape`)."""
        d.SetValidShapeOp(t, _val(rows), _val(cols))


def _int_operand(x: SSAValue | int) -> SSAValue:
    """An i32 operand: an int becomes an i32 constant, an index value is cast."""
    if isinstance(x, int):
        return scalar.const(x, I32)
    if isinstance(x.type, IndexType):
        return scalar.index_cast(x, I32)
    return x
