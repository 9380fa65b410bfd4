"""Split-KV for the dense calls (`ptofa.launch.splitkv.plan_dense_split`, `ptofa.attention.core.run_dense_split`): a few-unit, long-KV problem with an automatic
config runs as a varlen batch through the split path; checked against the reference and the unsplit run."""

from __future__ import annotations

import pytest
import torch

import ptofa
from ptofa.kernels import argspec
from ptofa.launch import npu
from ptofa.launch import dispatch
from ptofa.launch import splitkv
from ptofa.attention.core import auto_config
from ptofa.launch.splitkv import varlen_window
from ptofa.reference import check_accuracy, check_lse, reference_fa
from test_serving_npu import CORES, calls, launches  # noqa: F401 (fixtures)


REAL_PLAN_SPLITS = splitkv.plan_splits


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.float16)


@pytest.fixture
def splits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Force the timing model's choice to `splits[0]` and record the split counts launched."""
    chosen, launched = [3], []
    monkeypatch.setattr(splitkv, "plan_splits", lambda config, table, *a, **kw: [chosen[0]] * int(table.shape[0]))
    real = dispatch.launch_on

    def spy(backend, plan, tensors, **kw):
        if plan.split is not None:
            launched.append(plan.split.launch_splits)
        return real(backend, plan, tensors, **kw)

    monkeypatch.setattr(dispatch, "launch_on", spy)
    chosen.append(launched)
    return chosen


def _qkv(s0: int, s1: int, heads: int = 4, kv_heads: int = 2):
    return _rand(1, s0, heads, 64, seed=1), _rand(1, s1, kv_heads, 64, seed=2), _rand(1, s1, kv_heads, 64, seed=3)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_split_matches_reference_and_unsplit(splits, causal) -> None:
    q, k, v = _qkv(64, 640)
    out, lse = ptofa.flash_attn_func(q, k, v, causal=causal, return_lse=True, backend="sim")
    assert splits[1] == [3]
    ref = reference_fa(q, k, v, 0.125, window=(-1, 0) if causal else (-1, -1))
    assert out.shape == q.shape and lse.shape == (1, 4, 64)
    assert check_accuracy(out, ref.out32, ref.out_low).passed
    assert check_lse(lse, ref).passed
    splits[0] = 1
    out1, lse1 = ptofa.flash_attn_func(q, k, v, causal=causal, return_lse=True, backend="sim")
    assert splits[1] == [3]  # split 1: the dense kernel ran, not the varlen launch
    assert check_accuracy(out, out1.float(), ref.out_low).passed
    assert torch.allclose(lse, lse1, atol=1e-3)


def _sdpa_ref(q, k, v, causal: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                            enable_gqa=True)


@pytest.mark.parametrize("s0, s1, splits_run", [(256, 128, [3]), (64, 640, [])])
def test_sdpa_top_left_causal(splits, s0, s1, splits_run) -> None:
    """S0 > S1 splits (right bound S0 - S1 >= 0); S0 < S1 has a negative right bound, which the
    varlen window cannot say, so it runs the dense kernel."""
    q, k, v = (t.transpose(1, 2) for t in _qkv(s0, s1))
    out = ptofa.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, backend="sim")
    assert splits[1] == splits_run
    ref32 = _sdpa_ref(q, k, v, True)
    ref16 = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).float()
    assert check_accuracy(out, ref32, ref16).passed


def test_explicit_config_and_many_units_stay_unsplit(splits, monkeypatch) -> None:
    """An explicit config keeps the dense kernel; so does a problem with a unit per core already
    (the timing model's own planner: equal units filling the cores stay whole)."""
    q, k, v = _qkv(64, 640)
    ptofa.flash_attn_func(q, k, v, backend="sim", config=auto_config(64, s1=640))
    monkeypatch.setattr(splitkv, "plan_splits", REAL_PLAN_SPLITS)
    q, k, v = _qkv(64, 256, heads=24, kv_heads=24)
    ptofa.flash_attn_func(q, k, v, backend="sim")
    assert splits[1] == []


def test_varlen_window_of_dense_bounds() -> None:
    assert varlen_window(None, 64, 640) == (-1, -1)
    assert varlen_window((704, 0), 64, 640) == (-1, 0)
    assert varlen_window((5, 704), 64, 640) == (5, -1)
    assert varlen_window((704, -576), 64, 640) is None


def test_npu_dense_split_launches_forward_then_reduce(splits, calls, launches, monkeypatch) -> None:
    """The NPU path (recording fake launcher, test_serving_npu): one dense call, main + reduce."""
    monkeypatch.setattr(npu, "cube_core_count", lambda: CORES)
    q, k, v = _qkv(64, 640)
    out, lse = ptofa.flash_attn_func(q, k, v, causal=True, return_lse=True, backend="npu")
    main, reduce = calls
    (launch,) = launches
    assert (main.entry, reduce.entry) == (argspec.ENTRY_NAME, argspec.REDUCE_ENTRY_NAME)
    assert launch.plan.config.split_kv and launch.plan.config.varlen and launch.plan.num_splits == 3
    assert set(reduce.units[:, 3].tolist()) == {3} and main.stream == reduce.stream
    assert out.shape == q.shape and lse.shape == (1, 4, 64)
