"""The NPU path of the backward kernels, checked with a recording fake launcher (the device is the
CPU) that can replay each launch on the simulator from its recorded addresses, and once on a real
NPU (marked `npu`, skipped without one)."""

from __future__ import annotations

import ctypes
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import ptofa
from ptofa.kernels import argspec
from ptofa.launch import npu
from ptofa.launch.plan import backward_kernel
from ptofa.launch.base import BackendUnavailable
from ptofa.attention.backward import attention_backward, check_gradients, reference_backward
from ptofa.kernels.bwd_pipeline import BwdConfig, entry_args, work_units
from ptofa.kernels.fa_bwd import emit_bwd, entry_name
from ptofa.pipeline import ProblemShape
from ptofa.sim import GmPointer, simulate
from ptofa.ir.textio import check_text
from ptofa.launch.toolchain import ToolchainError, caller_for, entry_signature
from ptofa.kernels.builtin_mods.window import window_mods

from fake_npu import STREAM, Call, Calls, install_fake_npu
from test_backward import _inputs

CORES = 24


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """The backward launches on the recording fake NPU (`fake_npu`)."""
    return install_fake_npu(monkeypatch, npu, CORES)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[npu.NpuLaunch]:
    """The `npu.launch` results (block dims and workspaces) of the calls."""
    results = []
    real = npu.launch

    def keep(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(npu, "launch", keep)
    return results


def _case(window=(-1, 0), b=1, n=4, kvn=2, s0=100, s1=140):
    """Inputs, and the forward's O and LSE from the simulator (the backward's real inputs)."""
    q, k, v, dout = _inputs(b, n, kvn, s0, s1)
    out, lse = ptofa.flash_attn_func(q, k, v, window_size=window, return_lse=True, backend="sim")
    return q, k, v, out.contiguous(), lse.contiguous(), dout


def _launcher_params(text: str, tmp_path: Path) -> list[str]:
    """The host parameters of the launcher `toolchain.caller_for` renders for this `.pto` text."""
    pto = tmp_path / "kernel.pto"
    pto.write_text(text)
    cpp = caller_for(pto)[1]
    params = re.search(r'extern "C" int32_t call_fa_\w+\((.*?)\)\n', cpp, re.S).group(1)
    return [p.split()[-1] for p in params.split(",")][2:]


def test_the_backward_entries_have_launchers() -> None:
    for kernel in ("dq", "prep", "dkdv", "post"):
        assert argspec.BWD_ENTRY_NAMES[kernel] == entry_name(kernel)
        assert argspec.LAUNCHERS[entry_name(kernel)] == f"call_fa_bwd_{kernel}"
        config = BwdConfig(atomic_dq=kernel in ("prep", "post"), block_q=64 if kernel in ("prep", "post") else 128)
        assert entry_signature(emit_bwd(config, kernel))[0] == entry_name(kernel)


def test_dq_then_dkdv_get_the_entry_arguments_in_signature_order(calls, launches, tmp_path) -> None:
    q, k, v, out, lse, dout = _case()
    dq, dk, dv = attention_backward(q, k, v, out, lse, dout, window=(-1, 0), softmax_scale=0.2, backend="npu")
    (launch,) = launches
    config = BwdConfig(head=64, mods=window_mods())
    assert [call.entry for call in calls] == [entry_name("dq"), entry_name("dkdv")]
    for call, kernel in zip(calls, ("dq", "dkdv")):
        assert call.text == emit_bwd(config, kernel)
        assert tuple((a.name, a.ir_type) for a in entry_signature(call.text)[1]) == entry_args(config, kernel)
        assert [argspec.c_ident(name) for name in call.order] == _launcher_params(call.text, tmp_path)
        units = work_units(config, kernel, 1, 4, 2, 100, 140)
        assert call.block_dim == launch.block_dims[kernel] == min(units, CORES) and call.stream == STREAM
        workspace = launch.workspaces[kernel]
        assert call.values["slots"] == workspace.data_ptr()
        assert workspace.numel() * 4 == config.slot_bytes_per_block(kernel) * call.block_dim
        assert (call.values["batch"], call.values["heads"], call.values["kv_heads"]) == (1, 4, 2)
        assert (call.values["s0"], call.values["s1"], call.values["scale"]) == (100, 140, 0.2)
        bounds = ProblemShape(1, 4, 100, 140, 2, (-1, 0)).window_bounds()
        assert (call.values["win_left"], call.values["win_right"]) == bounds
    first, second = calls
    for name, tensor in {"q": q, "k": k, "v": v, "do": dout, "lse": lse}.items():
        assert first.values[name] == second.values[name] == tensor.data_ptr()
    assert first.values["o"] == out.data_ptr() and "o" not in second.values
    assert first.values["dq"] == dq.data_ptr() and (second.values["dk"], second.values["dv"]) == (
        dk.data_ptr(), dv.data_ptr())
    assert first.values["dsum"] == second.values["dsum"]  # dkdv reads the D that dq wrote


def test_the_launcher_spells_do_as_a_cpp_identifier(tmp_path) -> None:
    pto = tmp_path / "fa_bwd_dq.pto"
    pto.write_text(emit_bwd(BwdConfig(), "dq"))
    cpp = caller_for(pto)[1]
    assert "uint8_t* do_" in cpp and "(__gm__ half*)do_" in cpp and "call_fa_bwd_dq(" in cpp
    assert not re.search(r"\bdo\b", cpp.split("extern \"C\" int32_t call_fa_bwd_dq")[1])


def _gm(address: int, nbytes: int, ir_type: str) -> GmPointer:
    """A simulator pointer onto `nbytes` of host memory at `address` (what a device address means here)."""
    buf = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
    return GmPointer(buf, 0, ir_type[len("!pto.ptr<"):-1])


def _replay_on_sim(calls: Calls, config: BwdConfig, nbytes: dict[str, int]) -> None:
    """Run each launch on the simulator inside the launch, from its recorded addresses and scalars
    alone, read in the launcher's order; `nbytes` sizes the tensors, the slot workspace is sized
    from the config (the size test checks the launch allocates exactly that)."""

    def replay(call: Call) -> None:
        kernel = call.entry.removeprefix("fa_bwd_")
        size = {**nbytes, "slots": config.slot_bytes_per_block(kernel) * call.block_dim}
        args = {}
        for arg in entry_signature(call.text)[1]:
            if arg.source == "ffts":
                args[arg.name] = GmPointer.of(np.zeros(16, dtype=np.int64))
            elif arg.ir_type.startswith("!pto.ptr<"):
                args[arg.name] = _gm(call.values[arg.source], size[arg.source], arg.ir_type)
            else:
                args[arg.name] = call.values[arg.source]
        simulate(check_text(call.text, call.entry), args, call.block_dim)

    calls.on_launch = replay


def _nbytes(q, k, lse) -> dict[str, int]:
    qb, kb, lb = (t.numel() * t.element_size() for t in (q, k, lse))
    return {"q": qb, "o": qb, "do": qb, "dq": qb, "k": kb, "v": kb, "dk": kb, "dv": kb, "lse": lb, "dsum": lb,
            "dq_acc": q.numel() * 4}


@pytest.mark.parametrize("window, kvn", [((-1, 0), 2), ((-1, -1), 1)])
def test_the_marshalled_arguments_run_the_kernels_to_the_reference(calls, window, kvn) -> None:
    """Causal and non-causal GQA (4 q heads on 2 or 1 kv heads), S0 != S1 with tails."""
    q, k, v, out, lse, dout = _case(window, kvn=kvn)
    masked = window != (-1, -1)
    _replay_on_sim(calls, BwdConfig(head=64, mods=window_mods(masked)), _nbytes(q, k, lse))
    dq, dk, dv = attention_backward(q, k, v, out, lse, dout, window=window if masked else None, backend="npu")
    assert [call.entry for call in calls] == [entry_name("dq"), entry_name("dkdv")]
    acc = check_gradients(dq, dk, dv, reference_backward(q, k, v, dout, window=window))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}


def test_a_wrong_marshalling_fails_the_accuracy_rule(calls, monkeypatch) -> None:
    """k and v passed in each other's place (same shape, so nothing else notices): the replayed
    gradients fail the rule, so the replay test above can see a marshalling mistake."""
    q, k, v, out, lse, dout = _case()
    _replay_on_sim(calls, BwdConfig(head=64, mods=window_mods()), _nbytes(q, k, lse))
    real = npu.host_values
    monkeypatch.setattr(npu, "host_values",
                        lambda args, values: real(args, {**values, "k": values["v"], "v": values["k"]}))
    dq, dk, dv = attention_backward(q, k, v, out, lse, dout, window=(-1, 0), backend="npu")
    acc = check_gradients(dq, dk, dv, reference_backward(q, k, v, dout, window=(-1, 0)))
    assert len(calls) == 2 and not acc["dq"].passed and not acc["dk"].passed


@pytest.mark.parametrize("change, error, message", [
    (lambda a: {**a, "lse": a["lse"][:, :1]}, ValueError, "lse must be float32"),
    (lambda a: {**a, "k": a["k"].to(torch.bfloat16)}, TypeError, "k.dtype"),
    (lambda a: {**a, "block_dim": 0}, ValueError, "block_dim=0"),
])
def test_bad_input_launches_nothing(calls, change, error, message) -> None:
    q, k, v, dout = _inputs(1, 2, 1, 64, 64)
    lse = torch.zeros(1, 2, 64)
    kwargs = change({"q": q, "k": k, "v": v, "out": q, "lse": lse, "dout": dout, "backend": "npu"})
    with pytest.raises(error, match=message):
        attention_backward(**kwargs)
    assert calls == []


@pytest.mark.parametrize("failing, deterministic", [("dkdv", True), ("post", False)])
def test_a_failed_build_launches_nothing(calls, monkeypatch, failing, deterministic) -> None:
    """Every kernel of the mode is built before any is enqueued: the dkdv kernel of the
    deterministic mode, the post kernel (the last one) of the atomic mode."""
    real = npu.launcher_of

    def failing_build(text: str, summary: str):
        if entry_signature(text)[0] == entry_name(failing):
            raise ToolchainError("ptoas: error: fake failure")
        return real(text, summary)

    monkeypatch.setattr(npu, "launcher_of", failing_build)
    q, k, v, dout = _inputs(1, 2, 1, 64, 64)
    with pytest.raises(ToolchainError, match="fake failure"):
        attention_backward(q, k, v, q, torch.zeros(1, 2, 64), dout, backend="npu", deterministic=deterministic)
    assert calls == []


def test_a_launcher_error_code_is_raised_naming_the_launcher(calls, monkeypatch) -> None:
    def failing(text: str, summary: str) -> npu.EntryLauncher:
        entry, args = entry_signature(text)
        return npu.EntryLauncher(lambda *values: argspec.RC_FFTS_FAILED, entry, args)

    monkeypatch.setattr(npu, "launcher_of", failing)
    q, k, v, dout = _inputs(1, 2, 1, 64, 64)
    with pytest.raises(npu.NpuLaunchError, match="call_fa_bwd_dq returned 1"):
        attention_backward(q, k, v, q, torch.zeros(1, 2, 64), dout, backend="npu")


def test_auto_takes_the_npu_path_where_there_is_an_npu(calls) -> None:
    q, k, v, dout = _inputs(1, 2, 1, 64, 64)
    attention_backward(q, k, v, q, torch.zeros(1, 2, 64), dout)
    assert [call.entry for call in calls] == [entry_name("dq"), entry_name("dkdv")]


ATOMIC = ("prep", "dkdv", "post")


def test_the_atomic_mode_launches_prep_dkdv_post_with_their_entry_arguments(calls, launches, tmp_path) -> None:
    """Each launcher gets the arguments of its `.pto` entry in signature order; prep, dkdv and post
    share one device f32 accumulator (prep zeroes it, dkdv adds into it, post casts it into dq),
    and the mixed prep (D's dO O^T) and dkdv kernels get slot workspaces, post none."""
    q, k, v, out, lse, dout = _case()
    dq, dk, dv = attention_backward(q, k, v, out, lse, dout, window=(-1, 0), softmax_scale=0.2, backend="npu",
                                    deterministic=False)
    (launch,) = launches
    config = BwdConfig(head=64, mods=window_mods(), atomic_dq=True, block_q=64)
    assert [call.entry for call in calls] == [entry_name(kernel) for kernel in ATOMIC]
    for call, kernel in zip(calls, ATOMIC):
        assert call.text == emit_bwd(config, kernel)
        assert tuple((a.name, a.ir_type) for a in entry_signature(call.text)[1]) == entry_args(config, kernel)
        assert [argspec.c_ident(name) for name in call.order] == _launcher_params(call.text, tmp_path)
        units = work_units(config, kernel, 1, 4, 2, 100, 140)
        assert call.block_dim == launch.block_dims[kernel] == min(units, CORES) and call.stream == STREAM
        assert (call.values["batch"], call.values["heads"], call.values["s0"]) == (1, 4, 100)
    prep, dkdv, post = calls
    assert set(launch.workspaces) == {"prep", "dkdv"} and "slots" not in post.values
    assert prep.values["slots"] == launch.workspaces["prep"].data_ptr()
    assert dkdv.values["slots"] == launch.workspaces["dkdv"].data_ptr()
    acc = launch.dq_acc
    assert acc.dtype == torch.float32 and acc.shape == q.shape
    assert prep.values["dq_acc"] == dkdv.values["dq_acc"] == post.values["dq_acc"] == acc.data_ptr()
    assert prep.values["dsum"] == dkdv.values["dsum"] and prep.values["o"] == out.data_ptr()
    assert post.values["dq"] == dq.data_ptr() and (dkdv.values["dk"], dkdv.values["dv"]) == (dk.data_ptr(), dv.data_ptr())
    assert (dkdv.values["scale"], dkdv.values["win_left"], dkdv.values["win_right"]) == (
        0.2, *ProblemShape(1, 4, 100, 140, 2, (-1, 0)).window_bounds())


@pytest.mark.parametrize("window, kvn", [((-1, 0), 2), ((-1, -1), 1)])
def test_the_atomic_launches_replayed_give_the_reference_gradients(calls, launches, window, kvn) -> None:
    """The three recorded launches, replayed on the simulator from their addresses and values alone
    (the accumulator starts as whatever torch.empty held: prep must zero it), pass the rule."""
    q, k, v, out, lse, dout = _case(window, kvn=kvn)
    masked = window != (-1, -1)
    _replay_on_sim(calls, BwdConfig(head=64, mods=window_mods(masked), atomic_dq=True, block_q=64), _nbytes(q, k, lse))
    dq, dk, dv = attention_backward(q, k, v, out, lse, dout, window=window if masked else None, backend="npu",
                                    deterministic=False)
    assert [call.entry for call in calls] == [entry_name(kernel) for kernel in ATOMIC]
    acc = check_gradients(dq, dk, dv, reference_backward(q, k, v, dout, window=window))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
    assert torch.equal(launches[0].dq_acc.to(q.dtype), dq)


def test_npu_backend_without_an_npu_is_refused_with_one_line(monkeypatch) -> None:
    monkeypatch.setattr(npu, "npu_available", lambda: (False, "npu backend: torch_npu is not installed"))
    q, k, v, dout = _inputs(1, 2, 1, 64, 64)
    with pytest.raises(BackendUnavailable, match="torch_npu is not installed"):
        attention_backward(q, k, v, q, torch.zeros(1, 2, 64), dout, backend="npu")


def test_kernel_launcher_builds_the_text_and_loads_its_entry(monkeypatch, tmp_path) -> None:
    config = BwdConfig(head=128, in_dtype="bf16", mods=window_mods())
    built, loaded = [], []

    def compile_pto(path, config_summary):
        built.append(Path(path).read_text())
        return type("Compiled", (), {"so_path": tmp_path / "fa.so"})()

    monkeypatch.setattr(npu, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(npu, "compile_pto", compile_pto)
    monkeypatch.setattr(npu, "load_launcher", lambda so, entry, args: loaded.append((so, entry, args)))
    npu.launcher_of.cache_clear()
    try:
        kernel = backward_kernel(config, "dkdv")
        npu.launcher_of(kernel.text, kernel.name)
    finally:
        npu.launcher_of.cache_clear()
    assert built == [emit_bwd(config, "dkdv")]
    ((so, entry, args),) = loaded
    assert (so, entry) == (tmp_path / "fa.so", entry_name("dkdv"))
    assert tuple((a.name, a.ir_type) for a in args) == entry_args(config, "dkdv")


@pytest.mark.parametrize("atomic", [False, True])
def test_run_backward_case_on_the_npu_backend_checks_the_replayed_gradients(calls, monkeypatch, atomic) -> None:
    """`run_fa run --backward [--atomic] --backend npu`'s backward half: the kernels launched through
    the NPU path (replayed here), the gradients checked, and no timing-model replay."""
    from ptofa.cli.run import run_backward_case
    from ptofa.pipeline import FAConfig

    forward = ptofa.flash_attn_func
    monkeypatch.setattr(ptofa, "flash_attn_func", lambda *a, **kw: forward(*a, **{**kw, "backend": "sim"}))
    shape = ProblemShape(1, 4, 100, 140, 2, (-1, 0))
    lse_bytes, q_bytes, k_bytes = 4 * 100 * 4, 100 * 4 * 64 * 2, 140 * 2 * 64 * 2
    bwd = BwdConfig(head=64, mods=window_mods(), atomic_dq=atomic, block_q=64 if atomic else 128)
    _replay_on_sim(calls, bwd,
                   {**dict.fromkeys(("q", "o", "do", "dq"), q_bytes), **dict.fromkeys(("k", "v", "dk", "dv"), k_bytes),
                    "lse": lse_bytes, "dsum": lse_bytes, "dq_acc": 2 * q_bytes})
    lines: list[str] = []
    config = FAConfig(head=64, mods=window_mods())
    assert run_backward_case(config, shape, None, 0, "910B2", None, lines.append, backend="npu", atomic=atomic)
    assert [call.entry for call in calls] == [entry_name(kernel) for kernel in bwd.kernels]
    assert [line.split(":")[0] for line in lines[:3]] == ["dq", "dk", "dv"] and all("pass" in x for x in lines[:3])
    assert "timing model not run on the npu backend" in lines[-1]


def test_cli_run_backward_on_npu_without_an_npu_exits_2(monkeypatch) -> None:
    from click.testing import CliRunner

    from ptofa.cli.main import main

    monkeypatch.setattr(npu, "npu_available", lambda: (False, "npu backend: torch_npu is not installed"))
    result = CliRunner().invoke(main, ["run", "--backward", "--backend", "npu", "--s0", "64", "--s1", "64"])
    assert result.exit_code == 2 and "torch_npu is not installed" in result.output


@pytest.mark.npu
def test_backward_on_the_npu_matches_the_reference() -> None:
    device = torch.device("npu", 0)
    for (window, kvn), deterministic in itertools.product((((-1, 0), 2), ((-1, -1), 4)), (True, False)):
        q, k, v, out, lse, dout = _case(window, kvn=kvn)
        masked = window != (-1, -1)
        grads = attention_backward(*(t.to(device) for t in (q, k, v, out, lse, dout)),
                                   window=window if masked else None, backend="npu", deterministic=deterministic)
        acc = check_gradients(*(g.cpu() for g in grads), reference_backward(q, k, v, dout, window=window))
        assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
