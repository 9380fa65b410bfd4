"""Bad input never crashes the checker: seeded mutations of an emitted FA kernel (lines
deleted, duplicated, swapped; tokens, numbers and float literals replaced; attribute dicts
appended) either check clean or raise `PtoCheckError` whose errors carry a line number. Any
other exception is a bug in `ptofa.ir.textio` or the dialect.

With a ptoas (marker `ptoas`) the same mutants are differential: the checker's verdict
(`--ptoas-only`) must be ptoas's (`--pto-arch=a3 --enable-insert-sync`). Without one, the rule
that such a run found missing (a partition window past a static view dim) is checked on every
window of the kernel."""

from __future__ import annotations

import random
import re
import time

import pytest

from ptofa.fa_builder import emit_fa
from ptofa.pipeline import FAConfig
from ptofa.ir.textio import PtoCheckError, check_text

SEED = 20261118
N_MUTANTS = 400
BUDGET_S = 20.0

_TOKEN = re.compile(r"%[\w.$#]+|[A-Za-z_][\w.]*|\d+\.\d+(?:e[+-]?\d+)?|\d+|\S")
_REPLACEMENTS = [
    "%c0", "%undefined", "%0", "pto.tadd", "pto.tload", "pto.nosuch", "index", "i32", "f32", "f16", "i1",
    "!pto.tile_buf<vec, 16x16xf32>", "!pto.ptr<f32>", "(", ")", "{", "}", "[", "]", ":", ",", "=", "->",
    "scf.for", "scf.yield", "func.call", "return", "#pto.layout<nd>", "\"", "0x7f", "-1", "",
    "pto.taddrelu", "pto.tsync", "pto.tgather", "pto.tprint", "pto.set_quant_scalar", "valid_col", "valid_row", "addr",
    "#pto.acc_to_vec_mode<dual_mode_split_m>", "#pto<sqrt_precision high_precision>", "{src0eqdst = true}",
]
# Attribute dicts a mutation appends to a line: discardable ones, inherent ones with wrong values, junk.
_ATTR_DICTS = [
    "{pto.fusion.group_id = 0 : i64}", "{precisionType = #pto<div_precision high_precision>}", "{accToVecMode = 3}",
    "{cmpMode = #pto<cmp gt>, offset = 7 : i32}", "{printFormat = 1}", "{", "{x = }", "{pto.backend = \"vpto\"}",
]
_NUMBERS = ["0", "-1", "1", "3", "7", "1000000", "99999999999999999999", "1.0e400", "-1.0e400", "1.5", "nan", "0x10"]


def _mutate(lines: list[str], rng: random.Random) -> list[str]:
    lines = list(lines)
    kind = rng.randrange(8)
    i = rng.randrange(len(lines))
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[i])
    elif kind == 2:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:  # move a line a few lines up: values used before their definition
        j = max(0, i - rng.randrange(1, 6))
        lines.insert(j, lines.pop(i))
    elif kind in (4, 5):
        toks = list(_TOKEN.finditer(lines[i]))
        if toks:
            m = rng.choice(toks)
            if kind == 5 or m.group().isdigit():
                new = rng.choice(_NUMBERS)
            else:
                new = rng.choice(_REPLACEMENTS + [t.group() for t in toks])
            lines[i] = lines[i][: m.start()] + new + lines[i][m.end() :]
    elif kind == 6:  # a huge or odd float literal in place of a number
        nums = list(re.finditer(r"\b\d+(?:\.\d+)?\b", lines[i]))
        if nums:
            m = rng.choice(nums)
            lines[i] = lines[i][: m.start()] + rng.choice(["1.0e400", "3.4e39", "-1.0e308", "1e-400", "0.0"]) + lines[i][m.end() :]
    else:  # an attribute dict appended to the line
        lines[i] = lines[i].rstrip() + " " + rng.choice(_ATTR_DICTS)
    return lines


@pytest.fixture(scope="module")
def kernel_lines() -> list[str]:
    return emit_fa(FAConfig()).splitlines()


def _outcome(text: str) -> str:
    try:
        check_text(text, "fuzz.pto")
    except PtoCheckError as exc:
        assert exc.errors, "PtoCheckError without errors"
        for line, msg in exc.errors:
            assert isinstance(line, int) and line >= 1, f"error without a line number: {line}: {msg}\n{text}"
            assert msg, "empty error message"
        return "error"
    return "ok"


def test_mutated_kernels_never_crash_the_checker(kernel_lines: list[str]) -> None:
    rng = random.Random(SEED)
    start = time.perf_counter()
    seen = {"ok": 0, "error": 0}
    for n in range(N_MUTANTS):
        lines = kernel_lines
        for _ in range(rng.choice((1, 1, 2, 3))):
            lines = _mutate(lines, rng)
        text = "\n".join(lines) + "\n"
        try:
            seen[_outcome(text)] += 1
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001
            changed = [ln for ln in lines if ln not in set(kernel_lines)][:4]
            pytest.fail(f"mutant {n} crashed the checker with {type(exc).__name__}: {exc}; changed lines: {changed}")
        if time.perf_counter() - start > BUDGET_S:
            break
    assert seen["error"] > 0


@pytest.mark.parametrize("case", ["use_before_def", "huge_float", "huge_float_negative", "huge_int", "unterminated_string"])
def test_known_crashes_are_line_numbered_errors(case: str) -> None:
    text = {
        "use_before_def": "module {\n  func.func @k() {\n    %b = arith.addi %a, %a : index\n"
                          "    %a = arith.constant 1 : index\n    return\n  }\n}\n",
        "huge_float": "module {\n  func.func @k() {\n    %x = arith.constant 1.0e400 : f32\n    return\n  }\n}\n",
        "huge_float_negative": "module {\n  func.func @k() {\n    %x = arith.constant -3.5e39 : f32\n    return\n  }\n}\n",
        "huge_int": "module {\n  func.func @k() {\n    %x = arith.constant 99999999999999999999 : i32\n    return\n  }\n}\n",
        # xDSL's lexer takes time quadratic in the rest of the file to reject this (mutant 116 of the fuzz run)
        "unterminated_string": "module {\n  func.func @k() {\n    %x = arith.constant 1 : index {a = \"x}\n"
                               + "    return\n" * 2000 + "  }\n}\n",
    }[case]
    with pytest.raises(PtoCheckError) as info:
        check_text(text)
    line, msg = info.value.errors[0]
    assert line == 3, (line, msg)


def _mutants(kernel_lines: list[str], n: int) -> list[str]:
    rng = random.Random(SEED)
    out = []
    for _ in range(n):
        lines = kernel_lines
        for _ in range(rng.choice((1, 1, 2, 3))):
            lines = _mutate(lines, rng)
        out.append("\n".join(lines) + "\n")
    return out


_WINDOW = re.compile(r"%(\w+) = pto\.partition_view %\w+, offsets = \[(.*?)\], sizes = \[(.*?)\] : !pto\.tensor_view<([^>]*)>")


def test_partition_windows_past_a_static_dim_are_refused(kernel_lines: list[str]) -> None:
    """For each kind of window of the kernel (view type, dim, size) with a constant size in a static
    dim, an offset that puts its end past the dim is refused on that line (ptoas's
    PartitionViewOp::verify; the rule a differential run found missing)."""
    consts = {m.group(1): int(m.group(2)) for m in (re.match(r"\s*%(\w+) = arith\.constant (\d+) : index", ln) for ln in kernel_lines) if m}
    by_value = {v: k for k, v in consts.items()}
    tried: set[tuple[str, int, int]] = set()
    for i, line in enumerate(kernel_lines):
        m = _WINDOW.search(line)
        if not m or len(tried) >= 4:  # each check of the whole kernel takes a second or two
            continue
        offsets, sizes = m.group(2).split(", "), m.group(3).split(", ")
        dims = [int(x) if x.isdigit() else None for x in m.group(4).split("x")[:-1]]
        for dim, (off, size) in enumerate(zip(offsets, sizes)):
            value = consts.get(size.lstrip("%"))
            if dims[dim] is None or value is None or (m.group(4), dim, value) in tried:
                continue
            past = dims[dim] - value + 1
            if past not in by_value:
                continue
            bad = offsets.copy()
            bad[dim] = "%" + by_value[past]
            text = "\n".join(kernel_lines[:i] + [line.replace(m.group(2), ", ".join(bad), 1)] + kernel_lines[i + 1:]) + "\n"
            with pytest.raises(PtoCheckError) as info:
                check_text(text, "window.pto", launch_rules=False)
            assert any(ln == i + 1 and "exceeds static source dim" in msg for ln, msg in info.value.errors), info.value.errors
            tried.add((m.group(4), dim, value))
    assert len(tried) >= 3, tried


@pytest.mark.ptoas
def test_mutants_agree_with_ptoas(kernel_lines: list[str], tmp_path) -> None:
    """Differential: on seeded mutants, `check_text(..., launch_rules=False)` accepts exactly what
    `ptoas --pto-arch=a3 --enable-insert-sync` compiles."""
    import subprocess

    from ptofa.launch.toolchain import find_ptoas

    ptoas = find_ptoas()[0]
    disagree = []
    for n, text in enumerate(_mutants(kernel_lines, 60)):
        path = tmp_path / f"m{n}.pto"
        path.write_text(text)
        done = subprocess.run([ptoas, "--pto-arch=a3", "--enable-insert-sync", str(path), "-o", str(tmp_path / "m.cpp")],
                              capture_output=True, text=True, timeout=300)
        try:
            check_text(text, path.name, launch_rules=False)
            ours = True
        except PtoCheckError as exc:
            ours, why = False, str(exc).splitlines()[0]
        if ours != (done.returncode == 0):
            disagree.append((n, "ptoas accepts" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[0],
                             "checker accepts" if ours else why))
    assert disagree == []


def _byte_mutants(data: bytes, rng: random.Random, n: int):
    """Byte-level mutants: a random byte replaced or inserted, a UTF-8 BOM or a stray backtick put in."""
    for _ in range(n):
        kind, i = rng.randrange(4), rng.randrange(len(data))
        if kind == 0:
            yield data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
        elif kind == 1:
            yield data[:i] + bytes([rng.randrange(256)]) + data[i:]
        elif kind == 2:
            yield b"\xef\xbb\xbf" + data
        else:
            yield data[:i] + b"`" + data[i:]


def test_byte_mutants_never_crash_the_checker(kernel_lines: list[str], tmp_path) -> None:
    """Bytes as well as lines: a file that is not UTF-8, starts with a BOM or holds a stray
    character is an error with a line number (read_pto + check_text, as `run_fa check` runs them)."""
    from ptofa.ir.textio import read_pto

    data = ("\n".join(kernel_lines) + "\n").encode()
    rng, start, path = random.Random(SEED + 1), time.perf_counter(), tmp_path / "fuzz.pto"
    errors = 0
    for mutant in _byte_mutants(data, rng, N_MUTANTS):
        path.write_bytes(mutant)
        try:
            check_text(read_pto(path), str(path))
        except PtoCheckError as exc:
            assert exc.errors and all(isinstance(ln, int) and ln >= 1 and msg for ln, msg in exc.errors)
            errors += 1
        if time.perf_counter() - start > BUDGET_S:
            break
    assert errors > 0


@pytest.mark.parametrize("column", ["start", "end"])
def test_a_stray_character_is_reported_on_its_own_line(kernel_lines: list[str], column: str) -> None:
    """A backtick on the line after an op is that line's error, not the op's (the parser's
    look-ahead token is not the op's fault when the lexer stopped there)."""
    body = [i for i, ln in enumerate(kernel_lines) if "pto.alloc_tile" in ln]
    for i in (body[0], body[0] + 1, 2):
        lines = list(kernel_lines)
        lines[i] = "`" + lines[i] if column == "start" else lines[i] + "`"
        with pytest.raises(PtoCheckError) as exc:
            check_text("\n".join(lines) + "\n")
        assert exc.value.errors[0][0] == i + 1, exc.value


def test_bad_bytes_name_their_line(tmp_path) -> None:
    from ptofa.ir.textio import read_pto

    path = tmp_path / "k.pto"
    path.write_bytes(b"module {\n}\n// caf\xe9\n")
    with pytest.raises(PtoCheckError, match=r"k.pto:3: error: not UTF-8 text: byte 0xe9 at column 7"):
        read_pto(path)
    path.write_bytes(b"\xef\xbb\xbfmodule {\n}\n")
    with pytest.raises(PtoCheckError, match=r":1: error: a UTF-8 byte order mark"):
        read_pto(path)
