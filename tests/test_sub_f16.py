"""`FAConfig.sub_f16`: with the row max on the f16 scores (`input_row_max`) and the f16 exp (`exp_f16`),
S and the new row max m are both f16 values, so the f32 softmax takes x = S - m as one f16 subtraction
on P's tile: no f32 score tile, no widening of S and no narrowing of x. The statistics stay f32."""

from __future__ import annotations

import pytest
import torch

from test_prescale import _stage_ops

from ptofa.pipeline import FAConfig, ProblemShape, tile_plan
from ptofa.runner import run_case


@pytest.mark.parametrize("knobs", [dict(), dict(tile_s1=1024, qk_preload=3), dict(tile_s1=512, qk_preload=2, q_pair=True),
                                   dict(head=64, tile_s1=128, qk_preload=2, slice_buffers=2)])
def test_the_slice_runs_on_the_f16_tile(knobs) -> None:
    """Per slice and block: the row max, S - m and the exp on the f16 P tile, then its store; m goes
    back to f16 (8-row slices: as a row-major 32-byte block per row, `m_bch`); no f32 score tile."""
    config = FAConfig(**knobs)
    assert config.sub_f16 and config.softmax_dtype == "f32"
    steps = config.vec_buffers * (1 + config.q_pair)
    assert _stage_ops(config, "p_half") == ["pto.trowmax", "pto.trowexpandsub", "pto.texp", "pto.tstore"] * steps
    names = {t.name for t in tile_plan(config) if t.core == "vector"}
    assert not any(n.startswith("s_tile") for n in names)
    assert ("m_bch" in names) == (config.vec_s0 < 16)


def test_not_without_its_two_conditions() -> None:
    """Scores changed on the vectors (a window, LSE's f32 S, a bf16 exp) keep the f32 form."""
    from ptofa.kernels.builtin_mods.window import window_mods

    assert not FAConfig(mods=window_mods()).sub_f16 and not FAConfig(lse=True).sub_f16
    assert not FAConfig(in_dtype="bf16").sub_f16 and not FAConfig(exp_f16=False).sub_f16
    assert not FAConfig(prescale_q=False).sub_f16 and not FAConfig(softmax_dtype="f16").sub_f16


CASES = {  # knobs, shape, scale: ragged keys, 8-row slices, a pair, tied scores at a large scale
    "t256_ragged": (dict(), ProblemShape(1, 2, 200, 700), None),
    "t1024_rows8": (dict(tile_s1=1024, qk_preload=3), ProblemShape(1, 1, 256, 2100), None),
    "pair_t512": (dict(tile_s1=512, qk_preload=2, q_pair=True), ProblemShape(1, 1, 512, 1500), None),
    "d64_large_scale": (dict(head=64, tile_s1=128, qk_preload=2), ProblemShape(2, 2, 130, 300), 1.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_meets_the_rule(name: str) -> None:
    knobs, shape, scale = CASES[name]
    config = FAConfig(**knobs)
    assert config.sub_f16
    result = run_case(config, shape, backend="sim", seed=5, scale=scale)
    assert result.status == "pass", result.message


def test_tied_scores_meet_the_rule() -> None:
    """Every key the same: every x is 0 and every P is 1 in each row, the case a rounded difference
    would show first."""
    from ptofa.attention.core import attend
    from ptofa.reference import check_accuracy, reference_fa

    torch.manual_seed(0)
    q = torch.randn(1, 300, 2, 128).half()
    k = torch.randn(1, 1, 2, 128).half().expand(1, 900, 2, 128).contiguous()
    v = torch.randn(1, 900, 2, 128).half()
    out, _ = attend(q, k, v, scale=None, backend="sim", config=FAConfig())
    ref = reference_fa(q, k, v, 128 ** -0.5, (-1, -1))
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
