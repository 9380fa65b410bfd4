"""Paired Q blocks (`FAConfig.q_pair`): a work unit is two Q blocks of one (batch, head) whose cube
stages share each KV tile loaded once, so K and V cross GM once per 256 query rows."""

from __future__ import annotations

import pytest
import torch

from ptofa.kernels.builtin_mods.alibi import Alibi
from ptofa.kernels.builtin_mods.softcap import Softcap

from ptofa.launch import sim as sim_launch
from ptofa.launch.kernel_cache import get_kernel
from ptofa.launch.plan import plan_forward
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.runner import run_case
from ptofa.sim.options import RunOptions
from ptofa.sim.timing import predict
from ptofa.kernels.builtin_mods.window import window_mods


@pytest.mark.parametrize("switches", [dict(mods=window_mods()), dict(key_padding=True), dict(lse=True), dict(varlen=True),
                                      dict(mods=(Softcap(),)), dict(mods=(Alibi(),)), dict(dropout=True, cube_rowsum=False),
                                      dict(head=256), dict(tile_s1=1024, qk_preload=2, softmax_dtype="f16")])
def test_q_pair_is_the_dense_forward_only(switches: dict) -> None:
    with pytest.raises(ConfigError, match="paired Q blocks"):
        FAConfig(q_pair=True, **switches)


def test_a_unit_is_two_q_blocks() -> None:
    """Three Q blocks per head make two units per head: the second holds the last block alone."""
    shape = ProblemShape(2, 3, 300, 1000)
    assert shape.work_units(FAConfig()) == 2 * 3 * 3
    assert shape.work_units(FAConfig(q_pair=True)) == 2 * 3 * 2


CASES = {  # S0 with an odd number of Q blocks (the last unit single) and ragged tails
    "f16_d128_t512": (dict(head=128, tile_s1=512, qk_preload=3), ProblemShape(1, 2, 300, 1100)),
    "f16_d128_t1024": (dict(head=128, tile_s1=1024, qk_preload=2), ProblemShape(1, 1, 400, 2100)),
    "bf16_d64_t256": (dict(head=64, tile_s1=256, qk_preload=3, in_dtype="bf16"), ProblemShape(2, 1, 520, 333)),
}
SLOW_CASES = {
    "softmax_f16_d128": (dict(tile_s1=512, qk_preload=2, softmax_dtype="f16"), ProblemShape(2, 1, 400, 1300)),
    "softmax_f16_d64": (dict(head=64, tile_s1=256, qk_preload=3, softmax_dtype="f16"), ProblemShape(1, 1, 640, 1000)),
    "bf16_d128_t512": (dict(tile_s1=512, qk_preload=2, in_dtype="bf16"), ProblemShape(1, 3, 130, 600)),
    "f16_d64_t512": (dict(head=64, tile_s1=512, qk_preload=2), ProblemShape(1, 3, 130, 600)),
    "no_prescale_f32_out": (dict(tile_s1=512, qk_preload=3, prescale_q=False, out_dtype="f32"),
                            ProblemShape(1, 1, 384, 1000)),
    "one_key": (dict(tile_s1=256, qk_preload=2), ProblemShape(1, 1, 100, 1)),
    # 32 units on 24 blocks (the persistent loop, Q scaled one unit ahead), GQA
    "gqa_units_per_block": (dict(tile_s1=256, qk_preload=3), ProblemShape(2, 4, 1000, 300, kv_heads=2)),
    "bf16_t1024": (dict(tile_s1=1024, qk_preload=2, in_dtype="bf16"), ProblemShape(1, 2, 520, 1500)),
}


def _check(name: str, cases: dict) -> None:
    switches, shape = cases[name]
    result = run_case(FAConfig(q_pair=True, **switches), shape, backend="sim", seed=5, timing=False)
    assert result.status == "pass", result.message


@pytest.mark.parametrize("name", sorted(CASES))
def test_q_pair_meets_the_rule(name: str) -> None:
    _check(name, CASES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_CASES))
def test_q_pair_meets_the_rule_more(name: str) -> None:
    _check(name, SLOW_CASES)


def _gm_bytes(config: FAConfig, shape: ProblemShape) -> float:
    """GM bytes (loads and stores, pipe slots included) of the whole launch, from the traced units."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, s, 1, config.head, generator=g).half() for s in (shape.s0, shape.s1, shape.s1))
    o = torch.empty(1, shape.s0, 1, config.head, dtype=torch.float16)
    plan = plan_forward(config, shape, "910B2", scale=config.head ** -0.5, block_dim=1, kernel=get_kernel(config))
    (sim,) = sim_launch.launch(plan, {"q": q, "k": k, "v": v, "o": o}, options=RunOptions(trace=True))
    return predict(sim.trace, config, shape, block_dim=1).gm_bytes_per_unit * shape.work_units(config)


def test_k_and_v_cross_gm_once_per_pair() -> None:
    """Two Q blocks: paired, the GM traffic is one K and one V (S1 x D each) less, and nothing else changes."""
    shape = ProblemShape(1, 1, 256, 1024)
    single, paired = (_gm_bytes(FAConfig(tile_s1=512, qk_preload=2, q_pair=pair), shape) for pair in (False, True))
    assert single - paired == 2 * shape.s1 * 128 * 2
