"""`FAConfig.softmax_dtype = "f16"`: the cube's FIX pipe rounds the scores to f16, and the
row max, exp and row sum run on f16 tiles (CANN's high-performance inner-precise mode).

Numerics over the kernel family it is built for (the accuracy rule against the torch
reference); the legality rule and the combinations it refuses; the IR (the QK pipe and its
slot in f16, the vector passes per score slice, no P conversion); the slot workspace; the
CLI and sweep switches; and the timing model's view of the vector work it saves.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from test_kvcache import make_cache, run_decode
from test_prescale import _stage_ops
from test_variants import config, parsed, run_variant
from test_varlen import run_varlen

from ptofa.ir import dialect as d
from ptofa.cli.main import main
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, tile_plan
from ptofa.cli.sweep import SweepGrid
from ptofa.kernels.builtin_mods.window import window_mods

F16 = dict(softmax_dtype="f16")

CASES = {
    "d128_ragged": (dict(), dict(batch=2, heads=2, s0=129, s1=300)),
    "d64_t128_gqa": (dict(head=64, tile_s1=128, qk_preload=2), dict(heads=8, kv_heads=2, s0=70, s1=1000)),
    "d96_t512": (dict(head=96, tile_s1=512, qk_preload=2), dict(heads=2, s0=257, s1=1100)),
    "d256_out_f32": (dict(head=256, out_dtype="f32"), dict(heads=2, kv_heads=1, s0=65, s1=700)),
    "d192_no_prescale": (dict(head=192, prescale_q=False), dict(heads=2, s0=100, s1=513)),
    "d128_one_key": (dict(), dict(heads=2, s0=300, s1=1)),
    "causal": (dict(mods=window_mods()), dict(batch=2, heads=2, s0=300, s1=1000, window=(-1, 0))),
    "causal_more_queries": (dict(mods=window_mods(), head=256), dict(heads=2, s0=700, s1=300, window=(-1, 0))),
    "window_t512": (dict(mods=window_mods(), tile_s1=512, qk_preload=2), dict(heads=2, s0=500, s1=1300, window=(300, 40))),
}


@pytest.mark.parametrize("knobs, dims", CASES.values(), ids=CASES.keys())
def test_dense_kernels_pass_the_accuracy_rule(knobs, dims) -> None:
    """The f16 softmax passes the rule against the fp32 and fp16 torch references (run_variant
    asserts it, with guards around every GM tensor), and stays close to the f32 softmax."""
    shape = ProblemShape(**dims)
    fast, _, _ = run_variant(config(**F16, **knobs), shape)
    precise, _, _ = run_variant(config(**knobs), shape)
    assert torch.allclose(fast.float(), precise.float(), atol=5e-3)


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0)])
def test_varlen_with_empty_sequences(window) -> None:
    """Packed sequences, some with no query or no key rows: rows without keys get O = 0."""
    run_varlen(config(varlen=True, mods=window_mods(window != (-1, -1)), **F16), [0, 1, 127, 129, 300], [5, 0, 127, 129, 300],
               4, 2, window)


def test_key_padding_and_window() -> None:
    """Both biases on one score (-30000 twice stays finite in f16); rows with no visible key get O = 0."""
    shape = ProblemShape(batch=3, heads=2, s0=300, s1=1000, window=(600, 20))
    mask = torch.ones(3, 1000, dtype=torch.bool)
    mask[0, 400:] = False
    mask[1, 50:] = False  # batch 1: query i sees keys from i + 100 on, none of them valid
    mask[2, 1::3] = False
    out, _, _ = run_variant(config(mods=window_mods(), key_padding=True, **F16), shape, key_mask=mask)
    assert torch.count_nonzero(out[1].float()) == 0 and torch.count_nonzero(out[0].float()) > 0


def test_slice_rows_of_minus_inf_scores_give_no_nan() -> None:
    """Scores near -6000, masked twice (window and key padding), round to -inf in f16: a slice
    row of them keeps the running-max start, which must stay finite in f16 (-65504, not -3e38),
    or P = exp(-inf + inf) would be NaN. Rows 228.. of the second Q block see no key of tile 0
    (window) and tile 0's keys are all padding; their visible keys are in tile 1."""
    from ptofa.attention.core import attend
    from ptofa.reference import check_accuracy, reference_fa

    s, d = 256, 128
    q = torch.full((1, s, 1, d), 23.0, dtype=torch.float16)
    k = torch.full((1, s, 1, d), -23.0, dtype=torch.float16)  # every score 23 * -23 * 128 / sqrt(128) = -5985
    v = torch.randn(1, s, 1, d, generator=torch.Generator().manual_seed(0)).to(torch.float16)
    mask = torch.ones(1, s, dtype=torch.bool)
    mask[:, :128] = False
    window = (100, 0)
    cfg = config(tile_s1=128, qk_preload=2, mods=window_mods(), key_padding=True, **F16)
    out, _ = attend(q, k, v, scale=d ** -0.5, window=window, key_padding_mask=mask, backend="sim", config=cfg)
    assert not torch.isnan(out).any()
    ref = reference_fa(q, k, v, d ** -0.5, window, key_padding_mask=mask)
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()


def test_scores_near_the_lowest_f16_keep_their_max() -> None:
    """Every score -63640 (finite in f16, below any start but the lowest f16): the running max
    must reach it, or P = exp(s - start) would be 0 for every key and O = 0 / 0."""
    from ptofa.attention.core import attend
    from ptofa.reference import check_accuracy, reference_fa

    s, d = 128, 128
    q = torch.full((1, s, 1, d), 75.0, dtype=torch.float16)
    k = torch.full((1, s, 1, d), -75.0, dtype=torch.float16)
    v = torch.randn(1, s, 1, d, generator=torch.Generator().manual_seed(1)).to(torch.float16)
    out, _ = attend(q, k, v, scale=d ** -0.5, backend="sim", config=config(**F16))
    ref = reference_fa(q, k, v, d ** -0.5)
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()


def test_paged_gqa_packed_decode() -> None:
    cache = make_cache(True, 3, 1024, 2, 128, page_size=256)
    run_decode(config(varlen=True, page_size=256, gqa_pack=True, **F16), cache, [300, 513, 1], heads=8)


@pytest.mark.parametrize("knobs, names", [
    (dict(in_dtype="bf16"), "in_dtype='bf16'"),
    (dict(lse=True), "lse=True"),
])
def test_refused_combinations_name_the_rule(knobs, names) -> None:
    with pytest.raises(ConfigError, match=r"^softmax dtype: .*" + names.replace("(", r"\(")):
        FAConfig(**F16, **knobs)


def test_unknown_softmax_dtype_and_short_slices_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^softmax dtype: softmax_dtype='bf16' must be one of \('f32', 'f16'\)"):
        FAConfig(softmax_dtype="bf16")
    # Two 8-row slices of a 512-key tile (D = 256: 32 rows per core): an f16 [8, 1] statistic is
    # 16 bytes, not a 32-byte block.
    with pytest.raises(ConfigError, match=r"^vector row slice: vec_s0=8 rows: .*vec_s0\*2 bytes \(softmax_dtype=f16\)"):
        FAConfig(head=256, tile_s1=512, slice_buffers=2, **F16)


def test_plan_and_pipes_hold_f16_scores() -> None:
    fast, precise = FAConfig(**F16), FAConfig(qk_dtype="f32")  # (the f32 softmax's f32 slot)
    qk = fast.pipes[0]
    assert (qk.name, qk.dtype, qk.slot_bytes) == ("qk", "f16", precise.pipes[0].slot_bytes // 2)
    # (the f32 softmax's PV slot also carries the cube's row sums: ROWSUM_COLS more f32 columns)
    pv_extra = (precise.pipes[2].slot_bytes - fast.pipes[2].slot_bytes) * fast.slot_num
    assert pv_extra == 128 * 16 * 4 * fast.slot_num
    assert fast.gm_slot_bytes_per_block == precise.gm_slot_bytes_per_block - qk.slot_bytes * fast.slot_num - pv_extra
    plan = {t.name: t for t in tile_plan(fast)}
    assert plan["s_tile"].dtype == plan["red_tmp"].dtype == "f16"
    assert "p_half" not in plan and plan["m_half"].dtype == plan["l_half"].dtype == "f16"
    # f16 copies of the running max and the tile's row sums replace the f32 slice statistics
    assert plan["m_all_h"].dtype == plan["l_tile_h"].dtype == "f16"
    assert (plan["m_all_h"].rows, plan["m_all_h"].cols) == (1, fast.vec_rows)
    # (the f32 softmax takes its row sums from the cube: no slice or tile sums, a row-sum accumulator)
    assert precise.cube_rowsum and not fast.cube_rowsum
    # (and one buffer of K's L0B operand and of the QK accumulator, `qk_buffers`)
    assert {t.name for t in tile_plan(precise)} - set(plan) == {"p_half", "m_slice", "l_pv", "l_acc", "k_right", "s_acc"}
    assert set(plan) - {t.name for t in tile_plan(precise)} == {"m_half", "l_half", "m_all_h", "l_tile_h", "l_tile",
                                                               "k_right0", "k_right1", "s_acc0", "s_acc1"}


def test_f16_statistics_per_slice_and_per_tile() -> None:
    """Per slice, the f16 softmax updates the f16 running max in place and copies the f16 row
    sums, with no conversion; per tile, two tcvt make the f32 statistics (exact: f16 values)."""
    from ptofa.fa_builder import emit_fa

    text = emit_fa(config(**F16))
    vec = text[text.index("func.func @fa_vec"):]
    body = vec[vec.index("scf.for %slice"):vec.index("pto.tcvt ins(%m_all_h")]  # the slice loop
    nbuf = config(**F16).vec_buffers
    assert "pto.tcvt" not in body
    assert body.count("pto.tadds") == 2 * nbuf and body.count("pto.tmax") == nbuf
    assert "%m_all_h" in body and "%l_tile_h" in body
    assert "pto.tcvt ins(%m_all_h" in vec and "pto.tcvt ins(%l_tile_h" in vec


def test_ir_stores_f16_scores_and_computes_p_in_place() -> None:
    """The cube stores its f32 accumulator into the f16 QK slot (FIX converts); the vectors
    read f16 scores and make three passes over a slice (row max, exp of the difference,
    row sum); the f32 softmax widens them and converts P into another tile."""
    module = parsed(config(**F16)).module
    acc_stores = [op for op in module.walk() if isinstance(op, d.TStoreOp)
                  and str(op.operands[0].type).startswith("!pto.tile_buf<acc, 128x64xf32")]
    assert acc_stores and any("f16" in str(op.operands[1].type) for op in acc_stores)
    # P is stored from the score tile itself
    assert _stage_ops(config(**F16)) == ["pto.trowmax", "pto.trowexpandexpdif", "pto.trowsum", "pto.tstore"]
    # the f32 softmax: S - m (its exp runs on the f16 P, exp_f16), the conversion; no row sum
    # (cube_rowsum), and the row max on the f16 scores as loaded (input_row_max), not on the f32 tile;
    # with both (sub_f16, the default) S - m is an f16 subtraction on P's tile and nothing reads an f32 S
    assert _stage_ops(config(exp_f16=False)) == ["pto.trowexpandexpdif", "pto.tcvt"]
    assert _stage_ops(config()) == [] and config().sub_f16


def test_timing_model_sees_half_the_vector_work_per_pass(tmp_path) -> None:
    """The same shape through both softmaxes: the f16 one's predicted time is lower, and its
    trowmax / trowexpandexpdif take less vector time in all (128 f16 elements per repeat, not
    64, and half as many slices, each twice as tall). The f32 side is the f32 softmax with the same
    passes (row sums on the vectors, exp in f32: `cube_rowsum=False, exp_f16=False`)."""
    from ptofa.runner import run_case

    shape = ProblemShape(batch=1, heads=1, s0=512, s1=2048)
    times, per_op = {}, {}
    for sd in ("f32", "f16"):
        trace = tmp_path / f"{sd}.json"
        same_passes = dict(cube_rowsum=False, exp_f16=False) if sd == "f32" else {}
        result = run_case(FAConfig(softmax_dtype=sd, **same_passes), shape, backend="sim", timing=True, trace=trace,
                          block_dim=1)
        assert result.status == "pass", result.message
        times[sd] = result.predicted_us
        events = json.loads(trace.read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        per_op[sd] = {name: sum(e["dur"] for e in events if e.get("ph") == "X" and e["name"] == name)
                      for name in ("pto.trowmax", "pto.trowexpandexpdif")}
    assert times["f16"] < 0.8 * times["f32"]
    for name in per_op["f32"]:
        assert per_op["f16"][name] < 0.65 * per_op["f32"][name], (name, per_op)


def test_cli_run_and_build_take_one_value(tmp_path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["run", "--backend", "sim", "--softmax-dtype", "f16,f32"])
    assert result.exit_code == 2 and "softmax dtype: --softmax-dtype f16,f32: build and run take one value" in result.output
    result = runner.invoke(main, ["build", "--softmax-dtype", "f16", "--lse", "-o", str(tmp_path / "fa.pto")])
    assert result.exit_code == 2 and "softmax dtype: softmax_dtype='f16' is built for" in result.output
    assert not (tmp_path / "fa.pto").exists()
    result = runner.invoke(main, ["build", "--softmax-dtype", "f16", "-o", str(tmp_path / "fa.pto")])
    assert result.exit_code == 0, result.output
    assert "softmax_f16" in "".join(result.output.split())
    assert "!pto.tensor_view<128x256xf16>" in (tmp_path / "fa.pto").read_text()  # the QK slot's entry
    result = runner.invoke(main, ["run", "--backend", "sim", "--softmax-dtype", "f64"])
    assert result.exit_code == 2 and "must be one of f32, f16" in result.output


def test_sweep_axis_keys_and_labels() -> None:
    grid = SweepGrid(tile_s1=(256,), qk_preload=(3,), head=(128,), s1=(1024,), softmax_dtype=("f32", "f16"))
    points = grid.points("sim")
    assert [p.softmax_dtype for p in points] == ["f32", "f16"]
    assert "softmax_dtype" not in points[0].key and ",softmax_dtype=f16," in points[1].key
    assert points[1].config_label.endswith("softmax=f16")
    assert points[1].switch_columns()["softmax_dtype"] == "f16"


def test_attend_runs_it_and_the_torch_op_refuses_it() -> None:
    """`attend` (no LSE asked) runs an f16-softmax config within the accuracy rule; the torch op,
    which always returns an LSE for autograd, refuses it before any work, naming the reason."""
    from ptofa.attention.core import attend
    from ptofa.attention.functional import flash_attn_func
    from ptofa.reference import check_accuracy, make_inputs, reference_fa

    shape = ProblemShape(batch=2, heads=2, s0=200, s1=500, window=(-1, 0))
    q, k, v = make_inputs(shape, 128, 3, torch.float16, 2)
    out, lse = attend(q, k, v, scale=None, window=(-1, 0), backend="sim", config=config(mods=window_mods(), **F16))
    assert lse is None
    ref = reference_fa(q, k, v, 128 ** -0.5, (-1, 0))
    acc = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert acc.passed, acc.summary()
    with pytest.raises(ConfigError, match=r"^config: softmax_dtype='f16' computes no LSE, and this op always returns one"):
        flash_attn_func(q, k, v, causal=True, backend="sim", config=config(mods=window_mods(), **F16))


@pytest.mark.parametrize("extra", [[], ["--causal"]])
def test_split_kv_passes_the_rule(extra) -> None:
    """Split-KV combines partials by their LSE; with f16 row sums a partial's row-sum error scales
    its O and its weight alike, so the split result meets the rule as the unsplit one does."""
    result = CliRunner().invoke(main, ["run", "--backend", "sim", "--heads", "1", "--seqlens", "1500,100,0,700",
                                       "--kv-seqlens", "1500,2600,20,0", "--num-splits", "3", "--softmax-dtype", "f16",
                                       *extra])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("num_splits=")]
    assert len(lines) == 2 and all(" passed " in line for line in lines)
    assert "x3" in lines[0]  # the split launch really split


def test_run_balance_splits_an_f16_softmax_launch() -> None:
    """`run_fa run --balance` sends the dense shape through the balanced split-KV launch (main + reduce)."""
    result = CliRunner().invoke(main, ["run", "--backend", "sim", "--batch", "1", "--heads", "1", "--s0", "1024",
                                       "--s1", "1024", "--softmax-dtype", "f16", "--causal", "--balance"])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("balanced split-KV (units x splits:")]
    assert ": pass" in line
