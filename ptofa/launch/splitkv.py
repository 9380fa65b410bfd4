"""Split-KV (flash-decoding) on the host: the reduce kernel, its predicted time, and the split count.

When a launch has fewer work units than cube cores (decode: B * heads units of one query
row), most cores idle while a few walk the whole cache; when it has a few more than a
multiple of the cores (a dense prefill of 32 Q blocks on 24 cores), the last wave keeps
most cores idle. A `split_kv` forward kernel splits a unit's visible KV tiles over its own
number of entries of the unit table (`varlen.table_of_sequences`), each writing a partial
O and LSE; the reduce kernel (`kernels/fa_reduce.py`) combines each split unit's partials.
`plan_splits` picks the per-unit counts for `num_splits=0` from the timing model's costs of
this kernel (`balanced_splits`: e.g. only the units of the last wave split).

The dense calls split the same way: a dense problem whose units leave cores idle (fewer units
than cube cores, or an incomplete last wave) runs as a varlen batch of B equal sequences
(`calls.dense_as_varlen`) with per-unit split counts (`plan_dense_split`), so the KV range of
some units is spread over several cores and combined by the reduce kernel: one `LaunchPlan`,
launched like any other (`ptofa.attention.core.run_dense_split`).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
from collections.abc import Sequence

import torch

from ptofa.launch.calls import LaunchPlan, dense_as_varlen, split_plan
from ptofa.launch.kernel_cache import split_kernels
from ptofa.launch.sim import launch
from ptofa.launch.varlen import reduce_table, split_tiles, unit_table, unit_visible_tiles, varlen_shape
from ptofa.kernels.mods import has_mod
from ptofa.kernels.units import block_loads, window_of_bounds
from ptofa.pipeline import DTYPE_BYTES, MAX_SPLITS, REDUCE_TABLE, ConfigError, FAConfig, ProblemShape
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import DEFAULT_SOC, SocSpec, get_soc
from ptofa.sim.timing import launch_cycles, replay
from ptofa.sim.trace import Trace


def reduce_us(trace: Trace, config: FAConfig, shape: ProblemShape, units: torch.Tensor,
              soc: str | SocSpec = DEFAULT_SOC) -> float:
    """Predicted time of a traced reduce launch of the forward unit table `units`: its replayed
    blocks, or the HBM time of reading the split units' partials and writing their O (and LSE),
    whichever is longer (as `timing.predict` bounds). It runs right behind the forward launch, so
    its first wave starts as a queued launch's does (`SocSpec.launch_start_us`)."""
    spec = get_soc(soc)
    table = reduce_table(config, units, shape.heads, shape.heads // shape.kv_heads)
    replays = replay(trace, spec, config.slot_num)
    cycles, _, _ = launch_cycles({b: r.cycles for b, r in replays.items()}, trace.block_dim,
                                 int(table.shape[0]), spec, queued=True)
    rows = table[:, REDUCE_TABLE.index("rows")].to(torch.int64)
    splits = table[:, REDUCE_TABLE.index("splits")].to(torch.int64)
    row_bytes = config.head * DTYPE_BYTES[config.out_dtype] + (4 if config.lse else 0)
    nbytes = 4 * (config.head + 1) * int((rows * splits).sum()) + row_bytes * int(rows.sum())
    hbm_us = spec.cycles_to_us(nbytes / (spec.hbm_bytes_per_cycle_per_core * spec.cube_cores))
    return max(spec.cycles_to_us(cycles), hbm_us)


def _snake_loads(costs: list[float], cores: int) -> list[float]:
    """Per-block time of the forward kernel's persistent loop over entries of these costs (in table
    order) on n = min(entries, cores) blocks (`units.block_loads`, the kernel's snake)."""
    return block_loads(costs, max(1, min(cores, len(costs))))


@dataclasses.dataclass(frozen=True)
class SplitCosts:
    """Per-unit and per-tile time of the split-KV forward kernel, and per-unit and per-split time
    of the reduce, in us, from the timing model on one-block launches (`split_costs`)."""

    unit_us: float
    tile_us: float
    reduce_unit_us: float
    reduce_split_us: float
    start_us: float = 0.0  # block start-up of a launch of one wave (`SocSpec.launch_start_us`)
    reduce_start_us: float = 0.0  # the same for the reduce, queued right behind the forward launch

    def plan_us(self, unit_tiles: list[int], counts: list[int], cores: int) -> float:
        """Estimated time of per-unit split counts: the longest block of the forward kernel's snake
        over the split table's entries (longest first, as `varlen.table_of_sequences` orders them),
        plus, when a unit is split, the reduce's longest block over the split units (round robin);
        each launch after its block start-up, as `timing.launch_cycles` charges it."""
        entries = sorted((split_tiles(n, i, s) for n, s in zip(unit_tiles, counts) for i in range(s)), reverse=True)
        total = self.start_us + max(_snake_loads([self.unit_us + self.tile_us * t for t in entries], cores))
        reduced = [self.reduce_unit_us + self.reduce_split_us * s for s in counts if s > 1]
        if reduced:
            blocks = min(cores, len(reduced))
            total += self.reduce_start_us + max(sum(reduced[b::blocks]) for b in range(blocks))
        return total


def _one_block_us(config: FAConfig, q_len: int, tiles: int, num_splits: int, reduce: bool, soc: str) -> float:
    """Timing-model time on chip `soc` of one block running one (sequence, head) of `tiles` KV tiles, or its reduce."""
    k_len = tiles * config.tile_s1
    shape = varlen_shape([q_len], [k_len], 1, 1)
    gen = torch.Generator().manual_seed(0)
    dtype = torch.float16 if config.in_dtype == "f16" else torch.bfloat16
    q, k, v = (torch.randn(n, 1, config.head, generator=gen).to(dtype) for n in (q_len, k_len, k_len))
    o = torch.empty(q_len, 1, config.head, dtype={"f16": torch.float16, "bf16": torch.bfloat16,
                                                   "f32": torch.float32}[config.out_dtype])
    lse = torch.empty(1, q_len) if config.lse else None
    split = Plan(num_splits, config, unit_table(config, [q_len], [k_len], 1, num_splits=num_splits), 1)
    spec = get_soc(soc)
    slopes = torch.full((1,), 0.5) if has_mod(config.mods, "alibi") else None  # (a softcap / ALiBi kernel: its ops are timed too)
    plan = split_plan(*split_kernels(config), split, shape, spec, scale=1.0, softcap=float(has_mod(config.mods, "softcap")),
                      alibi=slopes)
    results = launch(plan, {"q": q, "k": k, "v": v, "o": o, "lse": lse, "block_table": None, "alibi_slopes": slopes},
                     options=RunOptions(trace=True))
    main, red = results[0], results[-1]
    trace = red.trace if reduce else main.trace
    return spec.cycles_to_us(max(r.cycles for r in replay(trace, spec, config.slot_num).values()))


@functools.lru_cache(maxsize=32)
def split_costs(config: FAConfig, q_len: int, soc: str = DEFAULT_SOC) -> SplitCosts:
    """Costs from the timing model on chip `soc` (a name: one block's costs do not depend on the core
    count): one block with one unit of 1 and of 4 tiles (slope = per tile), and the reduce of 2 and 4
    splits (slope = per split; a unit of one split is not reduced). A split_kv, non-paged config, priced
    without its mod objects (their arguments are the caller's tensors): a mod's per-tile ops are left out."""
    base = dataclasses.replace(config, page_size=0, split_kv=True, varlen=True, mods=())
    one, four = (_one_block_us(base, q_len, n, 1, False, soc) for n in (1, 4))
    r2, r4 = (_one_block_us(base, q_len, 4, s, True, soc) for s in (2, 4))
    tile_us = (four - one) / 3
    split_us = (r4 - r2) / 2
    spec = get_soc(soc)
    return SplitCosts(one - tile_us, tile_us, r2 - 2 * split_us, split_us, spec.launch_start_us(1),
                      spec.launch_start_us(1, queued=True))


def chip(cores: int | SocSpec) -> SocSpec:
    """The chip a split is planned for: a `SocSpec` (its facts and cube cores), or a core count on
    the default chip."""
    return cores if isinstance(cores, SocSpec) else get_soc(DEFAULT_SOC).with_cube_cores(cores)


def _fill_slots(tiles: list[int], costs: SplitCosts, slots: int) -> list[int]:
    """Split counts for units of `tiles` over `slots` entries: each unit one, then one more to the unit
    whose splits are longest, while entries are left (at most its tiles and MAX_SPLITS per unit)."""
    counts = [1] * len(tiles)
    heap = [(-(costs.unit_us + costs.tile_us * n), i) for i, n in enumerate(tiles)]
    heapq.heapify(heap)
    for _ in range(slots - len(tiles)):
        while heap and counts[heap[0][1]] >= min(MAX_SPLITS, max(1, tiles[heap[0][1]])):
            heapq.heappop(heap)
        if not heap:
            break
        _, i = heapq.heappop(heap)
        counts[i] += 1
        heapq.heappush(heap, (-(costs.unit_us + costs.tile_us * tiles[i] / counts[i]), i))
    return counts


def balanced_splits(costs: SplitCosts, tiles: list[int], cores: int) -> list[int]:
    """Per-unit split counts (for `tiles`, the units' visible tiles in the order of the num_splits=1
    table, longest first) with the least estimated time (`SplitCosts.plan_us`; ties to fewer entries).

    Candidates: every uniform count 1..16, and tail splits: the longest units of `keep` full waves
    stay whole and the remaining units share `m` waves of entries (`_fill_slots`), for every number
    of kept waves and m = 1..4. Splitting only the units of the incomplete last wave so that every
    core gets about the same work is the tail split keeping all the full waves, with m = 1."""
    if not tiles:
        return []
    most = min(MAX_SPLITS, max(1, max(tiles)))
    candidates = [[s] * len(tiles) for s in range(1, most + 1)]
    for waves in range(len(tiles) // cores + 1):
        keep = waves * cores
        rest = tiles[keep:]
        for m in range(1, 5):
            slots = cores * (m + -(-len(rest) // cores) - 1)
            if rest and slots >= len(rest):
                candidates.append([1] * keep + _fill_slots(rest, costs, slots))
    return min(candidates, key=lambda counts: (costs.plan_us(tiles, counts, cores), sum(counts)))


def plan_splits(config: FAConfig, table: torch.Tensor, cores: int | SocSpec,
                window: tuple[int, int] = (-1, -1)) -> list[int]:
    """The per-unit split counts `num_splits=0` asks for (`balanced_splits` on the timing model's
    costs of this kernel on the chip, `chip(cores)`), for the units of `table` (a num_splits=1 unit
    table). All ones, with no costs measured, when no unit has two tiles or every core gets the same
    whole units."""
    spec = chip(cores)
    cores = spec.cube_cores
    tiles = unit_visible_tiles(config, table, window)
    if not tiles or max(tiles) <= 1 or (len(tiles) % cores == 0 and min(tiles) == max(tiles)):
        return [1] * len(tiles)
    q_len = int(min(config.cube_s0, max(int(r) for r in table[:, 1])))
    return balanced_splits(split_costs(config, q_len, spec.name), tiles, cores)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One serving launch, decided once for both backends: the split counts (`num_splits` the most
    of any unit, `unit_splits` per unit of the num_splits=1 table), the kernel config (`split_kv`
    when split), its unit table and block count (one block per entry, up to the cores)."""

    num_splits: int
    config: FAConfig
    table: torch.Tensor
    block_dim: int
    unit_splits: tuple[int, ...] = ()

    @property
    def launch_splits(self) -> int | list[int]:
        """The split counts as `varlen.unit_table` takes them: one for every unit, or one per unit."""
        counts = self.unit_splits
        return counts[0] if len(set(counts)) == 1 else list(counts)

    def describe(self) -> str:
        """The split of the launch as units x splits, most splits first: "8x3+24x1", or "unsplit"."""
        if self.num_splits == 1:
            return "unsplit"
        counts = sorted(set(self.unit_splits), reverse=True)
        return "+".join(f"{self.unit_splits.count(n)}x{n}" for n in counts)


def plan_varlen(config: FAConfig, shape: ProblemShape, table_of, num_splits: int | Sequence[int],
                cores: int | SocSpec) -> Plan | None:
    """The launch of `config` on the chip `cores` (a `SocSpec`, or a cube-core count on the default
    chip) with `num_splits` splits of every unit (0: per-unit counts chosen by the timing model on that
    chip, `plan_splits`; a list: per unit of the num_splits=1 table); None when the unit table is empty."""
    table = table_of(config, 1)
    if not table.shape[0]:
        return None
    if isinstance(num_splits, int):
        counts = [num_splits] * int(table.shape[0])
    elif len(num_splits) == table.shape[0]:
        counts = [int(n) for n in num_splits]
    else:
        raise ConfigError(f"split-KV: {len(num_splits)} per-unit split counts for a table of {table.shape[0]} units")
    if num_splits == 0:
        counts = plan_splits(config, table, cores, shape.window)
    cores = chip(cores).cube_cores
    if max(counts) > 1:
        config = dataclasses.replace(config, split_kv=True)
        table = table_of(config, counts[0] if len(set(counts)) == 1 else counts)
    return Plan(max(counts), config, table, min(int(table.shape[0]), cores), tuple(counts))


def plan_serving(config: FAConfig, shape: ProblemShape, table_of, num_splits: int | Sequence[int], soc: SocSpec, *,
                 scale: float, block_table=None, softcap: float = 0.0, alibi=None,
                 dropout: tuple[float, int, int] | None = None) -> LaunchPlan | None:
    """The launch of a serving call on `soc`: split counts (`splitkv.plan_varlen`: `num_splits` 0 chosen
    by the timing model, or per unit), the varlen kernel and the reduce; None for an empty unit table
    (`dropout`: (p, seed, offset) of a dropout kernel, which never splits)."""
    split = plan_varlen(config, shape, table_of, num_splits, soc)
    if split is None:
        return None
    max_pages = 0 if block_table is None else int(block_table.shape[-1])
    return split_plan(*split_kernels(split.config), split, shape, soc, scale=scale, max_pages=max_pages, softcap=softcap,
                      alibi=alibi, dropout=dropout)


def tune_window(bounds: tuple[int, int] | None, s0: int, s1: int) -> tuple[int, int]:
    """The window of the kernel's bounds as a bottom-right window: a bound that no offset reaches
    is -1, a negative right bound (torch's top-left causal with S1 > S0) is 0."""
    return window_of_bounds(bounds, s0, s1)


def varlen_window(bounds: tuple[int, int] | None, s0: int, s1: int) -> tuple[int, int] | None:
    """The varlen kernel's window for dense kernel bounds (`tune_window`), or None when it cannot
    say it: the varlen window reads -1 as unbounded, so a negative right bound (torch's top-left
    causal with S0 < S1) stays on the dense kernel."""
    if bounds is not None and bounds[1] < 0:
        return None
    return tune_window(bounds, s0, s1)


@dataclasses.dataclass(frozen=True)
class DenseSplit:
    """A dense problem planned as a varlen batch of B equal sequences: the split launch's plan
    (varlen config and shape, unit table, split counts, reduce) on the chip planned for."""

    plan: LaunchPlan

    @property
    def config(self) -> FAConfig:
        return self.plan.config

    @property
    def shape(self) -> ProblemShape:
        return self.plan.shape

    @property
    def num_splits(self) -> int:
        """The most splits of any unit (the partials hold that many)."""
        return self.plan.num_splits

    @property
    def launch_splits(self) -> int | list[int]:
        """One count for every unit, or the count of each unit."""
        return self.plan.split.launch_splits

    def workspace_bytes(self) -> int:
        """The launch's GM workspace: slot rings of its blocks, then the partial O and LSE."""
        return self.plan.workspace_bytes


def plan_dense_split(config: FAConfig, batch: int, s0: int, s1: int, heads: int, kv_heads: int,
                     bounds: tuple[int, int] | None, soc: str | SocSpec, *, scale: float,
                     num_splits: int | list[int] = 0, softcap: float = 0.0,
                     alibi: torch.Tensor | None = None) -> DenseSplit | None:
    """The one split decision of the dense calls and InfiniOp: split when told (`num_splits` > 1,
    or one count per unit), or (0) when the timing model's estimate of the balanced per-unit split
    (reduce included, `splitkv.plan_splits`) beats the unsplit launch; None to run the dense
    kernel unsplit (also when the varlen window cannot say `bounds`)."""
    window = varlen_window(bounds, s0, s1)
    if window is None:
        return None
    soc = get_soc(soc)
    vconfig, vshape, table_of = dense_as_varlen(dataclasses.replace(config, mods=config.score_mods), batch, s0, s1, heads,
                                                kv_heads, window)
    split = plan_varlen(vconfig, vshape, table_of, num_splits, soc)
    if split is None or split.num_splits == 1:
        return None
    return DenseSplit(split_plan(*split_kernels(split.config), split, vshape, soc, scale=scale, softcap=softcap,
                                 alibi=alibi))
