"""The varlen backward's schedule and its timing model (`ptofa.sim.bwd_timing`, `ptofa.kernels.units`).

The dq and dkdv kernels hand their unit tables' ranks out in the forward's snake: every block's
cube runs the units `units.schedule` gives it, in that order (read from the simulator's trace:
the score-pipe pushes between two stores of the unit's result), so the per-block loads the timing
model computes from the table are the blocks' actual work. The prediction from the tables agrees
with the dense backward's on equal lengths, ignores sequences without rows and grows with a longer
sequence.
"""

from __future__ import annotations

import pytest
import torch

from ptofa.attention.backward import BackwardBuffers, run_backward, run_varlen_backward
from ptofa.kernels import units
from ptofa.kernels.bwd_pipeline import default_config
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.launch.varlen import backward_tables
from ptofa.pipeline import ProblemShape
from ptofa.sim.bwd_timing import predict_backward, table_schedule
from ptofa.sim.timing import units_of_block
from ptofa.kernels.builtin_mods.window import window_mods

D = 64
# The dense and the varlen kernels of one shape differ in per-unit scalar work (the table's loads and
# the snake's arithmetic) and the dense model copies each block's replay where the varlen one solves
# a unit's and a step's cycles from the replayed blocks (their mean for units of equal work): 2%
# (measured 0.4-0.8% on the cases below).
DENSE_TOLERANCE = 0.02


def _inputs(q_lens, k_lens, n, kvn, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(q_lens), n, D, generator=g).half()
    k = torch.randn(sum(k_lens), kvn, D, generator=g).half()
    v = torch.randn(sum(k_lens), kvn, D, generator=g).half()
    # the kernels' work does not depend on the values: any finite O and LSE do for the timing
    return q, k, v, torch.randn_like(q), torch.zeros(n, sum(q_lens)), torch.randn_like(q)


def _varlen(q_lens, k_lens, n=2, kvn=1, window=(-1, -1), deterministic=True, block_dim=None):
    run = run_varlen_backward(*_inputs(q_lens, k_lens, n, kvn), q_lens, k_lens, window=window,
                              deterministic=deterministic, backend="sim", block_dim=block_dim, trace=True)
    return run, predict_backward(run.results, run.config, run.shape, tables=run.tables)


def _dense(batch, s0, s1, n=2, kvn=1, window=(-1, -1), deterministic=True):
    shape = ProblemShape(batch, n, s0, s1, kvn, window)
    config = default_config(D, mods=window_mods(window != (-1, -1)), atomic_dq=not deterministic)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, s0, n, D, generator=g).half()
    k, v = (torch.randn(batch, s1, kvn, D, generator=g).half() for _ in range(2))
    grads = BackwardBuffers.zeros(q, k, atomic=not deterministic)
    results = run_backward(config, shape, q, k, v, torch.randn_like(q), torch.zeros(batch, n, s0), torch.randn_like(q),
                           grads, D ** -0.5, trace=True)
    return predict_backward(results, config, shape)


def _pushes(result, kernel: str, block: int, units: int) -> int:
    """Score-pipe (id 0) pushes of a block's cube: one per step (score tile) of the units it ran (of `units`),
    less the dq kernel's one G = dO O^T per unit (its D)."""
    pushes = result.pipe_counts.get((block, 0), {}).get("tpush", {}).get("cube", 0)
    return pushes - units_of_block(block, result.block_dim, units) if kernel == "dq" else pushes


# ---- the kernels run the units the schedule gives each block, in its order ------------------


RAGGED = ([400, 0, 1, 127, 129, 70], [400, 5, 130, 127, 0, 200])


@pytest.mark.parametrize("deterministic", [True, False])
def test_each_block_runs_the_snake_of_the_table_in_order(deterministic):
    """On 3 blocks (several waves), block b's cube runs ranks `units.schedule(units, 3, snake=True)[b]`
    in that order: the score-pipe pushes between two stores of a unit's result (dQ in the dq kernel,
    dV in the dkdv kernel; a unit without steps stores nothing) are those ranks' steps. Round robin
    would run other steps in another order here, so the check can fail."""
    q_lens, k_lens = RAGGED
    run, timing = _varlen(q_lens, k_lens, window=(-1, 0), deterministic=deterministic, block_dim=3)
    for kernel in [k for k in ("dq", "dkdv") if k in run.config.kernels]:
        result, plan = run.results[kernel], timing.schedules[kernel]
        steps = units.backward_table_steps(run.config, kernel, run.tables[kernel].tolist(), (-1, 0), 2)
        assert list(plan.steps) == steps
        order = {snake: [[steps[r] for r in ranks if steps[r]] for ranks in units.schedule(len(steps), 3, snake)]
                 for snake in (True, False)}
        assert order[True] != order[False]  # round robin would run other steps in another order
        assert [_pushes(result, kernel, b, len(steps)) for b in range(3)] == units.block_loads(steps, 3, snake=True)
        text = emit_bwd(run.config, kernel).splitlines()
        store = "pto.tstore ins(%dq_acc" if kernel == "dq" else "pto.tstore ins(%dv_acc"
        lines = {i + 1 for i, line in enumerate(text) if line.strip().startswith(store)}
        gram = {i + 1 for i, line in enumerate(text) if line.strip().startswith("pto.tpush_to_aiv(%gram_entry")}
        assert len(lines) == 1 and len(gram) == (kernel == "dq")
        for b in range(3):
            runs, count = [], 0
            for op in result.trace.cores[(b, "cube")]:
                if op.pipe_kind == "tpush" and op.pipe_id == 0 and op.line not in gram:
                    count += 1
                elif op.line in lines:
                    runs.append(count)
                    count = 0
            assert runs == order[True][b], (kernel, b)


def test_the_makespan_is_the_busiest_block_the_kernel_ran():
    """The reported per-block loads are a unit's cycles x the units each block ran plus a step's
    cycles x the steps it ran, read from the simulator (score-pipe pushes per block), and the
    makespan is their maximum; the per-unit figures come from the replayed blocks (no constant)."""
    q_lens, k_lens = RAGGED
    run, timing = _varlen(q_lens, k_lens, n=4, kvn=2, window=(40, 0), block_dim=3)
    for kernel, plan in timing.schedules.items():
        result = run.results[kernel]
        ran = [plan.unit_cycles * units_of_block(b, 3, len(plan.steps))
               + plan.step_cycles * _pushes(result, kernel, b, len(plan.steps)) for b in range(3)]
        assert list(plan.loads) == pytest.approx(ran, rel=1e-12)
        assert plan.makespan == pytest.approx(max(ran), rel=1e-12)
        replayed = timing.kernels[kernel].block_us
        soc = timing.kernels[kernel].soc
        # the solved figures reproduce the replayed blocks to within 15% here
        assert [soc.cycles_to_us(x) for x in plan.loads] == pytest.approx([replayed[b] for b in range(3)], rel=0.15)
        assert plan.step_cycles > 0 or len(set(plan.steps)) == 1


def test_table_schedule_recovers_unit_and_step_cycles():
    """Blocks whose cycles are exactly a n_b + c T_b give back a and c; equal work gives the mean."""
    steps = [5, 4, 4, 2, 1, 0, 0]
    plan = units.schedule(len(steps), 3, snake=True)
    replayed = {b: 100 * len(r) + 30 * sum(steps[i] for i in r) for b, r in enumerate(plan)}
    got = table_schedule(replayed, 3, steps)
    assert (got.unit_cycles, got.step_cycles) == pytest.approx((100, 30))
    assert list(got.loads) == pytest.approx([replayed[b] for b in range(3)])
    same = table_schedule({0: 90.0, 1: 110.0}, 2, [2, 2, 2, 2])
    assert same.makespan == pytest.approx(100.0) and len(set(same.loads)) == 1  # 2 units of 50


# ---- the prediction against the dense backward's -------------------------------------------


@pytest.mark.parametrize("window, deterministic", [((-1, -1), True), ((-1, 0), True), ((-1, -1), False)])
def test_equal_lengths_predict_the_dense_time(window, deterministic):
    dense = _dense(2, 256, 256, window=window, deterministic=deterministic)
    _, varlen = _varlen([256, 256], [256, 256], window=window, deterministic=deterministic)
    assert varlen.total_us == pytest.approx(dense.total_us, rel=DENSE_TOLERANCE)
    for kernel, t in dense.kernels.items():
        assert varlen.kernels[kernel].kernel_us == pytest.approx(t.kernel_us, rel=DENSE_TOLERANCE), kernel


def test_a_sequence_without_rows_changes_nothing_and_a_longer_one_costs_more():
    _, base = _varlen([256, 256], [256, 256], window=(-1, 0))
    _, empty = _varlen([256, 0, 256, 0], [256, 9, 256, 0], window=(-1, 0))
    _, longer = _varlen([256, 700], [256, 700], window=(-1, 0))
    assert empty.total_us == pytest.approx(base.total_us, rel=DENSE_TOLERANCE)
    assert longer.total_us > base.total_us * (1 + DENSE_TOLERANCE)
    for kernel in ("dq", "dkdv"):
        assert longer.schedules[kernel].makespan > base.schedules[kernel].makespan


def test_backward_tables_are_ordered_by_the_step_functions():
    """The tables' order is `units.longest_first` of the steps the timing model reads from them."""
    c = default_config(D, mods=window_mods(), varlen=True)
    tables = backward_tables(c, *RAGGED, 4, 2, (-1, 0))
    for kernel, table in tables.items():
        steps = units.backward_table_steps(c, kernel, table.tolist(), (-1, 0), 2)
        assert units.longest_first(steps) == list(range(len(steps))) and steps == sorted(steps, reverse=True)
