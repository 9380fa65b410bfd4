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
