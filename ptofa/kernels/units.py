"""The kernels' work units on the host, in plain Python integers: the window, the tiles a
unit visits, and which block of the persistent loop runs which unit.

The kernels compute the same in IR with `scalar.*` ops (`fa_fwd._unit`, `common.snake_rank`,
`kernels/builtin_mods/window.py`); `tests/test_units.py` runs the kernels on the
simulator and checks that every block visits the tiles this module says it does.
Every host-side copy (unit tables, split plans, the tuner, the timing model, FLOP counts)
calls these functions.

The window. A bottom-right aligned window (left, right) lets query i see key j iff
i + diag - left <= j <= i + diag + right, with diag = S1 - S0; -1 is unbounded and
causal is (-1, 0). The kernels take bounds instead (`kernel_bounds`): -1 becomes
S0 + S1, which no offset reaches, and a right bound may be negative (torch's top-left
causal with S1 > S0).

The schedule. A persistent launch of n blocks runs units b, b + n, b + 2n, ... on block b
(wave i is units [i*n, (i+1)*n)). A kernel whose units differ in work ranks them longest
first and hands the ranks out in a snake: in odd full waves block b takes rank
i*n + (n-1-b), so a block with a long unit in one wave gets a short one in the next.
The forward's masked and varlen kernels and the varlen backward's dq and dkdv kernels
(whose tables `longest_first` orders) snake; the uniform backward's units are round robin.
"""

from __future__ import annotations

from collections.abc import Sequence

# The window's normalisation and pair count live with `ProblemShape` (which every layer
# imports); they are part of this module's arithmetic and re-exported here.
from ptofa.pipeline import UNIT_TABLE
from ptofa.visibility import UNBOUNDED, kernel_bounds, visible_pairs  # noqa: F401 (re-exported)


# ======================================================================================
# The window
# ======================================================================================


def window_of_bounds(bounds: Sequence[int] | None, s0: int, s1: int) -> tuple[int, int]:
    """The window (-1 = unbounded) of kernel bounds: a bound no offset reaches is -1, a
    negative right bound (torch's top-left causal with S1 > S0) is 0; None is (-1, -1)."""
    if bounds is None:
        return (UNBOUNDED, UNBOUNDED)
    left, right = bounds
    return (UNBOUNDED if left >= s0 + s1 else left, UNBOUNDED if right >= s0 + s1 else max(0, right))


def blocks_of(lo_pos: int, hi_pos: int, limit: int, block: int) -> tuple[int, int]:
    """Blocks [lo, hi) of `block` positions covering [max(lo_pos, 0), min(hi_pos, limit)), empty (lo == hi) if that is."""
    lo_pos, hi_pos = max(lo_pos, 0), min(hi_pos, limit)
    lo = lo_pos // block
    return lo, (-(-hi_pos // block) if hi_pos > lo_pos else lo)


def keys_seen(q0: int, q_rows: int, s0: int, s1: int, bounds: Sequence[int] | None, block: int) -> tuple[int, int]:
    """KV tiles [lo, hi) of `block` keys seen by query rows [q0, q0 + q_rows) under kernel `bounds`
    (None: no window, every tile); `fa_fwd._unit` and `window.keys_seen` in IR."""
    if bounds is None:
        return 0, -(-s1 // block)
    left, right = bounds
    diag = s1 - s0
    return blocks_of(q0 + diag - left, q0 + q_rows + diag + right, s1, block)


def queries_seeing(k0: int, k_rows: int, s0: int, s1: int, bounds: Sequence[int] | None, block: int) -> tuple[int, int]:
    """Q blocks [lo, hi) of `block` rows with a row that sees a key of [k0, k0 + k_rows)
    (`window.queries_seeing` in IR, the dkdv kernel)."""
    if bounds is None:
        return 0, -(-s0 // block)
    left, right = bounds
    diag = s1 - s0
    return blocks_of(k0 - diag - right, k0 + k_rows - diag + left, s0, block)


def visible_tiles(q0: int, q_rows: int, s0: int, s1: int, bounds: Sequence[int] | None, block: int) -> int:
    """How many KV tiles of `block` keys rows [q0, q0 + q_rows) visit (`keys_seen`)."""
    lo, hi = keys_seen(q0, q_rows, s0, s1, bounds, block)
    return hi - lo


def split_tiles(visible: int, split: int, splits: int) -> int:
    """Tiles split `split` of `splits` gets of a unit's `visible` tiles: split i covers
    [n*i // S, n*(i+1) // S) (`fa_fwd._split_range`)."""
    return visible * (split + 1) // splits - visible * split // splits


def row_keys(i: int, s0: int, s1: int, bounds: Sequence[int]) -> tuple[int, int]:
    """Keys [lo, hi) query row i sees under kernel `bounds`."""
    left, right = bounds
    diag = s1 - s0
    lo, hi = max(0, i + diag - left), min(s1, i + diag + right + 1)
    return lo, max(lo, hi)


# ======================================================================================
# The persistent loop's schedule
# ======================================================================================


def snake_rank(unit: int, blocks: int, units: int) -> int:
    """The rank (0 = longest) loop index `unit` works on: rank i*n + b in even waves and
    i*n + (n-1-b) in odd full waves (n = blocks; `common.snake_rank` in IR)."""
    wave, pos = divmod(unit, blocks)
    if wave % 2 == 1 and (wave + 1) * blocks <= units:
        pos = blocks - 1 - pos
    return wave * blocks + pos


def block_units(block: int, blocks: int, units: int, snake: bool) -> list[int]:
    """The units (ranks when `snake`) block `block` of `blocks` runs, in order."""
    loop = range(block, units, blocks)
    return [snake_rank(u, blocks, units) for u in loop] if snake else list(loop)


def schedule(units: int, blocks: int, snake: bool) -> list[list[int]]:
    """Per block, the units it runs (`block_units` of every block)."""
    return [block_units(b, blocks, units, snake) for b in range(blocks)]


def longest_first(work: Sequence[float]) -> list[int]:
    """The units of `work` by rank: longest first, stable within equal work (a unit table's order,
    whose rank r `schedule` hands out)."""
    return sorted(range(len(work)), key=lambda i: -work[i])


def dq_unit_tiles(q_block: int, q_len: int, k_len: int, bounds: Sequence[int] | None, block_q: int,
                  block_kv: int) -> int:
    """Steps of a backward dq unit (Q block `q_block` of `block_q` rows of a sequence): the KV tiles of
    `block_kv` keys its rows see (one score tile each)."""
    q0 = q_block * block_q
    return visible_tiles(q0, min(block_q, q_len - q0), q_len, k_len, bounds, block_kv)


def dkdv_unit_steps(k_block: int, q_len: int, k_len: int, bounds: Sequence[int] | None, block_kv: int,
                    block_q: int, group: int) -> int:
    """Steps of a backward dkdv unit (KV block `k_block` of `block_kv` keys of a sequence): the group's
    q heads x the Q blocks of `block_q` rows that see the block (one score tile each)."""
    k0 = k_block * block_kv
    lo, hi = queries_seeing(k0, min(block_kv, k_len - k0), q_len, k_len, bounds, block_q)
    return group * (hi - lo)


def backward_table_steps(c, kernel: str, rows: Sequence[Sequence[int]], window: tuple[int, int],
                         group: int) -> list[int]:
    """Steps of each entry (by rank) of a varlen backward unit table (`launch.varlen.backward_tables`;
    `rows` its entries as lists, `c` the `BwdConfig`): `dq_unit_tiles` of a dq table, `dkdv_unit_steps`
    of a dkdv table (whose `head` is the KV head and `q_block` the KV block)."""
    f = {name: i for i, name in enumerate(UNIT_TABLE)}
    steps = []
    for row in rows:
        q_len, k_len, block = row[f["q_len"]], row[f["k_len"]], row[f["q_block"]]
        bounds = kernel_bounds(window, q_len, k_len) if c.narrowing else None
        steps.append(dq_unit_tiles(block, q_len, k_len, bounds, c.dq_block_q, c.dq_block_kv) if kernel == "dq" else
                     dkdv_unit_steps(block, q_len, k_len, bounds, c.block_kv, c.block_q, group))
    return steps


def block_loads(costs: Sequence[float], blocks: int, snake: bool = True) -> list[float]:
    """Per-block sum of the costs of the units it runs; `costs[r]` is unit (or rank) r's cost."""
    return [sum(costs[u] for u in ranks) for ranks in schedule(len(costs), blocks, snake)]


def makespan(costs: Sequence[float], blocks: int, snake: bool = True) -> float:
    """The busiest block's load (0 without units)."""
    return max(block_loads(costs, blocks, snake), default=0.0)


def masked_q_block(rank: int, batch_heads: int, q_blocks: int) -> int:
    """The Q block of rank `rank` in a dense masked launch: last block first, then every
    (batch, head) of it (`fa_fwd._unit`: later blocks see more keys)."""
    return q_blocks - 1 - rank // batch_heads
