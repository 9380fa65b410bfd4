"""Split-KV (flash-decoding) on the host: the reduce kernel, its predicted time, and the split count.

When a launch has fewer work units than cube cores (decode: B * heads units of one query
row), most cores idle while a few walk the whole cache. A `split_kv` forward kernel
splits each unit's visible KV tiles over `num_splits` entries of the unit table
(`varlen.table_of_sequences`), each writing a partial O and LSE; the reduce kernel
(`kernels/fa_reduce.py`) combines them. `choose_splits` picks the count for
`num_splits=0` from the timing model's costs of this kernel (see its docstring).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math

import torch

from ptofa.attention import get_kernel
from ptofa.kernels.fa_reduce import emit_reduce
from ptofa.pipeline import DTYPE_BYTES, MAX_SPLITS, FAConfig, ProblemShape, partial_elems
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import SocSpec, get_soc
from ptofa.sim.timing import launch_cycles, replay
from ptofa.sim.trace import Trace
from ptofa.sim_backend import launch_split_sim, reduce_rows
from ptofa.textio import ParsedModule, check_text
from ptofa.varlen import split_tiles, unit_table, unit_visible_tiles, varlen_shape


@functools.lru_cache(maxsize=32)
def reduce_kernel(config: FAConfig) -> ParsedModule:
    """The parsed, verified reduce kernel of a split-KV config (emitted once per config)."""
    return check_text(emit_reduce(config), f"fa_reduce_{config.head}_{config.out_dtype}.pto")


def reduce_units(config: FAConfig, shape: ProblemShape) -> int:
    """(head, Q block of packed rows) units of the reduce launch."""
    heads, rows = reduce_rows(config, shape)
    return heads * -(-rows // config.cube_s0)


def reduce_us(trace: Trace, config: FAConfig, shape: ProblemShape, num_splits: int, soc: str | SocSpec = "910B2") -> float:
    """Predicted time of a traced reduce launch: its replayed blocks, or the HBM time of reading
    the partials and writing O (and LSE), whichever is longer (as `timing.predict` bounds)."""
    spec = get_soc(soc)
    replays = replay(trace, spec, config.slot_num)
    cycles, _, _ = launch_cycles({b: r.cycles for b, r in replays.items()}, trace.block_dim,
                                 reduce_units(config, shape), spec.cube_cores)
    rows = shape.s0 * shape.heads
    nbytes = 4 * sum(partial_elems(config, shape, num_splits)) + rows * config.head * DTYPE_BYTES[config.out_dtype]
    if config.lse:
        nbytes += 4 * rows
    hbm_us = spec.cycles_to_us(nbytes / (spec.hbm_bytes_per_cycle_per_core * spec.cube_cores))
    return max(spec.cycles_to_us(cycles), hbm_us)


@dataclasses.dataclass(frozen=True)
class SplitCosts:
    """Per-unit and per-tile time of the split-KV forward kernel, and per-unit and per-split time
    of the reduce, in us, from the timing model on one-block launches (`split_costs`)."""

    unit_us: float
    tile_us: float
    reduce_unit_us: float
    reduce_split_us: float

    def estimate_us(self, unit_tiles: list[int], num_splits: int, reduce_units: int, cores: int) -> float:
        """Longest core of a longest-first greedy assignment of the split units, plus the reduce's waves."""
        costs = sorted((self.unit_us + self.tile_us * split_tiles(n, i, num_splits)
                        for n in unit_tiles for i in range(num_splits)), reverse=True)
        load = [0.0] * min(cores, max(1, len(costs)))
        for cost in costs:
            heapq.heapreplace(load, load[0] + cost)
        total = max(load)
        if num_splits > 1:
            total += math.ceil(reduce_units / cores) * (self.reduce_unit_us + self.reduce_split_us * num_splits)
        return total


def _one_block_us(config: FAConfig, q_len: int, tiles: int, num_splits: int, reduce: bool) -> float:
    """Timing-model time of one block running one (sequence, head) of `tiles` KV tiles, or its reduce."""
    k_len = tiles * config.tile_s1
    shape = varlen_shape([q_len], [k_len], 1, 1)
    gen = torch.Generator().manual_seed(0)
    dtype = torch.float16 if config.in_dtype == "f16" else torch.bfloat16
    q, k, v = (torch.randn(n, 1, config.head, generator=gen).to(dtype) for n in (q_len, k_len, k_len))
    o = torch.empty(q_len, 1, config.head, dtype={"f16": torch.float16, "bf16": torch.bfloat16,
                                                   "f32": torch.float32}[config.out_dtype])
    lse = torch.empty(1, q_len) if config.lse else None
    main, red = launch_split_sim(get_kernel(config).parsed, reduce_kernel(config), config, shape, q, k, v, o, 1,
                                 1.0, num_splits, units=unit_table(config, [q_len], [k_len], 1, num_splits=num_splits),
                                 lse=lse, options=RunOptions(trace=True))
    spec = get_soc("910B2")
    trace = red.trace if reduce else main.trace
    return spec.cycles_to_us(max(r.cycles for r in replay(trace, spec, config.slot_num).values()))


@functools.lru_cache(maxsize=32)
def split_costs(config: FAConfig, q_len: int) -> SplitCosts:
    """Costs from the timing model: one block with one unit of 1 and of 4 tiles (slope = per tile),
    and the reduce of 1 and 4 splits (slope = per split). A split_kv, non-paged config."""
    base = dataclasses.replace(config, page_size=0, split_kv=True, varlen=True)
    one, four = (_one_block_us(base, q_len, n, 1, False) for n in (1, 4))
    r1, r4 = (_one_block_us(base, q_len, 4, s, True) for s in (1, 4))
    tile_us = (four - one) / 3
    split_us = (r4 - r1) / 3
    return SplitCosts(one - tile_us, tile_us, r1 - split_us, split_us)


def choose_splits(config: FAConfig, table: torch.Tensor, heads: int, s0_total: int, cores: int,
                  window: tuple[int, int] = (-1, -1)) -> int:
    """The split count `num_splits=0` asks for: the one with the least estimated time
    (`SplitCosts.estimate_us`, ties to fewer splits) among 1..16, for the units of `table`
    (a num_splits=1 unit table)."""
    tiles = unit_visible_tiles(config, table, window)
    if not tiles or max(tiles) <= 1:
        return 1
    q_len = int(min(config.cube_s0, max(int(r) for r in table[:, 1])))
    costs = split_costs(config, q_len)
    red_units = heads * -(-s0_total // config.cube_s0) if not config.gqa_pack else -(-s0_total * heads // config.cube_s0)
    best = min(range(1, min(MAX_SPLITS, max(tiles)) + 1),
               key=lambda s: (costs.estimate_us(tiles, s, red_units, cores), s))
    return best


@dataclasses.dataclass(frozen=True)
class Plan:
    """One serving launch, decided once for both backends: the split count, the kernel config
    (`split_kv` when split), its unit table and block count (one block per entry, up to the cores)."""

    num_splits: int
    config: FAConfig
    table: torch.Tensor
    block_dim: int


def plan_varlen(config: FAConfig, shape: ProblemShape, table_of, num_splits: int, cores: int) -> Plan | None:
    """The launch of `config` on `cores` cube cores with `num_splits` (0: chosen by the timing
    model); None when the unit table is empty (nothing to compute)."""
    table = table_of(config, 1)
    if not table.shape[0]:
        return None
    if num_splits == 0:
        num_splits = choose_splits(config, table, shape.heads, shape.s0, cores, shape.window)
    if num_splits > 1:
        config = dataclasses.replace(config, split_kv=True)
        table = table_of(config, num_splits)
    return Plan(num_splits, config, table, min(int(table.shape[0]), cores))
