"""Conformance of ptofa's checker (and simulator) with the programs ptoas accepts, and rejects.

    python scripts/conformance.py /tmp/ptoas_corpus/test [--simulate] [--list] [--json out.json] [--ptoas PATH]

Walks a folder of `.pto` files (e.g. a local fetch of PTOAS's `test/` folder: never commit
it), runs `check_text` as `run_fa check --ptoas-only` does (ptofa's own launch and C++-build
rules left out; the EmitC lowering rule unless the file selects the vpto back end) and prints
tables by cause.

Without a ptoas (none on PATH and no `--ptoas`) it keeps the files a real ptoas compiles for
A2/A3, judged from each file's lit `RUN:` lines and attributes, and tables files, parsed,
verified (simulated) and the first error of every failure by cause:

* skipped as *meant to fail*: a `RUN:` command that runs ptoas under `not`, a file with
  `expected-error` diagnostics, a positive `CHECK:` pattern that expects `error:`
  (`CHECK-NOT: error:` is a positive test), or a sample without `RUN:` lines named
  `*_invalid` / `*_xfail` (as PTOAS's samples/runop.sh expects them to fail);
* skipped as *A5 only*: `pto.target_arch = "a5"` in the module, a `"pto.device-spec"` naming
  an A5 device (`Ascend950*` / `Ascend910_95*`, as PTOAS's isA5DeviceSpec reads it), every
  ptoas `RUN:` line passing `--pto-arch=a5` (ptoas's default arch is a3), or a sample without
  `RUN:` lines named for A5 (`test_a5_*`, `*_a5`, `*_a5_*`);
* skipped as *vpto back end*: every ptoas `RUN:` line passes `--pto-backend=vpto`, or the
  module says `pto.backend = "vpto"`: programs for ptoas's other back end, in its own
  low-level ops (`pto.ub.*`, `pto.vmi.*`, `pto.mte_*`, ...), which ptofa does not model;
* skipped as *not a ptoas input*: `RUN:` lines that run only other tools (`pto-test-opt`
  pass pipelines on internal dialects), or whose ptoas reads another file (`%S/other.pto`)
  or none (`--help`);
* the rest (lit tests and sample kernels without `RUN:` lines) are A3 inputs.

With a ptoas it measures both directions of agreement instead of guessing:

1. every file is compiled with `ptoas --pto-arch=a3 --enable-insert-sync` (what `run_fa
   compile` runs); of the ones it accepts, the files the checker rejects;
2. every file is compiled with the flags of its own A2/A3 `RUN:` lines (`not ptoas` ones
   too; a file without `RUN:` lines with the flags above); of the ones ptoas rejects, the
   files the checker (with the back end those flags select) accepts.

`--simulate` also runs the simulator on the verified files whose entry takes only GM
pointers and integer / float scalars: inputs are zero-filled GM buffers of a generous
size and scalars are 1, one block. A file counts as simulated when it runs to the end
with no error; a failure there is reported by cause too.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

A3_FLAGS = ["--pto-arch=a3", "--enable-insert-sync"]
PTOAS_TIMEOUT_S = 120

_RUN = re.compile(r"//\s*RUN:(.*)$")
_A5_ARCH = re.compile(r"--pto-arch(=|\s+)a5\b")
_ANY_ARCH = re.compile(r"--pto-arch(=|\s+)(\w+)")
_A5_DEVICE = re.compile(r'"pto\.device-spec"\s*=\s*"(Ascend950|Ascend910_95)')
_VPTO_MODULE = re.compile(r'pto\.backend\s*=\s*"vpto"', re.IGNORECASE)
_A5_NAME = re.compile(r"(^test_a5_|(^|_)a5(_|$))")


def run_commands(text: str) -> list[str]:
    """The file's RUN: commands, continuation lines (trailing backslash) joined."""
    cmds: list[str] = []
    cur = ""
    for line in text.splitlines():
        m = _RUN.search(line)
        if not m:
            continue
        part = m.group(1).strip()
        if part.endswith("\\"):
            cur += part[:-1] + " "
            continue
        cmds.append((cur + part).strip())
        cur = ""
    if cur:
        cmds.append(cur.strip())
    return cmds


@dataclass
class PtoasRun:
    """One ptoas invocation of a RUN: line: its arguments (lit substitutions applied, output and
    redirections dropped), whether it runs under `not`, and whether it reads the file itself."""

    args: list[str]
    expect_fail: bool
    reads_file: bool

    @property
    def arch(self) -> str | None:
        for i, a in enumerate(self.args):
            m = re.match(r"--pto-arch=(\w+)$", a)
            if m:
                return m.group(1)
            if a == "--pto-arch" and i + 1 < len(self.args):
                return self.args[i + 1]
        return None

    @property
    def level(self) -> str:
        """The run's --pto-level (ptoas's default level2)."""
        for i, a in enumerate(self.args):
            m = re.match(r"--pto-level=(\w+)$", a)
            if m:
                return m.group(1)
            if a == "--pto-level" and i + 1 < len(self.args):
                return self.args[i + 1]
        return "level2"

    @property
    def backend(self) -> str | None:
        for i, a in enumerate(self.args):
            m = re.match(r"--pto-backend=(\w+)$", a)
            if m:
                return m.group(1).lower()
            if a == "--pto-backend" and i + 1 < len(self.args):
                return self.args[i + 1].lower()
        return None


def ptoas_runs(text: str, path: str = "FILE") -> list[PtoasRun]:
    """The ptoas invocations of the file's RUN: lines. A run reads the file when it names `%s`,
    or a part that `split-file %s` cut from it (`%t/part.pto`)."""
    runs: list[PtoasRun] = []
    cmds = run_commands(text)
    split = any(re.search(r"\bsplit-file\s+%s\b", c) for c in cmds)
    for cmd in cmds:
        for segment in re.split(r"\|\||&&|\||;", cmd):
            try:
                tokens = shlex.split(segment)
            except ValueError:
                tokens = segment.split()
            tokens = [t.strip("(){}") for t in tokens]
            tokens = [t for t in tokens if t]
            expect_fail = False
            while tokens and tokens[0] in ("not", "!", "env"):
                if tokens[0] == "env":  # env [-u VAR]... [VAR=value]... command
                    i = 1
                    while i < len(tokens) and (tokens[i] == "-u" or tokens[i - 1] == "-u" or "=" in tokens[i]):
                        i += 1
                    tokens = tokens[i:]
                else:
                    expect_fail, tokens = True, tokens[1:]
            if not tokens or tokens[0] != "ptoas":
                continue
            args: list[str] = []
            reads = False
            skip = False
            for tok in tokens[1:]:
                if skip:
                    skip = False
                    continue
                if tok in ("-o", ">", "2>", ">>"):
                    skip = True
                    continue
                if re.match(r"^(\d?>|>>|2>&1)", tok) or tok.startswith("-o="):
                    continue
                if tok == "%s":
                    reads = True
                    args.append(path)
                    continue
                if split and tok.startswith("%t/"):
                    reads = True
                args.append(tok)
            runs.append(PtoasRun(args, expect_fail, reads))
    return runs


def classify(text: str, path: str = "") -> str:
    """'a3' for a file to check, else the reason to skip it."""
    cmds = run_commands(text)
    runs = ptoas_runs(text)
    stem = Path(path).stem
    if cmds and not runs:
        return "not a ptoas input"
    if runs and not any(r.reads_file for r in runs):
        return "not a ptoas input"
    if any(r.expect_fail for r in runs) or "expected-error" in text:
        return "meant to fail"
    if not cmds and re.search(r"_(invalid|xfail)$", stem):
        return "meant to fail"
    check_prefixes = {"CHECK"}
    for c in cmds:
        for m in re.finditer(r"--check-prefix(?:es)?[= ](\S+)", c):
            check_prefixes.update(m.group(1).split(","))
    for line in text.splitlines():
        m = re.match(r"\s*//\s*([A-Za-z0-9_]+)(-[A-Z]+)?:\s*(.*)$", line)
        if m and m.group(1) in check_prefixes and m.group(2) in (None, "-NEXT", "-SAME", "-DAG", "-LABEL"):
            if re.search(r"\berror:", m.group(3)):
                return "meant to fail"
    if re.search(r'pto\.target_arch\s*=\s*"a5"', text) or _A5_DEVICE.search(text):
        return "A5 only"
    own = [r for r in runs if r.reads_file]
    if own and all(r.arch == "a5" for r in own):
        return "A5 only"
    if not cmds and _A5_NAME.search(stem.removesuffix("-pto")):
        return "A5 only"
    if (own and all(r.backend == "vpto" for r in own)) or _VPTO_MODULE.search(text):
        return "vpto back end"
    return "a3"


@dataclass
class Result:
    path: str
    parsed: bool = False
    verified: bool = False
    simulated: bool | None = None  # None: not attempted
    stage: str = ""  # where it failed: parse / verify / simulate / crash
    line: int = 0
    message: str = ""
    sim_note: str = ""
    kind: str = ""  # the selection (classify) of the file
    ptoas_a3: bool | None = None  # ptoas --pto-arch=a3 --enable-insert-sync accepts it (None: not run)
    ptoas_own: bool | None = None  # ptoas with the file's own A3 RUN flags accepts it (None: not run)
    ptoas_error: str = ""  # ptoas's first error line when it rejects
    own_backend: str | None = None  # the back end of the rejecting RUN flags
    own_level: str = "level2"  # the --pto-level of the rejecting RUN flags
    own_verified: bool | None = None  # the checker's verdict with that back end (None: ptoas did not reject)


def cause_of(stage: str, message: str) -> str:
    """A failure's cause: the message with names, numbers and types taken out."""
    m = re.search(r"Operation (\S+) is not registered", message)
    if m:
        return f"{stage}: unknown op {m.group(1)}"
    m = re.match(r"'([\w.]+)' ([^:]+):", message)
    if m:
        return f"{stage}: '{m.group(1)}' {m.group(2)}"
    msg = message
    msg = re.sub(r"@[\w.$]+", "@F", msg)
    msg = re.sub(r"%[\w.$#]+", "%v", msg)
    msg = re.sub(r"!pto\.[a-z_]+<[^>]*>+", "!pto.T", msg)
    msg = re.sub(r"\b\d+\b", "N", msg)
    return f"{stage}: {msg[:110]}"


def check_one(path: str, simulate: bool, backend: str | None = None, level: str | None = None) -> Result:
    from ptofa.ir.textio import PtoCheckError, parse_pto, verify_module

    res = Result(path)
    text = Path(path).read_text(errors="replace")
    try:
        parsed = parse_pto(text, path)
        res.parsed = True
        verify_module(parsed, launch_rules=False, backend=backend, level=level)
        res.verified = True
    except PtoCheckError as exc:
        line, msg = exc.errors[0]
        res.stage, res.line, res.message = ("verify" if res.parsed else "parse"), line, msg
        return res
    except Exception as exc:  # noqa: BLE001 - a crash is a finding to report
        res.stage, res.message = "crash", f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return res
    if simulate:
        _simulate(parsed, res)
    return res


def _simulate(parsed, res: Result) -> None:
    """Run the entry on zero inputs, one block, when its arguments are all pointers / scalars."""
    import numpy as np
    from xdsl.dialects import builtin, func

    from ptofa.ir import dialect as d
    from ptofa.sim import GmPointer, SimError, simulate

    funcs = [op for op in parsed.module.walk() if isinstance(op, func.FuncOp) and op.body.blocks]
    entries = [f for f in funcs if "pto.entry" in f.attributes] or funcs
    if len(entries) != 1:
        res.sim_note = "no single entry function"
        return
    args: dict[str, object] = {}
    block = entries[0].body.blocks[0]
    for i, arg in enumerate(block.args):
        name = arg.name_hint or f"arg{i}"
        t = arg.type
        if isinstance(t, d.PtrType):
            elem = d.elem_name(t.elem)
            try:
                args[name] = GmPointer.of(np.zeros(1 << 20, dtype=np.dtype({"bf16": "V2"}.get(elem, elem.replace("f", "float").replace("i", "int")))))
            except Exception:  # noqa: BLE001
                res.sim_note = f"argument type {t}"
                return
        elif isinstance(t, (builtin.IntegerType, builtin.IndexType)):
            args[name] = 1
        elif isinstance(t, (builtin.Float32Type, builtin.Float16Type)):
            args[name] = 1.0
        else:
            res.sim_note = f"argument type {t}"
            return
    import contextlib
    import io

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # tprint output
            simulate(parsed, args, 1, max_steps=2_000_000)
        res.simulated = True
    except SimError as exc:
        res.simulated = False
        res.stage, res.message = "simulate", str(exc).splitlines()[0][:200]
    except Exception as exc:  # noqa: BLE001
        res.simulated = False
        res.stage, res.message = "simulate", f"{type(exc).__name__}: {str(exc).splitlines()[0][:180] if str(exc) else ''}"


def run_ptoas(ptoas: str, args: list[str]) -> tuple[bool, str]:
    """(accepted, first error line): one ptoas run, its output to a scratch file."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run([ptoas, *args, "-o", os.path.join(tmp, "out")], capture_output=True, text=True,
                                  timeout=PTOAS_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            return False, f"ptoas timed out after {PTOAS_TIMEOUT_S} s"
    if proc.returncode == 0:
        return True, ""
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if "error" in ln.lower()]
    return False, (lines[0] if lines else f"exit code {proc.returncode}").strip()[:200]


def _lit_args(run: PtoasRun, path: str, tmp: str) -> list[str]:
    subst = {"%S": os.path.dirname(path), "%t": os.path.join(tmp, "t"), "%T": tmp}
    out = []
    for a in run.args:
        for k, v in subst.items():
            a = a.replace(k, v)
        out.append(a)
    return out


def two_way(job: tuple[str, bool, str]) -> Result:
    """Check a file, and compile it with ptoas both ways (A3 flags; its own A3 RUN flags)."""
    path, simulate, ptoas = job
    text = Path(path).read_text(errors="replace")
    res = check_one(path, simulate, level="level2")  # what A3_FLAGS (ptoas's default level) compile
    res.kind = classify(text, path)
    res.ptoas_a3, err = run_ptoas(ptoas, [*A3_FLAGS, path])
    runs = [r for r in ptoas_runs(text, path) if r.reads_file and r.arch in (None, "a3")]
    if not run_commands(text):
        runs = [PtoasRun([*A3_FLAGS, path], False, True)]
    if res.ptoas_a3 is False:
        res.ptoas_error = err
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            ok, err = run_ptoas(ptoas, _lit_args(run, path, tmp))
            if not ok:
                res.ptoas_own, res.ptoas_error, res.own_backend, res.own_level = False, err, run.backend, run.level
                break
            res.ptoas_own = True
    if res.ptoas_own is False:
        own_flags = res.own_backend or res.own_level != "level2"
        res.own_verified = (check_one(path, False, backend=res.own_backend, level=res.own_level) if own_flags else res).verified
    return res


def _worker(job: tuple[str, bool]) -> Result:
    path, simulate = job
    res = check_one(path, simulate)
    res.kind = classify(Path(path).read_text(errors="replace"), path)
    return res


def collect(folder: Path) -> tuple[list[str], Counter]:
    selected: list[str] = []
    skipped: Counter = Counter()
    for root, _dirs, files in os.walk(folder):
        for f in sorted(files):
            if not f.endswith(".pto"):
                continue
            p = os.path.join(root, f)
            kind = classify(Path(p).read_text(errors="replace"), p)
            if kind == "a3":
                selected.append(p)
            else:
                skipped[kind] += 1
    return sorted(selected), skipped


def all_files(folder: Path) -> list[str]:
    return sorted(os.path.join(root, f) for root, _dirs, files in os.walk(folder) for f in files if f.endswith(".pto"))


def _cause_table(rows: list[tuple[str, Result]], folder: Path) -> None:
    causes: dict[str, list[Result]] = defaultdict(list)
    for cause, r in rows:
        causes[cause].append(r)
    if not causes:
        return
    print()
    print("| files | cause | e.g. |")
    print("|---:|---|---|")
    for cause, rs in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ex = rs[0]
        print(f"| {len(rs)} | {cause} | {os.path.relpath(ex.path, folder)}:{ex.line} |")


def _pool_map(fn, jobs, n: int):
    if n > 1:
        with multiprocessing.Pool(n) as pool:
            return pool.map(fn, jobs, chunksize=4)
    return [fn(j) for j in jobs]


def report_selection(results: list[Result], skipped: Counter, ns) -> None:
    n = len(results)
    parsed = sum(r.parsed for r in results)
    verified = sum(r.verified for r in results)
    sim_tried = [r for r in results if r.simulated is not None]
    simulated = sum(bool(r.simulated) for r in sim_tried)
    print("skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) + f" (total {sum(skipped.values())})")
    pct = lambda k: f"{100.0 * k / n:5.1f}%" if n else "  -  "  # noqa: E731
    print()
    print("| files | parsed | verified |" + (" simulated |" if ns.simulate else ""))
    print("|---:|---:|---:|" + ("---:|" if ns.simulate else ""))
    row = f"| {n} | {parsed} ({pct(parsed).strip()}) | {verified} ({pct(verified).strip()}) |"
    if ns.simulate:
        row += f" {simulated} of {len(sim_tried)} run |"
    print(row)
    _cause_table([(cause_of(r.stage, r.message), r) for r in results if r.stage], ns.folder)


def report_two_way(results: list[Result], ns) -> None:
    accepted = [r for r in results if r.ptoas_a3]
    d1 = [r for r in accepted if r.stage and r.stage != "simulate"]
    rejected = [r for r in results if r.ptoas_own is False]
    d2 = [r for r in rejected if r.own_verified]
    print(f"ptoas: {ns.ptoas}")
    print()
    print("| direction | ptoas | checker disagrees |")
    print("|---|---:|---:|")
    print(f"| ptoas {' '.join(A3_FLAGS)} accepts, checker rejects | {len(accepted)} accepted | {len(d1)} |")
    print(f"| ptoas with the file's own A3 RUN flags rejects, checker accepts | {len(rejected)} rejected | {len(d2)} |")
    if d1:
        print("\nptoas accepts, the checker rejects (the checker's first error):")
        _cause_table([(cause_of(r.stage, r.message), r) for r in d1], ns.folder)
    if d2:
        print("\nptoas rejects, the checker accepts (ptoas's first error):")
        _cause_table([(re.sub(r"\b\d+\b", "N", re.sub(r"^.*?error:\s*", "", r.ptoas_error))[:110], r) for r in d2], ns.folder)
    if ns.list:
        print()
        for r in d1:
            print(f"{os.path.relpath(r.path, ns.folder)}:{r.line}: ptoas accepts, checker: {r.stage}: {r.message}")
        for r in d2:
            print(f"{os.path.relpath(r.path, ns.folder)}: ptoas rejects ({r.ptoas_error}), checker accepts")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--simulate", action="store_true", help="also run the simulator on complete kernels")
    ap.add_argument("--list", action="store_true", help="list every failing file with its first error")
    ap.add_argument("--json", type=Path, help="write the per-file results here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ptoas", default=shutil.which("ptoas"),
                    help="a ptoas to measure both directions with (default: ptoas on PATH; without one, the RUN-line selection)")
    ap.add_argument("--no-ptoas", dest="ptoas", action="store_const", const=None, help="ignore any ptoas on PATH")
    ns = ap.parse_args(argv)
    print(f"corpus: {ns.folder}")
    if ns.ptoas:
        results = _pool_map(two_way, [(p, ns.simulate, ns.ptoas) for p in all_files(ns.folder)], ns.jobs)
        selected = [r for r in results if r.kind == "a3"]
        report_selection(selected, Counter(r.kind for r in results if r.kind != "a3"), ns)
        print()
        report_two_way(results, ns)
    else:
        selected, skipped = collect(ns.folder)
        results = _pool_map(_worker, [(p, ns.simulate) for p in selected], ns.jobs)
        report_selection(results, skipped, ns)
        if ns.list:
            print()
            for r in results:
                if r.stage:
                    print(f"{os.path.relpath(r.path, ns.folder)}:{r.line}: {r.stage}: {r.message}")
    if ns.json:
        ns.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
