"""The host's work-unit arithmetic (`ptofa.kernels.units`) against the kernels and the reference.

The kernels compute the visible tiles and the persistent loop's unit order in IR; here
the forward and both backward kernels run on the simulator and every block's count of
visited tiles (pushes of the score pipe: one per visited tile or step) must equal what
the host's window arithmetic and schedule say that block runs. The tuner's makespan
must equal the busiest block the kernel actually runs.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ptofa.attention.backward import BackwardBuffers, run_backward
from ptofa.kernels import units
from ptofa.kernels.bwd_pipeline import BwdConfig, work_units
from ptofa.launch import tune
from ptofa.launch.plan import plan_forward
from ptofa.launch.sim import launch
from ptofa.launch.splitkv import _snake_loads
from ptofa.launch.varlen import make_varlen_inputs, unit_table, unit_visible_tiles, varlen_shape
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.reference import make_inputs, visible_mask
from ptofa.sim.timing import units_of_block
from ptofa.kernels.builtin_mods.window import window_mods

WINDOWS = [(-1, -1), (-1, 0), (0, 0), (5, 0), (130, 3), (-1, 70), (200, -1), (1, 1)]


def _bounds(window, s0, s1):
    return None if tuple(window) == (-1, -1) else units.kernel_bounds(window, s0, s1)


# ======================================================================================
# The arithmetic against the reference's mask (pure Python, fast)
# ======================================================================================


@settings(max_examples=60, deadline=None)
@given(s0=st.integers(1, 300), s1=st.integers(1, 300), left=st.integers(-1, 320), right=st.integers(-1, 320),
       block=st.sampled_from([16, 64, 128]))
def test_tiles_and_pairs_match_the_reference_mask(s0, s1, left, right, block):
    """Every Q block's visible KV tiles are the first to the last tile holding a visible key of
    the reference's mask; every KV block's Q blocks likewise; the pair count is the mask's sum."""
    window = (left, right)
    vis = visible_mask(s0, s1, window)[0]
    assert units.visible_pairs(s0, s1, window) == int(vis.sum())
    bounds = _bounds(window, s0, s1)
    for q0 in range(0, s0, block):
        cols = vis[q0:q0 + block].any(dim=0).nonzero().flatten().tolist()
        lo, hi = units.keys_seen(q0, min(block, s0 - q0), s0, s1, bounds, block)
        assert (lo < hi) == bool(cols)
        if cols:
            assert (lo, hi) == (cols[0] // block, cols[-1] // block + 1)
    for k0 in range(0, s1, block):
        rows = vis[:, k0:k0 + block].any(dim=1).nonzero().flatten().tolist()
        lo, hi = units.queries_seeing(k0, min(block, s1 - k0), s0, s1, bounds, block)
        assert (lo < hi) == bool(rows)
        if rows:
            assert (lo, hi) == (rows[0] // block, rows[-1] // block + 1)


def test_shape_pairs_and_bounds_use_the_window_arithmetic():
    shape = ProblemShape(2, 1, 1000, 1500, window=(-1, 0), seqlens=((1000, 1500), (7, 300)))
    assert shape.visible_pairs() == sum(int(visible_mask(a, b, (-1, 0)).sum()) for a, b in shape.seqlens)
    assert ProblemShape(1, 1, 100, 60, window=(-1, 4)).window_bounds() == (160, 4)
    assert units.window_of_bounds(units.kernel_bounds((-1, 4), 100, 60), 100, 60) == (-1, 4)


def test_schedule_is_a_snake_over_the_loop():
    """Every rank runs exactly once; odd full waves are mirrored, a partial last wave is not."""
    for n_units, blocks in itertools.product(range(1, 60), range(1, 13)):
        plan = units.schedule(n_units, blocks, snake=True)
        assert sorted(itertools.chain(*plan)) == list(range(n_units))
        assert [len(p) for p in plan] == [units_of_block(b, blocks, n_units) for b in range(blocks)]
    assert units.schedule(7, 3, snake=True) == [[0, 5, 6], [1, 4], [2, 3]]
    assert units.schedule(7, 3, snake=False) == [[0, 3, 6], [1, 4], [2, 5]]


def test_tuner_makespan_is_the_kernels_snake():
    """Causal units of cost 16..1 in two heads on 24 cores: the kernel's first wave gives block 0
    the cost-16 unit, the partial second wave a cost-4 one (20); longest-first onto the least
    loaded block would say 16."""
    costs = [float(i + 1) for i in range(16)]
    assert tune.masked_makespan(costs, 2, 24) == 20.0
    assert tune.longest_first_makespan(costs * 2, 24) == 16.0  # the dynamic bound the tuner no longer uses
    ranked = sorted(costs * 2, reverse=True)
    assert max(_snake_loads(ranked, 24)) == 20.0


# ======================================================================================
# The kernels on the simulator: visited tiles per block
# ======================================================================================


def _pushes(result, pipe_id: int, block: int) -> int:
    return result.pipe_counts.get((block, pipe_id), {}).get("tpush", {}).get("cube", 0)


def _forward(config: FAConfig, shape: ProblemShape, blocks: int, table=None):
    if table is not None:
        q, k, v = make_varlen_inputs(shape, config, 0)
        o = torch.empty(q.shape[0], shape.heads, config.head, dtype=torch.float16)
    else:
        q, k, v = make_inputs(shape, config.head, 0, torch.float16, shape.kv_heads)
        o = torch.empty(shape.batch, shape.s0, shape.heads, config.head, dtype=torch.float16)
    plan = plan_forward(config, shape, "910B2", scale=config.head ** -0.5, block_dim=blocks, units=table)
    (result,) = launch(plan, {"q": q, "k": k, "v": v, "o": o})
    return result


FORWARD_CASES = [  # (tile_s1, batch, heads, s0, s1, window, blocks)
    (128, 1, 2, 700, 900, (-1, 0), 5),
    (128, 2, 1, 300, 200, (-1, 0), 3),
    (256, 1, 1, 520, 1100, (130, 3), 4),
    (128, 1, 1, 600, 300, (200, -1), 2),
    (128, 1, 2, 400, 400, (0, 0), 3),
    (128, 1, 1, 300, 500, (-1, -1), 2),
]


@pytest.mark.parametrize("tile_s1, batch, heads, s0, s1, window, blocks", FORWARD_CASES)
def test_forward_visits_the_host_tiles(tile_s1, batch, heads, s0, s1, window, blocks):
    """Dense forward: block b's QK pushes are the visible tiles of the ranks the snake gives it."""
    masked = window != (-1, -1)
    config = FAConfig(head=64, tile_s1=tile_s1, qk_preload=2, mods=window_mods(masked))
    assert config.pipes[0].name == "qk" and config.pipes[0].cols == tile_s1  # one push per visited tile
    shape = ProblemShape(batch, heads, s0, s1, window=window)
    result = _forward(config, shape, blocks)
    q_blocks, bh = shape.q_blocks(config), batch * heads
    bounds = _bounds(window, s0, s1) if masked else None

    def tiles(q_block: int) -> int:
        q0 = q_block * config.cube_s0
        return units.visible_tiles(q0, min(config.cube_s0, s0 - q0), s0, s1, bounds, tile_s1)

    ranks = range(shape.work_units(config))
    costs = [tiles(units.masked_q_block(r, bh, q_blocks) if masked else r % q_blocks) for r in ranks]
    want = units.block_loads(costs, blocks, snake=masked)
    assert [_pushes(result, 0, b) for b in range(blocks)] == want
    if masked:  # the tuner's model of this launch (a cost per Q block, each head a copy) is the kernel's
        assert tune.masked_makespan([tiles(i) for i in range(q_blocks)], bh, blocks) == max(want)


def test_varlen_forward_visits_the_table_tiles():
    """Varlen: the host table's order (longest first) handed out in the snake, tiles from the table."""
    config = FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), varlen=True)
    q_lens, k_lens, window = [300, 5, 520, 129], [400, 900, 520, 60], (-1, 0)
    shape = varlen_shape(q_lens, k_lens, 2, 2, window)
    table = unit_table(config, q_lens, k_lens, 2, window)
    blocks = 5
    result = _forward(config, shape, blocks, table)
    want = units.block_loads(unit_visible_tiles(config, table, window), blocks)
    assert [_pushes(result, 0, b) for b in range(blocks)] == want


BACKWARD_CASES = [  # (batch, heads, kv_heads, s0, s1, window)
    (1, 2, 1, 200, 300, (-1, 0)),
    (1, 1, 1, 250, 130, (40, 0)),
    (1, 2, 2, 190, 190, (0, 70)),
    (2, 1, 1, 100, 140, (-1, -1)),
]


@pytest.mark.parametrize("batch, heads, kv_heads, s0, s1, window", BACKWARD_CASES)
def test_backward_visits_the_host_tiles(batch, heads, kv_heads, s0, s1, window):
    """dq: per Q block the KV tiles it sees (and the G entry); dkdv: per KV block the group's Q blocks that see it;
    both kernels hand units out in plain round robin."""
    masked = window != (-1, -1)
    config = BwdConfig(head=64, mods=window_mods(masked))
    shape = ProblemShape(batch, heads, s0, s1, kv_heads=kv_heads, window=window)
    q, k, v = make_inputs(shape, 64, 0, torch.float16, kv_heads)
    out, dout = torch.zeros_like(q), torch.randn_like(q)
    lse = torch.zeros(batch, heads, s0)
    results = run_backward(config, shape, q, k, v, out, lse, dout, BackwardBuffers.zeros(q, k), 0.125)
    bounds = _bounds(window, s0, s1) if masked else None
    group = heads // kv_heads

    def dq_tiles(unit: int) -> int:  # the unit's visible tiles and its first entry, G = dO O^T (D on the cube)
        q0 = unit % -(-s0 // config.dq_block_q) * config.dq_block_q
        lo, hi = units.keys_seen(q0, min(config.dq_block_q, s0 - q0), s0, s1, bounds, config.dq_block_kv)
        return hi - lo + 1

    def dkdv_steps(unit: int) -> int:
        k0 = unit % -(-s1 // config.block_kv) * config.block_kv
        lo, hi = units.queries_seeing(k0, min(config.block_kv, s1 - k0), s0, s1, bounds, config.block_q)
        return group * (hi - lo)

    for kernel, cost in (("dq", dq_tiles), ("dkdv", dkdv_steps)):
        n = work_units(config, kernel, batch, heads, kv_heads, s0, s1)
        result = results[kernel]
        want = units.block_loads([cost(u) for u in range(n)], result.block_dim, snake=False)
        assert [_pushes(result, 0, b) for b in range(result.block_dim)] == want, kernel
