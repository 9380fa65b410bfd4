"""The kernel-author API: readable functions over the PTO dialect.

In the spirit of pto-dsl's namespaces: `pto.*` (runtime ids, pointers, views,
tiles, loads/stores, pipes, control flow), `tile.*` (compute on tiles) and
`scalar.*` (index / integer arithmetic). Ops are appended at the current
insertion point (xDSL's implicit builder); `pto.range` and `pto.if_` are
context managers that open an `scf.for` / `scf.if` body:

    with pto.range(c0, num_tiles) as t:
        tile.matmul(q_left, k_right, out=s_acc)

Constants are de-duplicated per function and hoisted to its top. Most `tile.*` ops are rows of
one table (`TileOp`, by family in `FAMILIES`) that make the function, its signature and its
docstring; `ptofa.optable` renders the table for docs/writing-a-kernel.md.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from xdsl.builder import ImplicitBuilder
from xdsl.dialects import arith, builtin, func, scf
from xdsl.dialects.builtin import (BFloat16Type, BoolAttr, Float16Type, Float32Type, FloatAttr, IndexType, IntegerAttr,
                                   IntegerType, StringAttr, UnitAttr)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import OptOperandDef

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
        """GM -> tile (`pto.tload`): `view` is a window made by `slice_view`, `dst` a vec / mat tile."""
        _check_window("load", view)
        d.TLoadOp.build(operands=[view, dst])

    @staticmethod
    def store(src: SSAValue, view: SSAValue, atomic: str | None = None) -> None:
        """tile -> GM (`pto.tstore`): `view` is a window made by `slice_view`; `atomic="add"` adds into
        GM (`{atomicType = #pto<atomic_type atomic_add>}`)."""
        _check_window("store", view)
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
        """The producer's next free slot (waits for one) as a GM view (`pto.talloc_to_aiv` / `_to_aic`)."""
        cls = d.TallocToAivOp if core == "cube" else d.TallocToAicOp
        return _named(cls.build(result_types=[entry_type], properties=pto._pipe_props(pipe_id, split)).entry, name)

    @staticmethod
    def tpush(core: str, pipe_id: int, entry: SSAValue, split: int = 1) -> None:
        """Hand the filled slot `entry` to the peer core (`pto.tpush_to_aiv` / `_to_aic`)."""
        cls = d.TpushToAivOp if core == "cube" else d.TpushToAicOp
        cls.build(operands=[entry], properties=pto._pipe_props(pipe_id, split))

    @staticmethod
    def tpop(core: str, pipe_id: int, entry_type: d.TensorViewType, split: int = 1, name: str | None = None) -> SSAValue:
        """The consumer's next filled slot (waits; a vector core's half) (`pto.tpop_from_aic` / `_from_aiv`)."""
        cls = d.TpopFromAivOp if core == "cube" else d.TpopFromAicOp
        return _named(cls.build(result_types=[entry_type], properties=pto._pipe_props(pipe_id, split)).entry, name)

    @staticmethod
    def tfree(core: str, pipe_id: int, entry: SSAValue, split: int = 1) -> None:
        """Give the consumed slot `entry` back to the producer (`pto.tfree_from_aic` / `_from_aiv`)."""
        cls = d.TfreeFromAivOp if core == "cube" else d.TfreeFromAicOp
        cls.build(operands=[entry], properties=pto._pipe_props(pipe_id, split))


def _check_window(fn: str, view: SSAValue) -> None:
    """ptoas's tload / tstore take a `!pto.partition_tensor_view`: say so at build time."""
    if isinstance(view.type, d.TensorViewType):
        raise TypeError(f"pto.{fn} takes a window of a GM view, not the whole {view.type}: pass "
                        f"`pto.slice_view(view, offsets, sizes)` (a !pto.partition_tensor_view)")


# --------------------------------------------------------------------------------------
# tile.*
# --------------------------------------------------------------------------------------

_OUT_OPERANDS = ("dst_", "dst")  # the names the dialect gives an op's destination operand
_TMP_OPERANDS = ("tmp", "scratch")


def _emit(cls, sources: Sequence[SSAValue], out: SSAValue, tmp: SSAValue | None = None,
          props: dict[str, Attribute] | None = None) -> Operation:
    """Build `cls` with its operands in the dialect's declared order: `sources` fill the required
    operands, `out` the destination, `tmp` the optional scratch; other optional operands stay empty."""
    given = iter(sources)
    operands: list = []
    for name, definition in cls.get_irdl_definition().operands:
        if name in _OUT_OPERANDS:
            operands.append(out)
        elif name in _TMP_OPERANDS:
            operands.append([tmp] if tmp is not None else [])
        elif isinstance(definition, OptOperandDef):
            operands.append([])
        else:
            operands.append(next(given))
    return cls.build(operands=operands, properties=props or {})


def _row_major_only(op_name: str, fn: str, tiles: Sequence[SSAValue]) -> None:
    """ptoas 0.60 refuses the elementwise tile-tile ops, the unary ops (not tneg) and texpands on a
    col_major tile ("expects src to use the row_major blayout"); say here, at build time, what works."""
    for value in tiles:
        t = value.type
        if isinstance(t, d.TileBufType) and t.space == "vec" and not t.is_row_major:
            rows, cols = t.shape
            hint = (f"a [{rows},1] column is the [1,{rows}] row of the same storage: "
                    f"`row = tile.reshape(col, 1, {rows})`, then tile.{fn} on rows" if cols == 1
                    else "use a blayout=row_major tile")
            raise ValueError(f"tile.{fn}: ptoas refuses {op_name} on the col_major tile {t.describe()}; {hint}")


def _scalar_operand(value: SSAValue | int | float, like: SSAValue | Attribute) -> SSAValue:
    """A scalar operand: a Python number becomes a constant of `like`'s element type (or of type `like`)."""
    if isinstance(value, (int, float)):
        return scalar.const(value, like.type.dtype if isinstance(like, SSAValue) else like)
    return value


@dataclass(frozen=True)
class TileOp:
    """One row of the `tile` namespace: the public name, the dialect op it emits, its sources in order,
    whether it takes a scratch tile ("optional" / "required"), and what it computes."""

    name: str
    op: type
    sources: tuple[str, ...]
    semantics: str
    tmp: str | None = None
    scalars: tuple[str, ...] = ()  # sources that are scalars (a Python number becomes a constant)
    indices: tuple[str, ...] = ()  # sources that are indices (an int becomes an index constant)
    row_major_only: bool = False  # ptoas refuses it on a col_major tile

    def function(self):
        """`tile.<name>`: (sources, out, *, [tmp], [precision]) -> the op, with the row's docstring."""
        spec, precision_attr, keyword = self, getattr(self.op, "PRECISION", None), inspect.Parameter.KEYWORD_ONLY
        params = [inspect.Parameter(s, inspect.Parameter.POSITIONAL_OR_KEYWORD) for s in (*self.sources, "out")]
        if self.tmp is not None:
            params.append(inspect.Parameter("tmp", keyword, default=inspect.Parameter.empty if self.tmp == "required" else None))
        if precision_attr is not None:
            params.append(inspect.Parameter("precision", keyword, default=None))
        sig = inspect.Signature(params, return_annotation=None)

        def call(*args, **kwargs) -> None:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            args, out = bound.arguments, bound.arguments["out"]
            tiles = [args[n] for n in spec.sources if n not in spec.scalars + spec.indices]
            like = tiles[0] if tiles else out  # the tile whose element type a Python number takes
            values = [_scalar_operand(args[n], like) if n in spec.scalars else _val(args[n]) if n in spec.indices
                      else args[n] for n in spec.sources]
            if spec.row_major_only:
                _row_major_only(spec.op.name, spec.name, [*tiles, out])
            precision = args.get("precision")
            props = {"precisionType": precision_attr(precision)} if precision is not None else None
            _emit(spec.op, values, out, args.get("tmp"), props)

        call.__name__ = call.__qualname__ = self.name
        call.__signature__ = sig
        scratch = {"required": " `tmp=` is required.", "optional": " `tmp=` optional (ptoas's hidden scratch without)."}
        call.__doc__ = f"{self.semantics} (`{self.op.name}`).{scratch.get(self.tmp, '')}"
        return staticmethod(call)


def _ops(family: str, rows: Sequence[tuple]) -> dict[str, TileOp]:
    """Rows (name, op class, sources, semantics, **options) of one family of the op table."""
    out = {}
    for name, op, sources, semantics, *options in rows:
        out[name] = TileOp(name, op, tuple(sources.split()), semantics, **(options[0] if options else {}))
    FAMILIES[family] = list(out.values())
    return out


RM = dict(row_major_only=True)
S = dict(scalars=("s",))
IX = dict(indices=("row", "col", "offset"))
FAMILIES: dict[str, list[TileOp]] = {}
# The generated part of the tile namespace: one row per op; the ops with a form of their own
# (matmul, mov, cvt, compares, ttri, tci, tfillpad, views) are written out in `tile` below.
_TABLE: dict[str, TileOp] = {
    **_ops("elementwise", [
        ("add", d.TAddOp, "a b", "out = a + b", RM),
        ("sub", d.TSubOp, "a b", "out = a - b", RM),
        ("mul", d.TMulOp, "a b", "out = a * b", RM),
        ("div", d.TDivOp, "a b", "out = a / b", RM),
        ("max", d.TMaxOp, "a b", "out = max(a, b)", RM),
        ("min", d.TMinOp, "a b", "out = min(a, b)", RM),
        ("add3", d.TAddCOp, "a b c", "out = a + b + c"),
        ("sub_add", d.TSubCOp, "a b c", "out = a - b + c"),
        ("add_relu", d.TAddReluOp, "a b", "out = max(0, a + b)", RM),
    ]),
    **_ops("unary", [
        ("exp", d.TExpOp, "src", "out = exp(src)", RM),
        ("log", d.TLogOp, "src", "out = ln(src)", RM),
        ("sqrt", d.TSqrtOp, "src", "out = sqrt(src)", RM),
        ("rsqrt", d.TRsqrtOp, "src", "out = 1 / sqrt(src)", dict(tmp="optional", **RM)),
        ("recip", d.TRecipOp, "src", "out = 1 / src (not in place)", RM),
        ("abs", d.TAbsOp, "src", "out = |src|", RM),
        ("neg", d.TNegOp, "src", "out = -src"),
        ("relu", d.TReluOp, "src", "out = max(0, src)", RM),
    ]),
    **_ops("with a scalar", [
        ("fill", d.TExpandsOp, "s", "out = s everywhere in out's valid region", dict(**S, **RM)),
        ("adds", d.TAddsOp, "src s", "out = src + s", S),
        ("subs", d.TSubsOp, "src s", "out = src - s", S),
        ("muls", d.TMulsOp, "src s", "out = src * s", S),
        ("divs", d.TDivsOp, "src s", "out = src / s", S),
        ("rdivs", d.TDivsOp, "s src", "out = s / src (tdivs with the scalar first)", S),
        ("maxs", d.TMaxsOp, "src s", "out = max(src, s)", S),
        ("mins", d.TMinsOp, "src s", "out = min(src, s)", S),
        ("lrelu", d.TLReluOp, "src s", "out = src where src > 0, else s * src (leaky ReLU)", S),
        ("axpy", d.TAxpyOp, "src s", "out = out + s * src", dict(**S, **RM)),
        ("adds_add", d.TAddSCOp, "a s b", "out = a + s + b", S),
        ("subs_add", d.TSubSCOp, "a s b", "out = a - s + b", S),
    ]),
    **_ops("integer and bitwise", [
        ("and_", d.TAndOp, "a b", "out = a & b"),
        ("or_", d.TOrOp, "a b", "out = a | b"),
        ("xor", d.TXorOp, "a b", "out = a ^ b", dict(tmp="optional")),
        ("shl", d.TShlOp, "a b", "out = a << b"),
        ("shr", d.TShrOp, "a b", "out = a >> b"),
        ("not_", d.TNotOp, "src", "out = ~src"),
        ("pow", d.TPowOp, "a b", "out = a ** b", dict(tmp="optional")),
        ("rem", d.TRemOp, "a b", "out = a - floor(a / b) * b", dict(tmp="optional")),
        ("fmod", d.TFModOp, "a b", "out = fmod(a, b)"),
        ("ands", d.TAndsOp, "src s", "out = src & s", S),
        ("ors", d.TOrsOp, "src s", "out = src | s", S),
        ("xors", d.TXorsOp, "src s", "out = src ^ s", dict(tmp="optional", **S)),
        ("shls", d.TShlsOp, "src s", "out = src << s", S),
        ("shrs", d.TShrsOp, "src s", "out = src >> s", S),
        ("pows", d.TPowsOp, "src s", "out = src ** s", dict(tmp="optional", **S)),
        ("rems", d.TRemsOp, "src s", "out = src - floor(src / s) * s", dict(tmp="optional", **S)),
        ("fmods", d.TFModsOp, "src s", "out = fmod(src, s)", S),
    ]),
    **_ops("row reductions and broadcasts", [
        ("row_max", d.TRowMaxOp, "src", "out[i,0] = max_j src[i,j] (tmp: src's size)", dict(tmp="required")),
        ("row_min", d.TRowMinOp, "src", "out[i,0] = min_j src[i,j] (tmp: src's size)", dict(tmp="required")),
        ("row_sum", d.TRowSumOp, "src", "out[i,0] = sum_j src[i,j] (tmp: src's size)", dict(tmp="required")),
        ("row_prod", d.TRowProdOp, "src", "out[i,0] = prod_j src[i,j]", dict(tmp="required")),
        ("row_argmax", d.TRowArgMaxOp, "src", "out[i,0] = argmax_j src[i,j]", dict(tmp="optional")),
        ("row_argmin", d.TRowArgMinOp, "src", "out[i,0] = argmin_j src[i,j]", dict(tmp="optional")),
        ("row_expand", d.TRowExpandOp, "col", "out[i,j] = col[i,0]"),
        ("row_expand_add", d.TRowExpandAddOp, "src col", "out = src + col[i]", dict(tmp="optional")),
        ("row_expand_sub", d.TRowExpandSubOp, "src col", "out = src - col[i]", dict(tmp="optional")),
        ("row_expand_mul", d.TRowExpandMulOp, "src col", "out = src * col[i]", dict(tmp="optional")),
        ("row_expand_div", d.TRowExpandDivOp, "src col", "out = src / col[i]", dict(tmp="optional")),
        ("row_expand_max", d.TRowExpandMaxOp, "src col", "out = max(src, col[i])", dict(tmp="optional")),
        ("row_expand_min", d.TRowExpandMinOp, "src col", "out = min(src, col[i])", dict(tmp="optional")),
        ("row_expand_expdif", d.TRowExpandExpdifOp, "src col",
         "out = exp(src - col[i]) (tmp: `ptofa.ir.target.EXPDIF_TMP_BYTES`)", dict(tmp="required")),
    ]),
    **_ops("column reductions and broadcasts", [
        ("col_max", d.TColMaxOp, "src", "out[0,j] = max_i src[i,j]"),
        ("col_min", d.TColMinOp, "src", "out[0,j] = min_i src[i,j]"),
        ("col_prod", d.TColProdOp, "src", "out[0,j] = prod_i src[i,j]"),
        ("col_argmax", d.TColArgMaxOp, "src", "out[0,j] = argmax_i src[i,j]", dict(tmp="optional")),
        ("col_argmin", d.TColArgMinOp, "src", "out[0,j] = argmin_i src[i,j]", dict(tmp="optional")),
        ("col_expand", d.TColExpandOp, "row", "out[i,j] = row[0,j]"),
        ("col_expand_add", d.TColExpandAddOp, "src row", "out = src + row[j]"),
        ("col_expand_sub", d.TColExpandSubOp, "src row", "out = src - row[j]"),
        ("col_expand_mul", d.TColExpandMulOp, "src row", "out = src * row[j]"),
        ("col_expand_div", d.TColExpandDivOp, "src row", "out = src / row[j]"),
        ("col_expand_max", d.TColExpandMaxOp, "src row", "out = max(src, row[j])"),
        ("col_expand_min", d.TColExpandMinOp, "src row", "out = min(src, row[j])"),
        ("col_expand_expdif", d.TColExpandExpdifOp, "src row", "out = exp(src - row[j])"),
    ]),
    **_ops("select, partial and layout", [
        ("sel", d.TSelOp, "mask a b", "out = a where the mask bit is 1, else b", dict(tmp="optional")),
        ("sels", d.TSelSOp, "mask src s", "out = src where the mask bit is 1, else s", dict(tmp="optional", **S)),
        ("prelu", d.TPReluOp, "src slope", "out = src where src > 0, else slope * src", dict(tmp="optional")),
        ("part_add", d.TPartAddOp, "a b", "out = a + b where both are valid, the valid one elsewhere"),
        ("part_mul", d.TPartMulOp, "a b", "out = a * b where both are valid, the valid one elsewhere"),
        ("part_max", d.TPartMaxOp, "a b", "out = max(a, b) where both are valid, the valid one elsewhere"),
        ("part_min", d.TPartMinOp, "a b", "out = min(a, b) where both are valid, the valid one elsewhere"),
        ("concat", d.TConcatOp, "a b", "out[i] = a[i] ++ b[i] (columns)"),
        ("concat_idx", d.TConcatIdxOp, "a b a_count b_count",
         "out[i] = the first a_count[i,0] columns of a[i], then the first b_count[i,0] of b[i]"),
        ("gather_b", d.TGatherBOp, "src offsets", "out[i,j] = src at byte offset offsets[i,j]"),
        ("sort32", d.TSort32Op, "src idx", "out = each 32-element block of src sorted, with its indices idx", dict(tmp="optional")),
        ("dequant", d.TDequantOp, "src scale offset", "out = (src - offset[i]) * scale[i]"),
    ]),
    **_ops("windows and elements", [
        ("extract", d.TExtractOp, "src row col", "out = src[row:row+R, col:col+C] for out's R x C", IX),
        ("insert", d.TInsertOp, "src row col", "out[row:row+R, col:col+C] = src for src's R x C", IX),
        ("set_val", d.TSetValOp, "offset value", "out's element at linear offset `offset` = value", IX),
    ]),
}
del RM, S, IX


class tile:  # noqa: N801
    """Compute on tiles, destination-passing: every op writes `out`. One argument order everywhere:
    the sources in the order of the math, then `out`, then keyword-only options and the scratch
    tile `tmp=` (required where the A2/A3 lowering needs one, optional wherever ptoas accepts one).
    Most ops are rows of the op table (`FAMILIES`); the ones below have a form of their own."""

    # ---- cube ----

    @staticmethod
    def mov(src: SSAValue, out: SSAValue) -> None:
        """out = src, between local memories (`pto.tmov`): L1 `mat` -> L0A `left` / L0B `right`
        (MTE1, the layout change to the cube's fractals included), `vec` -> `vec` (V)."""
        _emit(d.TMovOp, [src], out)

    @staticmethod
    def matmul(a: SSAValue, b: SSAValue, out: SSAValue, *, accumulate: bool | SSAValue = False) -> None:
        """out = a @ b (`pto.tmatmul`), or out += a @ b with `accumulate` (`pto.tmatmul.acc`). `a` is a
        `left` (L0A) tile [M, K], `b` a `right` (L0B) tile [K, N], `out` an `acc` (L0C) tile [M, N], f32
        (i32 for i8); m, k, n at run time are a's valid rows and columns and b's valid columns. L0C is
        not zero-filled, so a K loop's first step initialises: `accumulate` is a bool known at build
        time, or an i1 value (e.g. `scalar.gt(k, 0)`) that picks one at run time (an `scf.if`)."""
        def emit(acc: bool) -> None:
            _emit(d.TMatmulAccOp, [out, a, b], out) if acc else _emit(d.TMatmulOp, [a, b], out)

        if isinstance(accumulate, bool):
            return emit(accumulate)
        if not (isinstance(accumulate.type, IntegerType) and accumulate.type.width.data == 1):
            raise TypeError(f"tile.matmul: accumulate must be a bool or an i1 value, got {accumulate.type}")
        blocks = Block(), Block()
        scf.IfOp(accumulate, [], Region(blocks[0]), Region(blocks[1]))
        for block, acc in zip(blocks, (True, False)):
            with ImplicitBuilder(block):
                emit(acc)
                scf.YieldOp()

    @staticmethod
    def matmul_bias(a: SSAValue, b: SSAValue, bias: SSAValue, out: SSAValue) -> None:
        """out = a @ b + bias, the [1, N] bias row broadcast down the rows (`pto.tmatmul.bias`)."""
        _emit(d.TMatmulBiasOp, [a, b, bias], out)

    # ---- conversions, compares, index tiles, padding ----

    @staticmethod
    def cvt(src: SSAValue, out: SSAValue, *, rmode: str = "CAST_RINT", tmp: SSAValue | None = None) -> None:
        """out = src converted to out's element type, rounded by `rmode` (`pto.tcvt`)."""
        _emit(d.TCvtOp, [src], out, tmp, {"rmode": StringAttr(rmode)})

    @staticmethod
    def cmps(src: SSAValue, s: SSAValue | int | float, out: SSAValue, *, mode: str) -> None:
        """out (an i8 packed predicate) = src <mode> s, mode eq/ne/lt/le/gt/ge (`pto.tcmps`); a Python
        number becomes a constant of src's element type."""
        _emit(d.TCmpSOp, [src, _scalar_operand(s, src)], out, props={"cmpMode": d.CmpModeAttr(mode)})

    @staticmethod
    def cmp(a: SSAValue, b: SSAValue, out: SSAValue, *, mode: str) -> None:
        """out (an i8 packed predicate) = a <mode> b (`pto.tcmp`)."""
        _emit(d.TCmpOp, [a, b], out, props={"cmpMode": d.CmpModeAttr(mode)})

    @staticmethod
    def tri(diag: SSAValue | int, out: SSAValue, *, upper: bool = False) -> None:
        """out = 1 where col <= row + diag (lower) / col >= row + diag (upper), else 0 (`pto.ttri`).
        An index `diag` is cast to i32 (ttri takes an integer, not an index)."""
        if not isinstance(diag, int) and isinstance(diag.type, IndexType):
            diag = scalar.index_cast(diag, I32)
        _emit(d.TTriOp, [_scalar_operand(diag, I32)], out, props={"upperOrLower": IntegerAttr(1 if upper else 0, I32)})

    @staticmethod
    def ci(start: SSAValue | int, out: SSAValue, *, descending: bool = False, tmp: SSAValue | None = None) -> None:
        """out[0][j] = start + j (descending: start - j); `out` is a 1xN i16/i32 tile (`pto.tci`)."""
        if not isinstance(start, int) and isinstance(start.type, IndexType):
            start = scalar.index_cast(start, out.type.dtype)
        props = {"descending": IntegerAttr(1, IntegerType(1))} if descending else None
        _emit(d.TCIOp, [_scalar_operand(start, out)], out, tmp, props)

    @staticmethod
    def fillpad(src: SSAValue, out: SSAValue) -> None:
        """out = src's valid region, the rest of out's physical tile = out's pad value (its type's `pad`)
        (`pto.tfillpad`)."""
        _emit(d.TFillPadOp, [src], out)

    @staticmethod
    def col_sum(src: SSAValue, out: SSAValue, *, tmp: SSAValue | None = None, pairwise: bool = False) -> None:
        """out[0,j] = sum_i src[i,j] (`pto.tcolsum`); `pairwise` sums the rows pairwise in `tmp`
        (`isBinary`)."""
        props = {"isBinary": BoolAttr(True, IntegerType(1))} if pairwise else None
        _emit(d.TColSumOp, [src], out, tmp, props)

    @staticmethod
    def trans(src: SSAValue, out: SSAValue, *, tmp: SSAValue) -> None:
        """out = src^T (`pto.ttrans`; the A2/A3 lowering needs a scratch tile of src's size)."""
        _emit(d.TTransOp, [src], out, tmp)

    # ---- windows, elements, views, valid shapes ----

    @staticmethod
    def get_val(src: SSAValue, offset: SSAValue | int, name: str | None = None) -> SSAValue:
        """src's element at linear offset `offset`, a scalar (`pto.tgetval`)."""
        return _named(d.TGetValOp.build(operands=[src, _val(offset)], result_types=[src.type.dtype]).result, name)

    @staticmethod
    def reshape(src: SSAValue, rows: int, cols: int, name: str | None = None, **overrides) -> SSAValue:
        """A view of the same storage as `rows x cols` (e.g. a [R,1] DN column as a [1,R] row)
        (`pto.treshape`)."""
        new = d.TileBufType(src.type.space, rows, cols, src.type.dtype, **overrides)
        return _named(d.TReshapeOp(src, new).result, name)

    @staticmethod
    def subview(src: SSAValue, row: SSAValue | int, col: SSAValue | int, rows: int, cols: int, name: str | None = None) -> SSAValue:
        """A `rows x cols` window of `src` at (row, col), same storage (`pto.subview`)."""
        t = src.type
        new = d.TileBufType(t.space, rows, cols, t.dtype, blayout=t.blayout.data, slayout=t.slayout.data, fractal=t.fractal.data)
        return _named(d.SubviewOp(src, _val(row), _val(col), new).result, name)

    @staticmethod
    def set_valid(t: SSAValue, rows: SSAValue | int, cols: SSAValue | int) -> None:
        """Set the runtime valid shape of a `valid=?x?` tile (`pto.set_validshape`)."""
        d.SetValidShapeOp(t, _val(rows), _val(cols))


# The table's rows become `tile.<name>` (a function with the row's signature and docstring).
for _spec in _TABLE.values():
    setattr(tile, _spec.name, _spec.function())
del _spec
