"""scripts/conformance.py: the RUN-line selection without a ptoas, and both directions of
agreement with one (here a fake `ptoas` whose verdicts the corpus files spell out)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import conformance  # noqa: E402

KERNEL = """module {
  func.func @k(%a: !pto.tile_buf<vec, 32x32xf32>) attributes {pto.kernel_kind = #pto.kernel_kind<vector>} {
    OP
    return
  }
}
"""
TADD = "pto.tadd ins(%a, %a : !pto.tile_buf<vec, 32x32xf32>, !pto.tile_buf<vec, 32x32xf32>) outs(%a : !pto.tile_buf<vec, 32x32xf32>)"
TADDRELU = TADD.replace("pto.tadd", "pto.taddrelu")

CORPUS = {
    # no RUN lines: an A3 input, compiled with the A3 flags
    "good.pto": KERNEL.replace("OP", TADD),
    # ptoas accepts (the fake says so), the checker does not know the op: direction 1
    "unknown_op.pto": KERNEL.replace("OP", "pto.tbogus") + "// FAKE: accept\n",
    # meant to fail, ptoas rejects with its own flags, and the checker accepts: direction 2
    "lax_checker.pto": "// RUN: not ptoas --pto-arch=a3 %s 2>&1 | FileCheck %s\n// CHECK: error: fake\n" + KERNEL.replace("OP", TADD) + "// FAKE: reject\n",
    # the vpto back end lowers taddrelu; the default back end does not (checker and fake agree)
    "vpto_only.pto": "// RUN: ptoas --pto-arch=a3 --pto-backend=vpto %s -o %t\n" + KERNEL.replace("OP", TADDRELU),
    # A5 only by its RUN line; a RUN line compiling another file; another tool
    "a5.pto": "// RUN: ptoas --pto-arch=a5 %s | FileCheck %s\n" + KERNEL.replace("OP", TADD),
    "other_file.pto": "// RUN: ptoas --pto-arch a3 %S/good.pto | FileCheck %s\n// CHECK: TADD(\n",
    "opt_only.pto": "// RUN: pto-test-opt %s -some-pass | FileCheck %s\n" + KERNEL.replace("OP", TADD),
}

FAKE_PTOAS = """#!{python}
import sys
args = sys.argv[1:]
path = next(a for a in args if a.endswith(".pto"))
text = open(path).read()
if "FAKE: reject" in text or ("pto.taddrelu" in text and "--pto-backend=vpto" not in args):
    sys.stderr.write(path + ":3: error: fake rejection\\n")
    sys.exit(1)
if "FAKE: accept" not in text and "pto.tbogus" in text:
    sys.exit(1)
sys.exit(0)
"""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "test"
    folder.mkdir()
    for name, text in CORPUS.items():
        (folder / name).write_text(text)
    return folder


def test_selection_without_ptoas(corpus: Path, capsys) -> None:
    assert conformance.main([str(corpus), "--no-ptoas", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "A5 only 1, meant to fail 1, not a ptoas input 2, vpto back end 1 (total 5)" in out
    assert "| 2 | 1 (50.0%) | 1 (50.0%) |" in out  # good.pto and unknown_op.pto
    assert "unknown op pto.tbogus" in out


def test_both_directions_with_a_ptoas(corpus: Path, tmp_path: Path, capsys) -> None:
    fake = tmp_path / "ptoas"
    fake.write_text(FAKE_PTOAS.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out_json = tmp_path / "r.json"
    assert conformance.main([str(corpus), "--ptoas", str(fake), "--jobs", "1", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    # A3 flags: good, unknown_op, a5, opt_only and other_file (no ops) accept; the checker rejects unknown_op
    assert "accepts, checker rejects | 5 accepted | 1 |" in out
    # own flags: lax_checker (not ptoas) rejects and the checker accepts it; vpto_only compiles with its vpto flag
    assert "rejects, checker accepts | 1 rejected | 1 |" in out
    assert "fake rejection" in out
    rows = {Path(r["path"]).name: r for r in json.loads(out_json.read_text())}
    assert rows["vpto_only.pto"]["ptoas_a3"] is False and rows["vpto_only.pto"]["ptoas_own"] is True
    assert rows["lax_checker.pto"]["ptoas_own"] is False and rows["lax_checker.pto"]["verified"]


def test_run_line_parsing() -> None:
    runs = conformance.ptoas_runs("// RUN: env -u X not ptoas --pto-arch a3 --pto-backend=vpto %s -o %t 2>&1 | FileCheck %s\n", "f.pto")
    (run,) = runs
    assert run.expect_fail and run.reads_file and run.arch == "a3" and run.backend == "vpto"
    assert run.args == ["--pto-arch", "a3", "--pto-backend=vpto", "f.pto"]
    split = conformance.ptoas_runs("// RUN: split-file %s %t\n// RUN: not ptoas %t/a.pto 2>&1\n", "f.pto")
    assert split[0].reads_file and conformance.classify("// RUN: split-file %s %t\n// RUN: not ptoas %t/a.pto\n") == "meant to fail"
