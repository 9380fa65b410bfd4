"""The varlen backward: the dq and dkdv kernels walking unit tables of packed sequences, one launch
each for the whole batch (`attention.backward.varlen_backward`, `launch.varlen.backward_tables`),
checked against per-sequence fp64 autograd with the accuracy rule; deterministic mode bit-identical
across runs and block counts; the atomic mode's launches on the (fake) NPU path replayed on the
simulator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ptofa
from ptofa.attention import backward
from ptofa.attention.backward import check_gradients, reference_varlen_backward, varlen_backward
from ptofa.kernels import argspec
from ptofa.kernels.builtin_mods.alibi import Alibi
from ptofa.kernels.builtin_mods.softcap import Softcap
from ptofa.kernels.bwd_pipeline import BwdConfig, default_config
from ptofa.kernels.fa_bwd import emit_bwd, entry_name
from ptofa.kernels.units import kernel_bounds, queries_seeing, row_keys, visible_tiles
from ptofa.launch import npu
from ptofa.launch.plan import plan_backward
from ptofa.launch.toolchain import entry_signature
from ptofa.launch.varlen import backward_tables, varlen_shape
from ptofa.pipeline import UNIT_FIELDS, UNIT_TABLE, ConfigError
from ptofa.sim import GmPointer, simulate
from ptofa.kernels.builtin_mods.window import window_mods

from fake_npu import install_fake_npu
from test_backward_npu import _gm, _launcher_params

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
LENS = ([0, 1, 127, 129], [5, 130, 127, 0])  # a sequence without queries, one row, ragged tails, one without keys


def _cu(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _case(q_lens, k_lens, n, kvn, d, dtype=torch.float16, window=(-1, -1), seed=0):
    """Packed q, k, v, dout and the varlen forward's out and LSE (the backward's real inputs)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(q_lens), n, d, generator=g).to(dtype)
    k = torch.randn(sum(k_lens), kvn, d, generator=g).to(dtype)
    v = torch.randn(sum(k_lens), kvn, d, generator=g).to(dtype)
    dout = torch.randn(sum(q_lens), n, d, generator=g).to(dtype)
    out, lse = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens),
                                            window_size=window, return_lse=True, backend="sim")
    return q, k, v, out, lse, dout


def _check(grads, q, k, v, dout, q_lens, k_lens, window) -> None:
    acc = check_gradients(*grads, reference_varlen_backward(q, k, v, dout, q_lens, k_lens, window=window))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}


@pytest.mark.parametrize("d, dt, n, kvn, window, deterministic", [
    (64, "f16", 2, 1, (-1, -1), True),  # MQA, no mask
    (64, "bf16", 4, 2, (-1, 0), True),  # GQA, causal (bottom-right per sequence)
    (64, "f16", 4, 2, (40, 3), False),  # a sliding window, atomic dQ
    (192, "bf16", 4, 2, (-1, 0), True),  # D split in two chunks
    (256, "f16", 3, 1, (30, 0), False),  # dkdv in two passes (deterministic) / 32-key blocks (atomic)
])
def test_varlen_gradients_pass_the_rule(d, dt, n, kvn, window, deterministic) -> None:
    q_lens, k_lens = LENS
    q, k, v, out, lse, dout = _case(q_lens, k_lens, n, kvn, d, DTYPES[dt], window, seed=d)
    grads = varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, window=window, deterministic=deterministic,
                            backend="sim")
    _check(grads, q, k, v, dout, q_lens, k_lens, window)
    assert grads[0][:1].abs().sum() > 0 and torch.count_nonzero(grads[1][:5]) == 0  # keys of the query-less sequence


def test_a_1000_row_sequence_beside_short_ones() -> None:
    q_lens, k_lens = [1000, 0, 37], [1000, 3, 100]
    q, k, v, out, lse, dout = _case(q_lens, k_lens, 1, 1, 64, window=(-1, 0), seed=7)
    grads = varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, window=(-1, 0), backend="sim")
    _check(grads, q, k, v, dout, q_lens, k_lens, (-1, 0))


def test_flash_attn_varlen_func_trains_through_one_launch(monkeypatch) -> None:
    """The autograd path of flash_attn_varlen_func: one plan for the batch (not one per sequence),
    gradients within the rule, in both modes."""
    q_lens, k_lens = LENS
    planned = []
    real = backward.plan_backward

    def record(config, shape, *args, **kwargs):
        planned.append(config)
        return real(config, shape, *args, **kwargs)

    monkeypatch.setattr(backward, "plan_backward", record)
    for deterministic in (True, False):
        q, k, v, _, _, dout = _case(q_lens, k_lens, 4, 2, 64, window=(-1, 0), seed=3)
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = ptofa.flash_attn_varlen_func(*leaves, _cu(q_lens), _cu(k_lens), 129, 130, causal=True,
                                           deterministic=deterministic, backend="sim")
        out.backward(dout)
        _check([x.grad for x in leaves], q, k, v, dout, q_lens, k_lens, (-1, 0))
    assert [(c.varlen, c.atomic_dq) for c in planned] == [(True, False), (True, True)]


@pytest.mark.parametrize("kernel", ["dq", "dkdv"])
def test_a_table_missing_a_unit_fails_the_rule(monkeypatch, kernel) -> None:
    """The kernels do what the table says: without the first (longest) unit of one kernel's table, the
    gradients it owns stay 0 and fail the rule (the checks above can see a table mistake); a missing
    dq unit also leaves D of its rows unwritten (NaN), which the dkdv kernel's dK reads (dV = P^T dO does not)."""
    q_lens, k_lens = [70, 129], [90, 129]
    q, k, v, out, lse, dout = _case(q_lens, k_lens, 2, 1, 64, window=(-1, 0), seed=2)
    real = backward.backward_tables
    monkeypatch.setattr(backward, "backward_tables",
                        lambda *a, **kw: {name: t[1:] if name == kernel else t for name, t in real(*a, **kw).items()})
    grads = varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, window=(-1, 0), backend="sim")
    acc = check_gradients(*grads, reference_varlen_backward(q, k, v, dout, q_lens, k_lens, window=(-1, 0)))
    owned = ("dq", "dk") if kernel == "dq" else ("dk", "dv")
    assert all(not acc[name].passed for name in owned) and all(acc[n].passed for n in acc if n not in owned)


def test_deterministic_mode_is_bit_identical_across_runs_and_block_counts() -> None:
    q_lens, k_lens = [70, 0, 129, 3], [90, 4, 129, 200]
    q, k, v, out, lse, dout = _case(q_lens, k_lens, 4, 2, 64, window=(-1, 0), seed=11)
    runs = [varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, window=(-1, 0), backend="sim", block_dim=b)
            for b in (None, None, 1, 3)]
    for grads in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], grads))
    _check(runs[0], q, k, v, dout, q_lens, k_lens, (-1, 0))


def test_no_rows_or_no_keys_give_zero_gradients_without_a_launch(monkeypatch) -> None:
    monkeypatch.setattr(backward, "plan_backward", lambda *a, **kw: pytest.fail("nothing to launch"))
    q, k = torch.zeros(0, 2, 64, dtype=torch.float16), torch.randn(5, 1, 64).half()
    grads = varlen_backward(q, k, k, q, torch.zeros(2, 0), q, [0, 0], [2, 3])
    assert [tuple(g.shape) for g in grads] == [(0, 2, 64), (5, 1, 64), (5, 1, 64)]
    assert all(torch.count_nonzero(g) == 0 for g in grads)


# ---- the unit tables ------------------------------------------------------------------------


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (20, 7), (0, 0)])
def test_backward_tables_list_every_unit_with_work_longest_first(window) -> None:
    """dq: every (sequence, head, Q block) of a sequence with queries; dkdv: exactly the (sequence, KV
    head, KV block) some query row sees (brute force over `units.row_keys`), work non-increasing."""
    q_lens, k_lens, heads, kv_heads = [0, 1, 127, 129, 65], [5, 130, 127, 0, 300], 4, 2
    c = default_config(64, mods=window_mods(window != (-1, -1)), varlen=True)
    tables = backward_tables(c, q_lens, k_lens, heads, kv_heads, window)
    f = {name: i for i, name in enumerate(UNIT_TABLE)}
    assert all(t.dtype == torch.int32 and t.shape[1] == UNIT_FIELDS for t in tables.values())
    dq = {(r[f["seq"]], r[f["head"]], r[f["q_block"]]) for r in tables["dq"].tolist()}
    assert len(dq) == len(tables["dq"]) and dq == {(s, h, b) for s, q in enumerate(q_lens) for h in range(heads)
                                                   for b in range(-(-q // c.dq_block_q))}
    expected = set()
    for s, (q, k) in enumerate(zip(q_lens, k_lens)):
        bounds = kernel_bounds(window, q, k)
        seen = {j // c.block_kv for i in range(q) for j in range(*row_keys(i, q, k, bounds))}
        expected |= {(s, g, b) for b in seen for g in range(kv_heads)}
    dkdv = {(r[f["seq"]], r[f["head"]], r[f["q_block"]]) for r in tables["dkdv"].tolist()}
    assert len(dkdv) == len(tables["dkdv"]) and dkdv == expected
    work = {"dq": [], "dkdv": []}
    for r in tables["dq"].tolist():
        q, k, b = r[f["q_len"]], r[f["k_len"]], r[f["q_block"]] * c.dq_block_q
        bounds = kernel_bounds(window, q, k) if c.narrowing else None
        work["dq"].append(visible_tiles(b, min(c.dq_block_q, q - b), q, k, bounds, c.dq_block_kv))
    for r in tables["dkdv"].tolist():
        q, k, b = r[f["q_len"]], r[f["k_len"]], r[f["q_block"]] * c.block_kv
        lo, hi = queries_seeing(b, min(c.block_kv, k - b), q, k, kernel_bounds(window, q, k) if c.narrowing else None,
                                c.block_q)
        work["dkdv"].append(hi - lo)
    assert all(w == sorted(w, reverse=True) for w in work.values()) and work["dq"][0] > work["dq"][-1]
    for r in tables["dq"].tolist() + tables["dkdv"].tolist():
        s = r[f["seq"]]
        assert (r[f["q_start"]], r[f["q_len"]]) == (sum(q_lens[:s]), q_lens[s])
        assert (r[f["k_start"]], r[f["k_len"]]) == (sum(k_lens[:s]), k_lens[s])


def test_varlen_rules() -> None:
    with pytest.raises(ConfigError, match="varlen key padding"):
        BwdConfig(head=64, varlen=True, key_padding=True)
    c = default_config(64, varlen=True)
    with pytest.raises(ValueError, match=r"unit tables of \['dq', 'dkdv'\]"):
        plan_backward(c, varlen_shape([3], [4], 1, 1), "910B2", scale=0.1)
    q = torch.zeros(4, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="must be as many and sum to total_q=4"):
        varlen_backward(q, q, q, q, torch.zeros(2, 4), q, [1, 2], [4, 0])


# ---- the NPU path (fake launcher, launches replayed on the simulator) -------------------------


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_npu_launches_carry_the_tables_and_replay_to_the_reference(monkeypatch, tmp_path, deterministic) -> None:
    """`backend="npu"`: the kernels of the mode in order, each with its `.pto` entry's arguments in
    signature order; the dq and dkdv kernels get their unit tables (int32) and lengths, and the
    atomic mode's prep, dkdv and post share one f32 dQ accumulator over all packed rows. Each launch
    is replayed on the simulator from its recorded addresses and values alone."""
    q_lens, k_lens, n, kvn = [0, 1, 127, 70], [5, 130, 127, 0], 4, 2
    q, k, v, out, lse, dout = _case(q_lens, k_lens, n, kvn, 64, window=(-1, 0), seed=5)
    calls = install_fake_npu(monkeypatch, npu, 24)
    config = default_config(64, mods=window_mods(), atomic_dq=not deterministic, varlen=True)
    tables = backward_tables(config, q_lens, k_lens, n, kvn, (-1, 0))
    qb, kb, lb = q.numel() * 2, k.numel() * 2, lse.numel() * 4
    sizes = {**dict.fromkeys(("q", "o", "do", "dq"), qb), **dict.fromkeys(("k", "v", "dk", "dv"), kb), "lse": lb,
             "dsum": lb, "dq_acc": 2 * qb}

    def replay(call) -> None:
        kernel = call.entry.removeprefix("fa_bwd_")
        size = {**sizes, "slots": config.slot_bytes_per_block(kernel) * call.block_dim,
                "units": call.values.get("num_units", 0) * UNIT_FIELDS * 4}
        args = {}
        for arg in entry_signature(call.text)[1]:
            if arg.source == "ffts":
                args[arg.name] = GmPointer.of(np.zeros(16, dtype=np.int64))
            elif arg.ir_type.startswith("!pto.ptr<"):
                args[arg.name] = _gm(call.values[arg.source], max(size[arg.source], 4), arg.ir_type)
            else:
                args[arg.name] = call.values[arg.source]
        if kernel in tables:
            got = _gm(call.values["units"], size["units"], "!pto.ptr<i32>").buf.view("int32").reshape(-1, UNIT_FIELDS)
            assert torch.equal(torch.from_numpy(got.copy()), tables[kernel])
        simulate(backward.backward_kernel(config, kernel).parsed, args, call.block_dim)

    calls.on_launch = replay
    grads = varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, window=(-1, 0), deterministic=deterministic,
                            backend="npu")
    assert [call.entry for call in calls] == [entry_name(kernel) for kernel in config.kernels]
    for call in calls:
        kernel = call.entry.removeprefix("fa_bwd_")
        assert call.text == emit_bwd(config, kernel)
        assert [argspec.c_ident(name) for name in call.order] == _launcher_params(call.text, tmp_path)
        assert (call.values["batch"], call.values["heads"], call.values["s0"]) == (1, n, sum(q_lens))
        if kernel in tables:
            assert call.values["num_units"] == len(tables[kernel]) and call.block_dim == min(len(tables[kernel]), 24)
            assert call.values["s1"] == sum(k_lens)
    if not deterministic:
        prep, dkdv, post = calls
        assert prep.values["dq_acc"] == dkdv.values["dq_acc"] == post.values["dq_acc"] != 0
    _check(grads, q, k, v, dout, q_lens, k_lens, (-1, 0))


# ---- softcap, ALiBi and padded head dims through the varlen backward ---------------------------


@pytest.mark.parametrize("deterministic", [True, False])
def test_varlen_alibi_and_softcap_per_sequence(deterministic) -> None:
    """ALiBi with [B, N] slopes and softcap in one launch: each unit's bias uses its own sequence's
    diagonal k_len - q_len (ragged lengths with S0 != S1 inside sequences, and total_q != total_k,
    so the launch's s1 - s0 would be wrong) and its own sequence's row of slopes; causal and GQA."""
    q_lens, k_lens, n, kvn, d, window = [0, 1, 70, 129, 40], [5, 130, 33, 129, 95], 4, 2, 64, (-1, 0)
    g = torch.Generator().manual_seed(11)
    q, k, v, dout = (torch.randn(sum(lens), heads, d, generator=g).half()
                     for lens, heads in ((q_lens, n), (k_lens, kvn), (k_lens, kvn), (q_lens, n)))
    slopes = torch.rand(len(q_lens), n, generator=g) * 0.5 + 0.05  # a different slope per (sequence, head)
    out, lse = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens),
                                            causal=True, softcap=5.0, alibi_slopes=slopes, return_lse=True,
                                            backend="sim")
    grads = varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, window=window, deterministic=deterministic,
                            softcap=5.0, alibi_slopes=slopes, backend="sim")
    ref = reference_varlen_backward(q, k, v, dout, q_lens, k_lens, window=window, softcap=5.0, alibi_slopes=slopes)
    acc = check_gradients(*grads, ref)
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
    # the bias matters here: without it (or with another sequence's slopes) the gradients fail the rule
    off = check_gradients(*grads, reference_varlen_backward(q, k, v, dout, q_lens, k_lens, window=window,
                                                            softcap=5.0, alibi_slopes=slopes.flip(0)))
    assert not all(a.passed for a in off.values())


def test_varlen_alibi_trains_through_flash_attn_varlen_func(monkeypatch) -> None:
    """The autograd path with softcap and [N] slopes: one varlen plan for the batch, alibi and softcap on."""
    q_lens, k_lens = [37, 0, 100], [60, 4, 80]
    planned = []
    real = backward.plan_backward
    monkeypatch.setattr(backward, "plan_backward", lambda c, *a, **kw: planned.append(c) or real(c, *a, **kw))
    g = torch.Generator().manual_seed(4)
    q, k, v, dout = (torch.randn(sum(lens), 2, 64, generator=g).bfloat16() for lens in (q_lens, k_lens, k_lens, q_lens))
    slopes = torch.tensor([0.25, 0.0625])
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = ptofa.flash_attn_varlen_func(*leaves, _cu(q_lens), _cu(k_lens), 100, 80, softcap=3.0, alibi_slopes=slopes,
                                       backend="sim")
    out.backward(dout)
    ref = reference_varlen_backward(q, k, v, dout, q_lens, k_lens, softcap=3.0, alibi_slopes=slopes)
    acc = check_gradients(*(x.grad for x in leaves), ref)
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
    assert [(c.varlen, c.mods) for c in planned] == [(True, (Softcap(), Alibi()))]


def test_varlen_backward_on_padded_head_dims() -> None:
    """D = 59, Dv = 40 (no kernel width): q/k/v/out/dO zero-padded to kernel_head(59, 40) = 64, one varlen
    launch, dq/dk sliced back to 59 columns and dv to 40, within the rule."""
    q_lens, k_lens, n, kvn, d, d_v, window = [0, 1, 127, 70], [5, 130, 127, 90], 4, 2, 59, 40, (-1, 0)
    g = torch.Generator().manual_seed(9)
    q = torch.randn(sum(q_lens), n, d, generator=g).half()
    k = torch.randn(sum(k_lens), kvn, d, generator=g).half()
    v = torch.randn(sum(k_lens), kvn, d_v, generator=g).half()
    dout = torch.randn(sum(q_lens), n, d_v, generator=g).half()
    out, lse = ptofa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), max(q_lens), max(k_lens),
                                            causal=True, return_lse=True, backend="sim")
    assert out.shape == (sum(q_lens), n, d_v)
    grads = varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, window=window, backend="sim")
    assert [tuple(x.shape) for x in grads] == [tuple(q.shape), tuple(k.shape), tuple(v.shape)]
    _check(grads, q, k, v, dout, q_lens, k_lens, window)
