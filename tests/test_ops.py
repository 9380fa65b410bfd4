"""The custom op `ptofa::flash_attn_fwd`, torch.compile, strided inputs and the NPU launch path.

The compiled module runs on the simulator and must equal the eager result exactly (same
kernel, same inputs). The NPU path runs with a fake torch.npu and a recording launcher:
what is checked is what the launcher receives (pointer order from `argspec.host_params`,
the workspace size, the stream), not the kernel's numbers.
"""

from __future__ import annotations

import math
import types

import pytest
import torch

import ptofa
from ptofa.kernels import argspec
from ptofa.attention import core as attention
from ptofa.launch import npu
from ptofa.launch.toolchain import entry_signature
from ptofa.attention.ops import config_to_json, flash_attn_fwd
from ptofa.pipeline import ConfigError, FAConfig
from ptofa.reference import check_accuracy, reference_fa
from ptofa.kernels.builtin_mods.window import window_mods

CONFIG = FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), lse=True)


@pytest.fixture(autouse=True)
def without_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu, "npu_available", lambda: (False, "no NPU in this test"))


def bsnd(batch=1, s0=70, s1=200, heads=2, kv_heads=2, head=64, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, s0, heads, head, generator=g).to(dtype)
    k, v = (torch.randn(batch, s1, kv_heads, head, generator=g).to(dtype) for _ in range(2))
    return q, k, v


class Tiny(torch.nn.Module):
    """A projection, ptofa attention, a projection: the op sits between traced torch ops."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 64, dtype=torch.float16)

    def forward(self, q, k, v):
        out = ptofa.flash_attn_func(self.proj(q), k, v, causal=True, backend="sim", config=CONFIG)
        return out * 2


@pytest.mark.parametrize("compiler", ["eager", "aot_eager"])
def test_torch_compile_traces_without_a_graph_break(compiler: str) -> None:
    torch._dynamo.reset()
    model = Tiny()
    q, k, v = bsnd()
    with torch.no_grad():
        eager = model(q, k, v)
        compiled = torch.compile(model, fullgraph=True, backend=compiler)(q, k, v)
    assert torch.equal(compiled, eager)
    ref = reference_fa(model.proj(q).detach(), k, v, 1 / math.sqrt(64), (-1, 0))
    assert check_accuracy(eager.float() / 2, ref.out32, ref.out_low).passed


def test_the_compiled_region_calls_nothing_on_the_config() -> None:
    """The config reaches the op as the JSON text it made on creation: `config_to_json` reads
    that attribute (the very string, nothing serialised; torch 2.11's dynamo could not hand a
    frozen dataclass to a function it runs while tracing), and the graph torch.compile traces
    holds the op with that text as a constant argument and nothing else of the config."""
    assert config_to_json(CONFIG) is CONFIG.json_text and config_to_json(None) is None
    graphs: list[torch.fx.GraphModule] = []

    def backend(graph: torch.fx.GraphModule, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    model = Tiny()
    q, k, v = bsnd()
    with torch.no_grad():
        compiled = torch.compile(model, fullgraph=True, backend=backend)(q, k, v)
        assert torch.equal(compiled, model(q, k, v))
    [graph] = graphs
    calls = [node for node in graph.graph.nodes if node.op == "call_function"]
    ops = [node for node in calls if "ptofa" in str(node.target)]
    assert [str(node.target) for node in ops] == ["ptofa.flash_attn_fwd.default"], [str(n.target) for n in calls]
    constants = [arg for arg in (*ops[0].args, *ops[0].kwargs.values()) if isinstance(arg, str)]
    assert constants == ["sim", CONFIG.json_text], ops[0].args


def test_sdpa_compiles_too() -> None:
    torch._dynamo.reset()
    q, k, v = (t.transpose(1, 2) for t in bsnd())

    def f(q, k, v):
        return ptofa.scaled_dot_product_attention(q, k, v, is_causal=True, backend="sim")

    assert torch.equal(torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v), f(q, k, v))


def test_the_op_returns_out_and_lse_and_its_fake_has_the_shapes() -> None:
    q, k, v = bsnd(batch=2, heads=4)
    out, lse = torch.ops.ptofa.flash_attn_fwd(q, k, v, 0.125, False, 0, 0, None, torch.float32, "sim", None)
    assert out.shape == (2, 70, 4, 64) and out.dtype == torch.float32
    assert lse.shape == (2, 4, 70) and lse.dtype == torch.float32 and torch.isfinite(lse).all()
    meta = [t.to("meta") for t in (q, k, v)]
    fake_out, fake_lse = flash_attn_fwd(*meta, 0.125, False, 0, 0, None, None, "sim", None)
    assert (fake_out.shape, fake_out.dtype, fake_lse.shape, fake_lse.dtype) == (q.shape, q.dtype, lse.shape, lse.dtype)


def test_opcheck() -> None:
    q, k, v = bsnd(s0=20, s1=40)
    torch.library.opcheck(flash_attn_fwd, (q, k, v, 0.125, True, 60, 0, None, None, "sim", None),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_backward_saves_out_lse_and_the_key_mask_only() -> None:
    """No S or P is saved; a key mask (and ALiBi slopes) is saved and reaches the backward kernels: the gradients
    through a masked attention pass the rule against fp64 autograd with the same mask, and the
    padding keys get exactly zero dk, dv."""
    from ptofa.attention.backward import check_gradients, reference_backward

    q, k, v = bsnd()
    q.requires_grad_(True)
    out, lse = ptofa.flash_attn_func(q, k, v, return_lse=True, backend="sim")
    assert out.requires_grad and not lse.requires_grad
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 7 and saved[5] is None and saved[6] is None  # q, k, v, out, lse, no key mask, no slopes
    mask = torch.ones(1, 200, dtype=torch.bool)
    mask[:, 150:] = False
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    masked = ptofa.flash_attn_func(*leaves, key_padding_mask=mask, backend="sim")
    assert torch.equal(masked.grad_fn.saved_tensors[5], mask.to(torch.int8))
    dout = torch.randn(masked.shape, generator=torch.Generator().manual_seed(1)).to(masked.dtype)
    masked.backward(dout)
    grads = [t.grad for t in leaves]
    acc = check_gradients(*grads, reference_backward(q.detach(), k, v, dout, key_padding_mask=mask))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
    assert (grads[1][:, 150:] == 0).all() and (grads[2][:, 150:] == 0).all() and grads[1][:, :150].abs().sum() > 0


# --------------------------------------------------------------------------------------
# Strided inputs
# --------------------------------------------------------------------------------------


def test_strided_inputs_from_a_packed_qkv_tensor() -> None:
    g = torch.Generator().manual_seed(3)
    qkv = torch.randn(2, 90, 3, 2, 64, generator=g).half()  # [B, S, 3, N, D], as a fused projection writes it
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.is_contiguous() and q.stride(-1) == 1
    out = ptofa.flash_attn_func(q, k, v, causal=True, backend="sim")
    dense = ptofa.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, backend="sim")
    assert torch.equal(out, dense)
    ref = reference_fa(q, k, v, 1 / math.sqrt(64), (-1, 0))
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed
    heads_first = torch.randn(2, 2, 90, 64, generator=g).half().transpose(1, 2)  # BNSD storage viewed as BSND
    assert torch.equal(ptofa.flash_attn_func(heads_first, k, v, backend="sim"),
                       ptofa.flash_attn_func(heads_first.contiguous(), k, v, backend="sim"))


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_a_last_dim_that_is_not_contiguous_is_refused(which: str) -> None:
    tensors = dict(zip("qkv", bsnd()))
    t = tensors[which]
    tensors[which] = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)[..., ::2]
    with pytest.raises(ValueError) as raised:
        ptofa.flash_attn_func(tensors["q"], tensors["k"], tensors["v"], backend="sim")
    assert str(raised.value).startswith(f"{which}: the last dim (head_dim) must be contiguous, stride 1; got stride 2")


# --------------------------------------------------------------------------------------
# Input checks, as flash-attn makes them
# --------------------------------------------------------------------------------------

Q, K, V = bsnd(batch=2, heads=4)


@pytest.mark.parametrize("args, error, message", [
    ((Q.float(), K.float(), V.float()), ValueError,
     "dtype: torch.float32 is not supported; q, k and v must be torch.float16 or torch.bfloat16"),
    ((Q, K.bfloat16(), V.bfloat16()), ValueError,
     "dtype: q, k and v must share one dtype; got torch.float16, torch.bfloat16, torch.bfloat16"),
    ((Q, K, V.to("meta")), ValueError, "device: q, k and v must be on one device; got cpu, cpu, meta"),
    ((Q.to("meta"), K.to("meta"), V.to("meta")), ValueError,
     "device: q is on meta; ptofa runs CPU tensors on the simulator and NPU tensors on an Ascend NPU"),
    ((Q[..., :32], K[..., :32], V.new_zeros(*V.shape[:3], 264)), ConfigError,
     "head dim: head_dim_v=264 must be an int in 1..256"),
    ((Q[:, :, :3], K, V), ValueError, "grouped heads: q heads=3 must be a multiple of k/v heads=2"),
    ((Q[0], K, V), ValueError, "rank: q, k and v must be 4-D [B, S, N, D]; got q (70, 4, 64)"),
    ((Q, K[:1], V[:1]), ValueError, "batch: q has B=2 but k/v have B=1"),
    ((Q, K, V[:, :199]), ValueError, "shape: k (2, 200, 2, 64) and v (2, 199, 2, 64) must have the same [B, S, N] (only the head dims may differ)"),
    ((Q, K, V[:1]), ValueError, "shape: k (2, 200, 2, 64) and v (1, 200, 2, 64) must have the same [B, S, N] (only the head dims may differ)"),
    ((Q, K.numpy(), V), ValueError, "k: must be a torch.Tensor, got ndarray"),
])
def test_input_checks_name_the_argument_and_the_numbers(args, error, message) -> None:
    with pytest.raises(error) as raised:
        ptofa.flash_attn_func(*args, backend="sim")
    assert str(raised.value).startswith(message), str(raised.value)


# --------------------------------------------------------------------------------------
# The NPU path, with a fake torch.npu and a recording launcher
# --------------------------------------------------------------------------------------


class FakeStream:
    _as_parameter_ = 0x5EED


def fake_npu(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """torch.npu with one device and a stream; launches recorded instead of run."""
    calls: list[tuple] = []
    monkeypatch.setattr(npu, "npu_available", lambda: (True, "fake NPU"))
    monkeypatch.setattr(npu, "require_npu", lambda: None)
    monkeypatch.setattr(npu, "cube_core_count", lambda: 24)
    fake = types.SimpleNamespace(current_device=lambda: 0, current_stream=lambda: FakeStream())
    monkeypatch.setattr(torch, "npu", fake, raising=False)
    monkeypatch.setattr(npu, "npu_device", lambda: torch.device("cpu"))
    real_workspace = npu.npu_workspace

    def workspace(nbytes, device):
        made = real_workspace(nbytes, device)
        calls.append(("workspace", made.data_ptr(), made.numel() * made.element_size()))
        return made

    monkeypatch.setattr(npu, "npu_workspace", workspace)

    def launcher(block_dim, stream, *args):
        calls.append((block_dim, stream, args))
        return argspec.RC_OK

    def launcher_of(text, summary):
        entry, args = entry_signature(text)
        return npu.EntryLauncher(launcher, entry, args)

    monkeypatch.setattr(npu, "launcher_of", launcher_of)
    return calls


def test_npu_launch_marshals_the_arguments_in_argspec_order(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_npu(monkeypatch)
    q, k, v = bsnd(batch=2, s0=300, heads=4)
    mask = torch.ones(2, 200, dtype=torch.bool)
    out, lse = ptofa.flash_attn_func(q, k, v, causal=True, key_padding_mask=mask, return_lse=True, backend="npu",
                                     config=FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), key_padding=True,
                                                     lse=True))
    (_, pointer, size), (block_dim, stream, args) = calls
    assert stream == FakeStream._as_parameter_ and block_dim == 24  # 2 x 4 x 3 = 24 units on 24 cores
    config = FAConfig(head=64, tile_s1=128, qk_preload=2, mods=window_mods(), key_padding=True, lse=True)
    names = [p.name for p in argspec.host_params(config)]
    by_name = dict(zip(names, args))
    assert len(args) == len(names)
    assert by_name["q"] == q.data_ptr() and by_name["k"] == k.data_ptr() and by_name["v"] == v.data_ptr()
    assert by_name["o"] == out.data_ptr() and by_name["lse"] == lse.data_ptr()
    sizes = tuple(by_name[name] for name in ("batch", "heads", "kv_heads", "s0", "s1"))
    assert sizes == (2, 4, 2, 300, 200)
    assert (by_name["win_left"], by_name["win_right"], by_name["key_mask_stride"]) == (500, 0, 200)
    assert by_name["scale"] == pytest.approx(1 / 8)
    assert by_name["slots"] == pointer and size == config.gm_slot_bytes_per_block * 24


def test_npu_launch_takes_the_callers_workspace_and_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_npu(monkeypatch)
    q, k, v = bsnd()
    config = FAConfig(head=64, tile_s1=128, qk_preload=2)
    workspace = torch.empty(config.gm_slot_bytes_per_block * 2, dtype=torch.uint8)
    attention.run_attention(q, k, v, scale=0.1, backend="npu", config=config, block_dim=2, workspace=workspace,
                            stream=FakeStream())
    (block_dim, stream, args), = calls
    by_name = dict(zip([p.name for p in argspec.host_params(config)], args))
    assert block_dim == 2 and stream == FakeStream._as_parameter_ and by_name["slots"] == workspace.data_ptr()
    calls.clear()
    attention.run_attention(q, k, v, scale=0.1, backend="npu", config=config, block_dim=3)
    (_, pointer, size), (block_dim, stream, args) = calls  # a workspace of its own, on the current stream
    assert size == config.gm_slot_bytes_per_block * 3 and args[0] == pointer
    assert block_dim == 3 and stream == FakeStream._as_parameter_
