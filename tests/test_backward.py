"""The FlashAttention backward kernels: gradients against fp64 autograd, determinism, rules, IR."""

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
from ptofa.kernels.bwd_pipeline import BwdConfig, budget, entry_args, tile_plan
from ptofa.sim.bwd_timing import predict_backward
from ptofa.kernels.fa_bwd import build_bwd, emit_bwd
from ptofa.pipeline import ConfigError, ProblemShape
from ptofa.reference import visible_mask
from ptofa.sim import SimImbalance, simulate
from ptofa.ir.textio import check_text, parse_pto, print_pto
from ptofa.kernels.builtin_mods.window import window_mods

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def _inputs(b, n, kvn, s0, s1, d=64, dtype=torch.float16, seed=0):
    """Seeded Q [B, S0, N, D], K and V [B, S1, KVN, D], dO, in `dtype` (shared by the backward tests)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s0, n, d, generator=g).to(dtype)
    k = torch.randn(b, s1, kvn, d, generator=g).to(dtype)
    v = torch.randn(b, s1, kvn, d, generator=g).to(dtype)
    dout = torch.randn(b, s0, n, d, generator=g).to(dtype)
    return q, k, v, dout


def _forward(q, k, v, window):
    """O and LSE from ptofa's forward kernel (the backward's real inputs)."""
    return ptofa.flash_attn_func(q, k, v, window_size=window, return_lse=True, backend="sim")


def _check_case(b, n, kvn, s0, s1, d, dt, window):
    q, k, v, dout = _inputs(b, n, kvn, s0, s1, d, DTYPES[dt])
    out, lse = _forward(q, k, v, window)
    dq, dk, dv = attention_backward(q, k, v, out, lse, dout, window=None if window == (-1, -1) else window)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    acc = check_gradients(dq, dk, dv, reference_backward(q, k, v, dout, window=window))
    failed = {name: str(a) for name, a in acc.items() if not a.passed}
    assert not failed, failed
    return dq, dk, dv


CASES = [
    # b, n, kvn, s0, s1, d, dtype, window
    (1, 1, 1, 128, 128, 64, "f16", (-1, -1)),
    (1, 2, 2, 256, 192, 128, "f16", (-1, -1)),
    (1, 1, 1, 77, 93, 64, "f16", (-1, -1)),  # tails on both sides
    (1, 1, 1, 150, 150, 64, "f16", (-1, 0)),  # causal S0 = S1
    (1, 1, 1, 100, 230, 64, "f16", (-1, 0)),  # causal S0 < S1
    (1, 1, 1, 230, 100, 128, "f16", (-1, 0)),  # causal S0 > S1: rows that see no key
    (1, 2, 1, 190, 170, 64, "f16", (20, 5)),  # sliding window
    (2, 4, 1, 77, 93, 64, "bf16", (-1, -1)),  # GQA 4, batch 2
    (1, 8, 1, 64, 130, 128, "bf16", (-1, 0)),  # GQA 8, causal
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_gradients_match_fp64_autograd(case):
    _check_case(*case)


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (64, 32)])
def test_gradient_grid(dt, d, window):
    _check_case(2, 4, 2, 333, 257, d, dt, window)


def test_rows_that_see_no_key_get_zero_gradients():
    """Causal with S0 > S1: the first S0 - S1 rows see no key (LSE = +inf); their dq is exactly 0."""
    dq, dk, dv = _check_case(1, 1, 1, 200, 64, 64, "f16", (-1, 0))
    assert torch.isfinite(dq).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    assert (dq[:, : 200 - 64] == 0).all()
    assert dq[:, 200 - 64 :].abs().sum() > 0


def test_bit_identical_across_runs_and_block_counts():
    q, k, v, dout = _inputs(1, 2, 1, 150, 170, 64, torch.float16, seed=3)
    out, lse = _forward(q, k, v, (-1, 0))
    first = attention_backward(q, k, v, out, lse, dout, window=(-1, 0))
    again = attention_backward(q, k, v, out, lse, dout, window=(-1, 0))
    one_block = attention_backward(q, k, v, out, lse, dout, window=(-1, 0), block_dim=1)
    for a, b, c in zip(first, again, one_block):
        assert torch.equal(a, b) and torch.equal(a, c)


class _Attention(torch.autograd.Function):
    """Forward: the forward kernel (saves O and LSE only); backward: the backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, window):
        out, lse = ptofa.flash_attn_func(q, k, v, window_size=window, return_lse=True, backend="sim")
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.window = window
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        window = None if ctx.window == (-1, -1) else ctx.window
        return (*attention_backward(q, k, v, out, lse, dout, window=window), None)


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0)])
def test_autograd_function_against_fp64(window):
    """The analytic gradients of the whole Function (forward kernel + backward kernels) against fp64 autograd."""
    q, k, v, dout = _inputs(1, 4, 2, 70, 90, 64, torch.float16, seed=5)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    _Attention.apply(*leaves, window).backward(dout)
    acc = check_gradients(*(x.grad for x in leaves), reference_backward(q, k, v, dout, window=window))
    assert all(a.passed for a in acc.values()), {n: str(a) for n, a in acc.items()}


def test_reference_backward_matches_torch_sdpa():
    """The fp64 reference is torch's own attention gradient (unmasked and causal, bottom-right = top-left at S0 = S1)."""
    q, k, v, dout = _inputs(1, 2, 2, 40, 40, 64, torch.float16)
    for causal in (False, True):
        leaves = [x.double().transpose(1, 2).requires_grad_(True) for x in (q, k, v)]
        torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal).backward(dout.double().transpose(1, 2))
        ref = reference_backward(q, k, v, dout, window=(-1, 0) if causal else (-1, -1))
        for ours, theirs in zip(ref.exact, leaves):
            torch.testing.assert_close(ours, theirs.grad.transpose(1, 2), rtol=1e-9, atol=1e-9)


# ---- kernels as IR --------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("kernel", ["dq", "dkdv"])
def test_emitted_pto_round_trips_and_verifies(kernel, masked):
    config = BwdConfig(mods=window_mods(masked))
    text = emit_bwd(config, kernel)
    check_text(text, f"{kernel}.pto")
    assert print_pto(parse_pto(text).module) == text
    assert "atomic" not in text  # one writer per output element


@pytest.mark.parametrize("kernel", ["dq", "dkdv"])
def test_builder_allocates_exactly_the_tile_plan(kernel):
    config = BwdConfig(head=64, in_dtype="bf16")
    text = emit_bwd(config, kernel)
    names = sorted(line.split("=")[0].strip().lstrip("%") for line in text.splitlines() if "pto.alloc_tile" in line)
    assert names == sorted(spec.name for spec in tile_plan(config, kernel))


def test_entry_signature_is_entry_args():
    config = BwdConfig(mods=window_mods())
    for kernel in ("dq", "dkdv"):
        entry = next(op for op in build_bwd(config, kernel).body.block.ops if "pto.entry" in op.attributes)
        assert [arg.name_hint for arg in entry.body.block.args] == [name for name, _ in entry_args(config, kernel)]


def test_pipe_faults_are_reported():
    """The simulator's pipe reports cover the backward kernels: a vector that drops its tfree
    pops again before freeing (an imbalance report naming the op and the counts)."""
    config, shape = BwdConfig(head=64), ProblemShape(1, 1, 64, 1024)
    q, k, v, dout = _inputs(1, 1, 1, 64, 1024, 64, torch.float16)
    out, lse = _forward(q, k, v, (-1, -1))
    grads = BackwardBuffers.zeros(q, k)
    tensors = {"q": q, "k": k, "v": v, "o": out, "do": dout, "lse": lse, "dq": grads.dq, "dsum": grads.dsum}
    args = launch_args(config, "dq", shape, tensors, 0.125, 1)
    with pytest.raises(SimImbalance, match="second tpop on vec0 before the tfree"):
        simulate(parsed_kernels(config)["dq"], args, 1, fault="drop_tfree")


# ---- rules and bad input ----------------------------------------------------------------


@pytest.mark.parametrize("kwargs, rule", [
    (dict(head=72), "head dim"),
    (dict(in_dtype="f32"), "dtypes"),
    (dict(block_kv=48), "block size"),
    (dict(dkdv_passes=3), "dkdv passes"),
    (dict(dq_block_q=256), "block size"),
    (dict(dq_block_q=128, dq_block_kv=32), "D on the cube"),  # G [128, 128] in a [128, 64] sdp slot
    (dict(preload=0), "preload"),
    (dict(slot_num=5), "slot ring reuse"),
    (dict(slot_num=2, preload=2), "preload vs slot ring"),
    (dict(target="a5"), "target"),
    (dict(block_kv=128), "memory budget"),  # dK, dV, S^T, dP^T: 4 x 64 KiB of L0C at D=128
])
def test_invalid_configs_name_the_rule(kwargs, rule):
    with pytest.raises(ConfigError, match=rule):
        BwdConfig(**kwargs)


def test_budgets_fit_and_count_hidden_scratch():
    for head in (64, 96, 128):
        config = BwdConfig(head=head)
        for kernel in ("dq", "dkdv"):
            plan = budget(config, kernel)
            assert all(row.used <= row.capacity for row in plan.rows)
        # dP - D's trowexpandsub gets ptoas's hidden scratch; P's trowexpandexpdif takes exp_tmp
        assert sum(1 for name, _ in budget(config, "dq").rows[0].items if name.startswith("hidden_rowexpand")) == 1
        assert "exp_tmp" in dict(budget(config, "dq").rows[0].items)
    text = emit_bwd(BwdConfig(), "dq")
    assert text.count("pto.trowexpand") == 2
    assert text.count("pto.trowexpandexpdif ins(%s_tile, %lse_col, %exp_tmp :") == 1


def test_bad_inputs_raise_clear_errors():
    q, k, v, dout = _inputs(1, 2, 1, 64, 64, 64, torch.float16)
    lse = torch.zeros(1, 2, 64)
    with pytest.raises(TypeError, match="k.dtype"):
        attention_backward(q, k.to(torch.bfloat16), v, q, lse, dout)
    with pytest.raises(TypeError, match="float16 or torch.bfloat16"):
        attention_backward(q.float(), k.float(), v.float(), q.float(), lse, dout.float())
    with pytest.raises(ValueError, match="lse must be float32"):
        attention_backward(q, k, v, q, lse[:, :1], dout)
    with pytest.raises(ValueError, match="N=2 a multiple of KVN"):
        attention_backward(q, torch.cat([k] * 3, 2), torch.cat([v] * 3, 2), q, lse, dout)
    with pytest.raises(ConfigError, match="atomic_dq=False"):
        attention_backward(q, k, v, q, lse, dout, deterministic=False, config=BwdConfig(head=64))
    with pytest.raises(ValueError, match="backend='gpu' must be"):
        attention_backward(q, k, v, q, lse, dout, backend="gpu")
    with pytest.raises(ConfigError, match="head dim"):
        attention_backward(*(torch.zeros(1, 8, 1, 264, dtype=torch.float16),) * 4, torch.zeros(1, 1, 8),
                           torch.zeros(1, 8, 1, 264, dtype=torch.float16))


# ---- timing -------------------------------------------------------------------------------


def test_timing_model_times_both_kernels():
    config, shape = BwdConfig(), ProblemShape(1, 1, 512, 512)
    q, k, v, dout = _inputs(1, 1, 1, 512, 512, 128, torch.float16)
    out, lse = _forward(q, k, v, (-1, -1))
    grads = BackwardBuffers.zeros(q, k)
    timing = predict_backward(run_backward(config, shape, q, k, v, out, lse, dout, grads, 128 ** -0.5, trace=True),
                              config, shape)
    assert set(timing.kernels) == {"dq", "dkdv"}
    assert all(t.kernel_us > t.cube_bound_us > 0 for t in timing.kernels.values())
    assert timing.total_us == pytest.approx(sum(t.kernel_us for t in timing.kernels.values()))
    assert "backward/forward ratio" in timing.summary(forward_us=timing.total_us / 3)


def test_visible_mask_is_the_reference_mask():
    """reference_backward masks with the forward reference's visible_mask (same window convention)."""
    vis = visible_mask(4, 6, (-1, 0))
    assert vis[0, 0].tolist() == [True, True, True, False, False, False]


# ---- command line ---------------------------------------------------------------------------


def test_cli_run_backward_checks_gradients_and_prints_the_ratio():
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, ["run", "--backend", "sim", "--backward", "--heads", "2", "--kv-heads", "1",
                                       "--s0", "100", "--s1", "150", "--causal", "--head", "64"])
    assert result.exit_code == 0, result.output
    for name in ("dq", "dk", "dv"):
        assert f"{name}: pass" in result.output
    assert "backward/forward ratio" in result.output and "bound" in result.output


def test_cli_build_backward_writes_both_kernels(tmp_path):
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, ["build", "--backward", "--window", "16,4", "--dtype", "bf16", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for kernel in ("dq", "dkdv"):
        text = (tmp_path / f"fa_bwd_{kernel}.pto").read_text()
        check_text(text, kernel)
        assert "win_left" in text and "bf16" in text


@pytest.mark.parametrize("argv, message", [
    (["build", "--backward", "--head", "72"], "head dim"),
    (["build", "--backward", "--out-dtype", "fp32"], "--out-dtype not supported"),
])
def test_cli_backward_bad_input_exits_2(argv, message):
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.parametrize("window", [(-1, 0), (40, 10), (0, 0)])
def test_masked_kernels_visit_exactly_the_visible_tiles(window):
    """The steps each kernel pushes through its score pipe are the (Q block, KV block) pairs with a
    visible entry, counted from the reference mask: fully hidden tiles are skipped on both sides (and
    the dq kernel pushes each unit's G = dO O^T first, for D)."""
    b, n, kvn, s0, s1 = 1, 2, 1, 300, 260
    config, shape = BwdConfig(head=64, mods=window_mods()), ProblemShape(b, n, s0, s1, kvn, window)
    q, k, v, dout = _inputs(b, n, kvn, s0, s1, 64, torch.float16)
    out, lse = _forward(q, k, v, window)
    grads = BackwardBuffers.zeros(q, k)
    results = run_backward(config, shape, q, k, v, out, lse, dout, grads, 0.125)
    acc = check_gradients(grads.dq, grads.dk, grads.dv, reference_backward(q, k, v, dout, 0.125, window))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
    vis = visible_mask(s0, s1, window)[0]

    def pairs(rows: int, cols: int) -> int:
        return sum(bool(vis[i:i + rows, j:j + cols].any()) for i in range(0, s0, rows) for j in range(0, s1, cols))

    pushed = {kernel: sum(c["tpush"].get("cube", 0) for (_, pid), c in r.pipe_counts.items() if pid == 0)
              for kernel, r in results.items()}
    q_blocks = -(-s0 // config.dq_block_q)
    assert pushed["dq"] == n * (q_blocks + pairs(config.dq_block_q, config.dq_block_kv))
    assert pushed["dkdv"] == n * pairs(config.block_q, config.block_kv)
    assert pushed["dq"] < n * q_blocks * (1 + -(-s1 // config.dq_block_kv))


@pytest.mark.parametrize("head", [64, 128])
def test_simulator_memory_peak_equals_the_budget(head):
    """Each kernel's budget (tile plan + hidden row-expand scratch) equals the simulator's live-byte peak."""
    config, shape = BwdConfig(head=head, mods=window_mods()), ProblemShape(1, 1, 130, 140, window=(-1, 0))
    q, k, v, dout = _inputs(1, 1, 1, 130, 140, head, torch.float16)
    out, lse = _forward(q, k, v, (-1, 0))
    results = run_backward(config, shape, q, k, v, out, lse, dout, BackwardBuffers.zeros(q, k), 0.1, block_dim=1)
    for kernel, result in results.items():
        planned = {row.space: row.used for row in budget(config, kernel).rows}
        peak = result.peak_bytes
        assert peak[(0, "vec0")]["vec"] == peak[(0, "vec1")]["vec"] == planned["vec"], kernel
        for space in ("mat", "left", "right", "acc"):
            assert peak[(0, "cube")][space] == planned[space], (kernel, space)


def test_softmax_scale_is_honoured():
    q, k, v, dout = _inputs(1, 2, 2, 96, 80, 64, torch.float16, seed=9)
    out, lse = ptofa.flash_attn_func(q, k, v, softmax_scale=0.3, return_lse=True, backend="sim")
    grads = attention_backward(q, k, v, out, lse, dout, softmax_scale=0.3)
    acc = check_gradients(*grads, reference_backward(q, k, v, dout, scale=0.3))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
    default = check_gradients(*grads, reference_backward(q, k, v, dout))
    assert not default["dq"].passed  # the scale changes the answer: the check can fail
