"""CPU simulator: numerics of the hand-written sample kernel, fault reports, pipe protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ptofa.pipeline import ConfigError
from ptofa.reference import check_accuracy, reference_fa
from ptofa.sim.errors import SimDeadlock, SimError, SimImbalance, SimMemoryOverflow, SimStepLimit
from ptofa.sim.executor import simulate
from ptofa.sim.faults import fault_text
from ptofa.sim.options import RunOptions
from ptofa.sim.memory import GmPointer
from ptofa.sim.pipes import PipeProtocol, pending_drain, sync_period, waited_credits
from ptofa.sim.tileops import _directed_float
from ptofa.ir.textio import parse_pto, print_pto

# One head, D = 64, 128 query rows per block, KV tiles of 64 keys (tests/data/fa_tiny.pto's header).
SAMPLE = Path(__file__).parent / "data" / "fa_tiny.pto"
HEAD = 64
KV_TILE = 64
RING_F32_PER_BLOCK = 163840  # 640 KiB: scores | PV | P rings of 8 slots each
UB_BYTES = 192 * 1024


@pytest.fixture(scope="module")
def sample_text() -> str:
    return SAMPLE.read_text()


class Run:
    """One simulated launch of the sample and its torch reference."""

    def __init__(self, result, o: np.ndarray, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
        self.result, self.o = result, o
        self.ref = reference_fa(q[None, :, None], k[None, :, None], v[None, :, None], scale)

    def accuracy(self, rows: slice = slice(None)):
        """The FlashAttention accuracy rule on rows `rows` of O."""
        return check_accuracy(torch.from_numpy(self.o[rows]), self.ref.out32[0, rows, 0], self.ref.out_low[0, rows, 0])


def run(text: str, block_dim: int = 2, s1: int = 256, seed: int = 0, s0: int | None = None, **kw) -> Run:
    rows = block_dim * 128
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, HEAD, generator=g).half()
    k = torch.randn(s1, HEAD, generator=g).half()
    v = torch.randn(s1, HEAD, generator=g).half()
    scale = HEAD**-0.5
    o = np.full((rows, HEAD), np.nan, np.float16)
    ring = GmPointer.of(np.full(block_dim * RING_F32_PER_BLOCK, np.nan, np.float32))
    args = {
        "ffts": GmPointer.of(np.zeros(1, np.int64)),
        "ring": ring,
        "ring_h": ring.retyped(np.float16),
        "q": GmPointer.of(q.numpy()),
        "k": GmPointer.of(k.numpy()),
        "v": GmPointer.of(v.numpy()),
        "o": GmPointer.of(o),
        "s0": rows if s0 is None else s0,
        "s1": s1,
        "scale": np.float32(scale),
    }
    result = simulate(parse_pto(text, "fa.pto"), args, block_dim, **kw)
    return Run(result, o, q, k, v, scale)


def replace_line(text: str, needle: str, new: str, occurrence: int = 1) -> str:
    """Replace the whole line holding the `occurrence`-th match of `needle`."""
    lines = text.split("\n")
    hits = [i for i, ln in enumerate(lines) if needle in ln]
    assert len(hits) >= occurrence, needle
    lines[hits[occurrence - 1]] = new
    return "\n".join(lines)


def insert_after(text: str, needle: str, new: str) -> str:
    """Insert the line `new` after the first line holding `needle`."""
    lines = text.split("\n")
    lines.insert(line_of(text, needle), new)
    return "\n".join(lines)


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    return [i + 1 for i, ln in enumerate(text.split("\n")) if needle in ln][occurrence - 1]


# numerics ---------------------------------------------------------------------------


def test_sample_matches_reference(sample_text):
    done = run(sample_text)
    assert done.accuracy().passed, done.accuracy().summary()
    assert done.result.steps > 0
    tiles = 256 // KV_TILE
    assert done.result.pipe_counts[(1, 0)]["tpush"] == {"cube": tiles}
    assert done.result.pipe_counts[(1, 1)]["tpush"] == {"vec0": tiles, "vec1": tiles}
    assert done.result.pipe_counts[(1, 1)]["tpop"] == {"cube": tiles}
    # UB: six 64x64 tiles (16 KiB f32, 8 KiB f16), the 8 KiB expdif tmp, five 256-byte
    # statistics and the hidden 8 KiB scratch of trowexpandmul and of trowexpanddiv
    assert done.result.peak_bytes[(0, "vec0")]["vec"] == 4 * 16384 + 2 * 8192 + 8192 + 5 * 256 + 2 * 8192
    assert done.result.warnings == []


def test_ring_wrap_and_back_pressure(sample_text):
    """20 KV tiles: the 8-slot rings wrap, so the batched free credits are exercised."""
    done = run(sample_text, s1=20 * KV_TILE, seed=1)
    assert done.accuracy().passed, done.accuracy().summary()
    assert done.result.pipe_counts[(0, 2)]["tfree"] == {"vec0": 20, "vec1": 20}
    assert done.result.warnings == []


def test_trace_records_ops(sample_text):
    done = run(sample_text, trace=True, trace_blocks=[1])
    assert done.accuracy().passed
    trace = done.result.trace
    assert set(trace.cores) == {(1, "cube"), (1, "vec0"), (1, "vec1")}
    cube = trace.ops(1, "cube")
    matmuls = [op for op in cube if op.op == "pto.tmatmul"]
    assert len(matmuls) == 2 * 256 // KV_TILE and matmuls[0].macs == 128 * HEAD * KV_TILE
    pops = [op for op in trace.ops(1, "vec1") if op.pipe_kind == "tpop"]
    assert [(op.pipe_id, op.pipe_index, op.stage) for op in pops[:3]] == [(0, 0, "p"), (2, 0, "gu"), (0, 1, "p")]
    stores = [op for op in cube if op.op == "pto.tstore"]
    assert stores[0].writes and stores[0].stage == "qk" and stores[0].src_loc == "acc"


# faults -----------------------------------------------------------------------------


def test_missing_tfree_is_reported(sample_text):
    text = replace_line(sample_text, "pto.tfree_from_aic(%scores_in", "")
    with pytest.raises(SimImbalance, match=r"pipe 0: second tpop on vec0 before the tfree"):
        run(text)


def test_missing_cube_tfree_is_reported(sample_text):
    text = replace_line(sample_text, "pto.tfree_from_aiv(%p_in", "")
    with pytest.raises(SimImbalance, match=r"pipe 1: second tpop on cube"):
        run(text)


def test_extra_tpop_deadlocks(sample_text):
    extra = "    %extra = pto.tpop_from_aic {id = 0, split = 1} -> !score_half"
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
    """The scores and PV slots have one shape, so the swap passes the verifier and hangs."""
    text = sample_text
    for needle, new_id in (("%scores_in = pto.tpop_from_aic {id = 0", 2), ("pto.tfree_from_aic(%scores_in", 2),
                           ("%pv_in = pto.tpop_from_aic {id = 2", 0), ("pto.tfree_from_aic(%pv_in", 0)):
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
    text = insert_after(sample_text, "%o_out = pto.alloc_tile", "    %big = pto.alloc_tile : !pto.tile_buf<vec, 64x512xf32>")
    with pytest.raises(SimMemoryOverflow) as err:
        run(text)
    msg = str(err.value)
    assert "UB overflow on block 0 vec0" in msg and "%big" in msg and "%o_acc" in msg


def test_hidden_reduction_tmp_counts(sample_text):
    """A 64 KiB tile beside the kernel's tiles still fits the UB; without their explicit tmp,
    trowmax and trowsum each get a hidden tile of the source's shape, and it no longer does."""
    padded = insert_after(sample_text, "%o_out = pto.alloc_tile", "    %pad = pto.alloc_tile : !pto.tile_buf<vec, 64x256xf32>")
    assert run(padded).result.peak_bytes[(0, "vec0")]["vec"] <= UB_BYTES
    text = padded.replace("ins(%scores, %reduce_tmp : !f32_tile, !f32_tile)", "ins(%scores : !f32_tile)")
    assert text.count("ins(%scores : !f32_tile)") == 2
    with pytest.raises(SimMemoryOverflow, match=r"<hidden tmp of pto.trowmax line \d+>"):
        run(text)


def test_wrong_ring_offset_gives_wrong_numbers(sample_text):
    # the vector side looks for PV one 32 KiB slot too far into the ring
    text = replace_line(sample_text, "%pv_ring_at = arith.constant 65536", "    %pv_ring_at = arith.constant 73728 : index",
                        occurrence=2)
    done = run(text)
    assert not done.accuracy().passed
    assert any("address different slots" in w for w in done.result.warnings)


def test_full_slot_descriptor_on_vector_side_reads_next_slot(sample_text):
    """docs/sources.md §2.6: a full 128x64 descriptor with split = 1 offsets AIV1 by a whole slot."""
    vec = sample_text.index("func.func @attn_vec")
    text = sample_text[vec:]
    for half, full in (
        ("%scores_desc = pto.make_tensor_view %scores_ring, shape = [%c64, %c64], strides = [%c64, %c1] : !score_half",
         "%scores_desc = pto.make_tensor_view %scores_ring, shape = [%c128, %c64], strides = [%c64, %c1] : !score_slot"),
        ("(gm_slot_tensor = %scores_desc : !score_half)", "(gm_slot_tensor = %scores_desc : !score_slot)"),
        ("{id = 0, split = 1} -> !score_half", "{id = 0, split = 1} -> !score_slot"),
        ("partition_view %scores_in, offsets = [%c0, %c0], sizes = [%c64, %c64] : !score_half",
         "partition_view %scores_in, offsets = [%c0, %c0], sizes = [%c64, %c64] : !score_slot"),
        ("pto.tfree_from_aic(%scores_in : !score_half)", "pto.tfree_from_aic(%scores_in : !score_slot)"),
    ):
        assert text.count(half) == 1, half
        text = text.replace(half, full)
    done = run(sample_text[:vec] + text)
    assert done.accuracy(slice(0, 64)).passed  # AIV0 unaffected
    assert not done.accuracy(slice(64, 128)).passed


def test_out_of_range_partition_names_op_and_line(sample_text):
    with pytest.raises(SimError, match=rf"block 1 cube: in pto.partition_view \(line {line_of(sample_text, '%q_blk =')}\): partition out of the view: dim 0 window \[128, 256\)"):
        run(sample_text, s0=128)


def test_max_steps(sample_text):
    with pytest.raises(SimStepLimit):
        run(sample_text, max_steps=100)


# pipe protocol ------------------------------------------------------------------------


def test_sync_period_and_drain_counts():
    assert [sync_period(s) for s in (1, 2, 4, 8)] == [1, 2, 2, 4]
    assert pending_drain(40, 8) == 2  # docs/sources.md §3.5 / pto-isa PR #240: 10 notified, 8 waited
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
