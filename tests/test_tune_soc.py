"""The chip of a backend reaches the automatic config: the timing model ranks configs for the
cube-core count the launch will have (an NPU device may have fewer cores than its chip's spec)."""

from __future__ import annotations

import dataclasses

import pytest

from ptofa.attention import core
from ptofa.launch import tune
from ptofa.launch.tune import TuneShape
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.sim.socspec import get_soc


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTOFA_CACHE_DIR", str(tmp_path))


def test_a_tune_shape_with_fewer_cores_ranks_for_them() -> None:
    # 24 equal units (B=1, N=24, one Q block each): one wave on 24 cores, two on 20.
    shape = TuneShape(batch=1, heads=24, kv_heads=24, s0=128, s1=512, head=64)
    fewer = dataclasses.replace(shape, cube_cores=20)
    assert shape.spec() == get_soc("910B2") and fewer.spec().cube_cores == 20
    config = FAConfig(head=64, tile_s1=128, qk_preload=2)
    full, cut = tune.predict_config(config, shape), tune.predict_config(config, fewer)
    assert cut.predicted_us > 1.5 * full.predicted_us, (full, cut)


def test_auto_config_passes_the_backends_core_count(monkeypatch) -> None:
    asked: list[TuneShape] = []
    real = tune.tune
    monkeypatch.setattr(tune, "tune", lambda wanted: asked.append(wanted) or real(wanted))
    shape = ProblemShape(1, 2, 128, 512, kv_heads=2)
    npu_like = dataclasses.replace(get_soc("910B2"), cube_cores=20)
    core.auto_config(64, "f16", s1=512, shape=shape, soc=npu_like)
    core.auto_config(64, "f16", s1=512, shape=shape, soc="910B4")
    core.auto_config(64, "f16", s1=512, shape=shape)
    assert [(w.soc, w.cube_cores) for w in asked] == [("910B2", 20), ("910B4", None), ("910B2", None)]


def test_the_split_planner_prices_splits_on_the_launchs_chip(monkeypatch) -> None:
    """`plan_dense_split` / `plan_serving` take the chip; the split costs come from its facts (a
    910B4's one-block costs, not the default 910B2's) and the waves from its core count."""
    from ptofa.launch import splitkv

    priced: list[str] = []
    real = splitkv.split_costs
    monkeypatch.setattr(splitkv, "split_costs", lambda config, q_len, soc: priced.append(soc) or real(config, q_len, soc))
    config = FAConfig(head=64, tile_s1=128, qk_preload=2)
    for soc in ("910B4", dataclasses.replace(get_soc("910B2"), cube_cores=20)):
        split = splitkv.plan_dense_split(config, 1, 64, 2048, 2, 2, None, get_soc(soc), scale=0.125)
        assert split is not None and split.plan.block_dim <= 20
    assert priced == ["910B4", "910B2"]
    b2, b4 = real(config, 64, "910B2"), real(config, 64, "910B4")
    assert b4.tile_us != b2.tile_us  # the chips' facts differ, so do the costs
    assert splitkv.chip(20) == dataclasses.replace(get_soc("910B2"), cube_cores=20)
