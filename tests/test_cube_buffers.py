"""`FAConfig.cube_s1`: 64-key cube sub-tiles with two buffers of every per-sub-tile cube tile
(L1 staging, L0A/L0B operands, QK accumulator), or 128-key sub-tiles with one.

The automatic choice, the plan and budget, the alternation in the emitted IR, numerics of
both widths against the torch reference, and the timing model's view of the overlap.
"""

from __future__ import annotations

import pytest
import torch
from test_variants import config, parsed, run_variant
from xdsl.dialects import func

from ptofa.kernels import argspec
from ptofa.ir import dialect as d
from ptofa.pipeline import FAConfig, ProblemShape, budget, tile_plan
from ptofa.kernels.builtin_mods.window import window_mods

PER_SUB_TILE = ("k_mat", "v_mat", "p_mat", "p_left", "k_right", "v_right", "s_acc")


@pytest.mark.parametrize("knobs, want", [
    (dict(), 64),
    (dict(tile_s1=128, qk_preload=1), 128),
    (dict(tile_s1=128, qk_preload=2), 64),
    (dict(head=256, tile_s1=256), 128),
    (dict(head=192, tile_s1=128), 128),
    (dict(head=256, tile_s1=512), 64),
    (dict(head=64, tile_s1=512), 64),
])
def test_automatic_sub_tile_width(knobs, want) -> None:
    assert config(**knobs).cube_s1 == want


def test_preload_1_needs_one_sub_tile_per_tile() -> None:
    with pytest.raises(Exception, match=r"^preload vs tile factor: qk_preload=1 needs k_tile_factor=1"):
        FAConfig(tile_s1=128, qk_preload=1, cube_s1=64)


@pytest.mark.parametrize("head, tile_s1", [(64, 256), (128, 256), (128, 512), (256, 512)])
def test_plan_double_buffers_each_sub_tile_tile_within_l0(head: int, tile_s1: int) -> None:
    # cube_rowsum single-buffers K's L0B operand and the QK accumulator at D = 128 to make room
    # for the row-sum columns (tests/test_cube_rowsum.py): the double-buffered plan is the one without it.
    cfg = config(head=head, tile_s1=tile_s1, cube_rowsum=False)
    assert (cfg.cube_s1, cfg.cube_buffers) == (64, 2)
    names = {t.name: t for t in tile_plan(cfg) if t.core == "cube"}
    for base in PER_SUB_TILE:
        a, b = names[base + "0"], names[base + "1"]
        assert (a.loc, a.rows, a.cols, a.dtype) == (b.loc, b.rows, b.cols, b.dtype) and 64 in (a.rows, a.cols)
        assert base not in names
    rows = {row.space: row for row in budget(cfg).rows}
    for space in ("left", "right", "acc"):
        assert rows[space].used <= rows[space].capacity
    single = config(head=head, tile_s1=tile_s1, cube_s1=128)
    assert {t.name for t in tile_plan(single) if t.core == "cube"} >= set(PER_SUB_TILE)


def test_ir_alternates_buffers_sub_tile_by_sub_tile() -> None:
    """The cube's steady loop: sub-tile i's K moves into k_right{i % 2}, and its QK accumulates in s_acc{i % 2}."""
    cfg = config(tile_s1=256, cube_rowsum=False)  # with cube_rowsum, K and the QK accumulator have one buffer
    module = parsed(cfg).module
    (cube,) = [op for op in module.walk() if isinstance(op, func.FuncOp) and op.sym_name.data == argspec.CUBE_FUNC_NAME]
    qk_outs = [op.operands[-1].name_hint for op in cube.walk() if isinstance(op, d.TMatmulOp)
               and (op.operands[1].name_hint or "").startswith("k_right")]
    # prologue (4 sub-tiles), then the steady loop (4), in program order
    assert qk_outs[:8] == ["s_acc0", "s_acc1"] * 4


@pytest.mark.parametrize("knobs, dims", [
    (dict(tile_s1=256), dict(batch=2, heads=2, s0=200, s1=700)),
    (dict(tile_s1=512, mods=window_mods(), lse=True), dict(heads=2, s0=300, s1=1000, window=(-1, 0))),
    (dict(head=256, tile_s1=512, in_dtype="bf16"), dict(heads=2, kv_heads=1, s0=70, s1=600)),
])
def test_both_widths_pass_the_rule_and_agree(knobs, dims) -> None:
    """Same scores either way; P V sums its sub-tiles in another order, so O differs by rounding only."""
    shape = ProblemShape(**dims)
    narrow, _, _ = run_variant(config(cube_s1=64, **knobs), shape)
    wide, _, _ = run_variant(config(cube_s1=128, **knobs), shape)
    assert torch.allclose(narrow.float(), wide.float(), atol=2e-3)


def test_timing_model_sees_the_overlap() -> None:
    """An f16 softmax at tile 512 is cube-bound: the double-buffered 64-key sub-tiles are faster."""
    from ptofa.runner import run_case

    shape = ProblemShape(batch=1, heads=1, s0=512, s1=4096)
    times = {}
    for width in (64, 128):
        cfg = FAConfig(tile_s1=512, softmax_dtype="f16", cube_s1=width)
        result = run_case(cfg, shape, backend="sim", timing=True, block_dim=1)
        assert result.status == "pass", result.message
        times[width] = result.predicted_us
    assert times[64] < 0.97 * times[128], times
