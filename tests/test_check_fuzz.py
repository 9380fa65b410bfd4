"""Bad input never crashes the checker: seeded mutations of an emitted FA kernel (lines
deleted, duplicated, swapped; tokens, numbers and float literals replaced) either check
clean or raise `PtoCheckError` whose errors carry a line number. Any other exception is a
bug in `ptofa.ir.textio` or the dialect."""

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
]
_NUMBERS = ["0", "-1", "1", "3", "7", "1000000", "99999999999999999999", "1.0e400", "-1.0e400", "1.5", "nan", "0x10"]


def _mutate(lines: list[str], rng: random.Random) -> list[str]:
    lines = list(lines)
    kind = rng.randrange(7)
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
    else:  # a huge or odd float literal in place of a number
        nums = list(re.finditer(r"\b\d+(?:\.\d+)?\b", lines[i]))
        if nums:
            m = rng.choice(nums)
            lines[i] = lines[i][: m.start()] + rng.choice(["1.0e400", "3.4e39", "-1.0e308", "1e-400", "0.0"]) + lines[i][m.end() :]
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
