"""The attention calls on torch tensors: attend, flash_attn_func, scaled_dot_product_attention, infiniop.

Each entry point runs the kernel on the simulator on small ragged shapes (S0 = 70,
S1 = 300, 4 query heads on 2 KV heads, D 64 / 128, fp16 / bf16) and is checked against
its own library's semantics with the FlashAttention accuracy rule of `ptofa.reference`:
`flash_attn_func` against `reference_fa` (flash-attn's bottom-right causal and windows),
`scaled_dot_product_attention` against `torch.nn.functional.scaled_dot_product_attention`
itself (fp32 on the same inputs; torch's math backend in the input dtype for the
tolerance), `ptofa.attention.infiniop` against `reference_fa` with InfiniOp's layout and mask.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import ptofa
from ptofa.attention import core as attention
from ptofa.attention import infiniop
from ptofa.launch import npu
from ptofa.attention.core import attend, auto_config
from ptofa.launch.base import BackendUnavailable
from ptofa.attention.functional import flash_attn_func, scaled_dot_product_attention
from ptofa.attention.infiniop import Status, TensorDescriptor
from ptofa.pipeline import ConfigError, FAConfig
from ptofa.reference import check_accuracy, check_lse, reference_fa
from ptofa.kernels.builtin_mods.window import window_mods

S0, S1, HEADS, KV_HEADS = 70, 300, 4, 2
UNAVAILABLE = "npu backend: torch_npu is not installed (on an Ascend host with CANN: pip install '.[npu]')"


@pytest.fixture(autouse=True)
def without_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    """`auto` means the simulator here, whatever the machine has."""
    monkeypatch.setattr(npu, "npu_available", lambda: (False, UNAVAILABLE))


def bsnd(batch: int, s0: int, s1: int, head: int, dtype: torch.dtype, heads: int = HEADS, kv_heads: int = KV_HEADS,
         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, s0, heads, head, generator=g).to(dtype)
    k = torch.randn(batch, s1, kv_heads, head, generator=g).to(dtype)
    v = torch.randn(batch, s1, kv_heads, head, generator=g).to(dtype)
    return q, k, v


def lengths_mask(lengths: list[int], s1: int) -> torch.Tensor:
    return torch.arange(s1).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # [B, S1] bool, True = key takes part


def assert_close_to(out: torch.Tensor, ref, lse: torch.Tensor | None = None) -> None:
    accuracy = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert accuracy.passed, accuracy.summary()
    if lse is not None:
        lse_accuracy = check_lse(lse, ref)
        assert lse_accuracy.passed, lse_accuracy.message


# --------------------------------------------------------------------------------------
# flash_attn_func: flash-attn's conventions, against reference_fa
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("head, dtype, s0, s1, causal, window, lengths, out_dtype", [
    (64, torch.float16, S0, S1, True, (-1, -1), [123, 0], None),  # bottom-right causal, a batch without keys
    (128, torch.bfloat16, S0, S1, False, (40, 8), None, torch.float32),  # sliding window, fp32 out
    (64, torch.bfloat16, S1, S0, True, (-1, -1), None, None),  # S0 > S1: the first S0 - S1 rows see no key
    (128, torch.float16, S0, S1, False, (-1, -1), [300, 17], None),  # key padding only
])
def test_flash_attn_func_matches_reference(head, dtype, s0, s1, causal, window, lengths, out_dtype) -> None:
    batch = 2
    q, k, v = bsnd(batch, s0, s1, head, dtype)
    mask = None if lengths is None else lengths_mask(lengths, s1)
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window, key_padding_mask=mask, return_lse=True,
                               out_dtype=out_dtype, backend="sim")
    assert out.shape == q.shape and out.dtype == (out_dtype or dtype)
    assert lse.shape == (batch, HEADS, s0) and lse.dtype == torch.float32
    expected_window = (window[0], 0) if causal else window
    ref = reference_fa(q, k, v, 1 / math.sqrt(head), expected_window, mask, out_dtype)
    assert_close_to(out, ref, lse)


def test_flash_attn_func_returns_out_alone_and_takes_a_scale() -> None:
    q, k, v = bsnd(1, S0, S1, 64, torch.float16)
    out = flash_attn_func(q, k, v, softmax_scale=0.05, backend="sim")
    assert isinstance(out, torch.Tensor)
    assert_close_to(out, reference_fa(q, k, v, 0.05))


def test_flash_attn_func_lse_is_not_differentiable() -> None:
    q, k, v = bsnd(1, S0, S1, 64, torch.float16)
    q.requires_grad_(True)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True, backend="sim")
    assert out.requires_grad and not lse.requires_grad


# --------------------------------------------------------------------------------------
# scaled_dot_product_attention: torch's conventions (top-left is_causal), against torch
# --------------------------------------------------------------------------------------


def torch_sdpa_reference(query, key, value, attn_mask, is_causal, scale, enable_gqa):
    """Reference(out32, out_low) in BNSD from torch's SDPA: fp32 on the inputs, and torch's math
    backend in the input dtype (each step rounded to it) for the tolerance."""
    from ptofa.reference import Reference

    kw = dict(attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    out32 = F.scaled_dot_product_attention(query.float(), key.float(), value.float(), **kw)
    with sdpa_kernel(SDPBackend.MATH):
        out_low = F.scaled_dot_product_attention(query, key, value, **kw).float()
    empty = torch.empty(0)
    return Reference(out32.nan_to_num(0.0), out_low.nan_to_num(0.0), empty, empty)  # fully masked rows: 0


@pytest.mark.parametrize("head, dtype, s0, s1, is_causal, lengths, mask_batch", [
    (64, torch.float16, S0, S1, True, None, None),  # top-left causal with S1 > S0: window right bound S0 - S1 < 0
    (128, torch.bfloat16, S1, S0, True, None, None),  # S0 > S1: right bound S0 - S1 > 0
    (64, torch.bfloat16, S0, S1, False, [250, 9], 2),  # key padding [B, 1, 1, S1]
    (128, torch.float16, S0, S1, False, [40, 0], 2),  # a batch without keys: rows of zeros, as torch
    (64, torch.float16, S0, S0 + 1, True, None, None),  # right bound -1 (not "unbounded")
    (64, torch.float16, S0, S1, False, [S1 - 3], 1),  # a mask shared by the batch: [1, 1, 1, S1]
])
def test_sdpa_matches_torch(head, dtype, s0, s1, is_causal, lengths, mask_batch) -> None:
    batch = 2
    q, k, v = (t.transpose(1, 2) for t in bsnd(batch, s0, s1, head, dtype, seed=3))  # BNSD views
    attn_mask = None
    if lengths is not None:
        attn_mask = lengths_mask(lengths, s1).reshape(mask_batch, 1, 1, s1)
    out = scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=True,
                                       backend="sim")
    assert out.shape == q.shape and out.dtype == dtype
    assert_close_to(out, torch_sdpa_reference(q, k, v, attn_mask, is_causal, None, True))


def test_sdpa_equal_heads_and_scale() -> None:
    q, k, v = (t.transpose(1, 2) for t in bsnd(1, S0, S1, 64, torch.float16, heads=2, kv_heads=2))
    out = scaled_dot_product_attention(q, k, v, scale=0.3, backend="sim")
    assert_close_to(out, torch_sdpa_reference(q, k, v, None, False, 0.3, False))


# --------------------------------------------------------------------------------------
# attend, configs, the kernel cache, backends
# --------------------------------------------------------------------------------------


def test_attend_with_window_padding_lse_and_a_given_config() -> None:
    q, k, v = bsnd(2, S0, S1, 64, torch.float16)
    mask = lengths_mask([200, 290], S1).to(torch.int8)
    config = FAConfig(head=64, tile_s1=256, qk_preload=3, mods=window_mods(), key_padding=True, lse=True)
    out, lse = attend(q, k, v, scale=0.125, window=(30, 0), key_padding_mask=mask, return_lse=True, config=config,
                      backend="sim", block_dim=3)
    assert_close_to(out, reference_fa(q, k, v, 0.125, (30, 0), mask), lse)
    out2, none = attend(q, k, v, scale=0.125, config=config, backend="sim")  # a superset config runs a plain call
    assert none is None
    assert_close_to(out2, reference_fa(q, k, v, 0.125))


def test_auto_config_follows_the_call() -> None:
    short = auto_config(64, "bf16", s1=300, masked=True, lse=True)
    assert (short.tile_s1, short.qk_preload, short.in_dtype, short.out_dtype) == (128, 2, "bf16", "bf16")
    assert short.narrowing and short.lse and not short.key_padding
    long = auto_config(128, "f16", s1=4096, out_dtype="f32", key_padding=True)
    assert (long.tile_s1, long.qk_preload, long.out_dtype, long.key_padding) == (256, 3, "f32", True)


def test_npu_backend_is_unavailable_here() -> None:
    q, k, v = bsnd(1, S0, S1, 64, torch.float16)
    with pytest.raises(BackendUnavailable) as raised:
        flash_attn_func(q, k, v, backend="npu")
    assert str(raised.value) == UNAVAILABLE
    with pytest.raises(BackendUnavailable, match="torch_npu is not installed"):
        attend(q, k, v, scale=0.1, backend="npu")
    assert attention.resolve_backend("auto") == "sim"


Q, K, V = bsnd(2, S0, S1, 64, torch.float16)
QB, KB, VB = (t.transpose(1, 2) for t in (Q, K, V))  # BNSD for the SDPA-shaped call


@pytest.mark.parametrize("call, error, message", [
    (lambda: attend(Q[0], K, V, scale=0.1), ValueError,
     "rank: q, k and v must be 4-D [B, S, N, D]; got q (70, 4, 64), k (2, 300, 2, 64), v (2, 300, 2, 64)"),
    (lambda: attend(Q, K[:1], V[:1], scale=0.1), ValueError, "batch: q has B=2 but k/v have B=1"),
    (lambda: attend(Q, K[..., :32], V[..., :32], scale=0.1), ValueError, "head_dim: q has D=64 but k has D=32"),
    (lambda: attend(Q, K, V[:, :299], scale=0.1), ValueError,
     "shape: k (2, 300, 2, 64) and v (2, 299, 2, 64) must have the same [B, S, N] (only the head dims may differ)"),
    (lambda: attend(Q[:, :, :3], K[:, :, :2], V[:, :, :2], scale=0.1), ValueError,
     "grouped heads: q heads=3 must be a multiple of k/v heads=2"),
    (lambda: attend(Q, K.bfloat16(), V, scale=0.1), ValueError,
     "dtype: q, k and v must share one dtype; got torch.float16, torch.bfloat16, torch.float16"),
    (lambda: attend(Q.float(), K.float(), V.float(), scale=0.1), ValueError,
     "dtype: torch.float32 is not supported; q, k and v must be torch.float16 or torch.bfloat16"),
    (lambda: attend(*bsnd(1, 8, 8, 264, torch.float16), scale=0.1), ConfigError,
     "head dim: head_dim=264 must be an int in 1..256"),
    (lambda: attend(Q, K, V, scale=0.1, window=(-2, 0)), ValueError,
     "window: (-2, 0) must be (left, right) with each an int >= -1 (-1 = unbounded)"),
    (lambda: flash_attn_func(Q, K, V, window_size=(3,)), ValueError, "window_size: (3,) must be (left, right)"),
    (lambda: attend(Q, K, V, scale=0.1, key_padding_mask=torch.ones(2, 301, dtype=torch.bool)), ConfigError,
     "key padding mask: shape (2, 301) must be [B, S1] = [2, 300] or [S1] = [300]"),
    (lambda: attend(Q, K, V, scale=0.1, key_padding_mask=torch.ones(2, 300)), ConfigError,
     "key padding mask: dtype torch.float32 must be bool or an integer type"),
    (lambda: attend(Q, K, V, scale=float("nan")), ValueError, "scale: nan must be a finite number"),
    (lambda: attend(Q, K, V, scale=0.1, out_dtype=torch.float64), ValueError,
     "out_dtype: dtype torch.float64 is not supported"),
    (lambda: attend(Q, K, V, scale=0.1, backend="gpu"), ValueError,
     "backend: 'gpu' must be one of ('auto', 'sim', 'npu')"),
    (lambda: attend(Q, K, V, scale=0.1, block_dim=0), ValueError, "block_dim: 0 must be an int >= 1"),
    (lambda: attend(Q, K, V, scale=0.1, config=FAConfig(head=128)), ConfigError,
     "config: head=128 but q/k/v run on the kernel width kernel_head(D, Dv) = 64"),
    (lambda: attend(Q, K, V, scale=0.1, config=FAConfig(head=64, in_dtype="bf16")), ConfigError,
     "config: in_dtype='bf16' but q/k/v are torch.float16"),
    (lambda: attend(Q, K, V, scale=0.1, window=(-1, 0), config=FAConfig(head=64)), ConfigError,
     "config: a window / causal mask needs the window mod in mods (mods=(WINDOW,) from ptofa.kernels.builtin_mods.window), "
     "the given config has mods=()"),
    (lambda: attend(Q, K, V, scale=0.1, return_lse=True, config=FAConfig(head=64)), ConfigError,
     "config: return_lse=True needs lse=True, the given config has lse=False"),
    (lambda: attend(Q, K, V, scale=0.1, out_dtype=torch.float32, config=FAConfig(head=64)), ConfigError,
     "config: out_dtype='f16' but out_dtype=torch.float32 was asked for"),
    (lambda: attend(Q, K, V, scale=0.1, config=FAConfig(head=64, varlen=True)), ConfigError,
     "config: varlen=True kernels take packed sequences"),
    (lambda: scaled_dot_product_attention(QB, KB, VB, attn_mask=torch.zeros(2, 1, 1, 300), enable_gqa=True),
     ValueError, "attn_mask: only a bool key-padding mask broadcastable as [B, 1, 1, S1] = [2, 1, 1, 300] is "
     "supported (True = the key takes part); got a torch.float32 mask of shape (2, 1, 1, 300)"),
    (lambda: scaled_dot_product_attention(QB, KB, VB, attn_mask=torch.ones(2, 1, 70, 300, dtype=torch.bool),
                                          enable_gqa=True), ValueError,
     "attn_mask: only a bool key-padding mask broadcastable as [B, 1, 1, S1] = [2, 1, 1, 300] is supported "
     "(True = the key takes part); got shape (2, 1, 70, 300)"),
    (lambda: scaled_dot_product_attention(QB, KB, VB, attn_mask=torch.ones(300, dtype=torch.bool), is_causal=True,
                                          enable_gqa=True), ValueError,
     "attn_mask and is_causal: torch's scaled_dot_product_attention takes one or the other"),
    (lambda: scaled_dot_product_attention(QB, KB, VB, dropout_p=1.0), ValueError,
     "dropout_p: 1.0 must be a float in [0, 1)"),
    (lambda: scaled_dot_product_attention(QB, KB, VB), ValueError,
     "enable_gqa: query has 4 heads and key/value 2; pass enable_gqa=True for grouped-query attention"),
    (lambda: scaled_dot_product_attention(QB, KB, VB[:, :, :299], enable_gqa=True), ValueError,
     "shape: key (2, 2, 300, 64) and value (2, 2, 299, 64) must have the same [B, H, S]"),
    (lambda: scaled_dot_product_attention(Q[0], K, V), ValueError,
     "rank: query, key and value must be 4-D [B, H, S, E]; got query (70, 4, 64)"),
])
def test_bad_input_names_the_rule(call, error, message) -> None:
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_sim_backend_wants_cpu_tensors() -> None:
    q, k, v = (t.to("meta") for t in bsnd(1, S0, S1, 64, torch.float16))
    with pytest.raises(ValueError, match="device: the sim backend runs on CPU tensors; q is on meta"):
        attend(q, k, v, scale=0.1)


# --------------------------------------------------------------------------------------
# ptofa.attention.infiniop
# --------------------------------------------------------------------------------------


def infiniop_causal_mask(s0: int, s1: int) -> torch.Tensor:
    """InfiniOp's causal mask (its flash attention test): True = masked out, bottom-right aligned."""
    return torch.tril(torch.ones(s0, s1), diagonal=-1).flip(dims=[-2, -1]).bool()


def descriptors(*tensors):
    return [None if t is None else TensorDescriptor.of(t) for t in tensors]


def test_status_values_are_infinicores() -> None:
    assert {s.name: int(s) for s in Status} == {
        "SUCCESS": 0, "INTERNAL_ERROR": 1, "NOT_IMPLEMENTED": 2, "BAD_PARAM": 3, "NULL_POINTER": 4,
        "DEVICE_TYPE_NOT_SUPPORTED": 5, "DEVICE_NOT_FOUND": 6, "DEVICE_NOT_INITIALIZED": 7,
        "DEVICE_ARCHITECTURE_NOT_SUPPORTED": 8, "BAD_TENSOR_DTYPE": 10, "BAD_TENSOR_SHAPE": 11,
        "BAD_TENSOR_STRIDES": 12, "INSUFFICIENT_WORKSPACE": 13,
    }
    assert infiniop.DataType.F16 == 12 and infiniop.DataType.BF16 == 19 and infiniop.DataType.BOOL == 2


def test_infiniop_causal_padded_mask_without_batch_dim() -> None:
    """InfiniOp's causal test mask plus padded keys, [seq, heads, dim] tensors (batch 1)."""
    q, k, v = (t[0] for t in bsnd(1, S0, S1, 64, torch.float16, seed=5))
    mask = infiniop_causal_mask(S0, S1)
    mask[:, 260:] = True
    out = torch.full_like(q, math.nan)
    status, desc = infiniop.create_descriptor(*descriptors(out, q, k, v, mask), backend="sim")
    assert status == Status.SUCCESS, infiniop.last_error()
    status, size = infiniop.get_workspace_size(desc)
    slots = desc.config.gm_slot_bytes_per_block * desc.block_dim
    assert status == Status.SUCCESS and size >= slots  # more when the descriptor planned a split-KV launch
    workspace = torch.full((size + 256,), 0xA5, dtype=torch.uint8)
    assert infiniop.flash_attention(desc, workspace, size, out, q, k, v, mask) == Status.SUCCESS, infiniop.last_error()
    # Padded keys run the dense kernel, whose slot rings are the buffer's first `slots` bytes.
    assert (workspace[:slots] != 0xA5).any() and (workspace[slots:] == 0xA5).all()
    key_mask = (torch.arange(S1) < 260).to(torch.int8)
    ref = reference_fa(q[None], k[None], v[None], 1 / math.sqrt(64), (-1, 0), key_mask)
    assert_close_to(out[None], ref)
    assert infiniop.destroy_descriptor(desc) == Status.SUCCESS


def test_infiniop_descriptor_takes_the_timing_model_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """create_descriptor ranks configs for its shape (ptofa.launch.tune), like the torch calls."""
    from types import SimpleNamespace

    from ptofa.launch import tune

    asked = []
    chosen = FAConfig(head=64, tile_s1=512, qk_preload=2)
    monkeypatch.setattr(tune, "tune", lambda wanted: asked.append(wanted) or SimpleNamespace(config=chosen))
    q, k, v = bsnd(2, S0, S1, 64, torch.float16)
    status, desc = infiniop.create_descriptor(*descriptors(torch.empty_like(q), q, k, v), backend="sim")
    assert status == Status.SUCCESS, infiniop.last_error()
    assert desc.config == chosen
    assert [(w.batch, w.s0, w.s1, w.head) for w in asked] == [(2, S0, S1, 64)]


def test_infiniop_batched_bf16_gqa_with_a_nan_workspace() -> None:
    q, k, v = bsnd(2, S0, S1, 128, torch.bfloat16, seed=6)
    out = torch.empty_like(q)
    status, desc = infiniop.create_descriptor(*descriptors(out, q, k, v), backend="sim")
    assert status == Status.SUCCESS, infiniop.last_error()
    workspace = torch.full((desc.workspace_size // 4,), math.nan)  # f32 NaN: a slot read before written shows
    assert infiniop.flash_attention(desc, workspace, desc.workspace_size, out, q, k, v) == Status.SUCCESS
    assert_close_to(out, reference_fa(q, k, v, 1 / math.sqrt(128)))


@pytest.mark.parametrize("mask, bounds, kept", [
    (torch.zeros(4, 6, dtype=torch.bool), None, None),
    (infiniop_causal_mask(4, 6), (5, 0), None),
    (torch.tensor([[0, 0, 1, 1, 1, 1]] * 4, dtype=torch.uint8), None, [1, 1, 0, 0, 0, 0]),
    (~(torch.arange(6)[None] <= torch.arange(4)[:, None]), (5, -2), None),  # top-left causal: right = S0 - S1
    (torch.ones(4, 6, dtype=torch.bool), None, [0] * 6),
])
def test_mask_to_window(mask, bounds, kept) -> None:
    got_bounds, got_keys = infiniop.mask_to_window(mask)
    assert got_bounds == bounds
    assert (got_keys is None and kept is None) or got_keys.tolist() == kept


def _status_cases():
    """name -> a call returning a status that is not SUCCESS (each reachable status once)."""
    q, k, v = (t[0] for t in bsnd(1, S0, S1, 64, torch.float16))
    out = torch.empty_like(q)

    def created(mask=None):
        status, desc = infiniop.create_descriptor(*descriptors(out, q, k, v, mask), backend="sim")
        assert status == Status.SUCCESS, infiniop.last_error()
        return desc

    def run(desc, size=None, **tensors):
        args = dict(out=out, q=q, k=k, v=v, mask=None) | tensors
        size = desc.workspace_size if size is None else size
        return infiniop.flash_attention(desc, torch.empty(desc.workspace_size, dtype=torch.uint8), size, **args)

    def destroyed():
        desc = created()
        infiniop.destroy_descriptor(desc)
        return infiniop.get_workspace_size(desc)[0]

    def internal(monkeypatch):
        def broken(*args, **kwargs):
            raise RuntimeError("simulator: boom")

        monkeypatch.setattr(infiniop, "run_attention", broken)
        monkeypatch.setattr(infiniop, "run_dense_split", broken)
        return run(created())

    random_mask = torch.rand(S0, S1, generator=torch.Generator().manual_seed(1)) < 0.5
    return {
        "INSUFFICIENT_WORKSPACE": (lambda mp: run(created(), size=created().workspace_size - 1),
                                   "bytes of slot rings x"),
        "NULL_POINTER": (lambda mp: infiniop.create_descriptor(*descriptors(out, None, k, v))[0], "q_desc: is None"),
        "BAD_PARAM": (lambda mp: destroyed(), "desc: the descriptor was destroyed"),
        "BAD_TENSOR_DTYPE": (lambda mp: infiniop.create_descriptor(*descriptors(out.float(), q.float(), k.float(),
                                                                                v.float()))[0],
                             "dtype: F32 is not supported (F16 or BF16)"),
        "BAD_TENSOR_SHAPE": (lambda mp: infiniop.create_descriptor(*descriptors(out, q, k[:, :1].expand(S1, 3, 64),
                                                                                v[:, :1].expand(S1, 3, 64)))[0],
                             "shape: grouped heads: heads=4 must be a multiple of kv_heads=3"),
        "BAD_TENSOR_STRIDES": (lambda mp: run(created(), k=k.transpose(0, 1).contiguous().transpose(0, 1)),
                               "k: strides (64, 19200, 1) are not contiguous"),
        "NOT_IMPLEMENTED": (lambda mp: run(created(random_mask), mask=random_mask), "mask: only a bottom-right band"),
        "DEVICE_TYPE_NOT_SUPPORTED": (lambda mp: run(created(), q=q.to("meta")),
                                      "q: is on meta; this descriptor runs on cpu tensors"),
        "DEVICE_NOT_FOUND": (lambda mp: infiniop.create_descriptor(*descriptors(out, q, k, v), backend="npu")[0],
                             UNAVAILABLE),
        "INTERNAL_ERROR": (internal, "RuntimeError: simulator: boom"),
    }


STATUS_CASES = _status_cases()


@pytest.mark.parametrize("name", list(STATUS_CASES))
def test_each_infiniop_status_is_reachable(name, monkeypatch: pytest.MonkeyPatch) -> None:
    call, message = STATUS_CASES[name]
    expected = message() if callable(message) else message  # before the call: creating a descriptor clears the error
    status = call(monkeypatch)
    assert status == Status[name], infiniop.last_error()
    assert expected in infiniop.last_error()
    with pytest.raises(infiniop.InfiniopError, match=name):
        infiniop.check(status)


def test_infiniop_more_status_rules() -> None:
    q, k, v = (t[0] for t in bsnd(1, S0, S1, 64, torch.float16))
    out = torch.empty_like(q)
    mask = infiniop_causal_mask(S0, S1)
    status, desc = infiniop.create_descriptor(*descriptors(out, q, k, v, mask[:, :-1]))
    assert status == Status.BAD_TENSOR_SHAPE and "mask shape: (70, 299) must be [seq_q, seq_kv] = (70, 300)" in \
        infiniop.last_error() and desc is None
    assert infiniop.create_descriptor(*descriptors(out, q, k, v, mask.float()))[0] == Status.BAD_TENSOR_DTYPE
    assert infiniop.create_descriptor(*descriptors(out, q, k, v.bfloat16()))[0] == Status.BAD_TENSOR_DTYPE
    assert infiniop.create_descriptor(*descriptors(out[None], q, k, v))[0] == Status.BAD_TENSOR_SHAPE
    assert infiniop.create_descriptor(*descriptors(out, q, k, v), backend="tpu")[0] == Status.BAD_PARAM
    status, desc = infiniop.create_descriptor(*descriptors(out, q, k, v, mask))
    assert status == Status.SUCCESS and infiniop.last_error() == ""
    size = desc.workspace_size
    workspace = torch.empty(size, dtype=torch.uint8)
    assert infiniop.flash_attention(desc, workspace, size, out, q, k, v) == Status.NULL_POINTER  # mask missing
    assert infiniop.flash_attention(desc, None, size, out, q, k, v, mask) == Status.NULL_POINTER
    assert infiniop.flash_attention(desc, workspace[:-1], size, out, q, k, v, mask) == Status.BAD_PARAM
    assert infiniop.flash_attention(desc, workspace, size, out, q.float(), k, v, mask) == Status.BAD_TENSOR_DTYPE
    assert infiniop.flash_attention(desc, workspace, size, out, q[:-1], k, v, mask) == Status.BAD_TENSOR_SHAPE
    assert infiniop.get_workspace_size(None) == (Status.NULL_POINTER, None)
    assert TensorDescriptor(torch.float16, (2, 3)).strides == (3, 1)
    assert not TensorDescriptor(torch.float16, (2, 3), (1, 2)).is_contiguous()


# --------------------------------------------------------------------------------------
# Exports
# --------------------------------------------------------------------------------------


def test_package_exports_are_lazy_and_documented() -> None:
    assert ptofa.flash_attn_func is flash_attn_func
    assert ptofa.scaled_dot_product_attention is scaled_dot_product_attention
    assert ptofa.attend is attend and ptofa.attention.infiniop is infiniop
    light = subprocess.run([sys.executable, "-c", "import sys, ptofa; print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "False"
    import inspect

    for fn in (flash_attn_func, scaled_dot_product_attention, attend):
        doc = inspect.getdoc(fn)
        missing = [p for p in inspect.signature(fn).parameters if f"{p}:" not in doc and f"{p}," not in doc]
        assert not missing, f"{fn.__name__} does not document {missing}"


def test_npu_launch_arguments_carry_the_bounds_and_the_workspace() -> None:
    """The NPU launch's marshalling, on CPU tensors (data_ptr only): a launch plan's argument list with
    the kernel's window bounds (top-left causal: a negative right bound)."""
    from ptofa.kernels import argspec
    from ptofa.launch.plan import BuiltKernel, plan_forward
    from ptofa.pipeline import ProblemShape

    config = FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), key_padding=True, lse=True)
    shape = ProblemShape(2, HEADS, S0, S1, kv_heads=KV_HEADS)
    q, k, v = bsnd(2, S0, S1, 64, torch.float16)
    o, lse = torch.empty_like(q), torch.empty(2, HEADS, S0)
    key_mask = torch.ones(2, S1, dtype=torch.int8)
    workspace = torch.empty(config.gm_slot_bytes_per_block * 3, dtype=torch.uint8)
    plan = plan_forward(config, shape, "910B2", scale=0.125, bounds=(S0 + S1, S0 - S1), key_mask=key_mask, block_dim=3,
                        kernel=BuiltKernel("", config.summary(), argspec.ENTRY_NAME, argspec.entry_args(config)))
    tensors = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "key_mask": key_mask}
    args = npu.host_values(argspec.entry_args(config),
                           npu.call_values(plan.calls[0], tensors, workspace, torch.device("cpu")))
    by_name = dict(zip([p.name for p in argspec.host_params(config)], args))
    assert by_name["win_left"] == S0 + S1 and by_name["win_right"] == S0 - S1 == -230
    assert by_name["slots"] == workspace.data_ptr() and by_name["q"] == q.data_ptr() and by_name["lse"] == lse.data_ptr()
    assert by_name["key_mask_stride"] == S1 and by_name["kv_heads"] == KV_HEADS and by_name["scale"] == 0.125
