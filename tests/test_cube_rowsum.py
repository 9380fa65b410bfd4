"""The f32 softmax's row sums from the cube (`cube_rowsum`) and its exp in f16 (`exp_f16`)."""

from __future__ import annotations

import pytest

from ptofa.kernels import argspec
from ptofa.fa_builder import emit_fa
from ptofa.pipeline import ROWSUM_COLS, ConfigError, FAConfig, ProblemShape, cube_buffer_names, tile_plan
from ptofa.runner import run_case
from ptofa.kernels.builtin_mods.window import window_mods


def _funcs(config: FAConfig) -> tuple[str, str]:
    text = emit_fa(config)
    cube = text.split(f"func.func @{argspec.CUBE_FUNC_NAME}")[1].split("func.func @")[0]
    vec = text.split(f"func.func @{argspec.VECTOR_FUNC_NAME}")[1]
    return cube, vec


def test_automatic_choice() -> None:
    """On for an f32 softmax with one D chunk whose plan fits; exp_f16 with it for fp16 inputs. At D = 128
    the QK accumulator and K's L0B operand drop to one buffer to make room for the wider V and PV."""
    default = FAConfig()
    assert (default.cube_rowsum, default.exp_f16, default.qk_buffers, default.cube_buffers) == (True, True, 1, 2)
    assert FAConfig(head=64).qk_buffers == 2  # D = 64 keeps both buffers
    assert FAConfig(in_dtype="bf16").cube_rowsum and not FAConfig(in_dtype="bf16").exp_f16
    for off in (FAConfig(head=256), FAConfig(softmax_dtype="f16"), FAConfig(tile_s1=128, qk_preload=1)):
        assert not off.cube_rowsum and not off.exp_f16
    assert default.pipes[2].cols == default.head + ROWSUM_COLS
    assert FAConfig(cube_rowsum=False).pipes[2].cols == 128


@pytest.mark.parametrize("kw, rule", [(dict(head=256, cube_rowsum=True), "cube row sum"),
                                      (dict(softmax_dtype="f16", cube_rowsum=True), "cube row sum"),
                                      (dict(in_dtype="bf16", exp_f16=True), "exp in f16"),
                                      (dict(cube_rowsum=False, exp_f16=True), "exp in f16")])
def test_rules(kw: dict, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        FAConfig(**kw)


def test_over_budget_is_refused() -> None:
    """With 128-key cube sub-tiles at D = 128, K's and V's L0B operands cannot both fit with the ones columns."""
    with pytest.raises(ConfigError, match="memory budget"):
        FAConfig(tile_s1=128, qk_preload=1, cube_rowsum=True)


def test_emitted_forms() -> None:
    """Cube: each V staging buffer is filled with ones once (texpands on L1) before the unit loop, V
    moves to L0B ROWSUM_COLS wider than D, the PV accumulator is stored that wide. Vectors: no trowsum,
    the row-sum columns loaded and accumulated in compute_gu, trowmax of them once per unit."""
    config = FAConfig()
    cube, vec = _funcs(config)
    fills = [line for line in cube.splitlines() if "pto.texpands" in line]
    assert len(fills) == len(cube_buffer_names(config, "v_mat")) == 2
    assert all("!pto.tile_buf<mat, 64x144xf16" in line for line in fills)
    assert cube.index("pto.texpands") < cube.index("scf.for")
    assert "pto.trowsum" not in vec and vec.count("pto.trowmax") == 2  # the slice's row max, the row-sum columns
    assert "outs(%l_pv" in vec and vec.count("pto.trowexpandmul") == 2
    plan = {t.name: t for t in tile_plan(config)}
    assert (plan["o_acc"].cols, plan["v_right0"].cols, plan["l_acc"].cols) == (144, 144, ROWSUM_COLS)
    old_cube, old_vec = _funcs(FAConfig(cube_rowsum=False, exp_f16=False))
    assert "pto.texpands" not in old_cube and "pto.trowsum" in old_vec


@pytest.mark.parametrize("rowsum, exp16", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("head, shape, switches", [
    (128, ProblemShape(1, 2, 200, 700), dict(lse=True)),
    (64, ProblemShape(2, 2, 150, 300, window=(40, 0)), dict(mods=window_mods(), lse=True, key_padding=True)),
])
def test_o_and_lse_meet_the_rule(rowsum: bool, exp16: bool, head: int, shape: ProblemShape, switches: dict) -> None:
    """Every combination passes the accuracy rule on O and LSE, with ragged tiles, a window (rows with no
    visible key: O = 0, LSE = +inf) and a key-padding mask."""
    config = FAConfig(head=head, tile_s1=128, qk_preload=2, cube_rowsum=rowsum, exp_f16=exp16, **switches)
    result = run_case(config, shape, backend="sim", seed=3, timing=False,
                      key_mask=None if not switches.get("key_padding") else _key_mask(shape))
    assert result.status == "pass", result.message


def _key_mask(shape: ProblemShape):
    from ptofa.reference import make_key_mask

    return make_key_mask(shape.batch, shape.s1, seed=3)[0]


def _probe(config: FAConfig, shape: ProblemShape):
    """The timing model's replay of a one-block simulated launch (as `ptofa.launch.tune` probes)."""
    import torch

    from ptofa.launch.kernel_cache import get_kernel
    from ptofa.sim.options import RunOptions
    from ptofa.sim.timing import predict
    from ptofa.launch import sim as sim_launch
    from ptofa.launch.plan import plan_forward

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, shape.s0, 1, config.head, generator=g).half()
    k, v = (torch.randn(1, shape.s1, 1, config.head, generator=g).half() for _ in range(2))
    o = torch.empty(1, shape.s0, 1, config.head, dtype=torch.float16)
    plan = plan_forward(config, shape, "910B2", scale=config.head ** -0.5, block_dim=1, kernel=get_kernel(config))
    (sim,) = sim_launch.launch(plan, {"q": q, "k": k, "v": v, "o": o}, options=RunOptions(trace=True))
    return predict(sim.trace, config, shape, block_dim=1)


def test_model_moves_the_row_sum_to_the_cube() -> None:
    """Predicted, on a one-unit probe: the vectors' V queue loses the row sums and (exp_f16) half of
    the exp's repeats; the cube's M queue gains the PV matmul's extra ROWSUM_COLS output columns, and
    its MTE2 the ones fill of each V staging buffer."""
    shape = ProblemShape(1, 1, 128, 4096)
    busy = {}
    for rowsum, exp16 in ((False, False), (True, False), (True, True)):
        timed = _probe(FAConfig(cube_rowsum=rowsum, exp_f16=exp16), shape)
        v = sum(i.end_us - i.start_us for i in timed.intervals if i.core == "vec0" and i.queue == "V")
        m = sum(i.end_us - i.start_us for i in timed.intervals if i.core == "cube" and i.queue == "M")
        fills = [i for i in timed.intervals if i.core == "cube" and i.op == "pto.texpands"]
        assert [i.queue for i in fills] == ["MTE2"] * (2 if rowsum else 0)
        busy[(rowsum, exp16)] = (v, m)
    assert busy[(True, False)][0] < 0.85 * busy[(False, False)][0]
    assert busy[(True, True)][0] < 0.95 * busy[(True, False)][0]
    qk_pv = busy[(False, False)][1]  # QK and PV take the same MACs at D = 128 without the row sums
    assert busy[(True, False)][1] == pytest.approx(qk_pv * (1 + ROWSUM_COLS / 128 / 2), rel=0.02)
