"""The atomic-add dQ mode of the backward (prep + dkdv with atomic dQ + post): gradients,
agreement with the deterministic mode, the atomic adds themselves, rules, IR, timing, CLI."""

from __future__ import annotations

import pytest
import torch

import ptofa
from ptofa.attention.backward import (
    BackwardBuffers,
    attention_backward,
    check_gradients,
    launch_args,
    parsed_kernels,
    reference_backward,
    run_backward,
)
from ptofa.kernels.bwd_pipeline import BwdConfig, budget, entry_args, tile_plan, work_units
from ptofa.sim.bwd_timing import predict_backward
from ptofa.kernels.fa_bwd import build_bwd, emit_bwd
from ptofa.pipeline import ConfigError, ProblemShape
from ptofa.reference import check_accuracy
from ptofa.sim import simulate
from ptofa.ir.textio import check_text, parse_pto, print_pto
from ptofa.kernels.builtin_mods.window import window_mods
from test_backward import _inputs

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def _case(b, n, kvn, s0, s1, d, dt, window, seed=0):
    q, k, v, dout = _inputs(b, n, kvn, s0, s1, d, DTYPES[dt], seed)
    out, lse = ptofa.flash_attn_func(q, k, v, window_size=window, return_lse=True, backend="sim")
    win = None if window == (-1, -1) else window
    return (q, k, v, out, lse, dout), win


def _check(case, deterministic=False, **kwargs):
    (q, k, v, out, lse, dout), win = case
    grads = attention_backward(q, k, v, out, lse, dout, window=win, deterministic=deterministic, **kwargs)
    acc = check_gradients(*grads, reference_backward(q, k, v, dout, window=win or (-1, -1)))
    failed = {name: str(a) for name, a in acc.items() if not a.passed}
    assert not failed, failed
    return grads


CASES = [
    # b, n, kvn, s0, s1, d, dtype, window
    (1, 2, 2, 128, 192, 128, "f16", (-1, -1)),
    (1, 1, 1, 77, 93, 64, "f16", (-1, -1)),  # tails on both sides (a KV block whose second vector core has no keys)
    (1, 1, 1, 100, 230, 64, "f16", (-1, 0)),  # causal S0 < S1
    (1, 1, 1, 230, 100, 128, "f16", (-1, 0)),  # causal S0 > S1: rows that see no key
    (1, 2, 1, 190, 170, 64, "bf16", (20, 5)),  # sliding window, GQA 2
    (2, 4, 1, 77, 93, 64, "bf16", (-1, -1)),  # GQA 4, batch 2
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_atomic_gradients_match_fp64_autograd(case):
    _check(_case(*case))


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (64, 32)])
def test_atomic_gradient_grid(dt, d, window):
    _check(_case(2, 4, 2, 333, 257, d, dt, window))


def test_rows_that_see_no_key_get_exactly_zero_dq():
    """Causal with S0 > S1: no atomic add reaches the first S0 - S1 rows; the prep kernel's zeros are cast to 0."""
    dq, dk, dv = _check(_case(1, 1, 1, 200, 64, 64, "f16", (-1, 0)))
    assert (dq[:, : 200 - 64] == 0).all() and dq[:, 200 - 64:].abs().sum() > 0
    assert torch.isfinite(dk).all() and torch.isfinite(dv).all()


def test_atomic_and_deterministic_agree_within_the_rule():
    """Both modes pass the rule, and the atomic dQ is within the rule of the deterministic one
    (taken as the reference, with the input-dtype autograd as the low-precision comparison);
    dK, dV come from the same dkdv arithmetic and agree to rounding of a differently blocked sum."""
    case = _case(1, 2, 1, 150, 170, 64, "f16", (-1, 0), seed=3)
    (q, k, v, out, lse, dout), win = case
    det = _check(case, deterministic=True)
    atom = _check(case, deterministic=False)
    ref = reference_backward(q, k, v, dout, window=win)
    for ours, theirs, exact, low in zip(atom, det, ref.exact, ref.low):
        assert check_accuracy(ours, theirs.double(), low).passed
        assert check_accuracy(ours, exact, low).passed
    assert not torch.equal(atom[0], torch.zeros_like(atom[0]))


def test_atomic_adds_accumulate_from_several_blocks():
    """dQ of one query row gets one atomic add per KV block (and q head step) that sees it: with
    3 KV blocks on 3 blocks, the f32 accumulator (NaN before the launch: the prep kernel zeroes
    it) equals dS K summed in fp64, and a second dkdv launch on its own adds the same amount again
    (the stores add into what is there, they do not overwrite it)."""
    config = BwdConfig(head=64, atomic_dq=True, block_q=64)
    b, n, s0, s1 = 1, 1, 64, 192
    shape = ProblemShape(b, n, s0, s1)
    (q, k, v, out, lse, dout), _ = _case(b, n, 1, s0, s1, 64, "f16", (-1, -1), seed=5)
    grads = BackwardBuffers.zeros(q, k, atomic=True)
    assert grads.dq_acc.isnan().all()
    results = run_backward(config, shape, q, k, v, out, lse, dout, grads, 0.125, block_dim=3)
    assert work_units(config, "dkdv", b, n, 1, s0, s1) == 3
    dsq_pops = {blk: c["tpop"].get("cube", 0) for (blk, pid), c in results["dkdv"].pipe_counts.items() if pid == 2}
    assert dsq_pops == {0: 1, 1: 1, 2: 1}  # each block adds its KV block's dS K into the same 64 rows
    exact = reference_backward(q, k, v, dout, scale=0.125).exact[0].float()
    assert torch.allclose(grads.dq_acc, exact, atol=2e-2, rtol=2e-2)
    assert torch.allclose(grads.dq.float(), grads.dq_acc.to(torch.float16).float())
    once = grads.dq_acc.clone()
    tensors = {"q": q, "k": k, "v": v, "do": dout, "lse": lse, "dsum": grads.dsum, "dk": grads.dk, "dv": grads.dv,
               "dq_acc": grads.dq_acc}
    simulate(parsed_kernels(config)["dkdv"], launch_args(config, "dkdv", shape, tensors, 0.125, 3), 3)
    assert torch.allclose(grads.dq_acc, 2 * once, atol=1e-5)


def test_the_prep_kernel_zeroes_every_accumulator_row():
    """GQA, two batches, ragged S0: after prep alone, the NaN-filled accumulator is all zeros."""
    config = BwdConfig(head=64, atomic_dq=True, block_q=64)
    shape = ProblemShape(2, 4, 77, 93, 2)
    (q, k, v, out, lse, dout), _ = _case(2, 4, 2, 77, 93, 64, "f16", (-1, -1))
    grads = BackwardBuffers.zeros(q, k, atomic=True)
    tensors = {"o": out, "do": dout, "dsum": grads.dsum, "dq_acc": grads.dq_acc}
    blocks = work_units(config, "prep", 2, 4, 2, 77, 93)
    simulate(parsed_kernels(config)["prep"], launch_args(config, "prep", shape, tensors, 0.125, blocks), blocks)
    assert torch.equal(grads.dq_acc, torch.zeros_like(grads.dq_acc)) and not grads.dsum.isnan().any()


def test_atomic_mode_does_not_run_the_dq_kernel():
    case = _case(1, 1, 1, 64, 64, 64, "f16", (-1, -1))
    (q, k, v, out, lse, dout), _ = case
    config = BwdConfig(head=64, atomic_dq=True, block_q=64)
    grads = BackwardBuffers.zeros(q, k, atomic=True)
    results = run_backward(config, ProblemShape(1, 1, 64, 64), q, k, v, out, lse, dout, grads, 0.125)
    assert list(results) == ["prep", "dkdv", "post"]
    assert torch.isfinite(grads.dsum).all()  # D written by prep


# ---- rules, IR -----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, rule", [
    (dict(atomic_dq=True), "atomic dQ tiles"),  # block_q=128 != block_kv=64
    (dict(atomic_dq=True, block_q=128, block_kv=128, head=64), "memory budget"),  # L0C: S^T, dP^T 64 KiB each
])
def test_invalid_atomic_configs_name_the_rule(kwargs, rule):
    with pytest.raises(ConfigError, match=rule):
        BwdConfig(**kwargs)


def test_atomic_budget_fills_l0c_at_d128():
    """dK, dV (32 KiB each), S^T, dP^T (16 KiB each) and the dQ partial (32 KiB): L0C's 128 KiB exactly."""
    acc = next(row for row in budget(BwdConfig(atomic_dq=True, block_q=64), "dkdv").rows if row.space == "acc")
    assert acc.used == acc.capacity == 128 * 1024
    assert "dqp_acc" in dict(acc.items)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("kernel", ["prep", "dkdv", "post"])
def test_atomic_pto_round_trips_and_verifies(kernel, masked):
    config = BwdConfig(mods=window_mods(masked), atomic_dq=True, block_q=64, in_dtype="bf16")
    text = emit_bwd(config, kernel)
    check_text(text, f"{kernel}.pto")
    assert print_pto(parse_pto(text).module) == text
    names = sorted(line.split("=")[0].strip().lstrip("%") for line in text.splitlines() if "pto.alloc_tile" in line)
    assert names == sorted(spec.name for spec in tile_plan(config, kernel))
    entry = next(op for op in build_bwd(config, kernel).body.block.ops if "pto.entry" in op.attributes)
    assert [arg.name_hint for arg in entry.body.block.args] == [name for name, _ in entry_args(config, kernel)]
    if kernel == "dkdv":
        pops = sum(1 for line in text.splitlines() if "pto.tpop_from_aiv" in line and "id = 2," in line)
        assert text.count("atomicType = #pto<atomic_type atomic_add>") == pops >= 1  # one add per dS piece pop
        assert text.count("pto.ttrans") == 1
    elif kernel == "prep":  # one matmul per D chunk: G = dO O^T, whose diagonal is D
        assert "atomic" not in text and text.count("pto.tmatmul") == config.d_split
    else:
        assert "atomic" not in text and "pto.tmatmul" not in text


def test_kernels_outside_the_mode_are_refused():
    with pytest.raises(ValueError, match="must be one of"):
        emit_bwd(BwdConfig(), "post")
    with pytest.raises(ValueError, match="must be one of"):
        emit_bwd(BwdConfig(atomic_dq=True, block_q=64), "dq")


def test_run_backward_needs_the_f32_accumulator():
    (q, k, v, out, lse, dout), _ = _case(1, 1, 1, 64, 64, 64, "f16", (-1, -1))
    with pytest.raises(ValueError, match="dq_acc"):
        run_backward(BwdConfig(head=64, atomic_dq=True, block_q=64), ProblemShape(1, 1, 64, 64), q, k, v, out, lse,
                     dout, BackwardBuffers.zeros(q, k), 0.125)


def test_simulator_memory_peak_equals_the_budget():
    config, shape = BwdConfig(head=128, mods=window_mods(), atomic_dq=True, block_q=64), ProblemShape(1, 1, 130, 140, window=(-1, 0))
    (q, k, v, out, lse, dout), _ = _case(1, 1, 1, 130, 140, 128, "f16", (-1, 0))
    grads = BackwardBuffers.zeros(q, k, atomic=True)
    results = run_backward(config, shape, q, k, v, out, lse, dout, grads, 0.1, block_dim=1)
    for kernel, result in results.items():
        planned = {row.space: row.used for row in budget(config, kernel).rows}
        peak = result.peak_bytes
        assert peak[(0, "vec0")]["vec"] == peak[(0, "vec1")]["vec"] == planned["vec"], kernel
        if kernel == "dkdv":
            for space in ("mat", "left", "right", "acc"):
                assert peak[(0, "cube")][space] == planned[space], (kernel, space)


# ---- timing, CLI ---------------------------------------------------------------------------


def test_timing_model_times_the_three_kernels():
    config, shape = BwdConfig(atomic_dq=True, block_q=64), ProblemShape(1, 1, 512, 512)
    (q, k, v, out, lse, dout), _ = _case(1, 1, 1, 512, 512, 128, "f16", (-1, -1))
    grads = BackwardBuffers.zeros(q, k, atomic=True)
    timing = predict_backward(run_backward(config, shape, q, k, v, out, lse, dout, grads, 128 ** -0.5, trace=True),
                              config, shape)
    assert list(timing.kernels) == ["prep", "dkdv", "post"]
    assert timing.kernels["dkdv"].kernel_us > timing.kernels["dkdv"].cube_bound_us > 0
    assert timing.kernels["prep"].cube_bound_us > 0 == timing.kernels["post"].cube_bound_us  # prep: D's dO O^T
    assert all(t.kernel_us > 0 for t in timing.kernels.values())
    assert "matmul work 5/2" in timing.summary(forward_us=1.0)


def test_cli_run_backward_atomic_checks_gradients():
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, ["run", "--backend", "sim", "--backward", "--atomic", "--heads", "2",
                                       "--kv-heads", "1", "--s0", "100", "--s1", "150", "--causal", "--head", "64"])
    assert result.exit_code == 0, result.output
    for name in ("dq", "dk", "dv"):
        assert f"{name}: pass" in result.output
    assert "atomic_dq" in result.output and "prep" in result.output and "post" in result.output


def test_cli_build_backward_atomic_writes_three_kernels(tmp_path):
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, ["build", "--backward", "--atomic", "--causal", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for kernel in ("prep", "dkdv", "post"):
        check_text((tmp_path / f"fa_bwd_{kernel}.pto").read_text(), kernel)
    assert not (tmp_path / "fa_bwd_dq.pto").exists()


@pytest.mark.slow
def test_cli_timing_at_8k():
    """The atomic mode's predicted backward/forward ratio at S=8192, D=128 (printed; gradients not checked)."""
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, ["run", "--backend", "sim", "--backward", "--atomic", "--heads", "1",
                                       "--s0", "8192", "--s1", "8192"])
    assert result.exit_code == 0, result.output
    assert "backward/forward ratio" in result.output
