"""The NPU path of the serving calls, checked with a recording fake launcher (the device is the CPU),
and once on a real NPU (marked `npu`, skipped without one)."""

from __future__ import annotations

import ctypes
import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import ptofa
from ptofa.kernels import argspec
from ptofa.kernels.fa_reduce import emit_reduce
from ptofa.launch import npu
from ptofa.launch import calls as launch_calls
from ptofa.launch import plan as launch_plan
from ptofa.attention.kvcache import KVCache, reference_kvcache
from ptofa.pipeline import REDUCE_TABLE, UNIT_FIELDS, FAConfig, workspace_bytes
from ptofa.reference import check_accuracy, check_lse
from ptofa.runner import BackendUnavailable
from ptofa.sim import GmPointer, simulate
from ptofa.launch.plan import reduce_block_dim, reduce_rows
from ptofa.ir.textio import check_text
from ptofa.launch.toolchain import ToolchainError, caller_for, entry_signature
from ptofa.launch.varlen import reduce_table, reference_varlen, unit_table, varlen_shape

from fake_npu import STREAM, Call, Calls, install_fake_npu

CORES = 24


def _read_i32(address: int, count: int) -> torch.Tensor:
    return torch.tensor(list((ctypes.c_int32 * count).from_address(address)), dtype=torch.int32)


def _unit_fields(call: Call) -> int:
    return len(REDUCE_TABLE) if call.entry == argspec.REDUCE_ENTRY_NAME else UNIT_FIELDS


def _read_tables(call: Call) -> None:
    """The unit table (the reduce's table for a reduce launch) and block table a serving launch
    passes, read from their addresses."""
    by_name = call.values
    if "units" in by_name:
        fields = _unit_fields(call)
        call.units = _read_i32(by_name["units"], by_name["num_units"] * fields).reshape(-1, fields)
    if by_name.get("block_table"):
        call.block_table = _read_i32(by_name["block_table"], by_name["batch"] * by_name["max_pages"]).reshape(
            by_name["batch"], -1)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """The serving launches on the recording fake NPU (`fake_npu`), with their tables."""
    return install_fake_npu(monkeypatch, npu, CORES, _read_tables)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[npu.NpuLaunch]:
    """The `npu.launch` results of the serving calls (their plans and device buffers)."""
    results = []
    real = npu.launch

    def keep(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(npu, "launch", keep)
    return results


def _rand(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _launcher_params(text: str, tmp_path: Path) -> list[str]:
    """The host parameters of the launcher `toolchain.caller_for` renders for this `.pto` text."""
    pto = tmp_path / "kernel.pto"
    pto.write_text(text)
    cpp = caller_for(pto)[1]
    params = re.search(r'extern "C" int32_t call_fa_\w+\((.*?)\)\n', cpp, re.S).group(1)
    return [p.split()[-1] for p in params.split(",")][2:]


Q_LENS, K_LENS = [0, 1, 127, 300], [3, 1, 127, 900]


def _varlen(num_splits: int, return_lse: bool = True, backend: str = "npu"):
    q = _rand(sum(Q_LENS), 4, 64, seed=1)
    k, v = _rand(sum(K_LENS), 2, 64, seed=2), _rand(sum(K_LENS), 2, 64, seed=3)
    result = ptofa.flash_attn_varlen_func(q, k, v, _cu(Q_LENS), _cu(K_LENS), 300, 900, causal=True,
                                          return_lse=return_lse, num_splits=num_splits, backend=backend)
    return q, k, v, result


def test_varlen_unsplit_passes_the_entry_arguments_in_signature_order(calls, launches, tmp_path) -> None:
    q, k, v, (out, lse) = _varlen(1)
    (call,) = calls
    (launch,) = launches
    config = launch.plan.config
    assert call.entry == argspec.ENTRY_NAME and not config.split_kv and config.varlen and config.lse
    assert entry_signature(call.text)[1] == argspec.entry_args(config)
    assert call.order == _launcher_params(call.text, tmp_path)  # the C++ launcher's own parameter order
    values = call.values
    assert [values[n] for n in ("q", "k", "v", "o", "lse")] == [t.data_ptr() for t in (q, k, v, out, lse)]
    assert values["slots"] == launch.workspace.data_ptr()
    assert launch.workspace.numel() * 4 == workspace_bytes(config, varlen_shape(Q_LENS, K_LENS, 4, 2, (-1, 0)),
                                                           launch.plan.block_dim)
    table = unit_table(config, Q_LENS, K_LENS, 4, (-1, 0), 1)
    assert torch.equal(call.units, table) and values["num_units"] == table.shape[0]
    assert call.block_dim == min(table.shape[0], CORES) and call.stream == STREAM
    assert (values["batch"], values["heads"], values["kv_heads"], values["s0"], values["s1"]) == (4, 4, 2, 428, 1031)
    assert values["scale"] == pytest.approx(1 / 8)
    assert (values["win_left"], values["win_right"]) == varlen_shape(Q_LENS, K_LENS, 4, 2, (-1, 0)).window_bounds()


def test_varlen_split_launches_the_reduce_after_the_forward_on_the_partials(calls, launches, tmp_path) -> None:
    q, k, v, (out, lse) = _varlen(3)
    main, reduce = calls
    (launch,) = launches
    config = launch.plan.config
    shape = varlen_shape(Q_LENS, K_LENS, 4, 2, (-1, 0))
    assert (main.entry, reduce.entry) == (argspec.ENTRY_NAME, argspec.REDUCE_ENTRY_NAME)
    assert config.split_kv and launch.plan.num_splits == 3
    assert entry_signature(reduce.text)[1] == argspec.reduce_entry_args(config)
    assert reduce.order == _launcher_params(reduce.text, tmp_path)
    assert main.order == _launcher_params(main.text, tmp_path)
    assert torch.equal(main.units, unit_table(config, Q_LENS, K_LENS, 4, (-1, 0), 3))
    need = workspace_bytes(config, shape, main.block_dim, 3)
    assert launch.workspace.numel() * 4 == need > workspace_bytes(config, shape, main.block_dim)
    partials = main.values["slots"] + config.gm_slot_bytes_per_block * main.block_dim
    assert main.values["partials"] == reduce.values["partials"] == partials
    assert reduce.values["o"] == main.values["o"] == out.data_ptr()
    assert reduce.values["lse"] == main.values["lse"] == lse.data_ptr()
    heads, rows = reduce_rows(config, shape)
    red_units = reduce_table(config, main.units, 4, 2)
    assert torch.equal(reduce.units, red_units) and set(red_units[:, 3].tolist()) == {3}
    assert (reduce.values["heads"], reduce.values["s0"], reduce.values["num_units"]) == (heads, rows, len(red_units))
    assert reduce.block_dim == reduce_block_dim(len(red_units), CORES)
    assert main.stream == reduce.stream == STREAM


def test_paged_decode_passes_the_block_table_and_the_decode_units(calls, launches, tmp_path) -> None:
    batch, heads, kv_heads, head = 2, 8, 2, 128
    k_cache, v_cache = _rand(10, 256, kv_heads, head, seed=4), _rand(10, 256, kv_heads, head, seed=5)
    block_table = torch.tensor([[7, 2, 9, 0], [1, 5, 3, 8]], dtype=torch.int32)
    q = _rand(batch, 1, heads, head, seed=8)
    out = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor([250, 700], dtype=torch.int32),
                                        block_table=block_table, num_splits=2, backend="npu")
    main, reduce = calls
    (launch,) = launches
    config = launch.plan.config
    assert config.page_size == 256 and config.gqa_pack and config.split_kv
    assert main.order == _launcher_params(main.text, tmp_path)
    assert torch.equal(main.block_table, block_table) and main.values["max_pages"] == 4
    assert torch.equal(main.units, launch.plan.table) and torch.equal(launch.units, launch.plan.table)
    assert main.values["k"] == k_cache.data_ptr() and main.values["v"] == v_cache.data_ptr()
    assert main.values["o"] == reduce.values["o"] == out.data_ptr()
    assert reduce.values["partials"] == launch.partials.data_ptr() == main.values["partials"]


@pytest.mark.parametrize("call, message", [
    (lambda q, kc, vc, lens, bt: ptofa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt, num_splits=17, backend="npu"),
     "num_splits"),
    (lambda q, kc, vc, lens, bt: ptofa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens + 2000, block_table=bt, backend="npu"),
     "cache"),
    (lambda q, kc, vc, lens, bt: ptofa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt, k=_rand(2, 3, 2, 128), v=None,
                                                               backend="npu"), "k, v"),
])
def test_bad_input_is_refused_before_any_launch(calls, call, message) -> None:
    k_cache, v_cache = _rand(10, 256, 2, 128, seed=4), _rand(10, 256, 2, 128, seed=5)
    before = k_cache.clone()
    block_table = torch.tensor([[7, 2, 9, 0], [1, 5, 3, 8]], dtype=torch.int32)
    with pytest.raises((ValueError, TypeError), match=message):
        call(_rand(2, 1, 8, 128), k_cache, v_cache, torch.tensor([250, 700], dtype=torch.int32), block_table)
    assert calls == [] and torch.equal(k_cache, before)


def test_varlen_bad_cu_seqlens_is_refused_before_any_launch(calls) -> None:
    q, k = _rand(5, 2, 64), _rand(5, 2, 64)
    with pytest.raises(ValueError, match="cu_seqlens"):
        ptofa.flash_attn_varlen_func(q, k, k, _cu([2, 3]), _cu([5]), 3, 5, backend="npu")
    assert calls == []


@pytest.mark.parametrize("failing_entry", [argspec.ENTRY_NAME, argspec.REDUCE_ENTRY_NAME])
def test_a_launcher_error_code_is_raised_naming_the_launcher(calls, monkeypatch, failing_entry) -> None:
    def failing(text: str, summary: str) -> npu.EntryLauncher:
        entry, args = entry_signature(text)
        code = argspec.RC_FFTS_FAILED if entry == failing_entry else argspec.RC_OK
        return npu.EntryLauncher(lambda *values: code, entry, args)

    monkeypatch.setattr(npu, "launcher_of", failing)
    with pytest.raises(npu.NpuLaunchError, match=f"{argspec.LAUNCHERS[failing_entry]} returned 1: rtGetC2cCtrlAddr"):
        _varlen(3)


def test_a_failed_reduce_build_launches_nothing(calls, monkeypatch) -> None:
    fake_launcher_of = npu.launcher_of

    def no_reduce(text: str, summary: str):
        if entry_signature(text)[0] == argspec.REDUCE_ENTRY_NAME:
            raise ToolchainError("ptoas: error: fake failure")
        return fake_launcher_of(text, summary)

    monkeypatch.setattr(npu, "launcher_of", no_reduce)
    with pytest.raises(ToolchainError, match="fake failure"):
        _varlen(3)
    assert calls == []


def test_auto_takes_the_npu_path_where_there_is_an_npu(calls) -> None:
    _varlen(1, backend="auto")
    assert [call.entry for call in calls] == [argspec.ENTRY_NAME]


def test_npu_backend_without_an_npu_is_refused_with_one_line(monkeypatch) -> None:
    monkeypatch.setattr(npu, "npu_available", lambda: (False, "npu backend: torch_npu is not installed"))
    with pytest.raises(BackendUnavailable, match="torch_npu is not installed"):
        _varlen(1)


def test_launcher_of_builds_the_text_and_loads_its_entry_with_its_arguments(monkeypatch, tmp_path) -> None:
    config = dataclasses.replace(FAConfig(), varlen=True, split_kv=True, lse=True)
    built, loaded = [], []

    def compile_pto(path, config_summary):
        built.append(Path(path).read_text())
        return type("Compiled", (), {"so_path": tmp_path / "fa.so"})()

    monkeypatch.setattr(npu, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(npu, "compile_pto", compile_pto)
    monkeypatch.setattr(npu, "load_launcher", lambda so, entry, args: loaded.append((so, entry, args)))
    npu.launcher_of.cache_clear()
    try:
        kernel = launch_plan.reduce_kernel(config)
        npu.launcher_of(kernel.text, kernel.name)
    finally:
        npu.launcher_of.cache_clear()
    assert built == [emit_reduce(config)]
    assert loaded == [(tmp_path / "fa.so", argspec.REDUCE_ENTRY_NAME, argspec.reduce_entry_args(config))]


def test_load_entry_launcher_sets_the_argtypes_of_the_declared_arguments(monkeypatch) -> None:
    config = dataclasses.replace(FAConfig(), varlen=True, split_kv=True, lse=True)
    library = type("Library", (), {"call_fa_reduce": type("Fn", (), {})()})()
    monkeypatch.setattr(npu.ctypes, "CDLL", lambda path: library)
    launcher = npu.load_launcher("x.so", argspec.REDUCE_ENTRY_NAME, argspec.reduce_entry_args(config))
    pointers, ints = [ctypes.c_void_p] * 4, [ctypes.c_int64] * 3
    assert launcher.argtypes == [ctypes.c_uint32, ctypes.c_void_p, *pointers, *ints]  # partials, o, lse, units; sizes
    assert launcher.restype is argspec.LAUNCHER_RESTYPE


def _gm(address: int, nbytes: int, ir_type: str) -> GmPointer | None:
    """A simulator pointer onto `nbytes` of host memory at `address` (what a device address means here)."""
    if not address:
        return None
    buf = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
    return GmPointer(buf, 0, ir_type[len("!pto.ptr<"):-1])


def _replay_on_sim(calls: Calls, monkeypatch: pytest.MonkeyPatch, nbytes: dict[str, int]) -> None:
    """Run each launch on the simulator, inside the launch (its buffers alive), from its recorded
    addresses and scalars alone, read in the launcher's order; `nbytes` sizes the caller's tensors
    (q, k, v, o, lse), the rest comes from the scalars and `workspace_bytes`."""
    sizes: list[int] = []
    workspace: dict[str, int] = {}

    def recorded_workspace_bytes(*args, **kwargs) -> int:
        sizes.append(workspace_bytes(*args, **kwargs))
        return sizes[-1]

    def replay(call: Call) -> None:
        values = call.values
        workspace.setdefault("start", values.get("slots", 0))
        end = workspace["start"] + sizes[-1]
        partials = values.get("partials", end)
        size = {**nbytes, "slots": partials - workspace["start"], "partials": end - partials,
                "units": values.get("num_units", 0) * _unit_fields(call) * 4,
                "block_table": values.get("batch", 0) * values.get("max_pages", 0) * 4}
        args = {}
        for arg in entry_signature(call.text)[1]:
            if arg.source == "ffts":
                args[arg.name] = GmPointer.of(np.zeros(16, dtype=np.int64))
            elif arg.ir_type.startswith("!pto.ptr<"):
                args[arg.name] = _gm(values[arg.source], size[arg.source], arg.ir_type)
            else:
                args[arg.name] = values[arg.source]
        simulate(check_text(call.text, call.entry), args, call.block_dim)

    monkeypatch.setattr(launch_calls, "workspace_bytes", recorded_workspace_bytes)  # where the planners read it
    calls.on_launch = replay


def _nbytes(**tensors: torch.Tensor) -> dict[str, int]:
    return {name: t.numel() * t.element_size() for name, t in tensors.items()}


def test_the_marshalled_varlen_arguments_run_the_kernels_to_the_reference(calls, monkeypatch) -> None:
    """Split-KV varlen: the reduce reads the partials the forward kernel wrote where the host said they are."""
    q = _rand(sum(Q_LENS), 4, 64, seed=1)
    k, v = _rand(sum(K_LENS), 2, 64, seed=2), _rand(sum(K_LENS), 2, 64, seed=3)
    _replay_on_sim(calls, monkeypatch, _nbytes(q=q, k=k, v=v, o=q, lse=torch.empty(4, q.shape[0])))
    out, lse = ptofa.flash_attn_varlen_func(q, k, v, _cu(Q_LENS), _cu(K_LENS), 300, 900, causal=True, return_lse=True,
                                            num_splits=3, backend="npu")
    ref = reference_varlen(q, k, v, Q_LENS, K_LENS, 1 / 8, (-1, 0), torch.float16)
    assert [call.entry for call in calls] == [argspec.ENTRY_NAME, argspec.REDUCE_ENTRY_NAME]
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed
    assert check_lse(lse, ref).passed


@pytest.mark.parametrize("num_splits", [1, 2])
def test_the_marshalled_paged_decode_arguments_run_the_kernels_to_the_reference(calls, monkeypatch, num_splits) -> None:
    """GQA-packed decode on a shuffled paged cache: the block table and the packed units as passed."""
    k_cache, v_cache = _rand(10, 256, 2, 128, seed=4), _rand(10, 256, 2, 128, seed=5)
    block_table = torch.tensor([[7, 2, 9, 0], [1, 5, 3, 8]], dtype=torch.int32)
    q = _rand(2, 1, 8, 128, seed=8)
    _replay_on_sim(calls, monkeypatch, _nbytes(q=q, k=k_cache, v=v_cache, o=q, lse=torch.empty(2, 8)))
    out, lse = ptofa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor([250, 700], dtype=torch.int32),
                                             block_table=block_table, return_lse=True, num_splits=num_splits, backend="npu")
    ref = reference_kvcache(q, KVCache(k_cache, v_cache, block_table), [250, 700], 1 / math.sqrt(128), (-1, -1),
                            torch.float16)
    assert [call.entry for call in calls] == [argspec.ENTRY_NAME, argspec.REDUCE_ENTRY_NAME][:num_splits]
    assert calls[0].values["max_pages"] == 4
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed
    assert check_lse(lse, ref).passed


@pytest.mark.npu
def test_serving_on_the_npu_matches_the_reference() -> None:
    device = torch.device("npu", 0)
    q, k, v = _rand(sum(Q_LENS), 4, 64, seed=1), _rand(sum(K_LENS), 2, 64, seed=2), _rand(sum(K_LENS), 2, 64, seed=3)
    ref = reference_varlen(q, k, v, Q_LENS, K_LENS, 1 / 8, (-1, 0), torch.float16)
    for splits in (1, 3):
        out, lse = ptofa.flash_attn_varlen_func(*(t.to(device) for t in (q, k, v)), _cu(Q_LENS), _cu(K_LENS), 300, 900,
                                                causal=True, return_lse=True, num_splits=splits, backend="npu")
        assert check_accuracy(out.cpu().float(), ref.out32, ref.out_low).passed
        assert check_lse(lse.cpu(), ref).passed
    k_cache, v_cache = _rand(10, 256, 2, 128, seed=4), _rand(10, 256, 2, 128, seed=5)
    block_table = torch.tensor([[7, 2, 9, 0], [1, 5, 3, 8]], dtype=torch.int32)
    q = _rand(2, 1, 8, 128, seed=8)
    lens = torch.tensor([250, 700], dtype=torch.int32)
    ref = reference_kvcache(q, KVCache(k_cache, v_cache, block_table), [250, 700], 1 / math.sqrt(128), (-1, -1),
                            torch.float16)
    out = ptofa.flash_attn_with_kvcache(q.to(device), k_cache.to(device), v_cache.to(device), cache_seqlens=lens,
                                        block_table=block_table.to(device), num_splits=2, backend="npu")
    assert check_accuracy(out.cpu().float(), ref.out32, ref.out_low).passed
