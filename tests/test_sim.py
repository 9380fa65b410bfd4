"""CPU simulator: numerics of the verified sample kernel, fault reports, pipe protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptofa.pipeline import ConfigError
from ptofa.sim.errors import SimDeadlock, SimError, SimImbalance, SimMemoryOverflow, SimStepLimit
from ptofa.sim.executor import simulate
from ptofa.sim.faults import fault_text
from ptofa.sim.options import RunOptions
from ptofa.sim.memory import GmPointer
from ptofa.sim.pipes import PipeProtocol, pending_drain, sync_period, waited_credits
from ptofa.sim.tileops import _directed_float
from ptofa.ir.textio import parse_pto, print_pto

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "samples" / "fa_min_verified.pto"
HEAD = 128
WS_F32_PER_BLOCK = 327680  # 1.25 MiB: QK | PV | P rings (the sample itself uses the first 1 MiB)


@pytest.fixture(scope="module")
def sample_text() -> str:
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE} is missing")
    return SAMPLE.read_text()


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = (q.astype(np.float64) @ k.astype(np.float64).T) / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def scaled(text: str, s1: int) -> str:
    """The sample with S1 = s1 (s1/128 KV tiles) and a P ring of its own after QK and PV."""
    nt = s1 // 128
    text = text.replace("%c3 = arith.constant 3 : index", f"%c3 = arith.constant {nt} : index")
    text = text.replace("%c384 = arith.constant 384 : index", f"%c384 = arith.constant {s1} : index")
    text = text.replace("128x384xf16", f"128x{s1}xf16").replace("384x128xf16", f"{s1}x128xf16")
    text = text.replace("%blk_f32 = arith.constant 262144 : index", f"%blk_f32 = arith.constant {WS_F32_PER_BLOCK} : index")
    text = text.replace("%blk_f16 = arith.constant 131072 : index", f"%blk_f16 = arith.constant {2 * WS_F32_PER_BLOCK} : index")
    return text.replace(
        "%p_base = pto.addptr %fifo_h, %o16 : !pto.ptr<f16> -> !pto.ptr<f16>",
        "%p_blk = pto.addptr %fifo_h, %o16 : !pto.ptr<f16> -> !pto.ptr<f16>\n"
        "    %p_off = arith.constant 524288 : index\n"
        "    %p_base = pto.addptr %p_blk, %p_off : !pto.ptr<f16> -> !pto.ptr<f16>",
    )


def run(text: str, block_dim: int = 2, s1: int = 384, seed: int = 0, **kw):
    s0 = block_dim * 128
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((s0, HEAD)).astype(np.float16)
    k = rng.standard_normal((s1, HEAD)).astype(np.float16)
    v = rng.standard_normal((s1, HEAD)).astype(np.float16)
    o = np.full((s0, HEAD), np.nan, np.float32)
    workspace = np.full(block_dim * WS_F32_PER_BLOCK, np.nan, np.float32)
    fifo = GmPointer.of(workspace)
    args = {
        "ffts": GmPointer.of(np.zeros(1, np.int64)),
        "fifo": fifo,
        "fifo_h": fifo.retyped(np.float16),
        "q": GmPointer.of(q),
        "k": GmPointer.of(k),
        "v": GmPointer.of(v),
        "o": GmPointer.of(o),
        "s0": kw.pop("s0", s0),
    }
    result = simulate(parse_pto(text, "fa.pto"), args, block_dim, **kw)
    return result, o, attention_reference(q, k, v)


def replace_line(text: str, needle: str, new: str, occurrence: int = 1) -> str:
    """Replace the whole line holding the `occurrence`-th match of `needle`."""
    lines = text.split("\n")
    hits = [i for i, ln in enumerate(lines) if needle in ln]
    assert len(hits) >= occurrence, needle
    lines[hits[occurrence - 1]] = new
    return "\n".join(lines)


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    return [i + 1 for i, ln in enumerate(text.split("\n")) if needle in ln][occurrence - 1]


# numerics ---------------------------------------------------------------------------


def test_sample_matches_reference(sample_text):
    result, o, ref = run(sample_text)
    np.testing.assert_allclose(o, ref, rtol=1e-3, atol=1e-3)
    assert result.steps > 0
    assert result.pipe_counts[(1, 0)]["tpush"] == {"cube": 3}
    assert result.pipe_counts[(1, 1)]["tpop"] == {"cube": 3}
    assert result.peak_bytes[(0, "vec0")]["vec"] > 128 * 1024
    # The sample's P ring (fifo_h + bid * 256 KiB) shares bytes with the QK ring.
    assert any("overlap" in w for w in result.warnings)


def test_ring_wrap_and_back_pressure(sample_text):
    """16 KV tiles: the 8-slot rings wrap, so the batched free credits are exercised."""
    result, o, ref = run(scaled(sample_text, 2048), block_dim=2, s1=2048)
    np.testing.assert_allclose(o, ref, rtol=1e-3, atol=1e-3)
    assert result.warnings == []


def test_trace_records_ops(sample_text):
    result, o, ref = run(sample_text, trace=True, trace_blocks=[1])
    np.testing.assert_allclose(o, ref, rtol=1e-3, atol=1e-3)
    trace = result.trace
    assert set(trace.cores) == {(1, "cube"), (1, "vec0"), (1, "vec1")}
    cube = trace.ops(1, "cube")
    matmuls = [op for op in cube if op.op == "pto.tmatmul"]
    assert len(matmuls) == 6 and matmuls[0].macs == 128**3
    pops = [op for op in trace.ops(1, "vec1") if op.pipe_kind == "tpop"]
    assert [(op.pipe_id, op.pipe_index, op.stage) for op in pops[:2]] == [(0, 0, "p"), (2, 0, "gu")]
    stores = [op for op in cube if op.op == "pto.tstore"]
    assert stores[0].writes and stores[0].stage == "qk" and stores[0].src_loc == "acc"


# faults -----------------------------------------------------------------------------


def test_missing_tfree_is_reported(sample_text):
    text = replace_line(sample_text, "pto.tfree_from_aic(%se", "")
    with pytest.raises(SimImbalance, match=r"pipe 0: second tpop on vec0 before the tfree"):
        run(text)


def test_missing_cube_tfree_is_reported(sample_text):
    text = replace_line(sample_text, "pto.tfree_from_aiv(%pe", "")
    with pytest.raises(SimImbalance, match=r"pipe 1: second tpop on cube"):
        run(text)


def test_extra_tpop_deadlocks(sample_text):
    extra = "    %extra = pto.tpop_from_aic {id = 0, split = 1} -> !qkh"
    anchor = line_of(sample_text, "pto.trowexpanddiv")
    lines = sample_text.split("\n")
    lines.insert(anchor - 1, extra)
    text = "\n".join(lines)
    with pytest.raises(SimDeadlock) as err:
        run(text)
    msg = str(err.value)
    assert f"vec0: blocked in pto.tpop_from_aic (line {anchor}) on pipe 0" in msg
    assert "cube: finished" in msg
    assert "last ops:" in msg and "pto.tadd (line" in msg


def test_swapped_pipe_ids_deadlock(sample_text):
    text = sample_text
    for needle, new_id in (("%se = pto.tpop_from_aic {id = 0", 2), ("pto.tfree_from_aic(%se", 2), ("%ve = pto.tpop_from_aic {id = 2", 0), ("pto.tfree_from_aic(%ve", 0)):
        old = next(ln for ln in text.split("\n") if needle in ln)
        text = replace_line(text, needle, old.replace(f"id = {2 - new_id}", f"id = {new_id}"))
    with pytest.raises(SimDeadlock) as err:
        run(text)
    msg = str(err.value)
    assert "cube: blocked in pto.tpop_from_aiv" in msg
    assert "vec0: blocked in pto.tpop_from_aic" in msg and "on pipe 2" in msg


@pytest.mark.parametrize(
    "fault,error,expected",
    [
        ("drop_tfree", SimImbalance, ["pipe 0: second tpop on vec0 before the tfree"]),
        ("extra_tpop", SimDeadlock, ["vec0: blocked in pto.tpop_from_aic (line {extra}) on pipe 2", "cube: finished"]),
        ("swap_pipe_ids", SimDeadlock, ["cube: blocked in pto.tpop_from_aiv", "vec0: blocked in pto.tpop_from_aic"]),
    ],
)
def test_run_option_faults_on_the_sample(sample_text, fault, error, expected):
    """`RunOptions.fault` breaks the parsed module the way the hand-edited texts above do;
    report lines are lines of the mutated text (`fault_text`)."""
    extra = line_of(fault_text(parse_pto(sample_text, "fa.pto"), fault), "%extra_entry") if fault == "extra_tpop" else 0
    with pytest.raises(error) as err:
        run(sample_text, options=RunOptions(fault=fault))
    for part in expected:
        assert part.format(extra=extra) in str(err.value)


def test_fault_pass_leaves_the_parsed_module_alone(sample_text):
    parsed = parse_pto(sample_text, "fa.pto")
    before = print_pto(parsed.module)
    assert fault_text(parsed, "swap_pipe_ids") != before
    assert print_pto(parsed.module) == before


def test_run_options_are_checked_and_normalised():
    assert RunOptions(blocks=[3, 1, 3], trace_blocks=range(2)) == RunOptions(blocks=(1, 3), trace_blocks=(0, 1))
    with pytest.raises(ConfigError, match="fault injection: fault='nope' is not one of drop_tfree, extra_tpop, swap_pipe_ids"):
        RunOptions(fault="nope")
    with pytest.raises(ConfigError, match="gm_guard=False is not available"):  # GM accesses are always checked
        RunOptions(gm_guard=False)


def test_fault_needs_its_ops():
    text = "func.func @k() attributes {pto.kernel_kind = #pto.kernel_kind<vector>} {\n  return\n}"
    with pytest.raises(SimError, match="fault drop_tfree: nothing to break, the module has no vector-side pto.tfree_from_aic of pipe 0"):
        fault_text(parse_pto(text), "drop_tfree")


def test_ub_overflow(sample_text):
    anchor = line_of(sample_text, "%e    = pto.alloc_tile")
    lines = sample_text.split("\n")
    lines.insert(anchor, "    %big = pto.alloc_tile : !pto.tile_buf<vec, 128x128xf32>")
    with pytest.raises(SimMemoryOverflow) as err:
        run("\n".join(lines))
    msg = str(err.value)
    assert "UB overflow on block 0 vec0" in msg and "%big" in msg and "%acc_o" in msg


def test_hidden_reduction_tmp_counts(sample_text):
    text = sample_text.replace("ins(%s, %tmp : !v32, !v32)", "ins(%s : !v32)")
    with pytest.raises(SimMemoryOverflow, match=r"<hidden tmp of pto.trowmax line \d+>"):
        run(text)


def test_wrong_ring_offset_gives_wrong_numbers(sample_text):
    # the vector side looks for PV one slot too far into the ring
    text = replace_line(sample_text, "%pv_off  = arith.constant 131072", "    %pv_off  = arith.constant 147456 : index", occurrence=2)
    result, o, ref = run(text)
    assert not np.allclose(o, ref, rtol=1e-3, atol=1e-3, equal_nan=False)
    assert any("address different slots" in w for w in result.warnings)


def test_full_slot_descriptor_on_vector_side_reads_next_slot(sample_text):
    """pto-ir.md 0.6: a full 128x128 descriptor with split = 1 offsets AIV1 by a whole slot."""
    text = sample_text.replace(
        "%qk_h = pto.make_tensor_view %qk_base, shape = [%c64, %c128], strides = [%c128, %c1] : !qkh",
        "%qk_h = pto.make_tensor_view %qk_base, shape = [%c128, %c128], strides = [%c128, %c1] : !qk",
    )
    text = text.replace("(gm_slot_tensor = %qk_h : !qkh)", "(gm_slot_tensor = %qk_h : !qk)")
    text = text.replace("%se = pto.tpop_from_aic {id = 0, split = 1} -> !qkh", "%se = pto.tpop_from_aic {id = 0, split = 1} -> !qk")
    text = text.replace("%sr = pto.partition_view %se, offsets = [%c0, %c0], sizes = [%c64, %c128] : !qkh", "%sr = pto.partition_view %se, offsets = [%c0, %c0], sizes = [%c64, %c128] : !qk")
    text = text.replace("pto.tfree_from_aic(%se : !qkh)", "pto.tfree_from_aic(%se : !qk)")
    _, o, ref = run(text)
    np.testing.assert_allclose(o[:64], ref[:64], rtol=1e-3, atol=1e-3)  # AIV0 unaffected
    assert not np.allclose(o[64:128], ref[64:128], rtol=1e-3, atol=1e-3)


def test_out_of_range_partition_names_op_and_line(sample_text):
    with pytest.raises(SimError, match=rf"block 1 vec0: in pto.partition_view \(line {line_of(sample_text, '%opart =')}\): partition out of the view: dim 0 window \[128, 192\)"):
        run(sample_text, s0=128)


def test_max_steps(sample_text):
    with pytest.raises(SimStepLimit):
        run(sample_text, max_steps=100)


# pipe protocol ------------------------------------------------------------------------


def test_sync_period_and_drain_counts():
    assert [sync_period(s) for s in (1, 2, 4, 8)] == [1, 2, 2, 4]
    assert pending_drain(40, 8) == 2  # pto-ir.md 10.5 / pto-isa PR #240: 10 notified, 8 waited
    assert waited_credits(40, 8) == 8
    assert [pending_drain(t, 8) for t in (0, 3, 4, 8, 9, 12, 13)] == [0, 0, 1, 2, 1, 2, 1]
    assert [pending_drain(t, 2) for t in (1, 2, 3, 4, 5)] == [0, 1, 0, 1, 0]
    assert [pending_drain(t, 1) for t in (1, 2, 5)] == [1, 1, 1]


def _stream(slot_num: int, n: int, consumers_lag: int = 0) -> PipeProtocol:
    """Push n entries C2V through a pipe, consumers freeing everything; returns the protocol."""
    pipe = PipeProtocol(0, 1, slot_num, 1024)
    pushed = popped = 0
    while popped < n:
        progressed = False
        while pushed < n:
            if pipe.alloc_needs_credit("cube"):
                if not pipe.has_credit("cube"):
                    break
                pipe.take_credit("cube")
            pipe.alloc("cube")
            pipe.push("cube")
            pushed += 1
            progressed = True
        while popped < pushed - consumers_lag or (pushed == n and popped < n):
            for vec in ("vec0", "vec1"):
                assert pipe.has_data(vec)
                pipe.pop(vec)
                pipe.release(vec)
            popped += 1
            progressed = True
        assert progressed, f"stuck at pushed={pushed} popped={popped}"
    return pipe


@pytest.mark.parametrize("slot_num,n", [(8, 40), (8, 9), (8, 3), (2, 7), (2, 8), (1, 5), (4, 13)])
def test_destructor_drain_never_hangs_when_all_freed(slot_num, n):
    pipe = _stream(slot_num, n)
    need = pipe.drain_needed("cube")
    assert need == pending_drain(n, slot_num)
    for _ in range(need):
        assert pipe.has_credit("cube")
        pipe.take_credit("cube")
    assert not pipe.has_credit("cube")  # nothing left over either
    assert pipe.imbalance() is None


def test_credits_are_batched_and_need_both_vectors():
    pipe = PipeProtocol(0, 1, 8, 1024)
    for _ in range(8):
        assert not pipe.alloc_needs_credit("cube")
        pipe.alloc("cube")
        pipe.push("cube")
    assert pipe.alloc_needs_credit("cube") and not pipe.has_credit("cube")
    for i in range(3):
        pipe.pop("vec0")
        assert not pipe.release("vec0")  # credits only every SyncPeriod = 4 frees
    pipe.pop("vec0")
    assert pipe.release("vec0")
    assert not pipe.has_credit("cube")  # vec1 has not freed yet (1 cube : 2 vector flags)
    for _ in range(4):
        pipe.pop("vec1")
        pipe.release("vec1")
    assert pipe.has_credit("cube")
    pipe.take_credit("cube")
    assert not pipe.has_credit("cube")


def test_pop_free_alternation():
    pipe = PipeProtocol(3, 2, 8, 1024)
    pipe.alloc("vec0"), pipe.push("vec0"), pipe.alloc("vec1"), pipe.push("vec1")
    with pytest.raises(SimImbalance, match="tfree on cube without a preceding unmatched tpop"):
        pipe.release("cube")
    assert pipe.has_data("cube")
    pipe.pop("cube")
    with pytest.raises(SimImbalance, match="second tpop on cube"):
        pipe.pop("cube")
    pipe.release("cube")
    assert pipe.imbalance() is None
    pipe.alloc("vec0")
    assert "vec0: 2 tallocs but 1 tpushes" in pipe.imbalance()


def test_v2c_pop_needs_both_vectors():
    pipe = PipeProtocol(1, 2, 8, 1024)
    pipe.alloc("vec0")
    pipe.push("vec0")
    assert not pipe.has_data("cube")
    pipe.alloc("vec1")
    pipe.push("vec1")
    assert pipe.has_data("cube")


# tcvt rounding -------------------------------------------------------------------------


def test_tcvt_directed_rounding():
    one, next_up = 1.0, float(np.nextafter(np.float16(1), np.float16(2)))
    half_ulp = (next_up - one) / 2
    x = np.array([one + half_ulp / 2, one + half_ulp, -(one + half_ulp / 2), 1e6], np.float32)
    assert _directed_float(x, np.dtype(np.float16), "RINT").tolist() == [1.0, 1.0, -1.0, np.inf]
    assert _directed_float(x, np.dtype(np.float16), "TRUNC").tolist() == [1.0, 1.0, -1.0, 65504.0]
    assert _directed_float(x, np.dtype(np.float16), "CEIL").tolist() == [next_up, next_up, -1.0, np.inf]
    assert _directed_float(x, np.dtype(np.float16), "FLOOR").tolist() == [1.0, 1.0, -next_up, 65504.0]
    assert _directed_float(x, np.dtype(np.float16), "ROUND").tolist()[:2] == [1.0, next_up]
    assert _directed_float(x, np.dtype(np.float16), "ODD").tolist()[:3] == [next_up, next_up, -next_up]
