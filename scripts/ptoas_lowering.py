"""Which ops of ptofa's dialect ptoas's default (EmitC) back end lowers for A2/A3, read from a
PTOAS checkout, against ptofa's table (`ptofa.ir.dialect.lowering`).

    python scripts/ptoas_lowering.py /tmp/PTOAS [--list]

A PTO op reaches PTOToEmitC unless a pass of the default pipeline rewrote it; PTOToEmitC marks
the PTO dialect illegal and converts the ops that `populatePTOToEmitCPatterns` registers a
pattern for. This script reads which op class each registered pattern converts
(`struct P : public OpConversionPattern<pto::X>`, or a template instantiated with `pto::X`),
maps the classes to their mnemonics through PTOOps.td (`def X : PTO_TOp<"name"`), and checks
ptofa's table: every op of the dialect is lowered by a pattern, lowered before (named by
`LOWERED_BEFORE_EMITC`, whose op class the pass's source must mention), or listed in
`NOT_LOWERED_BY_EMITC` (and then has no pattern). Exit 1 on any disagreement. The PTOAS
checkout is only read (never commit it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _split_top_level(text: str) -> list[str]:
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return items + [cur.strip()]


def emitc_lowered(ptoas: Path) -> set[str]:
    """Mnemonics (`pto.X`) of the ops populatePTOToEmitCPatterns registers a pattern for."""
    src = (ptoas / "lib/PTO/Transforms/PTOToEmitC.cpp").read_text(errors="replace")
    converts = {m.group(1): m.group(2) for m in re.finditer(
        r"(?:struct|class)\s+(\w+)\s*(?:final\s*)?:\s*public\s+(?:mlir::)?OpConversionPattern<\s*(?:mlir::)?(?:pto::)?(\w+)\s*>", src)}
    templates = set(re.findall(r"template\s*<[^>]*>\s*(?:struct|class)\s+(\w+)\s*:\s*public\s+(?:mlir::)?OpConversionPattern<", src))
    body = src[src.index("static void populatePTOToEmitCPatterns"):]
    body = body[: body.index("populateSCFToEmitCConversionPatterns")]
    classes: set[str] = set()
    for m in re.finditer(r"patterns\.add<(.*?)>\s*\(", body, re.S):
        for item in _split_top_level(" ".join(m.group(1).split())):
            inst = re.match(r"(\w+)<\s*(?:mlir::)?(?:pto::)?(\w+)", item)
            if inst and inst.group(1) in templates:
                classes.add(inst.group(2))
            elif item.split("<")[0] in converts:
                classes.add(converts[item.split("<")[0]])
    named = set(re.findall(r'patterns\.add<\w+>\(typeConverter, ctx, "(pto\.[\w.]+)"', body))
    td = (ptoas / "include/PTO/IR/PTOOps.td").read_text(errors="replace")
    mnemonic = {m.group(1): m.group(2) for m in re.finditer(r'^def (\w+)\s*:\s*\w+<"([\w.]+)"', td, re.M)}
    return {f"pto.{mnemonic[c]}" for c in classes if c in mnemonic} | named


def op_classes(ptoas: Path) -> dict[str, str]:
    """Mnemonic (`pto.X`) -> op class name, from PTOOps.td."""
    td = (ptoas / "include/PTO/IR/PTOOps.td").read_text(errors="replace")
    return {f"pto.{m.group(2)}": m.group(1) for m in re.finditer(r'^def (\w+)\s*:\s*\w+<"([\w.]+)"', td, re.M)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ptoas", type=Path, help="a PTOAS checkout (its lib/ and include/)")
    ap.add_argument("--list", action="store_true", help="print every op of ptofa's dialect with how ptoas lowers it")
    ns = ap.parse_args(argv)
    from ptofa.ir import dialect as d
    from ptofa.ir.dialect.lowering import LOWERED_BEFORE_EMITC, NOT_LOWERED_BY_EMITC

    lowered = emitc_lowered(ns.ptoas)
    classes = op_classes(ns.ptoas)
    transforms = "\n".join(p.read_text(errors="replace") for p in sorted((ns.ptoas / "lib/PTO/Transforms").rglob("*.cpp"))
                           if p.name != "PTOToEmitC.cpp")
    problems: list[str] = []
    names = sorted(op.name for op in d.PTO.operations)
    for name in names:
        if name in NOT_LOWERED_BY_EMITC:
            how = "not lowered by EmitC: " + NOT_LOWERED_BY_EMITC[name]
            if name in lowered:
                problems.append(f"{name}: listed as not lowered, but PTOToEmitC has a pattern for it")
        elif name in lowered:
            how = "PTOToEmitC pattern"
            if name in LOWERED_BEFORE_EMITC:
                problems.append(f"{name}: listed as lowered before EmitC, but PTOToEmitC has a pattern for it (drop the entry)")
        elif name in LOWERED_BEFORE_EMITC:
            how = "lowered before EmitC: " + LOWERED_BEFORE_EMITC[name]
            cls = classes.get(name)
            if cls is None or not re.search(rf"\b{cls}\b", transforms):
                problems.append(f"{name}: listed as lowered by {LOWERED_BEFORE_EMITC[name]}, but no pass mentions {cls or 'its class'}")
        else:
            how = "UNKNOWN"
            problems.append(f"{name}: no PTOToEmitC pattern and no entry in ptofa.ir.dialect.lowering (add it to NOT_LOWERED_BY_EMITC "
                            "or, if a pass rewrites it first, to LOWERED_BEFORE_EMITC)")
        if ns.list:
            print(f"{name}\t{how}")
    for problem in problems:
        print(problem)
    print(f"{len(names)} ops of ptofa's dialect, {len(problems)} disagreement(s) with {ns.ptoas}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
