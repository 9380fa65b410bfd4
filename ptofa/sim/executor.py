"""Execute a parsed `.pto` module on the CPU: blocks of 1 cube + 2 vector cores.

`simulate(parsed, args, block_dim)` runs the `pto.entry` function on every core of
every block. Blocks run one after another; inside a block the cube core (which runs
only cube-kind bodies) and the two vector cores (sub-blocks 0 and 1, vector-kind
bodies only) are coroutines scheduled round-robin. Only pipe ops (and the pipe
destructor drain at function exit) can block; when every live core of a block is
blocked the launch fails with `SimDeadlock`, and unbalanced pipes at kernel exit
with `SimImbalance`. Results are written into the caller's GM buffers. How to run
(tracing, blocks, step limit, an injected fault) is a `RunOptions`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from xdsl.dialects import builtin

from ptofa.ir import dialect as d
from ptofa.sim import (  # noqa: F401 (each family registers its ops' semantics in `registry` before a module compiles)
    accessops, commops, extraops, fusedops, gatherops, gmqueryops, ipipeops, localarrayops, maskops, multitile, partialops,
    scatterops, structops, syncops,
)
from ptofa.sim.compiler import FuncProgram, Program, compile_module, invoke
from ptofa.sim.errors import SimDeadlock, SimError, SimImbalance, SimStepLimit
from ptofa.sim.faults import inject_fault
from ptofa.sim.memory import GmPointer, LocalMemory
from ptofa.sim.options import RunOptions
from ptofa.sim.pipes import PipeProtocol
from ptofa.sim.report import deadlock_report, imbalance_report, ring_warnings
from ptofa.sim.tileops import np_dtype
from ptofa.sim.trace import Trace, TraceOp
from ptofa.ir.textio import ParsedModule

CORE_NAMES = ("cube", "vec0", "vec1")
# Compiled programs per parsed module (by identity, dropped with it) and trace flag.
_PROGRAMS: dict[int, dict[tuple[int, bool], tuple[builtin.ModuleOp, Program]]] = {}
HISTORY = 6  # ops remembered per core for reports


@dataclass
class SimResult:
    """Outcome of a launch. Outputs are in the caller's GM buffers."""

    block_dim: int
    steps: int  # op executions (loop bodies counted per iteration)
    wall_s: float
    steps_per_core: dict[tuple[int, str], int] = field(default_factory=dict)
    peak_bytes: dict[tuple[int, str], dict[str, int]] = field(default_factory=dict)  # (block, core) -> space -> bytes
    pipe_counts: dict[tuple[int, int], dict[str, dict[str, int]]] = field(default_factory=dict)  # (block, id) -> counter -> core -> n
    warnings: list[str] = field(default_factory=list)  # GM slot rings that overlap or differ between sides
    trace: Trace | None = None


class LaunchState:
    """State shared by all cores of a launch."""

    def __init__(self, program: Program, block_dim: int, max_steps: int | None, trace: Trace | None):
        self.program = program
        self.block_dim = block_dim
        self.max_steps = max_steps if max_steps is not None else 1 << 62
        self.steps = 0
        self.progress = 0
        self.trace = trace
        self.slot_ids: dict[tuple[int, int, int], int] = {}
        self.rings: list[tuple] = []  # (block, pipe id, core, buffer, lo, hi) per pipe end
        self._next_id = 0

    def new_buffer_id(self) -> int:
        self._next_id += 1
        return self._next_id


class BlockState:
    def __init__(self, block: int):
        self.block = block
        self.pipes: dict[int, PipeProtocol] = {}


class Core:
    """One AIC or AIV of a block: identity, local memory, pipe ends, report state."""

    def __init__(self, launch: LaunchState, block_state: BlockState, name: str, traced: bool):
        self.launch = launch
        self.program = launch.program
        self.block_state = block_state
        self.block = block_state.block
        self.block_dim = launch.block_dim
        self.name = name
        self.kind = "cube" if name == "cube" else "vector"
        self.sb = 1 if name == "vec1" else 0
        self.sub_num = 2
        self.hist: deque[int] = deque(maxlen=HISTORY)
        self.hist_append = self.hist.append
        self.tiles: list = [None] * launch.program.n_allocs
        self.mem = LocalMemory(f"block {self.block} {name}", ())
        self.ends: list = []
        self.hidden_done: set[str] = set()
        self.wait = None
        self.done = False
        self.steps = 0
        self.trace_ops: list[TraceOp] | None = launch.trace.ops(self.block, name) if traced else None
        self.pending_scalar = 0
        self.pending_line = 0
        self.gen = None

    def count_steps(self, n: int) -> None:
        launch = self.launch
        launch.steps += n
        self.steps += n
        if launch.steps > launch.max_steps:
            raise SimStepLimit(f"max_steps={launch.max_steps} exceeded ({launch.steps} op executions)")

    def flush_scalar(self) -> None:
        if self.pending_scalar:
            self.trace_ops.append(
                TraceOp(self.name, self.block, "scalar", self.pending_line, "other", scalar_ops=self.pending_scalar)
            )
            self.pending_scalar = 0


def compiled(parsed: ParsedModule, trace: bool) -> Program:
    """The simulator program of `parsed`, compiled once per parsed module and trace flag.

    A `ParsedModule` is not changed once parsed (a fault makes a new one, `inject_fault`),
    so its program is kept as long as the parsed module lives: a tune's probe launches
    of one kernel compile it once. The key is the module object (its `id`, dropped when
    it dies, so an id is never reused for a stale entry), the `ModuleOp` it holds and
    `trace`, the one option the compiled program depends on."""
    programs = _PROGRAMS.get(id(parsed))
    if programs is None:
        programs = _PROGRAMS[id(parsed)] = {}
        weakref.finalize(parsed, _PROGRAMS.pop, id(parsed), None)
    key = (id(parsed.module), bool(trace))
    if key not in programs:  # the entry holds the ModuleOp, so its id is not reused while cached
        programs[key] = (parsed.module, compile_module(parsed, trace=trace))
    return programs[key][1]


def _bind_args(entry: FuncProgram, args: dict[str, object]) -> list:
    missing = [n for n in entry.arg_names if n not in args]
    if missing:
        raise SimError(f"@{entry.name}: missing arguments {missing} (entry arguments: {entry.arg_names})")
    extra = sorted(set(args) - set(entry.arg_names))
    if extra:
        raise SimError(f"@{entry.name}: unknown arguments {extra} (entry arguments: {entry.arg_names})")
    out = []
    for name, t in zip(entry.arg_names, entry.arg_types):
        value = args[name]
        if isinstance(t, d.PtrType):
            if not isinstance(value, GmPointer):
                raise SimError(f"@{entry.name}: argument %{name} : {t} needs a GmPointer, got {type(value).__name__}")
            want = np_dtype(t.elem) if d.elem_name(t.elem) != "i64" or value.dtype == np.int64 else None
            if want is not None and value.dtype != want:
                raise SimError(f"@{entry.name}: argument %{name} : {t} got a GmPointer of {value.dtype}")
            out.append(value)
        elif isinstance(t, (builtin.Float32Type, builtin.Float16Type)):
            out.append(float(np.float32(value)) if isinstance(t, builtin.Float32Type) else float(np.float16(value)))
        elif isinstance(t, (builtin.IntegerType, builtin.IndexType)):
            if not isinstance(value, (int, np.integer)):
                raise SimError(f"@{entry.name}: argument %{name} : {t} needs an int, got {type(value).__name__}")
            out.append(int(value))
        else:
            raise SimError(f"@{entry.name}: argument %{name} has type {t}, which the simulator cannot pass")
    return out


def _context(core: Core, exc: BaseException) -> str:
    where = core.program.ops[core.hist[-1]].where() if core.hist else "entry"
    return f"block {core.block} {core.name}: in {where}: {exc}"


def _run_block(launch: LaunchState, block: int, entry: FuncProgram, args: list, traced: bool) -> tuple[list[Core], BlockState]:
    state = BlockState(block)
    cores = [Core(launch, state, name, traced) for name in CORE_NAMES]
    for core in cores:
        core.gen = invoke(entry, core, args)
    live = list(cores)
    ops = launch.program.ops
    fresh = set(CORE_NAMES)
    while live:
        progressed = False
        for core in list(live):
            mark = launch.progress
            try:
                next(core.gen)
            except StopIteration:
                core.done = True
                live.remove(core)
                progressed = True
                if core.trace_ops is not None:
                    core.flush_scalar()
                continue
            except SimError as exc:
                raise type(exc)(_context(core, exc)) from exc
            except (ValueError, TypeError, IndexError, AttributeError, RuntimeError, ZeroDivisionError) as exc:
                raise SimError(_context(core, exc)) from exc
            if core.name in fresh:
                fresh.discard(core.name)
                progressed = True
            if launch.progress != mark:
                progressed = True
        if live and not progressed:
            raise SimDeadlock(deadlock_report(block, cores, state.pipes, ops))
    problems = [p for p in (state.pipes[pid].imbalance() for pid in sorted(state.pipes)) if p]
    if problems:
        raise SimImbalance(imbalance_report(block, problems))
    return cores, state


@contextlib.contextmanager
def _single_torch_thread() -> Iterator[None]:
    """Tile-sized matmuls run 5-10x slower with torch's intra-op thread pool than on one
    thread (thread start-up per 128x128 GEMM), so the launch runs single-threaded."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def simulate(
    parsed: ParsedModule,
    args: dict[str, object],
    block_dim: int,
    options: RunOptions | None = None,
    **overrides: object,
) -> SimResult:
    """Run the module's `pto.entry` on `block_dim` blocks (1 cube + 2 vector cores each).

    `args` maps entry argument names (without `%`) to `GmPointer`s and Python scalars.
    `options` (`RunOptions`, default: none set) says how to run: a fault to inject
    into (a copy of) the module first, tracing, which blocks to execute (`blocks`;
    blocks are independent, the others' outputs stay unwritten) and record
    (`trace_blocks`, default: all executed blocks when `trace` is set), a step limit.
    Keyword `overrides` replace fields of `options`: `simulate(p, a, 2, trace=True)`.
    Raises `SimError` (bad access, bad shapes), `SimDeadlock`, `SimImbalance`,
    `SimMemoryOverflow` or `SimStepLimit` with a report, and `PtoCheckError` when an
    injected fault makes the module fail the verifier.
    """
    options = options or RunOptions()
    if overrides:
        options = dataclasses.replace(options, **overrides)
    if block_dim < 1:
        raise SimError(f"block_dim={block_dim} must be >= 1")
    start = time.perf_counter()
    if options.fault is not None:
        parsed = inject_fault(parsed, options.fault)
    trace = options.trace
    program = compiled(parsed, trace)
    bound = _bind_args(program.entry, args)
    tr = Trace(block_dim) if trace else None
    launch = LaunchState(program, block_dim, options.max_steps, tr)
    result = SimResult(block_dim=block_dim, steps=0, wall_s=0.0, trace=tr)
    run = list(options.blocks) if options.blocks is not None else list(range(block_dim))
    bad = [b for b in run if not 0 <= b < block_dim]
    if bad:
        raise SimError(f"blocks {bad} are outside [0, block_dim={block_dim})")
    traced = set(options.trace_blocks) if options.trace_blocks is not None else set(run)
    # IEEE arithmetic as on the device: 1/0 = inf, overflow to inf, no warnings.
    with _single_torch_thread(), np.errstate(all="ignore"):
        for block in run:
            cores, state = _run_block(launch, block, program.entry, bound, trace and block in traced)
            for core in cores:
                result.steps_per_core[(block, core.name)] = core.steps
                result.peak_bytes[(block, core.name)] = {s: n for s, n in core.mem.peak.items() if n}
            for pid, proto in state.pipes.items():
                result.pipe_counts[(block, pid)] = {
                    "talloc": dict(proto.allocs),
                    "tpush": dict(proto.pushes),
                    "tpop": dict(proto.pops),
                    "tfree": dict(proto.frees),
                }
    result.warnings = ring_warnings(launch.rings)
    result.steps = launch.steps
    result.wall_s = time.perf_counter() - start
    return result
