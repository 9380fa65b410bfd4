"""Human-readable reports of a stuck or unbalanced launch."""

from __future__ import annotations


def last_ops(core, ops) -> str:
    if not core.hist:
        return "(none)"
    return " -> ".join(ops[i].where() for i in core.hist)


def deadlock_report(block: int, cores, pipes: dict, ops) -> str:
    lines = [f"pipe deadlock in block {block}: every live core is blocked"]
    for core in cores:
        if core.done:
            lines.append(f"  {core.name}: finished")
            continue
        if core.wait is None:
            lines.append(f"  {core.name}: not blocked in a pipe op (last op {last_ops(core, ops)})")
            continue
        opid, proto, what = core.wait
        lines.append(f"  {core.name}: blocked in {ops[opid].where()} on pipe {proto.pipe_id}, waiting for {what}")
        lines.append(f"      {proto.describe()}")
        lines.append(f"      last ops: {last_ops(core, ops)}")
    if pipes:
        lines.append("  all pipes of the block:")
        for pid in sorted(pipes):
            lines.append(f"    {pipes[pid].describe()}")
    return "\n".join(lines)


def imbalance_report(block: int, problems: list[str]) -> str:
    return f"pipe imbalance at kernel exit in block {block}: " + "; ".join(problems)
