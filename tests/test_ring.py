"""Ring and Ulysses attention over torch.distributed: gloo process groups of 2 and 4 ranks on the
simulator, every result put back together and checked with the accuracy rule against the torch
references (forward and backward), and against single-device `flash_attn_func`; bad shards and a
missing process group raise on every rank. Tiny shapes: each rank is a process running the simulator."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

import ptofa
from ptofa.attention.backward import check_gradients, reference_backward, reference_varlen_backward
from ptofa.attention.ring import RingLayout
from ptofa.attention.ring_timing import describe, predict_ring_steps
from ptofa.attention.zigzag import (zigzag_chunks, zigzag_shard, zigzag_shard_varlen, zigzag_unshard,
                                    zigzag_unshard_varlen)
from ptofa.launch.varlen import reference_varlen
from ptofa.reference import check_accuracy, check_lse, reference_fa

from ring_workers import Case, cu_seqlens, inputs, worker

F16, BF16 = torch.float16, torch.bfloat16


def run_ranks(world: int, cases: list[Case]) -> list[dict]:
    """Every case on a gloo group of `world` spawned ranks; each rank's results."""
    with tempfile.TemporaryDirectory() as out_dir:
        store = tempfile.NamedTemporaryFile(delete=False).name
        mp.spawn(worker, args=(world, store, cases, out_dir), nprocs=world, join=True)
        return [torch.load(f"{out_dir}/rank{r}.pt") for r in range(world)]


def _unshard(case: Case, shards: list[torch.Tensor], name: str) -> torch.Tensor:
    if case.kind == "ring_varlen":  # lse is [N, total]
        if name == "lse":
            return zigzag_unshard_varlen([s.t() for s in shards], cu_seqlens(case.seqlens)).t()
        return zigzag_unshard_varlen(shards, cu_seqlens(case.seqlens))
    dim = 2 if name == "lse" else 1
    return zigzag_unshard(shards, dim) if case.kind == "ring" else torch.cat(shards, dim)


def check_case(case: Case, results: list[dict]) -> None:
    """The shards of `case` put together pass the accuracy rule (out, lse, dq, dk, dv)."""
    failed = case_failures(case, results)
    assert not failed, f"{case.name}: accuracy rule failed (err, tolerance): {failed}"


def case_failures(case: Case, results: list[dict]) -> dict[str, tuple[float, float]]:
    """(err, tolerance) of each output of `case` that fails the accuracy rule."""
    errors = [r[case.name].get("error") for r in results]
    assert not any(errors), f"{case.name}: {errors}"
    got = {name: _unshard(case, [r[case.name][name] for r in results], name)
           for name in ("out", "lse", "dq", "dk", "dv")}
    q, k, v, dout = inputs(case)
    scale = 1.0 / math.sqrt(case.head_dim)
    window = (-1, 0) if case.causal else (-1, -1)
    if case.kind == "ring_varlen":
        lengths = list(case.seqlens)
        ref = reference_varlen(q, k, v, lengths, lengths, scale, window)
        grads = reference_varlen_backward(q, k, v, dout, lengths, lengths, scale, window)
    else:
        ref = reference_fa(q, k, v, scale, window)
        grads = reference_backward(q, k, v, dout, scale, window)
    found = {"out": check_accuracy(got["out"], ref.out32, ref.out_low), "lse": check_lse(got["lse"], ref),
             **check_gradients(got["dq"], got["dk"], got["dv"], grads)}
    return {name: (a.err, a.tolerance) for name, a in found.items() if not a.passed}


def check_single_device(case: Case, results: list[dict]) -> None:
    """The ring's out and gradients stay within the accuracy rule's tolerance of `flash_attn_func`'s."""
    q, k, v, dout = inputs(case)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = ptofa.flash_attn_func(*leaves, causal=case.causal, backend="sim")
    out.backward(dout)
    ref = reference_fa(q, k, v, 1.0 / math.sqrt(case.head_dim), (-1, 0) if case.causal else (-1, -1))
    tolerance = check_accuracy(out.detach(), ref.out32, ref.out_low).tolerance
    ring = _unshard(case, [r[case.name]["out"] for r in results], "out")
    assert (ring.double() - out.detach().double()).abs().max() <= tolerance
    grads = reference_backward(q, k, v, dout, None, (-1, 0) if case.causal else (-1, -1))
    for name, single, exact, low in zip(("dq", "dk", "dv"), (t.grad for t in leaves), grads.exact, grads.low):
        ring = _unshard(case, [r[case.name][name] for r in results], name)
        assert (ring.double() - single.double()).abs().max() <= check_accuracy(single, exact, low).tolerance, name


# --------------------------------------------------------------------------------------
# Without processes
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [1, 7, 8, 13, 32])
def test_zigzag_round_trip(world: int, length: int) -> None:
    x = torch.arange(2 * length * 3).reshape(2, length, 3)
    shards = [zigzag_shard(x, world, r) for r in range(world)]
    assert sum(zigzag_chunks(length, world)) == length
    assert [s.shape[1] for s in shards] == [sum(zigzag_chunks(length, world)[c] for c in (r, 2 * world - 1 - r))
                                            for r in range(world)]
    assert torch.equal(zigzag_unshard(shards), x)


def test_zigzag_varlen_round_trip() -> None:
    cu = cu_seqlens([3, 10, 0, 17])
    x = torch.arange(30 * 2).reshape(30, 2)
    for world in (2, 4):
        shards = [zigzag_shard_varlen(x, cu, world, r) for r in range(world)]
        assert all(int(local[-1]) == rows.shape[0] for rows, local in shards)
        assert torch.equal(zigzag_unshard_varlen([rows for rows, _ in shards], cu), x)


def test_zigzag_unshard_names_bad_lengths() -> None:
    shards = [zigzag_shard(torch.zeros(1, 8), 2, r) for r in range(2)]
    with pytest.raises(ValueError, match="rank 0's shard has 4 rows"):
        zigzag_unshard([shards[0], shards[1][:, :3]])


def test_causal_steps_balance_the_work() -> None:
    """After step 0 every rank attends half its rows to a whole shard or all its rows to half a shard."""
    world, length = 4, 32
    lens = tuple((sum(n for c, n in enumerate(zigzag_chunks(length, world)) if c in (r, 2 * world - 1 - r)),)
                 for r in range(world))
    lo = tuple((zigzag_chunks(length, world)[r],) for r in range(world))
    for rank in range(world):
        layout = RingLayout(world, rank, lens, lens, True, lo)
        src, q_runs, k_runs, causal = layout.step(0)
        assert (src, q_runs.lengths, k_runs.lengths, causal) == (rank, (8,), (8,), True)
        for step in range(1, world):
            src, q_runs, k_runs, causal = layout.step(step)
            assert not causal and q_runs.lengths[0] * k_runs.lengths[0] == 8 * 4
            assert (q_runs.runs[0][0] == 4) == (src > rank)


def test_without_process_group_is_a_clear_error() -> None:
    q = torch.zeros(1, 8, 2, 32, dtype=F16)
    with pytest.raises(ValueError, match="torch.distributed is not initialized"):
        ptofa.ring_flash_attn_func(q, q, q, causal=True)
    with pytest.raises(ValueError, match="torch.distributed is not initialized"):
        ptofa.ulysses_flash_attn_func(q, q, q)


def test_predicted_ring_steps() -> None:
    """Zigzag gives every step after the first one kernel shape; a slow link stops hiding behind it."""
    fast = predict_ring_steps(batch=1, heads=2, kv_heads=1, seqlen=512, head_dim=64, world=2, causal=True,
                              link_gbps=1e6)
    slow = predict_ring_steps(batch=1, heads=2, kv_heads=1, seqlen=512, head_dim=64, world=2, causal=True,
                              link_gbps=0.1)
    assert fast[0].kernels == ((256, 256, True),) and fast[1].kernels[0] in ((128, 256, False), (256, 128, False))
    assert fast[0].sent_bytes == 2 * 256 * 64 * 2 and fast[1].sent_bytes == 0
    assert fast[0].hidden and not slow[0].hidden and slow[0].step_us == slow[0].comm_us > fast[0].step_us
    assert all(s.compute_us > 0 for s in fast)
    assert "predicted" in describe(fast)


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ring_attention.py"


def _example():
    spec = importlib.util.spec_from_file_location("ring_attention_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_predicts(capsys) -> None:
    assert _example().main(["--predict", "--world", "2", "--seqlen", "512", "--heads", "2", "--kv-heads", "1",
                            "--causal"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("step 0: kernel 256 x 256 causal predicted") and "send 64 KiB" in lines[0]
    assert "nothing to send" in lines[1] and lines[2].startswith("ring forward predicted")


@pytest.mark.slow
def test_example_runs_and_checks() -> None:
    """The whole example in its own process (its ranks are spawned from its own __main__)."""
    done = subprocess.run([sys.executable, str(EXAMPLE), "--world", "2", "--seqlen", "24", "--heads", "2",
                           "--kv-heads", "1", "--causal"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("PASS") == 4


# --------------------------------------------------------------------------------------
# On process groups
# --------------------------------------------------------------------------------------

# The default run's cases (CI's time): causal and not, fp16 and bf16 (the 4-rank case), GQA, uneven
# lengths; `test_two_ranks_more` (slow) and the slow grid hold the rest.
TWO_RANKS = [
    Case("dense_causal_f16_gqa", "ring", F16, True, heads=4, kv_heads=2, batch=2, seqlen=16),
    Case("varlen_full_f16", "ring_varlen", F16, False, heads=4, kv_heads=2, seqlens=(9, 1, 14)),  # rank 1: 0 rows
    Case("ulysses_causal_f16_gqa", "ulysses", F16, True, heads=4, kv_heads=2, seqlen=15),
    Case("bad_lengths", "ring", F16, True, bad="lengths"),
    Case("bad_window", "ring", F16, True, bad="window"),
    Case("bad_group", "ring", F16, True, bad="group"),
]
# One case: each rank parses every kernel it runs (seconds each on the simulator), W of them on 2 cores.
FOUR_RANKS = [Case("varlen_causal_bf16_gqa", "ring_varlen", BF16, True, heads=4, kv_heads=2, seqlens=(11, 20))]


def test_two_ranks() -> None:
    results = run_ranks(2, TWO_RANKS)
    for case in TWO_RANKS:
        if not case.bad:
            check_case(case, results)
    check_single_device(TWO_RANKS[0], results)
    lengths = [r["bad_lengths"]["error"] for r in results]
    assert "ValueError: ring_flash_attn_func: causal ring attention needs zigzag shards" in lengths[0], lengths
    assert lengths[0] == lengths[1]  # every rank raised, none waits
    assert all("NotImplementedError: window_size: (2, 0)" in r["bad_window"]["error"] for r in results)
    assert all(r["bad_group"]["error"].startswith("ValueError: group: 'not a group' has no backend") for r in results)


TWO_RANKS_MORE = [
    Case("dense_full_bf16", "ring", BF16, False, heads=2, kv_heads=1, seqlen=12),
    Case("varlen_causal_bf16", "ring_varlen", BF16, True, seqlens=(10, 3, 16)),
]


@pytest.mark.slow
def test_two_ranks_more() -> None:
    results = run_ranks(2, TWO_RANKS_MORE)
    for case in TWO_RANKS_MORE:
        check_case(case, results)


@pytest.mark.slow  # four ranks on CI's two cores (~100 s); two ranks run by default, four in the slow grid too
def test_four_ranks() -> None:
    results = run_ranks(4, FOUR_RANKS)
    for case in FOUR_RANKS:
        check_case(case, results)


SLOW_GRID = [Case(f"{kind}_{'causal' if causal else 'full'}_{str(dtype)[6:]}_{heads}x{kv_heads}", kind, dtype, causal,
                  heads=heads, kv_heads=kv_heads, head_dim=64, batch=2, seqlen=40, seqlens=(37, 64, 3))
             for kind in ("ring", "ring_varlen", "ulysses") for causal in (True, False) for dtype in (F16, BF16)
             for heads, kv_heads in ((4, 4), (4, 2), (4, 1)) if kind != "ulysses" or kv_heads >= 2]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_grid(world: int) -> None:
    cases = [c for c in SLOW_GRID if c.kind != "ulysses" or c.kv_heads % world == 0]
    results = run_ranks(world, cases)
    # Every gradient is the f32 sum of the steps' f32 partials, rounded once (`BwdConfig.grads_f32`); with
    # the partials rounded first, ring_varlen_full_bfloat16_4x1's dv had one element on the other bf16
    # neighbour (err 0.0306 against the rule's 0.0257).
    failed = {(case.name, output): found for case in cases for output, found in case_failures(case, results).items()}
    assert not failed, failed
