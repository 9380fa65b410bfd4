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


def ring_warnings(rings: list[tuple], limit: int = 10) -> list[str]:
    """GM slot rings that disagree between the two sides of a pipe, or overlap another ring.

    `rings` holds (block, pipe id, core, buffer, lo, hi) per pipe end. Blocks run
    concurrently on hardware, so rings of different pipes or blocks that share bytes
    race even when the sequential simulation happens to produce the right numbers.
    """
    out: list[str] = []
    per_pipe: dict[tuple[int, int], list[tuple]] = {}
    for ring in rings:
        per_pipe.setdefault((ring[0], ring[1]), []).append(ring)
    spans = []
    for (block, pid), ends in sorted(per_pipe.items(), key=lambda kv: kv[0]):
        first = ends[0]
        for other in ends[1:]:
            if other[3] is not first[3] or other[4] != first[4]:
                out.append(
                    f"block {block} pipe {pid}: {first[2]} ring starts at byte {first[4]}, "
                    f"{other[2]} ring at byte {other[4]}{'' if other[3] is first[3] else ' of another buffer'}; "
                    "the two sides address different slots"
                )
        spans.append((id(first[3]), first[4], first[5], block, pid))
    spans.sort()
    for i in range(1, len(spans)):
        prev, cur = spans[i - 1], spans[i]
        if prev[0] == cur[0] and cur[1] < prev[2]:
            out.append(
                f"GM slot rings overlap: block {prev[3]} pipe {prev[4]} bytes [{prev[1]}, {prev[2]}) and "
                f"block {cur[3]} pipe {cur[4]} bytes [{cur[1]}, {cur[2]}) (a race when blocks or pipes run concurrently)"
            )
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out
