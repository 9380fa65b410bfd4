"""Split-KV behind the InfiniOp interface (`ptofa.attention.infiniop`): the descriptor plans the dense calls'
split, its workspace size is the slot rings plus the partials, and the split launch keeps its slot
rings and partials in the caller's buffer. The split count is forced (the timing model's choice is
checked in test_splitkv); outputs are checked against `reference_fa` with the accuracy rule."""

from __future__ import annotations

import math

import pytest
import torch

from ptofa.kernels import argspec

from ptofa.attention import infiniop

from ptofa.launch import npu

from ptofa.launch import dispatch

from ptofa.launch import plan as launch_plan

from ptofa.launch import splitkv
from ptofa.attention.infiniop import Status, TensorDescriptor
from ptofa.attention.core import run_dense_split
from ptofa.pipeline import ConfigError, workspace_bytes
from ptofa.reference import check_accuracy, check_lse, reference_fa

from fake_npu import install_fake_npu

B, S0, S1, HEADS, KV_HEADS, D = 1, 64, 640, 4, 2, 64
SPLITS = 3
CORES = 24


def _rand(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.float16)


def _qkv(kv_heads: int = KV_HEADS, s0: int = S0):
    return _rand(B, s0, HEADS, D, seed=1), _rand(B, S1, kv_heads, D, seed=2), _rand(B, S1, kv_heads, D, seed=3)


def causal_mask(s0: int, s1: int) -> torch.Tensor:
    """InfiniOp's causal mask: True = masked out, bottom-right aligned."""
    return torch.tril(torch.ones(s0, s1), diagonal=-1).flip(dims=[-2, -1]).bool()


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list:
    """Force the timing model's split choice to SPLITS and record the serving launches (split count, shape)."""
    monkeypatch.setattr(splitkv, "plan_splits", lambda config, table, *a, **kw: [SPLITS] * int(table.shape[0]))
    calls = []
    real = dispatch.launch_on

    def spy(backend, plan, tensors, **kw):
        if plan.split is not None:
            calls.append((plan.split.launch_splits, plan.shape.window, kw["workspace"]))
        return real(backend, plan, tensors, **kw)

    monkeypatch.setattr(dispatch, "launch_on", spy)
    return calls


def _descriptor(out, q, k, v, mask=None, backend: str = "sim") -> infiniop.FlashAttentionDescriptor:
    status, desc = infiniop.create_descriptor(*(None if t is None else TensorDescriptor.of(t)
                                                for t in (out, q, k, v, mask)), backend=backend)
    assert status == Status.SUCCESS, infiniop.last_error()
    return desc


def _expected_size(desc, kv_heads: int = KV_HEADS) -> tuple[int, int]:
    """(slot bytes, partial bytes) from the shapes: one block per (head, Q block, split) entry
    up to the cores, fp32 partial O [S0, N, D] and LSE [N, S0] per split."""
    blocks = min(B * HEADS * -(-S0 // 128) * SPLITS, CORES)
    return desc.config.gm_slot_bytes_per_block * blocks, 4 * SPLITS * B * S0 * HEADS * (D + 1)


def _partial_lse(workspace: torch.Tensor, slot_bytes: int) -> torch.Tensor:
    """The partial LSE [N, B*S0] of every split the split kernel left in the caller's buffer (split i
    at i * B*S0*N*(D+1) floats: O_i [B*S0, N, D], then LSE_i), combined."""
    floats = workspace.view(torch.uint8)[slot_bytes:].view(torch.float32)
    per_split, o_elems = B * S0 * HEADS * (D + 1), B * S0 * HEADS * D
    partial = floats[:SPLITS * per_split].reshape(SPLITS, per_split)[:, o_elems:].reshape(SPLITS, HEADS, B, S0)
    return torch.logsumexp(partial, 0).permute(1, 0, 2)


@pytest.mark.parametrize("kv_heads", [KV_HEADS, HEADS])
def test_split_descriptor_workspace_and_run(launched, kv_heads) -> None:
    q, k, v = _qkv(kv_heads)
    out = torch.full_like(q, math.nan)
    desc = _descriptor(out, q, k, v)
    assert desc.split is not None and desc.split.num_splits == SPLITS
    slot_bytes, partial_bytes = _expected_size(desc, kv_heads)
    status, size = infiniop.get_workspace_size(desc)
    assert status == Status.SUCCESS and size == slot_bytes + partial_bytes
    assert workspace_bytes(desc.config, desc.shape, desc.block_dim) <= size  # the unsplit fallback fits too
    workspace = torch.full((size // 4,), math.nan)  # poisoned: a partial read before written would show in out
    assert infiniop.flash_attention(desc, workspace, size, out, q, k, v) == Status.SUCCESS, infiniop.last_error()
    assert [(n, w) for n, w, _ in launched] == [(SPLITS, (-1, -1))]
    assert launched[0][2].data_ptr() == workspace.data_ptr()
    ref = reference_fa(q, k, v, 1 / math.sqrt(D))
    assert check_accuracy(out, ref.out32, ref.out_low).passed
    assert check_lse(_partial_lse(workspace, slot_bytes), ref).passed  # the partials are in the caller's buffer


def test_split_equals_unsplit_within_the_rule(launched, monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = _qkv()
    split_out, whole_out = torch.empty_like(q), torch.empty_like(q)
    desc = _descriptor(split_out, q, k, v)
    assert infiniop.flash_attention(desc, torch.empty(desc.workspace_size, dtype=torch.uint8), desc.workspace_size,
                                    split_out, q, k, v) == Status.SUCCESS
    monkeypatch.setattr(splitkv, "plan_splits", lambda config, table, *a, **kw: [1] * int(table.shape[0]))
    whole = _descriptor(whole_out, q, k, v)
    assert whole.split is None and whole.workspace_size == whole.config.gm_slot_bytes_per_block * whole.block_dim
    assert infiniop.flash_attention(whole, torch.empty(whole.workspace_size, dtype=torch.uint8),
                                    whole.workspace_size, whole_out, q, k, v) == Status.SUCCESS
    assert len(launched) == 1  # the unsplit descriptor ran the dense kernel
    ref = reference_fa(q, k, v, 1 / math.sqrt(D))
    assert check_accuracy(split_out, ref.out32, ref.out_low).passed
    assert check_accuracy(split_out, whole_out.float(), ref.out_low).passed


def test_one_byte_short_is_insufficient_and_writes_nothing(launched) -> None:
    q, k, v = _qkv()
    out = torch.full_like(q, math.nan)
    desc = _descriptor(out, q, k, v)
    slot_bytes, partial_bytes = _expected_size(desc)
    size = desc.workspace_size
    workspace = torch.full((size,), 0xA5, dtype=torch.uint8)
    assert infiniop.flash_attention(desc, workspace, size - 1, out, q, k, v) == Status.INSUFFICIENT_WORKSPACE
    blocks = slot_bytes // desc.config.gm_slot_bytes_per_block
    assert infiniop.last_error() == (f"workspace_size: {size - 1} bytes < {size} needed "
                                     f"({desc.config.gm_slot_bytes_per_block} bytes of slot rings x {blocks} blocks "
                                     f"+ {partial_bytes} bytes of partial O and LSE for num_splits={SPLITS})")
    assert out.isnan().all() and (workspace == 0xA5).all() and launched == []


def test_a_truncated_buffer_is_caught(launched, monkeypatch: pytest.MonkeyPatch) -> None:
    """The partials are addressed in the buffer given: with 16 bytes cut off it, the launch's own
    size check fails; with that check told the cut size, the simulator's GM bounds catch the
    last partial LSE store."""
    q, k, v = _qkv()
    out = torch.empty_like(q)
    desc = _descriptor(out, q, k, v)
    full = desc.workspace_size
    desc.workspace_size = full - 16
    workspace = torch.empty(full - 16, dtype=torch.uint8)
    assert infiniop.flash_attention(desc, workspace, full - 16, out, q, k, v) == Status.INTERNAL_ERROR
    assert f"workspace: {full - 16} bytes, but split-KV with num_splits={SPLITS}" in infiniop.last_error()
    monkeypatch.setattr(launch_plan.LaunchPlan, "check_workspace", lambda self, have: None)
    assert infiniop.flash_attention(desc, workspace, full - 16, out, q, k, v) == Status.INTERNAL_ERROR
    error = infiniop.last_error()
    assert "GM access out of range" in error and f"of a {full - 16}-byte buffer" in error


def test_masks_split_or_fall_back(launched) -> None:
    """A causal mask runs the planned split count with its window; padded keys, and a top-left
    causal mask (negative right bound), run the unsplit kernel inside the same workspace."""
    q, k, v = _qkv()
    mask = causal_mask(S0, S1)
    out = torch.full_like(q, math.nan)
    desc = _descriptor(out, q, k, v, mask)
    assert desc.split is not None and desc.split.shape.window == (-1, -1)
    size = desc.workspace_size
    workspace = torch.full((size,), 0xA5, dtype=torch.uint8)
    assert infiniop.flash_attention(desc, workspace, size, out, q, k, v, mask) == Status.SUCCESS, infiniop.last_error()
    assert [(n, w) for n, w, _ in launched] == [(SPLITS, (S1 - 1, 0))]
    assert infiniop._call_split(desc, (S1 - 1, 0), None).workspace_bytes() <= size
    ref = reference_fa(q, k, v, 1 / math.sqrt(D), window=(-1, 0))
    assert check_accuracy(out, ref.out32, ref.out_low).passed

    slots = workspace_bytes(desc.config, desc.shape, desc.block_dim)
    assert slots < size
    padded = mask.clone()
    padded[:, 500:] = True
    workspace.fill_(0xA5)
    out.fill_(math.nan)
    assert infiniop.flash_attention(desc, workspace, size, out, q, k, v, padded) == Status.SUCCESS
    assert len(launched) == 1 and (workspace[slots:] == 0xA5).all()  # the dense kernel, in the first `slots` bytes
    ref = reference_fa(q, k, v, 1 / math.sqrt(D), window=(-1, 0),
                       key_padding_mask=(torch.arange(S1) < 500).to(torch.int8))
    assert check_accuracy(out, ref.out32, ref.out_low).passed

    top_left = ~(torch.arange(S1)[None] <= torch.arange(S0)[:, None])
    assert infiniop.flash_attention(desc, workspace, size, out, q, k, v, top_left) == Status.SUCCESS
    assert len(launched) == 1
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), attn_mask=~top_left,
        enable_gqa=True).transpose(1, 2)
    low = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=~top_left, enable_gqa=True).transpose(1, 2)
    assert check_accuracy(out, sdpa, low.float()).passed


class _Stream:
    _as_parameter_ = 0x51DE


def test_npu_launches_main_and_reduce_on_the_callers_workspace(launched, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NPU path on the recording fake launcher: main and reduce get the caller's workspace,
    its partials region, the caller's out and stream."""
    calls = install_fake_npu(monkeypatch, npu, CORES)
    monkeypatch.setattr(npu, "cube_core_count", lambda: CORES)
    monkeypatch.setattr(infiniop, "device_type_of", lambda backend: "cpu")
    q, k, v = _qkv()
    out = torch.empty_like(q)
    desc = _descriptor(out, q, k, v, backend="npu")
    assert desc.backend == "npu" and desc.split.num_splits == SPLITS
    slot_bytes, partial_bytes = _expected_size(desc)
    workspace = torch.empty(desc.workspace_size + 64, dtype=torch.uint8)
    assert infiniop.flash_attention(desc, workspace, desc.workspace_size, out, q, k, v,
                                    stream=_Stream()) == Status.SUCCESS, infiniop.last_error()
    main, reduce = calls
    assert (main.entry, reduce.entry) == (argspec.ENTRY_NAME, argspec.REDUCE_ENTRY_NAME)
    assert main.values["slots"] == workspace.data_ptr()
    assert main.values["partials"] == reduce.values["partials"] == workspace.data_ptr() + slot_bytes
    assert main.values["o"] == reduce.values["o"] == out.data_ptr()
    assert main.stream == reduce.stream == _Stream._as_parameter_
    assert reduce.values["num_units"] == B * HEADS * -(-S0 // 128) and main.block_dim == slot_bytes // desc.config.gm_slot_bytes_per_block
    assert infiniop.flash_attention(desc, workspace, desc.workspace_size - 1, out, q, k, v) == \
        Status.INSUFFICIENT_WORKSPACE and len(calls) == 2
    with pytest.raises(ConfigError, match=f"workspace: {desc.workspace_size - 1} bytes, but num_splits={SPLITS}"):
        run_dense_split(desc.split, q, k, v, return_lse=False, backend="npu",
                        workspace=workspace[:desc.workspace_size - 1])
    assert len(calls) == 2  # the launch's own check refuses a short buffer before enqueueing
