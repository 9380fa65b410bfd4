"""docs/writing-a-kernel.md is executable and current: every code block runs in document order
(Python blocks in one namespace; shell lines through the CLI, except those marked
`# on an Ascend host`), its `tile.*` op table is the one `ptofa.api` generates, and every tile
op of the dialect has a public name or a stated reason not to (`ptofa.optable.IR_ONLY`)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ptofa import api, optable
from ptofa.cli.main import main
from ptofa.ir import dialect as d

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "writing-a-kernel.md"
sys.path.insert(0, str(ROOT / "scripts"))
from op_table import with_current_table  # noqa: E402


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, in order."""
    return re.findall(r"^```(\w+)\n(.*?)^```", text, re.S | re.M)


def _shell_lines(code: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped, Ascend-only lines left out."""
    lines = code.replace("\\\n", " ").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.strip() and "on an Ascend host" not in line]


def _run_shell(line: str, cwd: Path) -> None:
    words = shlex.split(line)
    if words[0] == "run_fa":
        result = CliRunner().invoke(main, words[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}"
        return
    assert words[0] == "python" and words[1].startswith("examples/"), f"no rule to run {line!r}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / words[1]), *words[2:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{line}\n{done.stderr}"


def test_every_code_block_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "writing_a_kernel"}
    for language, code in _blocks(DOC.read_text()):
        if language == "python":
            exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the documentation's own code
        else:
            for line in _shell_lines(code):
                _run_shell(line, tmp_path)
    assert (tmp_path / "row_softmax.pto").exists() and "single" in namespace and "two" in namespace


def test_the_op_table_is_current() -> None:
    text = DOC.read_text()
    assert with_current_table(text) == text, "the tile.* op table is stale: run `python scripts/op_table.py`"


def _public_ops() -> set[str]:
    """The PTO ops the public `tile.*` names emit (their docstrings name them), and pto.load / store's."""
    names = {"pto.tload", "pto.tstore"}
    for name in dir(api.tile):
        if not name.startswith("_"):
            names |= set(re.findall(r"`(pto\.[a-z0-9_.]+)`", getattr(api.tile, name).__doc__ or ""))
    return names


def _tile_ops() -> set[str]:
    """The dialect's ops that take or make a tile, less allocation and the global-entry pipes (`pto.*`)."""
    out = set()
    for op in d.PTO.operations:
        definition = op.get_irdl_definition()
        constraints = [str(od.constr) for _, od in definition.operands] + [str(rd.constr) for _, rd in definition.results]
        if any("TileBuf" in c for c in constraints):
            out.add(op.name)
    return out - {"pto.alloc_tile", *(op.name for op in (*d.PIPE_DATA_OPS, *d.PIPE_INIT_OPS))}


def test_every_tile_op_has_a_public_name_or_a_reason() -> None:
    public, ir_only, ops = _public_ops(), set(optable.IR_ONLY), _tile_ops()
    assert ops - public - ir_only == set(), "dialect ops with neither a tile.* name nor an IR_ONLY reason"
    assert ir_only <= {op.name for op in d.PTO.operations}, "IR_ONLY names an op the dialect does not have"
    assert not ir_only & public, "an IR_ONLY op has a public name"
