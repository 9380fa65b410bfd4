"""`FAConfig.prescale_q`: the vectors scale Q once per unit and hand it to the cube through a
fourth (V2C) pipe, one unit ahead, so compute_p has no per-tile scaling pass.

Numerics with the switch on and off (the accuracy rule, LSE) over the kernel family; the IR
(vector passes per score tile, one Q entry per unit); pipe balance over many units per
block and over idle blocks (the simulator reports deadlocks and unbalanced pipes); the
Q ring as the last region of the slot workspace; the budget rule for its tiles.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from test_variants import config, parsed, run_variant
from test_varlen import run_varlen
from xdsl.dialects import func, scf

from ptofa import pipeline

from ptofa.kernels import argspec
from ptofa.ir import dialect as d
from ptofa.pipeline import ConfigError, ProblemShape, budget, workspace_bytes
from ptofa.reference import make_inputs
from ptofa.sim import GmPointer, SimError, simulate
from ptofa.launch.sim import sim_kernel_args
from ptofa.kernels.builtin_mods.window import window_mods

Q_PIPE = 3

CASES = {
    "f16_d64_ragged": (dict(head=64, lse=True, tile_s1=128, qk_preload=2), dict(s0=129, s1=300)),
    "bf16_d128_lse": (dict(in_dtype="bf16", lse=True), dict(s0=150, s1=300)),
    "causal_lse": (dict(mods=window_mods(), lse=True), dict(s0=200, s1=200, window=(-1, 0))),
    "gqa_4": (dict(lse=True, out_dtype="f32"), dict(heads=8, kv_heads=2, s0=70, s1=300)),
    "d192_causal": (dict(head=192, mods=window_mods(), lse=True), dict(s0=150, s1=333, window=(-1, 0))),
    "d256_gqa_bf16": (dict(head=256, in_dtype="bf16", lse=True, tile_s1=512, qk_preload=2),
                      dict(heads=4, kv_heads=2, s0=65, s1=700)),
}


@pytest.mark.parametrize("knobs, dims", CASES.values(), ids=CASES.keys())
def test_on_and_off_are_within_the_rule(knobs, dims) -> None:
    """Both kernels pass the accuracy rule (and LSE) against the torch reference. They differ by
    Q' = scale * Q rounded to the input dtype: not at all when the scale is a power of two
    (D = 64, 256: 1/8, 1/16), else slightly."""
    shape = ProblemShape(**dict(dict(batch=2, heads=2), **dims))
    cfg = config(prescale_q=True, **knobs)
    on, _, _ = run_variant(cfg, shape)
    off, _, _ = run_variant(config(prescale_q=False, **knobs), shape)
    exact = math.log2(shape.default_scale(cfg.head)).is_integer()
    assert torch.equal(on, off) == exact
    assert torch.allclose(on.float(), off.float(), atol=2e-2)


@pytest.mark.parametrize("knobs", [dict(mods=window_mods(), lse=True), dict(lse=True, head=64, tile_s1=512, qk_preload=2)])
def test_varlen_with_prescale_off(knobs) -> None:
    run_varlen(config(varlen=True, prescale_q=False, **knobs), [0, 1, 127, 129, 300], [5, 1, 127, 129, 300], 4, 2,
               (-1, 0) if knobs.get("mods") else (-1, -1))


def _stage_ops(cfg, tile: str = "s_tile") -> list[str]:
    """Ops of the vector function's softmax stage that read a score tile (`s_tile*`, or `tile`), in order."""
    module = parsed(cfg).module
    (vec,) = [op for op in module.walk() if isinstance(op, func.FuncOp) and op.sym_name.data == argspec.VECTOR_FUNC_NAME]
    reads = []
    for op in vec.walk():
        if isinstance(op, d.TLoadOp) or not isinstance(op, d._InsOutsOp):
            continue
        if any((v.name_hint or "").startswith(tile) for v in op.operands[:-1]):  # the last operand is dst
            reads.append(op.name)
    return reads


@pytest.mark.parametrize("tile_s1", [128, 256, 512])
def test_score_tile_passes_before_and_after(tile_s1: int) -> None:
    """Vector passes over a score slice: 4 without prescale_q, 2 with it (the tmuls is gone, and the row
    max is taken on the f16 scores before they are widened: `input_row_max`); the row sums come from
    the cube (cube_rowsum) and the exp runs on the f16 P after the tcvt (exp_f16). With both (`sub_f16`)
    no f32 score tile is left: S - m and the exp run on the f16 P tile."""
    passes = ["pto.trowexpandsub", "pto.tcvt"]
    for on, want in ((False, ["pto.tmuls", "pto.trowmax", *passes]), (True, [])):
        cfg = config(tile_s1=tile_s1, qk_preload=2, prescale_q=on)
        assert cfg.sub_f16 == on
        assert _stage_ops(cfg) == want * cfg.vec_buffers  # the slice loop body handles one slice per buffer


def _pipe_ops(op) -> Counter:
    return Counter((o.ROLE, o.id_value) for o in op.walk() if isinstance(o, d.PIPE_DATA_OPS) and o.id_value == Q_PIPE)


def test_one_scaled_q_entry_per_unit_in_the_ir() -> None:
    """Cube: one pop and free of the Q pipe per unit, in the unit loop outside the schedule loops.
    Vectors: one push before the unit loop (the block's first unit) and one in it (the next unit)."""
    funcs = {op.sym_name.data: op for op in parsed(config()).module.walk() if isinstance(op, func.FuncOp)}
    cube, vec = funcs[argspec.CUBE_FUNC_NAME], funcs[argspec.VECTOR_FUNC_NAME]
    (unit_loop,) = [op for op in cube.body.block.ops if isinstance(op, scf.ForOp)]
    direct = [op for op in unit_loop.body.block.ops if isinstance(op, d.PIPE_DATA_OPS)]
    assert [(op.ROLE, op.id_value) for op in direct] == [("tpop", Q_PIPE), ("tfree", Q_PIPE)]
    assert _pipe_ops(cube) == {("tpop", Q_PIPE): 1, ("tfree", Q_PIPE): 1}
    first, in_loop = [op for op in vec.body.block.ops if isinstance(op, (scf.IfOp, scf.ForOp))][:2]
    assert isinstance(first, scf.IfOp) and isinstance(in_loop, scf.ForOp)
    assert _pipe_ops(first) == _pipe_ops(in_loop) == {("talloc", Q_PIPE): 1, ("tpush", Q_PIPE): 1}
    assert not _pipe_ops(parsed(config(prescale_q=False)).module)


@pytest.mark.parametrize("units, block_dim", [(10, 1), (9, 4), (2, 3)])
def test_q_pipe_balances_over_many_units_and_idle_blocks(units: int, block_dim: int) -> None:
    """10 units on one block wrap the 8-slot Q ring (batched free credits); 2 units on 3 blocks
    leave one block without work. The simulator would report a deadlock or an unbalanced pipe;
    each block pushes and pops one Q entry per unit it runs."""
    cfg = config(head=64, tile_s1=128, qk_preload=2)
    shape = ProblemShape(1, units, 100, 200)
    q, k, v = make_inputs(shape, cfg.head, 0)
    o = torch.full((1, 100, units, cfg.head), math.nan, dtype=torch.float16)
    res = simulate(parsed(cfg), sim_kernel_args(cfg, shape, q, k, v, o, block_dim, 0.125), block_dim, trace=True)
    for block in range(block_dim):
        mine = len(range(block, units, block_dim))
        for core, role in (("cube", "tpop"), ("vec0", "talloc"), ("vec1", "talloc")):
            ops = res.trace.cores.get((block, core), [])
            assert sum(1 for op in ops if op.pipe_id == Q_PIPE and op.pipe_kind == role) == mine
    assert torch.isfinite(o.float()).all()


def test_q_ring_is_the_last_region_of_the_workspace() -> None:
    """The per-block slot bytes hold the four rings; with 9 full units on one block the Q ring's
    last slot is written, and a workspace 2 bytes short is reported as an out-of-range access."""
    cfg = config(head=64, tile_s1=128, qk_preload=2)
    assert cfg.gm_slot_bytes_per_block == cfg.slot_num * sum(p.slot_bytes for p in cfg.pipes)
    assert cfg.pipes[Q_PIPE].slot_bytes == cfg.cube_s0 * cfg.head * 2
    shape = ProblemShape(1, 9, 128, 128)
    q, k, v = make_inputs(shape, cfg.head, 0)
    o = torch.empty(1, 128, 9, cfg.head, dtype=torch.float16)
    need = workspace_bytes(cfg, shape, 1)
    for nbytes, ok in ((need, True), (need - 2, False)):
        ws = GmPointer.of(np.full(nbytes // 2, np.nan, dtype=np.float16))
        args = sim_kernel_args(cfg, shape, q, k, v, o, 1, 0.125, slots=ws)
        if ok:
            simulate(parsed(cfg), args, 1)
        else:
            with pytest.raises(SimError, match="GM access out of range"):
                simulate(parsed(cfg), args, 1)


def test_budget_counts_the_prescale_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scaled-Q tiles are in the plan and the UB budget; their rows shrink to what the UB
    leaves (64 at D=64, 8 at D=128), and the budget rule rejects them when even
    MIN_PRESCALE_ROWS do not fit, naming them."""
    for head, rows in ((64, 64), (128, 8)):
        cfg = config(head=head, tile_s1=512, key_padding=True, lse=True)
        ub = next(r for r in budget(cfg).rows if r.space == "vec")
        names = dict(ub.items)
        assert cfg.prescale_rows == rows and ub.used <= ub.capacity
        assert names["q_in"] == names["q_out"] == rows * head * 2 and names["q_f32"] == rows * head * 4
        assert "q_in" not in dict(next(r for r in budget(config(head=head, prescale_q=False)).rows if r.space == "vec").items)
    monkeypatch.setattr(pipeline, "MIN_PRESCALE_ROWS", 32)
    with pytest.raises(ConfigError, match=r"(?s)memory budget exceeded .*q_in 8K, q_f32 16K, q_out 8K, .*OVER"):
        pipeline.FAConfig(tile_s1=512, key_padding=True, lse=True)
    pipeline.FAConfig(tile_s1=512, key_padding=True, lse=True, prescale_q=False)


def test_cli_switch_builds_and_sweeps_both(tmp_path) -> None:
    """`--no-prescale-q` gives the three-pipe kernel (build) and its own sweep key; the default has four pipes."""
    from click.testing import CliRunner

    from ptofa.cli.main import main

    for flag, pipes in (("--prescale-q", 4), ("--no-prescale-q", 3)):
        out = tmp_path / f"{flag}.pto"
        result = CliRunner().invoke(main, ["build", "--head", "64", flag, "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert out.read_text().count("pto.aic_initialize_pipe") == pipes
    result = CliRunner().invoke(main, ["sweep", "--s1", "300", "--head-dim", "64", "--tile-s1", "128", "--qk-preload", "2",
                                       "--no-prescale-q", "-j", "1", "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    rows = (tmp_path / "sweep" / "results.jsonl").read_text().splitlines()
    assert len(rows) == 1 and ",prescale_q=0," in rows[0] and '"prescale_q": false' in rows[0]
