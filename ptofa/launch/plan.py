"""Launch plans: everything one call runs, decided once, for either backend.

    plan = plan_forward(config, shape, soc, scale=0.125)
    sim.launch(plan, {"q": q, "k": k, "v": v, "o": o})        # or npu.launch(plan, tensors)

What a plan holds (`LaunchPlan`, `KernelCall`, `Workspace`) and how its values meet the
caller's tensors (`bind`) is `ptofa.launch.calls`'s; its names are re-exported here.

The planners here take configs and fetch their kernels from the kernel cache
(`ptofa.launch.kernel_cache`: `get_kernel`, `reduce_kernel`, `backward_kernel`); the plans
themselves are made by `ptofa.launch.calls` (`forward_plan`, `split_plan`, `backward_plan`,
`plan_kernel`), which take built kernels: the backends and the split planner use those, so
they do not sit above the kernel builders. Every planner takes the chip, so the default
block count is min(work units, `soc.cube_cores`) everywhere. The split counts of a split-KV
launch are decided by `ptofa.launch.splitkv` and handed to `plan_split`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ptofa.kernels.bwd_pipeline import BwdConfig
from ptofa.launch.calls import (  # noqa: F401 (the plan types and helpers, re-exported)
    BuiltKernel,
    KernelCall,
    LaunchPlan,
    Workspace,
    alibi_stride,
    backward_plan,
    bind,
    blocks_for,
    check_block_dim,
    dense_as_varlen,
    forward_plan,
    key_mask_stride,
    plan_kernel,
    reduce_block_dim,
    reduce_rows,
    runtime_values,
    split_plan,
)
from ptofa.launch.kernel_cache import backward_kernel, backward_kernels, get_kernel, reduce_kernel, split_kernels  # noqa: F401
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.sim.socspec import SocSpec


def plan_forward(config: FAConfig, shape: ProblemShape, soc: str | SocSpec, *, scale: float,
                 bounds: tuple[int, int] | None = None, key_mask: torch.Tensor | None = None,
                 block_dim: int | None = None, units: torch.Tensor | None = None, max_pages: int = 0,
                 kernel=None, softcap: float = 0.0, alibi: torch.Tensor | None = None,
                 dropout: tuple[float, int, int] | None = None) -> LaunchPlan:
    """One launch of the forward kernel of `config` (a varlen kernel reads `units`); `kernel` the
    built kernel when the caller has it (default: the kernel cache's)."""
    return forward_plan(kernel or get_kernel(config), config, shape, soc, scale=scale, bounds=bounds,
                        key_mask=key_mask, block_dim=block_dim, units=units, max_pages=max_pages, softcap=softcap,
                        alibi=alibi, dropout=dropout)


def plan_split(split, shape: ProblemShape, soc: str | SocSpec, *, scale: float, max_pages: int = 0,
               block_dim: int | None = None, softcap: float = 0.0, alibi: torch.Tensor | None = None) -> LaunchPlan:
    """The launch of a varlen split decision (`splitkv.Plan`: config, unit table, split counts): the
    forward kernel, and when a unit has more than one split, the reduce kernel over the split
    units' partials (`calls.split_plan`)."""
    return split_plan(*split_kernels(split.config), split, shape, soc, scale=scale, max_pages=max_pages,
                      block_dim=block_dim, softcap=softcap, alibi=alibi)


def plan_backward(config: BwdConfig, shape: ProblemShape, soc: str | SocSpec, *, scale: float,
                  bounds: tuple[int, int] | None = None, key_mask: torch.Tensor | None = None,
                  block_dim: int | None = None, softcap: float = 0.0, alibi: torch.Tensor | None = None,
                  tables: Mapping[str, torch.Tensor] | None = None,
                  dropout: tuple[float, int, int] | None = None) -> LaunchPlan:
    """The backward kernels of `config` in launch order (`calls.backward_plan`; a varlen config walks
    `tables`, its unit tables by kernel name, `varlen.backward_tables`)."""
    return backward_plan(backward_kernels(config), config, shape, soc, scale=scale, bounds=bounds, key_mask=key_mask,
                         block_dim=block_dim, softcap=softcap, alibi=alibi, tables=tables, dropout=dropout)


__all__ = ["BuiltKernel", "KernelCall", "LaunchPlan", "Workspace", "backward_kernel", "bind", "dense_as_varlen",
           "key_mask_stride", "plan_backward", "plan_forward", "plan_kernel", "plan_split", "reduce_block_dim",
           "reduce_kernel", "reduce_rows", "runtime_values"]
