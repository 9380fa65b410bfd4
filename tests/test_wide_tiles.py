"""TILE_S1 = 1024 (half the PV partials' GM bytes per key: one O partial per 1024 keys) and the f32
softmax's row max on the f16 scores as loaded (`FAConfig.input_row_max`)."""

from __future__ import annotations

import pytest

from ptofa.fa_builder import emit_fa
from ptofa.kernels import argspec
from ptofa.kernels.builtin_mods.alibi import Alibi
from ptofa.kernels.builtin_mods.softcap import Softcap
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, budget
from ptofa.runner import run_case
from ptofa.kernels.builtin_mods.window import window_mods


def test_wide_tiles_are_legal_up_to_d128() -> None:
    """1024-key tiles: 8-row f32 softmax slices with 128-row Q blocks; the 64-row Q blocks of D > 128
    would leave 4 rows, below the vector row slice's minimum, and the key mask's rows do not fit the UB."""
    for head in (64, 128):
        config = FAConfig(head=head, tile_s1=1024, qk_preload=2)
        assert config.vec_s0 == 8 and config.tile_factor == 16
        assert all(row.used <= row.capacity for row in budget(config).rows)
    with pytest.raises(ConfigError, match="vector row slice"):
        FAConfig(head=192, tile_s1=1024, qk_preload=2)
    with pytest.raises(ConfigError, match="memory budget exceeded"):
        FAConfig(head=128, tile_s1=1024, qk_preload=2, key_padding=True)


CASES = {  # switches, shape: ragged tails, a single partial tile, a window with LSE and GQA, varlen
    "ragged": (dict(), ProblemShape(1, 2, 200, 2500)),
    "one_partial_tile": (dict(qk_preload=3), ProblemShape(1, 1, 130, 700)),
    "causal_lse_gqa": (dict(mods=window_mods(), lse=True), ProblemShape(1, 2, 200, 1500, kv_heads=1, window=(-1, 0))),
    "softmax_f16": (dict(softmax_dtype="f16"), ProblemShape(1, 2, 256, 2300)),
    "bf16": (dict(in_dtype="bf16"), ProblemShape(1, 1, 128, 1100)),
    "varlen": (dict(varlen=True), ProblemShape(2, 1, 300, 2400, seqlens=((100, 1300), (200, 1100)))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_wide_tiles_meet_the_rule(name: str) -> None:
    switches, shape = CASES[name]
    config = FAConfig(head=128, tile_s1=1024, **{"qk_preload": 2, **switches})
    result = run_case(config, shape, backend="sim", seed=5, timing=False)
    assert result.status == "pass", result.message


def _vector_func(config: FAConfig) -> str:
    return emit_fa(config).split(f"func.func @{argspec.VECTOR_FUNC_NAME}")[1]


def test_input_row_max_where_nothing_changes_the_scores() -> None:
    """On by default (fp16, S in f16, prescaled Q, the cube's row sums); off where the vectors change
    the scores before the max (mask, key padding, scale pass, modifications) and with f32 S. The
    8-row slices of 1024-key tiles take the max into an ND tile (an f16 [8, 1] column is not 32 bytes)."""
    for on in (dict(), dict(tile_s1=512, qk_preload=2), dict(tile_s1=1024, qk_preload=2), dict(varlen=True)):
        assert FAConfig(**on).input_row_max, on
    for off in (dict(mods=window_mods()), dict(key_padding=True), dict(prescale_q=False), dict(mods=(Softcap(),)),
                dict(mods=(Alibi(),)), dict(qk_dtype="f32"), dict(lse=True), dict(in_dtype="bf16"),
                dict(cube_rowsum=False), dict(softmax_dtype="f16")):
        assert not FAConfig(**off).input_row_max, off
    on, off = _vector_func(FAConfig()), _vector_func(FAConfig(mods=window_mods()))
    assert "pto.trowmax ins(%p_half" in on and "pto.trowmax ins(%p_half" not in off and "m_wide" not in on
    wide = _vector_func(FAConfig(tile_s1=1024, qk_preload=2))
    assert "outs(%m_half : !pto.tile_buf<vec, 8x16xf16, valid=8x1>)" in wide and "pto.trowmax ins(%m_wide" in wide


def _v_busy_us(config: FAConfig) -> float:
    """The vectors' V queue in the timing model's replay of a one-unit probe (as `ptofa.launch.tune` probes)."""
    import torch

    from ptofa.launch import sim as sim_launch
    from ptofa.launch.kernel_cache import Kernel
    from ptofa.launch.plan import plan_forward
    from ptofa.sim.options import RunOptions
    from ptofa.sim.timing import predict

    shape = ProblemShape(1, 1, 128, 4096)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, s, 1, 128, generator=g).half() for s in (128, 4096, 4096))
    o = torch.empty(1, 128, 1, 128, dtype=torch.float16)
    kernel = Kernel(config, emit_fa(config))  # (not the kernel cache: the test patches the form)
    plan = plan_forward(config, shape, "910B2", scale=128 ** -0.5, block_dim=1, kernel=kernel)
    (sim,) = sim_launch.launch(plan, {"q": q, "k": k, "v": v, "o": o}, options=RunOptions(trace=True))
    timed = predict(sim.trace, config, shape, block_dim=1)
    return sum(i.end_us - i.start_us for i in timed.intervals if i.core == "vec0" and i.queue == "V")


def test_input_row_max_shortens_the_v_queue(monkeypatch) -> None:
    """Predicted: the f16 max takes half the repeats and column folds of the f32 one (fewer still at
    1024 keys, whose 16 f32 column chunks fold one by one), which the small widening ops do not undo."""
    for tile_s1 in (256, 1024):
        config = FAConfig(tile_s1=tile_s1, qk_preload=2)
        on = _v_busy_us(config)
        monkeypatch.setattr(FAConfig, "input_row_max", property(lambda self: False))
        off = _v_busy_us(config)
        monkeypatch.undo()
        assert on < 0.9 * off, (tile_s1, on, off)


@pytest.mark.parametrize("scale", [None, 1.0])
def test_input_row_max_meets_the_rule(scale: float | None) -> None:
    """Scale 1 gives scores of magnitude ~ sqrt(D): the f16 max is the f32 one exactly."""
    config = FAConfig(head=128, tile_s1=256, qk_preload=2)
    assert config.input_row_max
    result = run_case(config, ProblemShape(1, 2, 200, 900), backend="sim", seed=7, scale=scale, timing=False)
    assert result.status == "pass", result.message
