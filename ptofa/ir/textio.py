"""Parse, print and check `.pto` text with the ptofa PTO dialect.

`parse_pto` returns the module and a map from op to its 1-based source line, so
that the verifier, the `run_fa check` command and the simulator can point at
the `.pto` line. `verify_module` runs the op verifiers and the function-level
rules (kernel kinds, pipe pairing) and raises `PtoCheckError` with line numbers.

The function rules include ptoas's memory-planner limit, the static local-memory check of
one kernel function the way ptoas's PlanMemory fails (`peak_usage`, `memory_errors`, at the
end of this module). ptoas plans every `pto.alloc_tile` (and the hidden scratch of ops
written without a tmp operand) into its on-chip space and may overlap buffers whose live
ranges do not intersect; when the live bytes of a space exceed its capacity it stops with
`vec overflow, requires N bits while M bits avaliable!` (docs/sources.md §2.11). `peak_usage`
computes live ranges over the function's ops in program order: a tile lives from its alloc
to its last use (uses through `treshape`/`subview` views and the slots of a multi-buffer
tile count; a multi-buffer tile needs all its slots), and a use inside a loop that the
alloc is outside of keeps the tile live to the end of that loop. Hidden scratch lives only
at its op. The peak is therefore a lower bound of what any planner needs: exceeding a
capacity is a certain failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, scf
from xdsl.ir import Operation, SSAValue
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span

from ptofa.ir import dialect as d
from ptofa.ir.dialect import make_context  # noqa: F401 (re-exported)
from ptofa.ir.dialect.lowering import lowering_errors
from ptofa.ir.target import ALIGNMENT, CAPACITY, align


class PtoCheckError(Exception):
    """A `.pto` file does not parse or verify; `errors` are (line, message) pairs."""

    def __init__(self, errors: list[tuple[int, str]], path: str = "<pto>"):
        self.errors = errors
        self.path = path
        super().__init__("\n".join(f"{path}:{line}: error: {msg}" for line, msg in errors))


class _LineParser(Parser):
    """A parser that remembers the source line of every op it parses."""

    def __init__(self, ctx: Context, text: str, name: str):
        super().__init__(ctx, text, name)
        self.op_lines: dict[Operation, int] = {}
        self._frames: list[bool] = []  # per op being parsed: has it parsed a nested op yet?
        self._line_starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self._line_starts.append(i + 1)

    def line_of(self, pos: int) -> int:
        import bisect

        return bisect.bisect_right(self._line_starts, pos)

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        if self._frames:
            self._frames[-1] = True  # the enclosing op has a nested op
        self._frames.append(False)
        try:
            op = super().parse_operation()
        except ParseError as exc:
            # A leaf op's error found at the lookahead token (the next line) belongs to the op:
            # e.g. "Operation pto.x is not registered" or a custom parser's check after its last token.
            has_nested = self._frames[-1]
            span = exc.span
            lexing = exc.msg.startswith("Unexpected character")  # a stray character is where the lexer met it
            if (not has_nested and not lexing and not getattr(exc, "_ptofa_located", False)
                    and self.line_of(span.start) > self.line_of(start)):
                text = self.lexer.input.content
                line_start = text.rfind("\n", 0, span.start) + 1
                if not text[line_start:span.start].strip():
                    exc = ParseError(Span(start, start, self.lexer.input), exc.msg)
            exc._ptofa_located = True  # type: ignore[attr-defined]
            raise exc from None
        except Exception as exc:
            if not hasattr(exc, "_ptofa_start"):
                exc._ptofa_start = start  # type: ignore[attr-defined]  # the innermost op being parsed
            raise
        finally:
            self._frames.pop()
        self.op_lines[op] = self.line_of(start)
        return op


@dataclass
class ParsedModule:
    module: builtin.ModuleOp
    op_lines: dict[Operation, int] = field(default_factory=dict)
    path: str = "<pto>"

    def line(self, op: Operation) -> int:
        return self.op_lines.get(op, 0)


def read_pto(path: str | Path) -> str:
    """A `.pto` file's text. Raises PtoCheckError naming the line of the first byte that is not
    UTF-8 (MLIR source is UTF-8) or a byte order mark (ptoas: 'unexpected character')."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PtoCheckError([(line, f"not UTF-8 text: byte 0x{data[exc.start]:02x} at column {column} "
                                    "(MLIR source is UTF-8)")], str(path)) from None
    if text.startswith("\ufeff"):
        raise PtoCheckError([(1, "a UTF-8 byte order mark starts the file (ptoas: 'unexpected character'); "
                                 "save it without one")], str(path))
    return text


def parse_pto(text: str, path: str = "<pto>") -> ParsedModule:
    """Parse `.pto` text (custom or generic syntax, aliases allowed). Raises PtoCheckError."""
    unterminated = _unterminated_string(text)
    if unterminated:
        raise PtoCheckError([(unterminated, "unterminated string literal (a string ends on its line)")], path)
    if _only_comments(text):
        # MLIR (and so ptoas) reads a file without ops as an empty module, which compiles.
        return ParsedModule(builtin.ModuleOp([]), {}, path)
    try:  # xDSL's parser reads the first token when it is made: a bad first character fails here
        parser = _LineParser(make_context(), text, path)
    except ParseError as exc:
        line = text.count("\n", 0, exc.span.start) + 1 if getattr(exc, "span", None) is not None else 1
        raise PtoCheckError([(line, _first_line(str(exc)))], path) from None
    try:
        module = parser.parse_module()
    except ParseError as exc:
        span = getattr(exc, "span", None)  # a zero-length span is falsy: test for None
        line = parser.line_of(span.start) if span is not None else 0
        raise PtoCheckError([(line, _first_line(str(exc)))], path) from None
    except (VerifyException, DiagnosticException) as exc:
        # An attribute or type verifier that fires while parsing: report the op being parsed.
        raise PtoCheckError([(_parse_line(parser, exc), _first_line(str(exc)))], path) from None
    except OverflowError as exc:
        # xDSL packs a float literal into its type while parsing: 1.0e5 : f16 overflows.
        raise PtoCheckError([(_parse_line(parser, exc), "float literal out of range for its type")], path) from None
    except Exception as exc:  # noqa: BLE001 - bad input must give an error line, never a traceback
        line = _parse_line(parser, exc)
        raise PtoCheckError([(line, f"cannot parse: {type(exc).__name__}: {_first_line(str(exc)) or 'bad input'}")], path) from None
    parsed = ParsedModule(module, parser.op_lines, path)
    errors = _ssa_errors(parsed, text)
    if errors:
        raise PtoCheckError(errors, path)
    return parsed


def _only_comments(text: str) -> bool:
    """True when every line is blank or a `//` comment."""
    return all(not line.strip() or line.lstrip().startswith("//") for line in text.splitlines())


def _unterminated_string(text: str) -> int:
    """The first line (1-based) whose string literal does not end on it, else 0. MLIR strings
    cannot span lines, and xDSL's lexer takes time quadratic in the rest of the file to find
    that out, so the checker reports it before parsing."""
    for number, line in enumerate(text.splitlines(), 1):
        if '"' not in line:
            continue
        inside = escaped = False
        for i, ch in enumerate(line):
            if inside:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    inside = False
            elif ch == '"':
                inside = True
            elif ch == "/" and line.startswith("//", i):
                break
        if inside:
            return number
    return 0


def _parse_line(parser: _LineParser, exc: BaseException) -> int:
    """The line of the op being parsed when `exc` stopped parsing (else of the current token)."""
    start = getattr(exc, "_ptofa_start", None)
    if start is not None:
        return parser.line_of(start)
    return max(1, parser.line_of(parser._current_token.span.start))


def _ssa_errors(parsed: ParsedModule, text: str) -> list[tuple[int, str]]:
    """What xDSL's parser lets through: a value used before (or outside the scope of) its
    definition, and a decimal float literal too large for its type (parsed as inf)."""
    from xdsl.dialects.builtin import FloatAttr

    errors: list[tuple[int, str]] = []
    lines = text.splitlines()
    positions: dict = {}  # block -> {op: its index}, built once per block
    for op in parsed.module.walk():
        for i, operand in enumerate(op.operands):
            msg = _dominance_error(op, operand, positions)
            if msg:
                errors.append((parsed.line(op), f"'{op.name}' operand #{i}: {msg}"))
        for attr in list(op.properties.values()) + list(op.attributes.values()):
            if isinstance(attr, FloatAttr) and attr.value.data in (float("inf"), float("-inf")):
                ln = parsed.line(op)
                src = lines[ln - 1] if 0 < ln <= len(lines) else ""
                if "0x" not in src:
                    errors.append((ln, f"'{op.name}' float literal: out of range for {attr.type}"))
    return sorted(errors, key=lambda e: e[0])


def _dominance_error(user: Operation, value, positions: dict) -> str | None:
    """SSA dominance: the definition is an earlier op of the block that holds the use (or of a
    block enclosing it), or sits in a block that dominates the use's block in a CFG region.
    `positions` caches each block's op indices (block -> {op: index}) across calls."""
    from xdsl.ir import Block, BlockArgument, OpResult

    if isinstance(value, BlockArgument):
        block = value.block
        def_op = None
    elif isinstance(value, OpResult):
        def_op = value.op
        block = def_op.parent_block()
    else:  # a forward reference the parser never resolved
        return f"use of value %{value.name_hint or '?'} that is never defined in scope"
    if block is None:
        return "use of a value outside any block"
    region = block.parent_region()
    # the ancestor of `user` that sits in `block`'s region
    anc: Operation | None = user
    while anc is not None and (anc.parent_block() is None or anc.parent_block().parent_region() is not region):
        anc = anc.parent_op()
    if anc is None:
        return f"%{value.name_hint or '?'} is used outside the region that defines it"
    if anc.parent_block() is not block:
        if block in _dominators(region)[anc.parent_block()]:
            return None
        return f"%{value.name_hint or '?'} is used in a block its definition's block does not dominate"
    if def_op is None:
        return None
    if anc is def_op:
        return f"%{value.name_hint or '?'} is used by the op that defines it" if anc is user else None
    index = positions.get(block)
    if index is None:
        index = positions[block] = {o: i for i, o in enumerate(block.ops)}
    if index[anc] < index[def_op]:
        return f"%{value.name_hint or '?'} is used before its definition (operand does not dominate this use)"
    return None


def _dominators(region) -> dict:
    """Each block of a CFG region (cf.br / cf.cond_br) -> the set of blocks that dominate it,
    by the iterative data-flow fixpoint from the entry block."""
    blocks = list(region.blocks)
    preds: dict = {b: [] for b in blocks}
    for b in blocks:
        term = b.last_op
        for succ in (term.successors if term is not None else ()):
            if succ in preds:
                preds[succ].append(b)
    everything = set(blocks)
    dom = {b: ({b} if b is blocks[0] else set(everything)) for b in blocks}
    changed = True
    while changed:
        changed = False
        for b in blocks[1:]:
            incoming = [dom[p] for p in preds[b]]
            new = set.intersection(*incoming) | {b} if incoming else {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


def _first_line(msg: str) -> str:
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    # xDSL's messages quote the source around the error; keep the message lines.
    for ln in reversed(lines):
        if "^" not in ln and not ln.lstrip().startswith(("|", "~")):
            return ln.strip()
    return lines[-1].strip() if lines else msg


def print_pto(module: builtin.ModuleOp) -> str:
    from io import StringIO

    out = StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue().rstrip("\n") + "\n"


def verify_module(parsed: ParsedModule, launch_rules: bool = True, backend: str | None = None,
                  level: str | None = None) -> None:
    """Op verifiers + function rules (+ ptofa's own rules unless `launch_rules` is False: the
    launch rules and the C++-build rules, `d.BuildRuleError`, which ptoas does not check) +
    the back end's lowering (`ptofa.ir.dialect.lowering`: with ptoas's default EmitC back end, the
    ops it cannot lower; `backend` is ptoas's --pto-backend, None reads the module's
    `pto.backend` attribute); `level` is ptoas's --pto-level (None: the level the module's
    allocations imply, `_level_errors`); raises PtoCheckError listing every error with its line."""
    errors: list[tuple[int, str]] = []
    for op in parsed.module.walk():
        if op is parsed.module:
            continue
        try:
            op.verify(verify_nested_ops=False)
        except d.BuildRuleError as exc:
            if launch_rules:
                errors.append((parsed.line(op), _first_line(str(exc))))
        except (VerifyException, DiagnosticException) as exc:
            errors.append((parsed.line(op), _first_line(str(exc))))
        except Exception as exc:  # noqa: BLE001 - a verifier tripping on bad IR is still an error line
            errors.append((parsed.line(op), f"'{op.name}' does not verify: {type(exc).__name__}: {_first_line(str(exc))}"))
    try:
        for func_op in parsed.module.walk():
            if isinstance(func_op, func.FuncOp):
                errors += [(parsed.line(op) if op else parsed.line(func_op), msg) for op, msg in function_errors(func_op)]
        errors += [(parsed.line(op) if op else 1, msg) for op, msg in module_errors(parsed.module, level)]
        errors += [(parsed.line(op) if op else 1, msg) for op, msg in lowering_errors(parsed.module, backend)]
        if launch_rules:
            errors += [(parsed.line(op) if op else 1, msg) for op, msg in launch_errors(parsed.module)]
    except Exception as exc:  # noqa: BLE001 - the function rules assume ops that verify
        if not errors:
            raise

    if errors:
        errors.sort(key=lambda e: e[0])
        raise PtoCheckError(errors, parsed.path)


def kernel_kind(func_op: func.FuncOp) -> str | None:
    attrs = func_op.attributes
    kind = attrs.get("pto.kernel_kind")
    if isinstance(kind, d.KernelKindAttr):
        return kind.value.data
    return None


def _section_kind(op: Operation) -> str | None:
    """The core kind of the pto.section.cube / pto.section.vector around `op`, if any."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, func.FuncOp):
        if isinstance(parent, d.SECTION_OPS):
            return parent.KIND
        parent = parent.parent_op()
    return None


def function_errors(func_op: func.FuncOp) -> list[tuple[Operation | None, str]]:
    """Rules that span a function: op placement by kernel kind, pipe init/use pairing."""
    errors: list[tuple[Operation | None, str]] = []
    fkind = kernel_kind(func_op)
    kind = fkind
    fname = func_op.sym_name.data
    inits: dict[int, d._InitPipeOp] = {}
    init_kinds: set[type] = set()
    for op in func_op.walk():
        kind = _section_kind(op) or fkind
        if isinstance(op, d.PIPE_INIT_OPS):
            if op.parent_op() is not func_op and not isinstance(op.parent_op(), d.SECTION_OPS):
                errors.append((op, f"'{op.name}' placement: pipe init must be at the top level of the function (it constructs a TPipe), not inside a loop or branch"))
            if kind != op.CORE:
                errors.append((op, f"'{op.name}' kernel kind: needs a {op.CORE} kernel function, @{fname} is {kind or 'not a kernel function'}"))
            if op.id_value in inits:
                errors.append((op, f"'{op.name}' id: pipe id {op.id_value} is initialised twice in @{fname} (requires 'id' to be unique)"))
            inits[op.id_value] = op
            init_kinds.add(type(op))
        elif isinstance(op, d.PIPE_DATA_OPS):
            if kind != op.CORE:
                errors.append((op, f"'{op.name}' kernel kind: runs in {op.CORE} code, @{fname} is {kind or 'not a kernel function'}"))
            init = inits.get(op.id_value)
            if init is None:
                errors.append((op, f"'{op.name}' pipe: id {op.id_value} is not initialised earlier in @{fname}"))
                continue
            if not init.dir_value & op.DIRECTION:
                errors.append((op, f"'{op.name}' direction: pipe id {op.id_value} has dir_mask={init.dir_value}, this op needs dir_mask={op.DIRECTION}"))
            if init.is_local:
                errors += _local_entry_errors(op)
                continue
            if not isinstance(op.entry_type, d.TensorViewType):
                errors.append((op, f"'{op.name}' entry type: a global (gm_slot_tensor) pipe's entries are !pto.tensor_view, got {op.entry_type or 'none'}"))
                continue
            if op.entry_type != init.gm_slot_tensor.type:
                errors.append((op, f"'{op.name}' entry type: {op.entry_type} must equal the init's gm_slot_tensor type {init.gm_slot_tensor.type}"))
            errors += _split_errors(op, init)
            if isinstance(op, d._TakesEntry):
                errors += _entry_source_errors(op)
        elif isinstance(op, d.CUBE_ONLY_OPS) and kind == "vector":
            errors.append((op, f"'{op.name}' kernel kind: cube op in vector function @{fname}"))
    if len(init_kinds) > 1:
        errors.append((None, f"@{fname}: cannot mix pto.aic_initialize_pipe and pto.aiv_initialize_pipe in one function"))
    if 2 * len(inits) > 16:
        errors.append((None, f"@{fname}: {len(inits)} one-way pipes need {2 * len(inits)} flag ids; at most 16 fit (8 pipes)"))
    errors += memory_errors(func_op)
    return errors


def _local_entry_errors(op: d._PipeDataOp) -> list[tuple[Operation | None, str]]:
    """A local (reserved-buffer) pipe moves tiles: its entries are tile_bufs, its tfree names none."""
    t = op.entry_type
    if t is not None and not isinstance(t, d.TileBufType):
        return [(op, f"'{op.name}' entry type: a local (consumer-buffer) pipe's entries are !pto.tile_buf, got {t}")]
    if t is not None and op.ROLE == "tfree":
        return [(op, f"'{op.name}' entry: a local pipe's tfree takes no entry (pto.tfree_from_... {{id = N, split = S}})")]
    if op.ROLE == "talloc":
        return [(op, f"'{op.name}' pipe: talloc reserves a global slot; a local pipe's producer pushes its tile with tpush alone")]
    return []


# What a tpush / tfree must take: the entry of a talloc / tpop of the same pipe.
_ENTRY_SOURCE = {"tpush": "talloc", "tfree": "tpop"}


def _entry_source_errors(op: d._TakesEntry) -> list[tuple[Operation | None, str]]:
    """tpush takes a talloc'd entry and tfree a popped one, of the same pipe (ptoas does not check it)."""
    want = _ENTRY_SOURCE[op.ROLE]
    src = op.entry_value.owner
    if isinstance(src, d._ProducesEntry) and src.ROLE == want and src.id_value == op.id_value:
        return []
    got = f"a {src.name} result of pipe id {src.id_value}" if isinstance(src, d._ProducesEntry) else "a value that no talloc or tpop made"
    return [(op, f"'{op.name}' entry: {op.ROLE} needs the entry of a {want} on pipe id {op.id_value}, got {got} "
                 "(ptoas compiles it and the pipe deadlocks or corrupts on hardware, docs/sources.md §2.7)")]


def _split_errors(op: d._PipeDataOp, init: d._InitPipeOp) -> list[tuple[Operation | None, str]]:
    """The vector side of a split pipe must declare the half shape (ptoas does not check it)."""
    t = init.gm_slot_tensor.type
    assert isinstance(t, d.TensorViewType)
    nbytes = t.nbytes or 0
    full = init.slot_size.value.data
    split = op.split_value
    if op.CORE == "vector":
        if split != 0 and nbytes * 2 != full:
            return [(op, f"'{op.name}' split: split={split} on the vector side needs the half-slot descriptor ({full // 2} bytes), the init declares {nbytes} bytes of slot_size={full}")]
        if split == 0 and nbytes != full:
            return [(op, f"'{op.name}' split: split=0 needs the full-slot descriptor ({full} bytes), got {nbytes}")]
    elif nbytes != full:
        return [(op, f"'{op.name}' split: the cube side declares the full slot ({full} bytes), got {nbytes}")]
    elif split in (1, 2) and t.dims[-3 + split] % 2 != 0:
        axis = "rows" if split == 1 else "cols"
        return [(op, f"'{op.name}' split: split={split} halves the slot's {axis}, {t.dims[-3 + split]} {axis} is odd")]
    return []


def _vector_slot_dims(cube_dims: tuple[int, ...], split: int) -> tuple[int, ...] | None:
    """The vector-side descriptor of a pipe whose cube side is `cube_dims` (split 1 halves rows, 2 cols)."""
    dims = list(cube_dims)
    if split in (1, 2):
        axis = len(dims) - 3 + split
        if dims[axis] % 2 != 0:
            return None
        dims[axis] //= 2
    elif split != 0:
        return None
    return tuple(dims)


# The unit attributes that mark a kernel entry: ptoas takes `pto.entry` and, as aliases,
# `pto.kernel`, `hacc.entry` and `pto.aicore` (PTOAS include/PTO/IR/PTO.h).
ENTRY_ATTRS = ("pto.entry", "pto.kernel", "hacc.entry", "pto.aicore")


def is_entry(func_op: func.FuncOp) -> bool:
    """True when the function carries one of the entry attributes."""
    return any(a in func_op.attributes for a in ENTRY_ATTRS)


def launch_errors(module: builtin.ModuleOp) -> list[tuple[Operation | None, str]]:
    """ptofa's own rules for a kernel it launches, which ptoas compiles without: an entry
    takes no tile argument (the launcher has none to pass), and in a module with
    cube-vector pipes every entry calls pto.set_ffts first (the pipes' cross-core flags
    need the FFTS base). ptoas itself asks for set_ffts only next to explicit
    `pto.sync.set` / `pto.sync.wait` (PTOAS PTOToEmitC.cpp), so `check_text(...,
    launch_rules=False)` checks what ptoas accepts."""
    errors: list[tuple[Operation | None, str]] = []
    pipes_used = any(isinstance(op, d.PIPE_INIT_OPS) for op in module.walk())
    for entry in (f for f in module.walk() if isinstance(f, func.FuncOp) and is_entry(f) and f.body.blocks):
        name = entry.sym_name.data
        if any(isinstance(arg.type, d.TileBufType) for arg in entry.body.blocks[0].args):
            errors.append((entry, f"'func.func' entry arguments: @{name} takes a !pto.tile_buf argument; tiles are only legal in callee functions "
                                  "(ptofa rule: ptoas compiles it, the kernel cannot be launched)"))
        if pipes_used and not isinstance(next(iter(entry.body.ops), None), d.SetFftsOp):
            errors.append((entry, f"'func.func' set_ffts: the module uses cube-vector pipes, so the entry @{name} must call pto.set_ffts first "
                                  "(ptofa rule: ptoas compiles it, the pipes' cross-core flags then have no FFTS base)"))
    return errors + ragged_row_errors(module)


def ragged_row_errors(module: builtin.ModuleOp) -> list[tuple[Operation | None, str]]:
    """ptofa rule 'ragged rows': a row reduction (trowmax/trowsum/trowmin) or row broadcast
    (trowexpand*) whose [R, C] tile gets a runtime valid row count needs a dynamic one on its
    [R, 1] per-row operand too. ptoas compiles the mix, but the valid rows must agree at run
    time (pto-isa checks them), so a ragged last chunk with a static [R, 1] tile fails there.
    Reported where the IR shows it: the rows last set on the tile before the op (its
    `set_validshape` in this or an enclosing block, else its `alloc_tile`) are not the
    constant R of the static per-row tile."""
    errors: list[tuple[Operation | None, str]] = []
    for op in module.walk():
        if isinstance(op, d._RowReduceOp):
            tile, per_row, role = op.src, op.dst.type, "dst"
        elif isinstance(op, d._RowExpandOp):
            tile, per_row, role = op.dst, op.col.type, "per-row operand"
        else:
            continue
        tile_type = tile.type
        if not isinstance(tile_type, d.TileBufType) or not isinstance(per_row, d.TileBufType):
            continue
        if tile_type.v_row.data != d.DYN or per_row.v_row.data == d.DYN:
            continue
        rows = _valid_rows_before(tile, op)
        if rows is None or _constant_index(rows) == per_row.v_row.data:
            continue
        errors.append((op, f"'{op.name}' ragged rows: the {tile_type.rows.data}-row tile gets a runtime valid row "
                           f"count but the {role} {per_row.describe()} has a static {per_row.v_row.data}: give it "
                           "valid=?x? and set_validshape it with the same rows (ptofa rule: ptoas compiles it, "
                           "a ragged chunk then fails the run-time shape check)"))
    return errors


def _valid_rows_before(tile, op: Operation):
    """The row operand of the last `set_validshape` on `tile` before `op` in its block or an
    enclosing one, else of the tile's `alloc_tile`; None when the IR does not show it."""
    current: Operation | None = op
    while current is not None and current.parent_block() is not None:
        previous = current.prev_op
        while previous is not None:
            if isinstance(previous, d.SetValidShapeOp) and previous.source == tile:
                return previous.valid_row
            previous = previous.prev_op
        current = current.parent_block().parent_op()
    owner = getattr(tile, "op", None)
    if isinstance(owner, d.AllocTileOp) and owner.valid_row is not None:
        return owner.valid_row
    return None


def _constant_index(value) -> int | None:
    owner = getattr(value, "op", None)
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, builtin.IntegerAttr):
        return owner.value.value.data
    return None


def module_errors(module: builtin.ModuleOp, level: str | None = None) -> list[tuple[Operation | None, str]]:
    """Rules across functions: entry functions as ptoas has them, peers agree on pipe parameters and split.

    ptoas needs no entry at all (a module of helper or kernel functions compiles; it
    then emits no `__global__` function) and allows several; an entry must be a
    definition and return nothing (PTOAS lib/PTO/IR/PTO.cpp, validatePTOEntryFunctions).
    """
    errors: list[tuple[Operation | None, str]] = []
    funcs = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    for entry in (f for f in funcs if is_entry(f)):
        name = entry.sym_name.data
        if not entry.body.blocks:
            errors.append((entry, f"'func.func' entry: @{name} is a declaration; the entry attribute is only valid on function definitions"))
            continue
        if entry.function_type.outputs.data:
            errors.append((entry, f"'func.func' entry: @{name} returns values; PTO entry functions must return void"))
    errors += _level_errors(module, level)
    errors += _reserved_buffer_errors(funcs)
    cube_inits: dict[int, d._InitPipeOp] = {}
    vec_inits: dict[int, d._InitPipeOp] = {}
    splits: dict[tuple[str, int], set[int]] = {}
    for f in funcs:
        for op in f.walk():
            if isinstance(op, d.AicInitializePipeOp):
                cube_inits[op.id_value] = op
            elif isinstance(op, d.AivInitializePipeOp):
                vec_inits[op.id_value] = op
            elif isinstance(op, d.PIPE_DATA_OPS):
                splits.setdefault(("all", op.id_value), set()).add(op.split_value)
    for pid in sorted(set(cube_inits) | set(vec_inits)):
        c, v = cube_inits.get(pid), vec_inits.get(pid)
        if c is None or v is None:
            present = c or v
            errors.append((present, f"pipe id {pid}: initialised on the {'cube' if c else 'vector'} side only; the peer init is missing"))
            continue
        for attr, cv, vv in (("dir_mask", c.dir_value, v.dir_value), ("slot_size", c.slot_size.value.data, v.slot_size.value.data), ("slot_num", c.slot_num_value, v.slot_num_value)):
            if cv != vv:
                errors.append((v, f"pipe id {pid}: {attr} differs between cube ({cv}) and vector ({vv})"))
        ce, ve = c.acc_push_epilogue, v.acc_push_epilogue
        if (ce is None) != (ve is None):
            errors.append((v, f"pipe id {pid}: acc_push_epilogue on the {'cube' if ce else 'vector'} side only; the FIX contract must be "
                              "written on both inits (PTOAS AicInitializePipeOp::verify)"))
        elif ce is not None and ce != ve:
            errors.append((v, f"pipe id {pid}: acc_push_epilogue differs between cube ({ce.layout.data}, {ce.quant.data}, {ce.relu.data}) "
                              f"and vector ({ve.layout.data}, {ve.quant.data}, {ve.relu.data})"))
        if c.is_local or v.is_local:
            if c.is_local != v.is_local:
                errors.append((v, f"pipe id {pid}: the {'cube' if c.is_local else 'vector'} side is a local (consumer-buffer) pipe, the peer a global one"))
            continue
        ct, vt = c.gm_slot_tensor.type, v.gm_slot_tensor.type
        assert isinstance(ct, d.TensorViewType) and isinstance(vt, d.TensorViewType)
        if ct.elem != vt.elem:
            errors.append((v, f"pipe id {pid}: slot element type differs between cube ({d.elem_name(ct.elem)}) and vector ({d.elem_name(vt.elem)})"))
        used = splits.get(("all", pid), set())
        if len(used) == 1 and ct.elem == vt.elem and len(ct.dims) >= 2:
            want = _vector_slot_dims(ct.dims, next(iter(used)))
            if want is not None and vt.dims != want:
                errors.append((v, f"pipe id {pid}: vector slot shape {d._dims_str(vt.dims)} does not match cube slot {d._dims_str(ct.dims)} with split={next(iter(used))} (expected {d._dims_str(want)})"))
        nosplit = [side for side, init in (("cube", c), ("vector", v)) if init.nosplit is not None and init.nosplit.value.data]
        if nosplit and used - {0}:
            errors.append((v, f"pipe id {pid}: nosplit = true on the {' and '.join(nosplit)} init requires split = 0 everywhere, ops use split {sorted(used)}"))
        if 0 in used and len(used) > 1:
            errors.append((v, f"pipe id {pid}: split values {sorted(used)} mix 0 with non-zero; one logical pipe uses only 0 or only non-zero"))
        elif len(used) > 1:
            errors.append((v, f"pipe id {pid}: split values {sorted(used)} differ between ops of one pipe"))
    return errors


def _reserved_buffer_errors(funcs: list[func.FuncOp]) -> list[tuple[Operation | None, str]]:
    """An import_reserved_buffer names a function of the module that reserves that buffer."""
    by_name = {f.sym_name.data: f for f in funcs}
    errors: list[tuple[Operation | None, str]] = []
    for f in funcs:
        for op in f.walk():
            if isinstance(op, d.ImportReservedBufferOp):
                peer = by_name.get(op.peer_func.root_reference.data)
                name = op.buf_name.data
                if peer is None:
                    errors.append((op, f"'{op.name}' peer: no function @{op.peer_func.root_reference.data} in the module"))
                elif not any(isinstance(r, d.ReserveBufferOp) and r.buf_name.data == name for r in peer.walk()):
                    errors.append((op, f"'{op.name}' peer: @{peer.sym_name.data} reserves no buffer named \"{name}\""))
    return errors


def _level_errors(module: builtin.ModuleOp, level: str | None = None) -> list[tuple[Operation | None, str]]:
    """ptoas's build level is a command-line choice (--pto-level, default level2): at level1/level2
    it plans local addresses and an allocation takes no `addr`; at level3 every allocation needs one
    and every reserve_buffer an explicit base (PTOAS tools/ptoas/ptoas.cpp). `level` None takes the
    level the module implies: an `addr` anywhere makes it a level3 program."""
    allocs = [op for op in module.walk() if isinstance(op, d.ALLOC_OPS)]
    with_addr = [op for op in allocs if op.addr is not None]
    reserves = [op for op in module.walk() if isinstance(op, d.ReserveBufferOp)]
    level3 = bool(with_addr) if level is None else level == "level3"
    if not level3:
        errors = [(op, f"'{op.name}' level: unexpected 'addr' operand: only supported when --pto-level=level3 (ptoas's "
                       f"words; checked at {level}, ptoas's default is level2: pass --pto-level level3 to both)")
                  for op in with_addr]
        if allocs:
            errors += [(op, f"'{op.name}' level3: an explicit 'base' (auto = false) needs --pto-level=level3, where every "
                            "alloc_tile also needs an 'addr'; at level1/level2 write auto = true") for op in reserves if not op.is_auto]
        return errors
    errors = [(op, f"'{op.name}' level3: requires 'auto = false' and an explicit 'base' when --pto-level=level3 "
                   "(the module's alloc_tile ops carry explicit addresses)") for op in reserves if op.is_auto]
    return errors + [(op, f"'{op.name}' level3: requires 'addr' operand when --pto-level=level3 (at level3 every "
                          "allocation needs an explicit 'addr'; at level1/level2 remove every 'addr')")
                     for op in allocs if op.addr is None]


def check_text(text: str, path: str = "<pto>", launch_rules: bool = True, backend: str | None = None,
               level: str | None = None) -> ParsedModule:
    """Parse and verify; raises PtoCheckError with every error and its line.

    By default: what ptoas compiles for A2/A3 with its default back end and ptofa can launch
    and build. `launch_rules=False` leaves out ptofa's own rules (the launch rules,
    `launch_errors`, and the C++-build rules, `d.BuildRuleError`): what `ptoas --pto-arch=a3`
    itself accepts. `backend="vpto"` (ptoas's --pto-backend) leaves out the EmitC lowering
    rule too: what ptoas's parser and verifiers accept. `level`: ptoas's --pto-level (None: the
    one the module's allocations imply)."""
    parsed = parse_pto(text, path)
    verify_module(parsed, launch_rules, backend, level)
    return parsed


# The memory-planner limit

_LOOPS = (scf.ForOp, scf.WhileOp)


@dataclass(frozen=True)
class Peak:
    space: str
    nbytes: int
    at: Operation  # the op at which the peak is reached
    live: tuple[tuple[str, int], ...]  # (tile name, aligned bytes) live there


def peak_usage(func_op: func.FuncOp) -> dict[str, Peak]:
    """Peak live bytes per local space of `func_op` (only spaces that are used)."""
    order: dict[Operation, int] = {}
    end: dict[Operation, int] = {}
    ops = list(func_op.walk())
    for i, op in enumerate(ops):
        order[op] = i
    for op in reversed(ops):  # a region op ends where its last nested op is
        last = order[op]
        for region in op.regions:
            for block in region.blocks:
                for inner in block.ops:
                    last = max(last, end[inner])
        end[op] = last

    intervals: list[tuple[int, int, str, str, int]] = []  # start, stop, space, name, bytes
    for op in ops:
        if isinstance(op, (d.AllocTileOp, d.AllocMultiTileOp)):
            t = op.result.type if isinstance(op, d.AllocTileOp) else op.slot_type
            nbytes = t.nbytes if isinstance(op, d.AllocTileOp) else op.result.type.nbytes
            if t.space not in CAPACITY:
                continue
            defining_loops = _enclosing_loops(op)
            uses = [u for u in _uses(op.result) if u in order]
            # ptoas's PlanMemory starts a buffer's life at its first writer, not at its
            # alloc (PTOAS test/lit/pto/plan_memory_modern_first_writer_reuse.pto).
            start = stop = order[op]
            if uses:
                start = stop = min(order[u] for u in uses)
            for use_op in uses:
                stop = max(stop, order[use_op])
                for loop in _enclosing_loops(use_op):
                    if loop not in defining_loops:
                        start = min(start, order[loop])
                        stop = max(stop, end[loop])
            name = op.result.name_hint or f"tile@{order[op]}"
            intervals.append((start, stop, t.space, name, align(nbytes, ALIGNMENT[t.space])))
        hidden = d.hidden_scratch(op)
        if hidden is not None:
            space, shape, nbytes = hidden
            # ptoas materialises the scratch as a tile of its own; inside a loop nest the planner keeps
            # it apart from the loop's other tiles for the whole nest (compared with ptoas's PlanMemory
            # addresses over the catalog: tests/test_toolchain.py).
            loops = _enclosing_loops(op)
            start, stop = (order[loops[-1]], end[loops[-1]]) if loops else (order[op], order[op])
            intervals.append((start, stop, space, f"<hidden {shape} of {op.name}>", align(nbytes, ALIGNMENT[space])))

    peaks: dict[str, Peak] = {}
    for space in {iv[2] for iv in intervals}:
        mine = [iv for iv in intervals if iv[2] == space]
        for point in sorted({iv[0] for iv in mine}):
            live = [(name, nbytes) for start, stop, _, name, nbytes in mine if start <= point <= stop]
            total = sum(b for _, b in live)
            if space not in peaks or total > peaks[space].nbytes:
                peaks[space] = Peak(space, total, ops[point], tuple(live))
    return peaks


def _uses(value: SSAValue) -> list[Operation]:
    """Ops using `value` or any view of it."""
    out: list[Operation] = []
    for use in list(value.uses):
        out.append(use.operation)
        if isinstance(use.operation, (d.TReshapeOp, d.SubviewOp, d.MultiTileGetOp)):
            out += _uses(use.operation.result)
    return out


def _enclosing_loops(op: Operation) -> list[Operation]:
    loops = []
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, _LOOPS):
            loops.append(parent)
        parent = parent.parent_op()
    return loops


def memory_errors(func_op: func.FuncOp) -> list[tuple[Operation | None, str]]:
    """ptoas's PlanMemory overflow, with the tiles live at the peak. A level3 program (its
    allocations carry explicit `addr`s) places its tiles itself: ptoas runs no PlanMemory there
    (PTOAS tools/ptoas/ptoas.cpp), so there is no overflow to report."""
    if any(isinstance(op, d.ALLOC_OPS) and op.addr is not None for op in func_op.walk()):
        return []
    errors: list[tuple[Operation | None, str]] = []
    for space, peak in sorted(peak_usage(func_op).items()):
        cap = CAPACITY[space]
        if peak.nbytes > cap:
            tiles = ", ".join(f"{n} {b}B" for n, b in sorted(peak.live, key=lambda x: -x[1]))
            errors.append((peak.at, f"memory capacity: {space} overflow, requires {peak.nbytes * 8} bits while {cap * 8} "
                                    f"bits avaliable (ptoas's words; {peak.nbytes} > {cap} bytes live in "
                                    f"@{func_op.sym_name.data}: {tiles})"))
    return errors
