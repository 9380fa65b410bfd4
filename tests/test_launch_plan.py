"""The launch layer (`ptofa.launch.plan`, `sim.launch`): plans carry the chip, bind argument values
in one place, lay out the workspace, and launch any built kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from ptofa.cli.main import main
from ptofa.kernels import argspec
from ptofa.kernels.bwd_pipeline import BwdConfig
from ptofa.launch import sim
from ptofa.launch.plan import BuiltKernel, Workspace, bind, key_mask_stride, plan_backward, plan_forward, plan_kernel
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.sim import GmPointer
from ptofa.kernels.builtin_mods.window import window_mods

BALANCE = ["run", "--backend", "sim", "--batch", "1", "--heads", "26", "--s0", "128", "--s1", "512", "--head", "64",
           "--tile-s1", "128", "--qk-preload", "2", "--balance"]


def test_soc_910b4_plans_and_launches_for_its_20_cores() -> None:
    """`--soc 910B4`: the dense run and the balanced split launch both use the chip's 20 cube cores
    (26 units), and are timed on that chip."""
    result = CliRunner().invoke(main, BALANCE + ["--soc", "910B4"])
    assert result.exit_code == 0, result.output
    text = result.output.replace("\n", " ")
    assert "; 20 blocks): pass" in text
    assert "block_dim=20" in text and "on 910B4" in text


@pytest.mark.parametrize("soc, cores", [("910B2", 24), ("910B4", 20)])
def test_the_default_block_count_is_the_chips_core_count(soc: str, cores: int) -> None:
    config = FAConfig(head=64)
    shape = ProblemShape(2, 16, 256, 256)  # 64 units
    kernel = BuiltKernel("", config.summary(), argspec.ENTRY_NAME, argspec.entry_args(config))
    assert plan_forward(config, shape, soc, scale=0.1, kernel=kernel).block_dim == cores
    assert plan_forward(config, shape, soc, scale=0.1, kernel=kernel, block_dim=5).block_dim == 5
    backward = plan_backward(BwdConfig(head=64), shape, soc, scale=0.1)
    assert [c.block_dim for c in backward.calls] == [cores, cores]


def test_bind_takes_the_plans_values_then_the_callers_and_names_a_missing_one() -> None:
    config = FAConfig(head=64, mods=window_mods(), key_padding=True)
    shape = ProblemShape(2, 4, 100, 300, kv_heads=2)
    mask = torch.ones(2, 300, dtype=torch.int8)
    kernel = BuiltKernel("", config.summary(), argspec.ENTRY_NAME, argspec.entry_args(config))
    plan = plan_forward(config, shape, "910B2", scale=0.5, bounds=(7, -3), key_mask=mask, kernel=kernel)
    tensors = {"q": 1, "k": 2, "v": 3, "o": 4, "key_mask": mask}
    values = bind(plan.calls[0], tensors)
    assert list(values) == [p.name for p in argspec.host_params(config)]
    assert (values["win_left"], values["win_right"], values["key_mask_stride"]) == (7, -3, 300)
    assert values["slots"] == Workspace(0) and values["scale"] == 0.5
    with pytest.raises(ValueError, match="entry argument 'key_mask' of fa_fwd: the launch has no value for it"):
        bind(plan.calls[0], {"q": 1, "k": 2, "v": 3, "o": 4})
    assert key_mask_stride(mask, 300) == 300 and key_mask_stride(mask[0], 300) == 0 and key_mask_stride(None, 9) == 0


def test_the_backward_kernels_get_their_own_workspace_regions() -> None:
    config = BwdConfig(head=64, atomic_dq=True, block_q=64)
    plan = plan_backward(config, ProblemShape(1, 2, 128, 128), "910B2", scale=0.1)
    assert [c.name for c in plan.calls] == ["prep", "dkdv", "post"]
    prep, dkdv = plan.call("prep"), plan.call("dkdv")  # prep's ring carries D's dO O^T; post has none
    prep_bytes = config.slot_bytes_per_block("prep") * prep.block_dim
    assert prep.values["slots"] == Workspace(0) and dkdv.values["slots"] == Workspace(prep_bytes)
    assert "slots" not in plan.call("post").values
    assert plan.workspace_bytes == prep_bytes + config.slot_bytes_per_block("dkdv") * dkdv.block_dim


EMPTY_KERNEL = """module {
  func.func @fa_reduce(%ffts: !pto.ptr<i64>, %x: !pto.ptr<f32>, %n: i64) attributes {pto.entry} {
    return
  }
}
"""


def test_any_built_kernel_launches_through_the_plan() -> None:
    """A kernel that is not FlashAttention's: its own entry arguments, values and block count."""
    kernel = BuiltKernel.of_text(EMPTY_KERNEL, "empty")
    assert kernel.entry == "fa_reduce" and [a.name for a in kernel.args] == ["ffts", "x", "n"]
    plan = plan_kernel(kernel, {"n": 4}, block_dim=3)
    x = np.zeros(4, dtype=np.float32)
    (result,) = sim.launch(plan, {"x": x})
    assert not result.warnings
    bound = sim.arguments(plan.calls[0], {"x": x}, None)
    assert isinstance(bound["x"], GmPointer) and bound["n"] == 4 and bound["x"].dtype == np.float32
    with pytest.raises(ValueError, match="block_dim=0 must be >= 1"):
        plan_kernel(kernel, {"n": 4}, block_dim=0)
