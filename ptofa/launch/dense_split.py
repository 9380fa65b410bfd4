"""Split-KV for the dense calls: a dense problem whose units leave cores idle (fewer units than
cube cores, or an incomplete last wave) runs as a varlen batch of B equal sequences through the
serving split path (`ptofa.attention.serving`), so the KV range of some units (all of them, or those of
the last wave) is spread over several cores and combined by the reduce kernel."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from ptofa.attention.core import tune_window
from ptofa.launch.base import TORCH_DTYPES
from ptofa.pipeline import FAConfig, ProblemShape, workspace_bytes
from ptofa.sim.socspec import get_soc
from ptofa.launch.splitkv import Plan, plan_varlen
from ptofa.launch.varlen import unit_table, varlen_shape


def varlen_window(bounds: tuple[int, int] | None, s0: int, s1: int) -> tuple[int, int] | None:
    """The varlen kernel's window for dense kernel bounds (`attention.tune_window`), or None when
    it cannot say it: the varlen window reads -1 as unbounded, so a negative right bound (torch's
    top-left causal with S0 < S1) stays on the dense kernel."""
    if bounds is not None and bounds[1] < 0:
        return None
    return tune_window(bounds, s0, s1)


@dataclasses.dataclass(frozen=True)
class DenseSplit:
    """A dense problem planned as a varlen batch of B equal sequences: the varlen config and
    shape the serving launch takes, the split count and the launch `splitkv.plan_varlen`
    makes of them (split config, unit table, block count) on the cores planned for."""

    config: FAConfig
    shape: ProblemShape
    table_of: Callable[[FAConfig, int], torch.Tensor]
    plan: Plan

    @property
    def num_splits(self) -> int:
        """The most splits of any unit (the partials hold that many)."""
        return self.plan.num_splits

    @property
    def launch_splits(self) -> int | list[int]:
        """What the serving launch takes: one count for every unit, or the count of each unit."""
        counts = self.plan.unit_splits
        return counts[0] if len(set(counts)) == 1 else list(counts)

    def workspace_bytes(self) -> int:
        """The launch's GM workspace: slot rings of its blocks, then the partial O and LSE."""
        return workspace_bytes(self.plan.config, self.shape, self.plan.block_dim, self.num_splits)


def plan_dense_split(config: FAConfig, batch: int, s0: int, s1: int, heads: int, kv_heads: int,
                     bounds: tuple[int, int] | None, cores: int,
                     num_splits: int | list[int] = 0) -> DenseSplit | None:
    """The one split decision of the dense calls and InfiniOp: split when told (`num_splits` > 1,
    or one count per unit), or (0) when the timing model's estimate of the balanced per-unit split
    (reduce included, `splitkv.plan_splits`) beats the unsplit launch; None to run the dense
    kernel unsplit (also when the varlen window cannot say `bounds`)."""
    window = varlen_window(bounds, s0, s1)
    if window is None:
        return None
    config = dataclasses.replace(config, varlen=True, masked=window != (-1, -1))
    shape = varlen_shape([s0] * batch, [s1] * batch, heads, kv_heads, window)
    shape.check(config)

    def table_of(c: FAConfig, n: int) -> torch.Tensor:
        return unit_table(c, [s0] * batch, [s1] * batch, heads, window, n)

    plan = plan_varlen(config, shape, table_of, num_splits, cores)
    if plan is None or plan.num_splits == 1:
        return None
    return DenseSplit(config, shape, table_of, plan)


def run_dense_split(split: DenseSplit, q, k, v, *, scale: float, return_lse: bool, backend: str, out=None,
                    workspace: torch.Tensor | None = None, stream=None):
    """Launch a planned split on [B, S*, N, D] tensors; returns (out [B,S0,N,D], lse [B,N,S0] or None).

    `out` (contiguous, written in place) and `workspace` (at least `split.workspace_bytes()`,
    holding the slot rings and the partials) are the caller's when given."""
    from ptofa.attention.serving import _launch  # serving imports attention, which calls here

    batch, s0, heads, head = q.shape
    s1, kv_heads = k.shape[1], k.shape[2]
    if out is None:
        out = torch.empty((batch, s0, heads, head), dtype=TORCH_DTYPES[split.config.out_dtype], device=q.device)
    lse = torch.full((heads, batch * s0), math.inf, device=q.device) if return_lse else None
    _launch(backend, split.config, split.shape, split.table_of, q.reshape(batch * s0, heads, head).contiguous(),
            k.reshape(batch * s1, kv_heads, head).contiguous(), v.reshape(batch * s1, kv_heads, head).contiguous(),
            out.view(batch * s0, heads, head), scale, split.launch_splits, lse=lse, workspace=workspace, stream=stream)
    dense_lse = lse.reshape(heads, batch, s0).permute(1, 0, 2).contiguous() if return_lse else None
    return out.view(batch, s0, heads, head), dense_lse


def dense_split(config: FAConfig, q, k, v, *, scale: float, bounds: tuple[int, int] | None, return_lse: bool,
                backend: str, cores: int, num_splits: int = 0):
    """Run the dense problem split-KV when the timing model says a split helps (`num_splits` 0)
    or as told (> 1); returns (out [B,S0,N,D], lse [B,N,S0] or None), or None to run unsplit."""
    batch, s0, heads, _ = q.shape
    split = plan_dense_split(config, batch, s0, k.shape[1], heads, k.shape[2], bounds, cores, num_splits)
    if split is None:
        return None
    return run_dense_split(split, q, k, v, scale=scale, return_lse=return_lse, backend=backend)


def sim_cores() -> int:
    """Cube cores of the simulated SoC (the one the serving sim launch plans for)."""
    from ptofa.attention.serving import SIM_SOC
    return get_soc(SIM_SOC).cube_cores
