"""Conformance of ptofa's checker (and simulator) with the programs ptoas accepts.

    python scripts/conformance.py /tmp/ptoas_corpus/test [--simulate] [--list] [--json out.json]

Walks a folder of `.pto` files (e.g. a local fetch of PTOAS's `test/` folder: never
commit it), keeps the ones a real ptoas compiles for A2/A3, runs `check_text` (what
`run_fa check` runs, less ptofa's launch rules: `ptofa.ir.textio.launch_errors`, which ptoas
does not have) on each and prints a table: files, parsed, verified, simulated,
and the first error of every failure grouped by cause.

Which files count (from each file's lit `RUN:` lines and module attributes):

* skipped as *meant to fail*: a `RUN:` command that runs ptoas under `not`, a file with
  `expected-error` diagnostics, or a positive `CHECK:` pattern that expects `error:`
  (`CHECK-NOT: error:` is a positive test);
* skipped as *A5 only*: `pto.target_arch = "a5"` in the module, a `"pto.device-spec"` naming
  an A5 device (`Ascend950*` / `Ascend910_95*`, as PTOAS's isA5DeviceSpec reads it), or
  every ptoas `RUN:` line passes `--pto-arch=a5` (ptoas's default arch is a3);
* skipped as *not a ptoas input*: `RUN:` lines that run only other tools
  (`pto-test-opt` pass pipelines on internal dialects);
* the rest (lit tests and sample kernels without `RUN:` lines) are A3 inputs.

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
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_RUN = re.compile(r"//\s*RUN:(.*)$")
_A5_ARCH = re.compile(r"--pto-arch(=|\s+)a5\b")
_ANY_ARCH = re.compile(r"--pto-arch(=|\s+)(\w+)")
_A5_DEVICE = re.compile(r'"pto\.device-spec"\s*=\s*"(Ascend950|Ascend910_95)')
_ERROR_CHECK = re.compile(r"//\s*[A-Z0-9_-]*(?<!NOT):\s.*\berror\b", re.IGNORECASE)


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


def classify(text: str) -> str:
    """'a3' for a file to check, else the reason to skip it."""
    cmds = run_commands(text)
    ptoas = [c for c in cmds if re.search(r"(^|[\s(|;&])ptoas\b", c)]
    if cmds and not ptoas:
        return "not a ptoas input"
    if any(re.search(r"(^|[\s(|;&])not\s+ptoas\b", c) for c in cmds) or "expected-error" in text:
        return "meant to fail"
    check_prefixes = {"CHECK"}
    for c in ptoas:
        for m in re.finditer(r"--check-prefix(?:es)?[= ](\S+)", c):
            check_prefixes.update(m.group(1).split(","))
    for line in text.splitlines():
        m = re.match(r"\s*//\s*([A-Za-z0-9_]+)(-[A-Z]+)?:\s*(.*)$", line)
        if m and m.group(1) in check_prefixes and m.group(2) in (None, "-NEXT", "-SAME", "-DAG", "-LABEL"):
            if re.search(r"\berror:", m.group(3)):
                return "meant to fail"
    if re.search(r'pto\.target_arch\s*=\s*"a5"', text) or _A5_DEVICE.search(text):
        return "A5 only"
    arch_runs = [c for c in ptoas if _ANY_ARCH.search(c)]
    if ptoas and len(arch_runs) == len(ptoas) and all(_A5_ARCH.search(c) for c in ptoas):
        return "A5 only"
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


def cause_of(stage: str, message: str) -> str:
    """A failure's cause: the message with names, numbers and types taken out."""
    m = re.search(r"Operation (\S+) is not registered", message)
    if m:
        return f"{stage}: unknown op {m.group(1)}"
    m = re.match(r"'([\w.]+)' ([^:]+):", message)
    if m:
        return f"{stage}: '{m.group(1)}' {m.group(2)}"
    m = re.match(r"(module|@\w+|pipe id \d+)[: ]", message)
    msg = message
    msg = re.sub(r"@[\w.$]+", "@F", msg)
    msg = re.sub(r"%[\w.$#]+", "%v", msg)
    msg = re.sub(r"!pto\.[a-z_]+<[^>]*>+", "!pto.T", msg)
    msg = re.sub(r"\b\d+\b", "N", msg)
    return f"{stage}: {msg[:110]}"


def check_one(path: str, simulate: bool) -> Result:
    from ptofa.ir.textio import PtoCheckError, parse_pto, verify_module

    res = Result(path)
    text = Path(path).read_text(errors="replace")
    try:
        parsed = parse_pto(text, path)
        res.parsed = True
        verify_module(parsed, launch_rules=False)
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


def _worker(job: tuple[str, bool]) -> Result:
    return check_one(*job)


def collect(folder: Path) -> tuple[list[str], Counter]:
    selected: list[str] = []
    skipped: Counter = Counter()
    for root, _dirs, files in os.walk(folder):
        for f in sorted(files):
            if not f.endswith(".pto"):
                continue
            p = os.path.join(root, f)
            kind = classify(Path(p).read_text(errors="replace"))
            if kind == "a3":
                selected.append(p)
            else:
                skipped[kind] += 1
    return sorted(selected), skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--simulate", action="store_true", help="also run the simulator on complete kernels")
    ap.add_argument("--list", action="store_true", help="list every failing file with its first error")
    ap.add_argument("--json", type=Path, help="write the per-file results here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ns = ap.parse_args(argv)
    selected, skipped = collect(ns.folder)
    jobs = [(p, ns.simulate) for p in selected]
    if ns.jobs > 1:
        with multiprocessing.Pool(ns.jobs) as pool:
            results = pool.map(_worker, jobs, chunksize=4)
    else:
        results = [_worker(j) for j in jobs]
    n = len(results)
    parsed = sum(r.parsed for r in results)
    verified = sum(r.verified for r in results)
    sim_tried = [r for r in results if r.simulated is not None]
    simulated = sum(bool(r.simulated) for r in sim_tried)
    print(f"corpus: {ns.folder}")
    print("skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) + f" (total {sum(skipped.values())})")
    pct = lambda k: f"{100.0 * k / n:5.1f}%" if n else "  -  "  # noqa: E731
    print()
    print("| files | parsed | verified |" + (" simulated |" if ns.simulate else ""))
    print("|---:|---:|---:|" + ("---:|" if ns.simulate else ""))
    row = f"| {n} | {parsed} ({pct(parsed).strip()}) | {verified} ({pct(verified).strip()}) |"
    if ns.simulate:
        row += f" {simulated} of {len(sim_tried)} run |"
    print(row)
    causes: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.stage:
            causes[cause_of(r.stage, r.message)].append(r)
    if causes:
        print()
        print("| failures | first error (cause) | e.g. |")
        print("|---:|---|---|")
        for cause, rs in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            ex = rs[0]
            print(f"| {len(rs)} | {cause} | {os.path.relpath(ex.path, ns.folder)}:{ex.line} |")
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
