"""Split-KV for the dense calls: a dense problem whose units leave cores idle (fewer units than
cube cores, or an incomplete last wave) runs as a varlen batch of B equal sequences
(`plan.dense_as_varlen`) with per-unit split counts (`splitkv.plan_varlen`), so the KV range of
some units (all of them, or those of the last wave) is spread over several cores and combined by
the reduce kernel: one `LaunchPlan`, launched like any other (`dispatch.launch_on`)."""

from __future__ import annotations

import dataclasses
import math

import torch

from ptofa.launch.base import TORCH_DTYPES
from ptofa.launch import dispatch
from ptofa.launch.plan import LaunchPlan, dense_as_varlen, plan_split
from ptofa.launch.splitkv import plan_varlen
from ptofa.kernels.units import window_of_bounds
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.sim.socspec import SocSpec, get_soc


def tune_window(bounds: tuple[int, int] | None, s0: int, s1: int) -> tuple[int, int]:
    """The window of the kernel's bounds as a bottom-right window: a bound that no offset reaches
    is -1, a negative right bound (torch's top-left causal with S1 > S0) is 0."""
    return window_of_bounds(bounds, s0, s1)


def varlen_window(bounds: tuple[int, int] | None, s0: int, s1: int) -> tuple[int, int] | None:
    """The varlen kernel's window for dense kernel bounds (`tune_window`), or None when it cannot
    say it: the varlen window reads -1 as unbounded, so a negative right bound (torch's top-left
    causal with S0 < S1) stays on the dense kernel."""
    if bounds is not None and bounds[1] < 0:
        return None
    return tune_window(bounds, s0, s1)


@dataclasses.dataclass(frozen=True)
class DenseSplit:
    """A dense problem planned as a varlen batch of B equal sequences: the split launch's plan
    (varlen config and shape, unit table, split counts, reduce) on the chip planned for."""

    plan: LaunchPlan

    @property
    def config(self) -> FAConfig:
        return self.plan.config

    @property
    def shape(self) -> ProblemShape:
        return self.plan.shape

    @property
    def num_splits(self) -> int:
        """The most splits of any unit (the partials hold that many)."""
        return self.plan.num_splits

    @property
    def launch_splits(self) -> int | list[int]:
        """One count for every unit, or the count of each unit."""
        return self.plan.split.launch_splits

    def workspace_bytes(self) -> int:
        """The launch's GM workspace: slot rings of its blocks, then the partial O and LSE."""
        return self.plan.workspace_bytes


def plan_dense_split(config: FAConfig, batch: int, s0: int, s1: int, heads: int, kv_heads: int,
                     bounds: tuple[int, int] | None, soc: str | SocSpec, *, scale: float,
                     num_splits: int | list[int] = 0, softcap: float = 0.0,
                     alibi: torch.Tensor | None = None) -> DenseSplit | None:
    """The one split decision of the dense calls and InfiniOp: split when told (`num_splits` > 1,
    or one count per unit), or (0) when the timing model's estimate of the balanced per-unit split
    (reduce included, `splitkv.plan_splits`) beats the unsplit launch; None to run the dense
    kernel unsplit (also when the varlen window cannot say `bounds`)."""
    window = varlen_window(bounds, s0, s1)
    if window is None:
        return None
    soc = get_soc(soc)
    vconfig, vshape, table_of = dense_as_varlen(dataclasses.replace(config, masked=False), batch, s0, s1, heads,
                                                kv_heads, window)
    split = plan_varlen(vconfig, vshape, table_of, num_splits, soc.cube_cores)
    if split is None or split.num_splits == 1:
        return None
    return DenseSplit(plan_split(split, vshape, soc, scale=scale, softcap=softcap, alibi=alibi))


def run_dense_split(split: DenseSplit, q, k, v, *, return_lse: bool, backend: str, out=None,
                    workspace: torch.Tensor | None = None, stream=None, alibi: torch.Tensor | None = None):
    """Launch a planned split on [B, S*, N, D] tensors; returns (out [B,S0,N,D], lse [B,N,S0] or None).

    `out` (contiguous, written in place) and `workspace` (at least `split.workspace_bytes()`,
    holding the slot rings and the partials) are the caller's when given."""
    batch, s0, heads, head = q.shape
    s1, kv_heads = k.shape[1], k.shape[2]
    if out is None:
        out = torch.empty((batch, s0, heads, head), dtype=TORCH_DTYPES[split.config.out_dtype], device=q.device)
    lse = torch.full((heads, batch * s0), math.inf, device=q.device) if return_lse else None
    tensors = {"q": q.reshape(batch * s0, heads, head).contiguous(),
               "k": k.reshape(batch * s1, kv_heads, head).contiguous(),
               "v": v.reshape(batch * s1, kv_heads, head).contiguous(),
               "o": out.view(batch * s0, heads, head), "lse": lse, "block_table": None, "alibi_slopes": alibi}
    dispatch.launch_on(backend, split.plan, tensors, workspace=workspace, stream=stream)
    dense_lse = lse.reshape(heads, batch, s0).permute(1, 0, 2).contiguous() if return_lse else None
    return out.view(batch, s0, heads, head), dense_lse


def dense_split(config: FAConfig, q, k, v, *, scale: float, bounds: tuple[int, int] | None, return_lse: bool,
                backend: str, soc: str | SocSpec, num_splits: int = 0, softcap: float = 0.0,
                alibi: torch.Tensor | None = None):
    """Run the dense problem split-KV when the timing model says a split helps (`num_splits` 0)
    or as told (> 1); returns (out [B,S0,N,D], lse [B,N,S0] or None), or None to run unsplit.
    (`softcap` and the ALiBi slopes `alibi` go to a config with those switches.)"""
    batch, s0, heads, _ = q.shape
    split = plan_dense_split(config, batch, s0, k.shape[1], heads, k.shape[2], bounds, soc, scale=scale,
                             num_splits=num_splits, softcap=softcap, alibi=alibi)
    if split is None:
        return None
    return run_dense_split(split, q, k, v, return_lse=return_lse, backend=backend, alibi=alibi)
