"""Compile a parsed module into closures, once per `simulate` call.

Every SSA value of a function gets an integer slot in a per-call value list (slot 0
holds the executing core); every op becomes `fn(vals)`. A region body is a list of
`(fn, opid)`; `opid` indexes `Program.ops` (name, line, stage) for reports. An op
that may block (talloc, tpop, a call, a loop or branch containing one) returns a
generator when it has to wait; everything else returns None. Bodies that cannot
block run in a plain loop, without generator overhead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import arith, builtin, func, scf
from xdsl.ir import Block, Operation, SSAValue

from ptofa.ir import dialect as d
from ptofa.sim import pipeops, registry, tileops
from ptofa.sim.errors import SimError
from ptofa.sim.memory import BF16, GmView, Tile, bf16_decode, bf16_encode, new_tile_storage
from ptofa.sim.stages import op_stages
from ptofa.sim.tracing import wrap_scalar, wrap_tile_op
from ptofa.ir.textio import kernel_kind

Fn = Callable[[list], object]


@dataclass(frozen=True)
class OpInfo:
    name: str
    line: int
    stage: str

    def where(self) -> str:
        return f"{self.name} (line {self.line})"


@dataclass
class FuncProgram:
    name: str
    kind: str | None  # "cube", "vector" or None (runs on every core)
    nslots: int = 0
    arg_slots: list[int] = field(default_factory=list)
    arg_names: list[str] = field(default_factory=list)
    arg_types: list = field(default_factory=list)
    body: list[tuple[Fn, int]] = field(default_factory=list)
    ret_slots: list[int] = field(default_factory=list)
    return_opid: int = 0
    hidden: list[tuple[str, str, str, int]] = field(default_factory=list)  # (space, name, type, bytes)


@dataclass
class Program:
    funcs: dict[str, FuncProgram]
    ops: list[OpInfo]
    entry: FuncProgram
    n_allocs: int


# Runners --------------------------------------------------------------------------------


def run_plain(body, vals, hist) -> None:
    for fn, opid in body:
        hist(opid)
        fn(vals)


def run_gen(body, vals, hist):
    for fn, opid in body:
        hist(opid)
        r = fn(vals)
        if r is not None:
            yield from r


def invoke(fp: FuncProgram, core, args: list):
    """Run a function on a core (a generator); returns its results. Drains pipes at exit."""
    if fp.kind is not None and fp.kind != core.kind:
        return []  # a kind entry: the other core type's body is compiled out
    vals = [None] * fp.nslots
    vals[0] = core
    for s, a in zip(fp.arg_slots, args):
        vals[s] = a
    if fp.hidden and fp.name not in core.hidden_done:
        core.hidden_done.add(fp.name)
        for space, name, type_str, nbytes in fp.hidden:
            core.mem.allocate(space, name, type_str, nbytes)
    core.count_steps(len(fp.body))
    first_end = len(core.ends)
    yield from run_gen(fp.body, vals, core.hist_append)
    for end in core.ends[first_end:]:
        if end.is_producer:
            core.hist_append(fp.return_opid)
            yield from pipeops.drain(core, end, fp.return_opid)
    del core.ends[first_end:]
    return [vals[s] for s in fp.ret_slots]


# Scalars --------------------------------------------------------------------------------


def _width(t) -> int | None:
    if isinstance(t, builtin.IndexType):
        return 64
    if isinstance(t, builtin.IntegerType):
        return t.width.data
    return None


def _float_round(t) -> Callable[[float], float]:
    if isinstance(t, builtin.Float32Type):
        return lambda x: float(np.float32(x))
    if isinstance(t, builtin.Float16Type):
        return lambda x: float(np.float16(x))
    if isinstance(t, builtin.BFloat16Type):
        return _bf16_round
    return float


def _bf16_round(x: float) -> float:
    """x rounded to bf16 (nearest even), as a Python float."""
    out = np.empty(1, BF16)
    bf16_encode(np.array([x], np.float32), out)
    return float(bf16_decode(out)[0])


def _wrap(width: int | None) -> Callable[[int], int] | None:
    if width is None or width >= 64:
        return None
    if width == 1:
        return lambda x: x & 1
    mask, sign = (1 << width) - 1, 1 << (width - 1)
    return lambda x: ((x & mask) ^ sign) - sign


def _unsigned(width: int | None) -> Callable[[int], int]:
    mask = (1 << (width or 64)) - 1
    return lambda x: x & mask


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _nonzero(b: int) -> int:
    if b == 0:
        raise SimError("integer division by zero")
    return b


_INT_BINARY: dict[str, tuple[Callable[[int, int], int], bool]] = {
    "arith.addi": (lambda a, b: a + b, False),
    "arith.subi": (lambda a, b: a - b, False),
    "arith.muli": (lambda a, b: a * b, False),
    "arith.divsi": (lambda a, b: _tdiv(a, _nonzero(b)), False),
    "arith.divui": (lambda a, b: a // _nonzero(b), True),
    "arith.remsi": (lambda a, b: a - b * _tdiv(a, _nonzero(b)), False),
    "arith.remui": (lambda a, b: a % _nonzero(b), True),
    "arith.ceildivsi": (lambda a, b: -((-a) // _nonzero(b)), False),
    "arith.ceildivui": (lambda a, b: -((-a) // _nonzero(b)), True),
    "arith.floordivsi": (lambda a, b: a // _nonzero(b), False),
    "arith.minsi": (min, False),
    "arith.maxsi": (max, False),
    "arith.minui": (min, True),
    "arith.maxui": (max, True),
    "arith.andi": (lambda a, b: a & b, False),
    "arith.ori": (lambda a, b: a | b, False),
    "arith.xori": (lambda a, b: a ^ b, False),
    "arith.shli": (lambda a, b: a << b, False),
    "arith.shrsi": (lambda a, b: a >> b, False),
    "arith.shrui": (lambda a, b: a >> b, True),
}

_FLOAT_BINARY: dict[str, Callable[[float, float], float]] = {
    "arith.addf": lambda a, b: a + b,
    "arith.subf": lambda a, b: a - b,
    "arith.mulf": lambda a, b: a * b,
    "arith.divf": lambda a, b: a / b if b != 0 else (math.copysign(math.inf, a) * math.copysign(1.0, b) if a != 0 else math.nan),
    "arith.maximumf": lambda a, b: math.nan if math.isnan(a) or math.isnan(b) else max(a, b),
    "arith.minimumf": lambda a, b: math.nan if math.isnan(a) or math.isnan(b) else min(a, b),
    "arith.maxnumf": lambda a, b: b if math.isnan(a) else a if math.isnan(b) else max(a, b),
    "arith.minnumf": lambda a, b: b if math.isnan(a) else a if math.isnan(b) else min(a, b),
}

_CMPI = {
    0: lambda a, b: a == b,
    1: lambda a, b: a != b,
    2: lambda a, b: a < b,
    3: lambda a, b: a <= b,
    4: lambda a, b: a > b,
    5: lambda a, b: a >= b,
    6: lambda a, b: a < b,
    7: lambda a, b: a <= b,
    8: lambda a, b: a > b,
    9: lambda a, b: a >= b,
}


def _cmpf(pred: int) -> Callable[[float, float], bool]:
    ordered = {1: "==", 2: ">", 3: ">=", 4: "<", 5: "<=", 6: "!="}
    unordered = {8: "==", 9: ">", 10: ">=", 11: "<", 12: "<=", 13: "!="}
    ops = {"==": lambda a, b: a == b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, "!=": lambda a, b: a != b}
    if pred == 0:
        return lambda a, b: False
    if pred == 15:
        return lambda a, b: True
    if pred == 7:
        return lambda a, b: not (math.isnan(a) or math.isnan(b))
    if pred == 14:
        return lambda a, b: math.isnan(a) or math.isnan(b)
    if pred in ordered:
        f = ops[ordered[pred]]
        return lambda a, b: not (math.isnan(a) or math.isnan(b)) and f(a, b)
    f = ops[unordered[pred]]
    return lambda a, b: math.isnan(a) or math.isnan(b) or f(a, b)


# The compiler --------------------------------------------------------------------------------


class ModuleCompiler:
    def __init__(self, parsed, trace: bool):
        self.parsed = parsed
        self.trace = trace
        self.ops: list[OpInfo] = []
        self.funcs: dict[str, FuncProgram] = {}
        self.func_ops: dict[str, func.FuncOp] = {}
        self.blocking: dict[str, bool] = {}
        self.n_allocs = 0
        for op in parsed.module.walk():
            if isinstance(op, func.FuncOp):
                self.func_ops[op.sym_name.data] = op

    def compile(self) -> Program:
        from ptofa.ir.textio import ENTRY_ATTRS, is_entry

        defined = [f for f in self.func_ops.values() if f.body.blocks]
        entries = [f for f in defined if is_entry(f)]
        if not entries and len(defined) == 1:
            entries = defined  # a single-function module: that function is the kernel
        if len(entries) != 1:
            raise SimError(f"module: the simulator runs one kernel entry (a function with one of {', '.join(ENTRY_ATTRS)}, "
                           f"or the only function of the module); found {len(entries)} entries among {len(defined)} functions")
        entry = self.function(entries[0].sym_name.data)
        if entry.kind is None:
            entry.kind = _inferred_kind(entries[0])
        return Program(self.funcs, self.ops, entry, self.n_allocs)

    def function(self, name: str) -> FuncProgram:
        if name in self.funcs:
            return self.funcs[name]
        if name not in self.func_ops:
            raise SimError(f"func.call: no function @{name} in the module")
        f = self.func_ops[name]
        if not f.body.blocks:
            raise SimError(f"@{name} is a declaration; the simulator needs its body")
        fp = FuncProgram(name, kernel_kind(f))
        self.funcs[name] = fp
        _FunctionCompiler(self, f, fp).run()
        return fp

    def add_op(self, op: Operation, stage: str) -> int:
        self.ops.append(OpInfo(op.name, self.parsed.line(op), stage))
        return len(self.ops) - 1


class _FunctionCompiler:
    def __init__(self, mc: ModuleCompiler, f: func.FuncOp, fp: FuncProgram):
        self.mc = mc
        self.f = f
        self.fp = fp
        self.slots: dict[SSAValue, int] = {}
        self.n = 1  # slot 0: the core
        self.pipe_slots: dict[int, int] = {}
        self.stages = op_stages(f, fp.kind)

    def slot(self, value: SSAValue) -> int:
        s = self.slots.get(value)
        if s is None:
            s = self.slots[value] = self.n
            self.n += 1
        return s

    def run(self) -> None:
        if len(self.f.body.blocks) > 1:
            raise SimError(f"@{self.f.sym_name.data} (line {self.mc.parsed.line(self.f)}): branches between blocks "
                           "(cf.br / cf.cond_br) are not simulated")
        block = self.f.body.blocks[0]
        self.fp.arg_slots = [self.slot(a) for a in block.args]
        self.fp.arg_names = [a.name_hint or f"arg{i}" for i, a in enumerate(block.args)]
        self.fp.arg_types = [a.type for a in block.args]
        ret = block.last_op
        self.fp.return_opid = self.mc.add_op(ret, "other") if ret is not None else 0
        body, _ = self.region(block)
        self.fp.body = body
        if isinstance(ret, func.ReturnOp):
            self.fp.ret_slots = [self.slot(v) for v in ret.operands]
        self.fp.hidden = self.hidden_scratch()
        self.fp.nslots = self.n

    def hidden_scratch(self) -> list[tuple[str, str, str, int]]:
        """ptoas's implicit UB tmp buffers (docs/sources.md §2.5), once per op."""
        out = []
        for op in self.f.walk():
            hidden = d.hidden_scratch(op)
            if hidden is not None:
                space, shape, nbytes = hidden
                out.append((space, f"<hidden tmp of {op.name} line {self.mc.parsed.line(op)}>", shape, nbytes))
        return out

    def region(self, block: Block) -> tuple[list[tuple[Fn, int]], bool]:
        """Compile a block's ops (without its terminator yield); returns (body, may_block)."""
        body = []
        blocking = False
        for op in block.ops:
            if isinstance(op, (scf.YieldOp, func.ReturnOp)):
                continue
            fn, may_block = self.op(op)
            if fn is None:
                continue
            opid = self.mc.add_op(op, self.stages.get(op, "other"))
            if isinstance(op, d.PIPE_INIT_OPS):
                fn = pipeops.init_pipe(op, self.slot, self.pipe_slot(op.id_value), opid)
            elif isinstance(op, d.PIPE_DATA_OPS):
                fn = pipeops.OPS[op.ROLE](op, self.slot, self.pipe_slot(op.id_value), opid)
            if self.mc.trace:
                if isinstance(op, (d.PIPE_DATA_OPS, scf.ForOp, scf.IfOp, func.CallOp, d.AllocTileOp, *d.SECTION_OPS)):
                    pass
                elif _is_scalar_op(op):
                    fn = wrap_scalar(fn, self.mc.parsed.line(op))
                else:
                    fn = wrap_tile_op(op, fn, opid, self.slot, self.mc.ops)
            body.append((fn, opid))
            blocking = blocking or may_block
        return body, blocking

    def pipe_slot(self, pipe_id: int) -> int:
        s = self.pipe_slots.get(pipe_id)
        if s is None:
            s = self.pipe_slots[pipe_id] = self.n
            self.n += 1
        return s

    # dispatch ------------------------------------------------------------------------------
    def op(self, op: Operation) -> tuple[Fn | None, bool]:
        """(fn, may_block) of one op: a PTO op through `registry.SEMANTICS`, else scf, func or arith."""
        sem = registry.SEMANTICS.get(type(op))
        if sem is not None:
            return sem.build(self, op) if sem.by_compiler else (sem.build(op, self.slot), False)
        if isinstance(op, scf.ForOp):
            return self.for_op(op)
        if isinstance(op, scf.IfOp):
            return self.if_op(op)
        if isinstance(op, func.CallOp):
            return self.call(op)
        simple = self.simple(op)
        if simple is not None:
            return simple, False
        raise SimError(f"{op.name} (line {self.mc.parsed.line(op)}): op not supported by the simulator")

    def simple(self, op: Operation) -> Fn | None:
        """The closure of an arith op, or None."""
        slot = self.slot
        name = op.name
        if isinstance(op, arith.ConstantOp):
            r = slot(op.result)
            value = op.value
            if isinstance(value, builtin.FloatAttr):
                c = _float_round(op.result.type)(value.value.data)
            elif isinstance(value, builtin.IntegerAttr):
                c = value.value.data
                if isinstance(op.result.type, builtin.IntegerType) and op.result.type.width.data == 1:
                    c = c & 1
            else:
                raise SimError(f"{name} (line {self.mc.parsed.line(op)}): constant {value} not supported")

            def constant(vals):
                vals[r] = c

            return constant
        if name in _INT_BINARY:
            f, unsigned = _INT_BINARY[name]
            a, b, r = slot(op.lhs), slot(op.rhs), slot(op.result)
            width = _width(op.result.type)
            wrap = _wrap(width)
            if unsigned:
                u = _unsigned(width)
                g = f

                def f(x, y, g=g, u=u):
                    return g(u(x), u(y))

            if wrap is None:

                def int_binary(vals):
                    vals[r] = f(vals[a], vals[b])

            else:

                def int_binary(vals):
                    vals[r] = wrap(f(vals[a], vals[b]))

            return int_binary
        if name in _FLOAT_BINARY:
            f = _FLOAT_BINARY[name]
            a, b, r = slot(op.lhs), slot(op.rhs), slot(op.result)
            rnd = _float_round(op.result.type)

            def float_binary(vals):
                vals[r] = rnd(f(vals[a], vals[b]))

            return float_binary
        if isinstance(op, arith.CmpiOp):
            pred = op.predicate.value.data
            f = _CMPI[pred]
            a, b, r = slot(op.lhs), slot(op.rhs), slot(op.result)
            if pred >= 6:
                u = _unsigned(_width(op.lhs.type))

                def cmpi(vals):
                    vals[r] = int(f(u(vals[a]), u(vals[b])))

            else:

                def cmpi(vals):
                    vals[r] = int(f(vals[a], vals[b]))

            return cmpi
        if isinstance(op, arith.CmpfOp):
            f = _cmpf(op.predicate.value.data)
            a, b, r = slot(op.lhs), slot(op.rhs), slot(op.result)

            def cmpf(vals):
                vals[r] = int(f(vals[a], vals[b]))

            return cmpf
        if isinstance(op, arith.SelectOp):
            c, a, b, r = slot(op.cond), slot(op.lhs), slot(op.rhs), slot(op.result)

            def select(vals):
                vals[r] = vals[a] if vals[c] else vals[b]

            return select
        if name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.trunci", "arith.extui"):
            a, r = slot(op.operands[0]), slot(op.results[0])
            wrap = _wrap(_width(op.results[0].type))
            pre = _unsigned(_width(op.operands[0].type)) if name in ("arith.index_castui", "arith.extui") else None
            if pre is None and wrap is None:

                def cast(vals):
                    vals[r] = vals[a]

            else:
                pre = pre or (lambda x: x)
                wrap = wrap or (lambda x: x)

                def cast(vals):
                    vals[r] = wrap(pre(vals[a]))

            return cast
        if name in ("arith.sitofp", "arith.uitofp", "arith.extf", "arith.truncf"):
            a, r = slot(op.operands[0]), slot(op.results[0])
            rnd = _float_round(op.results[0].type)
            pre = _unsigned(_width(op.operands[0].type)) if name == "arith.uitofp" else (lambda x: x)

            def to_float(vals):
                vals[r] = rnd(pre(vals[a]))

            return to_float
        if name in ("arith.fptosi", "arith.fptoui"):
            a, r = slot(op.operands[0]), slot(op.results[0])
            wrap = _wrap(_width(op.results[0].type)) or (lambda x: x)

            def to_int(vals):
                x = vals[a]
                if math.isnan(x) or math.isinf(x):
                    raise SimError(f"{name}: cannot convert {x} to an integer")
                vals[r] = wrap(int(x))

            return to_int
        if name == "arith.negf":
            a, r = slot(op.operands[0]), slot(op.results[0])

            def negf(vals):
                vals[r] = -vals[a]

            return negf
        return None

    @registry.compiled_by(*d.PIPE_INIT_OPS, *d.PIPE_DATA_OPS)
    def pipe_op(self, op: Operation) -> tuple[Fn, bool]:
        """A placeholder; `region` binds the `pipeops` closure once the op has its id."""
        local = op.is_local if isinstance(op, d.PIPE_INIT_OPS) else not isinstance(op.entry_type, (d.TensorViewType, type(None)))
        if getattr(op, "aiv_subblockid", None) is not None:
            raise SimError(f"{op.name} (pipe id {op.id_value}): an explicit aiv_subblockid is not simulated")
        if local:
            raise SimError(f"{op.name} (pipe id {op.id_value}): local (consumer-buffer) pipes with tile entries are not simulated; "
                           "ptofa runs global (gm_slot_tensor) pipes")
        return _placeholder, isinstance(op, d.PIPE_DATA_OPS) and op.ROLE in ("talloc", "tpop")

    @registry.compiled_by(d.AllocTileOp)
    def alloc_tile(self, op: d.AllocTileOp) -> tuple[Fn, bool]:
        """Allocate on the core's first execution (one tile per op and core), then reuse."""
        t = op.result.type
        k = self.mc.n_allocs
        self.mc.n_allocs += 1
        r = self.slot(op.result)
        rows, cols = t.shape
        dtype = tileops.np_dtype(t.dtype)
        fortran = not t.is_row_major and not t.is_boxed
        vr, vc = t.valid
        vr_s = self.slot(op.valid_row) if op.valid_row is not None else None
        vc_s = self.slot(op.valid_col) if op.valid_col is not None else None
        dynamic = vr_s is not None or vc_s is not None
        vr0 = rows if vr == d.DYN else vr
        vc0 = cols if vc == d.DYN else vc
        name = op.result.name_hint or f"tile{k}"
        space = t.space
        type_str = str(t)
        nbytes = t.nbytes

        def alloc(vals):
            core = vals[0]
            tile = core.tiles[k]
            if tile is None:
                core.mem.allocate(space, "%" + name, type_str, nbytes)
                storage = new_tile_storage(rows, cols, dtype, fortran)
                tile = core.tiles[k] = Tile(storage, vr0, vc0, core.launch.new_buffer_id(), name, space)
            if dynamic:
                tile.set_valid(vals[vr_s] if vr_s is not None else vr0, vals[vc_s] if vc_s is not None else vc0)
            vals[r] = tile

        return alloc, False

    def for_op(self, op: scf.ForOp) -> tuple[Fn, bool]:
        lb, ub, step = self.slot(op.lb), self.slot(op.ub), self.slot(op.step)
        block = op.body.blocks[0]
        iv = self.slot(block.args[0])
        carried = [self.slot(a) for a in block.args[1:]]
        inits = [self.slot(v) for v in op.iter_args]
        results = [self.slot(v) for v in op.results]
        body, blocking = self.region(block)
        y = block.last_op
        yields = [self.slot(v) for v in y.operands] if isinstance(y, scf.YieldOp) else []
        n = len(body)
        line = self.mc.parsed.line(op)

        def bounds(vals):
            lo, hi, st = vals[lb], vals[ub], vals[step]
            if st <= 0:
                raise SimError(f"scf.for (line {line}): step {st} must be positive")
            for c, i in zip(carried, inits):
                vals[c] = vals[i]
            return range(lo, hi, st)

        def finish(vals):
            for res, c in zip(results, carried):
                vals[res] = vals[c]

        if not blocking:
            if not carried:

                def loop(vals):
                    core = vals[0]
                    hist = core.hist_append
                    for i in bounds(vals):
                        vals[iv] = i
                        core.count_steps(n)
                        for fn, opid in body:
                            hist(opid)
                            fn(vals)

                return loop, False

            def loop_carried(vals):
                core = vals[0]
                for i in bounds(vals):
                    vals[iv] = i
                    core.count_steps(n)
                    run_plain(body, vals, core.hist_append)
                    new = [vals[s] for s in yields]
                    for c, v in zip(carried, new):
                        vals[c] = v
                finish(vals)

            return loop_carried, False

        def loop_gen(vals):
            core = vals[0]
            hist = core.hist_append
            for i in bounds(vals):
                vals[iv] = i
                core.count_steps(n)
                for fn, opid in body:
                    hist(opid)
                    r = fn(vals)
                    if r is not None:
                        yield from r
                if yields:
                    new = [vals[s] for s in yields]
                    for c, v in zip(carried, new):
                        vals[c] = v
            finish(vals)

        return loop_gen, True

    def if_op(self, op: scf.IfOp) -> tuple[Fn, bool]:
        cond = self.slot(op.cond)
        results = [self.slot(v) for v in op.results]
        branches = []
        blocking = False
        for region in (op.true_region, op.false_region):
            if not region.blocks:
                branches.append(([], []))
                continue
            block = region.blocks[0]
            body, b = self.region(block)
            blocking = blocking or b
            y = block.last_op
            branches.append((body, [self.slot(v) for v in y.operands] if isinstance(y, scf.YieldOp) else []))
        (then_body, then_y), (else_body, else_y) = branches

        def pick(vals):
            return (then_body, then_y) if vals[cond] else (else_body, else_y)

        if not blocking:

            def branch(vals):
                body, ys = pick(vals)
                core = vals[0]
                core.count_steps(len(body))
                run_plain(body, vals, core.hist_append)
                for res, s in zip(results, ys):
                    vals[res] = vals[s]

            return branch, False

        def branch_gen(vals, body, ys):
            core = vals[0]
            core.count_steps(len(body))
            yield from run_gen(body, vals, core.hist_append)
            for res, s in zip(results, ys):
                vals[res] = vals[s]

        def branch_blocking(vals):
            body, ys = pick(vals)
            return branch_gen(vals, body, ys)

        return branch_blocking, True

    @registry.compiled_by(d.SectionCubeOp, d.SectionVectorOp)
    def section(self, op) -> tuple[Fn, bool]:
        """pto.section.cube / .vector: the body runs only on that core type (ptoas's #if defined)."""
        body, blocking = self.region(op.body.blocks[0])
        kind = op.KIND

        def plain(vals):
            core = vals[0]
            if core.kind == kind:
                core.count_steps(len(body))
                run_plain(body, vals, core.hist_append)

        if not blocking:
            return plain, False

        def gen(vals, core):
            core.count_steps(len(body))
            yield from run_gen(body, vals, core.hist_append)

        def blocking_fn(vals):
            core = vals[0]
            return gen(vals, core) if core.kind == kind else None

        return blocking_fn, True

    def call(self, op: func.CallOp) -> tuple[Fn, bool]:
        callee = self.mc.function(op.callee.root_reference.data)
        args = [self.slot(v) for v in op.arguments]
        results = [self.slot(v) for v in op.results]
        kind = callee.kind

        def call_gen(vals, core):
            out = yield from invoke(callee, core, [vals[s] for s in args])
            for res, v in zip(results, out):
                vals[res] = v

        def call(vals):
            core = vals[0]
            if kind is not None and kind != core.kind:
                return None  # the other core type's body is compiled out (#if defined(__DAV_...))
            return call_gen(vals, core)

        return call, True


def _noop(vals) -> None:
    return None


def _placeholder(vals) -> None:
    raise AssertionError("pipe op placeholder executed")


# Runtime and pointer ops --------------------------------------------------------------------


@registry.semantics(d.SetFftsOp)
def set_ffts(op: d.SetFftsOp, slot) -> Fn:
    """The FFTS base address only matters on hardware: a no-op."""
    return _noop


@registry.semantics(d.AddPtrOp)
def addptr(op: d.AddPtrOp, slot) -> Fn:
    p, o, r = slot(op.ptr), slot(op.offset), slot(op.result)

    def fn(vals):
        vals[r] = vals[p].add(vals[o])

    return fn


@registry.semantics(d.LoadScalarOp)
def load_scalar(op: d.LoadScalarOp, slot) -> Fn:
    """One GM element, bounds-checked like any GM access."""
    p, i, r = slot(op.ptr), slot(op.index), slot(op.result)

    def fn(vals):
        ptr = vals[p]
        value = GmView(ptr.buf, ptr.offset + int(vals[i]) * ptr.dtype.itemsize, ptr.dtype, (1,), (1,)).array()[0]
        vals[r] = value.item()

    return fn


@registry.semantics(d.StoreScalarOp)
def store_scalar(op: d.StoreScalarOp, slot) -> Fn:
    v, p, i = slot(op.value), slot(op.ptr), slot(op.index)

    def fn(vals):
        ptr = vals[p]
        GmView(ptr.buf, ptr.offset + int(vals[i]) * ptr.dtype.itemsize, ptr.dtype, (1,), (1,)).array()[0] = vals[v]

    return fn


_RUNTIME_IDS = {d.GetBlockIdxOp: "block", d.GetBlockNumOp: "block_dim", d.GetSubblockIdxOp: "sb", d.GetSubblockNumOp: "sub_num"}


@registry.semantics(*_RUNTIME_IDS)
def runtime_id(op, slot) -> Fn:
    """Reads the executing core's attribute (block index, block_dim, sub-block index or count)."""
    r, attr = slot(op.result), _RUNTIME_IDS[type(op)]

    def fn(vals):
        vals[r] = getattr(vals[0], attr)

    return fn


_SCALAR_TYPES = (d.AddPtrOp, d.LoadScalarOp, d.StoreScalarOp, d.MakeTensorViewOp, d.PartitionViewOp, d._RuntimeIdOp, d.SetFftsOp, d.TReshapeOp, d.SubviewOp,
                 d.SetValidShapeOp, d.TSetValOp, d.TGetValOp, d.TPrintOp, d.ReserveBufferOp, d.ImportReservedBufferOp,
                 d.CastPtrOp, d.BarrierOp, *d.PIPE_INIT_OPS, d.AllocMultiTileOp, d.MultiTileGetOp,
                 d.PtrToIntOp, d.IntToPtrOp, d.CmoCacheInvalidOp, d.FenceBarrierAllOp, d.DeclareLocalArrayOp, d.LocalArrayGetOp,
                 d.LocalArraySetOp, *d.sync.OPS, *d.gmquery.VIEW_QUERY_OPS,
                 *d.structs.OPS)


def _is_scalar_op(op: Operation) -> bool:
    return isinstance(op, _SCALAR_TYPES) or op.name.startswith("arith.")


def _inferred_kind(f: func.FuncOp) -> str | None:
    """The core type of a kernel without pto.kernel_kind, from the tiles it allocates: vec
    tiles only -> vector, cube spaces only -> cube, both or none -> every core runs it."""
    spaces = {op.result.type.space for op in f.walk() if isinstance(op, d.AllocTileOp)}
    if spaces and spaces <= {"vec"}:
        return "vector"
    if spaces and not spaces & {"vec"}:
        return "cube"
    return None


def compile_module(parsed, trace: bool = False) -> Program:
    return ModuleCompiler(parsed, trace).compile()

