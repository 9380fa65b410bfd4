"""Split-KV for the dense calls: a dense problem whose units leave cores idle (fewer units than
cube cores, or an incomplete last wave) runs as a varlen batch of B equal sequences through the
serving split path (`ptofa.serving`), so the KV range of some units (all of them, or those of
the last wave) is spread over several cores and combined by the reduce kernel."""

from __future__ import annotations

import dataclasses
import math

import torch

from ptofa.attention import tune_window
from ptofa.backend import TORCH_DTYPES
from ptofa.pipeline import FAConfig
from ptofa.sim.socspec import get_soc
from ptofa.varlen import unit_table, varlen_shape


def varlen_window(bounds: tuple[int, int] | None, s0: int, s1: int) -> tuple[int, int] | None:
    """The varlen kernel's window for dense kernel bounds (`attention.tune_window`), or None when
    it cannot say it: the varlen window reads -1 as unbounded, so a negative right bound (torch's
    top-left causal with S0 < S1) stays on the dense kernel."""
    if bounds is not None and bounds[1] < 0:
        return None
    return tune_window(bounds, s0, s1)


def dense_split(config: FAConfig, q, k, v, *, scale: float, bounds: tuple[int, int] | None, return_lse: bool,
                backend: str, cores: int, num_splits: int = 0):
    """Run the dense problem split-KV when the timing model's estimate of the balanced per-unit
    split (reduce included, `splitkv.plan_splits`) beats the unsplit launch (`num_splits` 0), or
    with every unit split as told (> 1); returns (out [B,S0,N,D], lse [B,N,S0] or None), or None
    to run unsplit."""
    from ptofa.serving import _launch  # serving imports attention, which calls here
    from ptofa.splitkv import plan_varlen

    batch, s0, heads, head = q.shape
    s1, kv_heads = k.shape[1], k.shape[2]
    window = varlen_window(bounds, s0, s1)
    if window is None:
        return None
    config = dataclasses.replace(config, varlen=True, masked=window != (-1, -1))
    q_lens, k_lens = [s0] * batch, [s1] * batch
    shape = varlen_shape(q_lens, k_lens, heads, kv_heads, window)
    shape.check(config)

    def table_of(c, n):
        return unit_table(c, q_lens, k_lens, heads, window, n)

    if num_splits == 0:
        plan = plan_varlen(config, shape, table_of, 0, cores)
        if plan is None or plan.num_splits == 1:
            return None
        num_splits = plan.num_splits if len(set(plan.unit_splits)) == 1 else plan.unit_splits
    out = torch.empty((batch * s0, heads, head), dtype=TORCH_DTYPES[config.out_dtype], device=q.device)
    lse = torch.full((heads, batch * s0), math.inf, device=q.device) if return_lse else None
    _launch(backend, config, shape, table_of, q.reshape(batch * s0, heads, head).contiguous(),
            k.reshape(batch * s1, kv_heads, head).contiguous(), v.reshape(batch * s1, kv_heads, head).contiguous(),
            out, scale, num_splits, lse=lse)
    dense_lse = lse.reshape(heads, batch, s0).permute(1, 0, 2).contiguous() if return_lse else None
    return out.view(batch, s0, heads, head), dense_lse


def sim_cores() -> int:
    """Cube cores of the simulated SoC (the one the serving sim launch plans for)."""
    from ptofa.serving import SIM_SOC
    return get_soc(SIM_SOC).cube_cores
