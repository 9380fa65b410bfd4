"""The FA builder over the config grid, FAConfig / ProblemShape legality rules, the
memory budget, the structure of the emitted IR, and the `run_fa build` / `check` commands.
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
from click.testing import CliRunner
from xdsl.dialects import func, scf

from ptofa import pipeline

from ptofa.kernels import argspec
from ptofa.ir import dialect as d
from ptofa.api import parse_ir_type, tile_type
from ptofa.cli.main import main
from ptofa.fa_builder import emit_fa
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, TileSpec, budget, tile_plan
from ptofa.sim.faults import fault_text
from ptofa.sim.options import RunOptions
from ptofa.ir.textio import ParsedModule, PtoCheckError, check_text, print_pto
from ptofa.kernels.builtin_mods.window import window_mods
from pairwise import grid_params, pairwise_cover

GRID = list(itertools.product((64, 96, 128, 192, 256), (128, 256, 512), (1, 2, 3, 4)))


def _grid_id(point: tuple[int, int, int]) -> str:
    return "head{}-s1tile{}-preload{}".format(*point)


def make(**knobs) -> FAConfig:
    """An FAConfig without the qk_preload=4 warning (tested on its own)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FAConfig(**knobs)


def is_legal(head: int, tile_s1: int, qk_preload: int) -> bool:
    return not (qk_preload == 1 and tile_s1 > 128)


LEGAL = [p for p in GRID if is_legal(*p)]
# The default run builds a pairwise cover of the legal points (and checks every illegal one).
DEFAULT = set(pairwise_cover(LEGAL)) | {p for p in GRID if not is_legal(*p)}


@lru_cache(maxsize=None)
def emitted(head: int, tile_s1: int, qk_preload: int) -> tuple[str, ParsedModule]:
    text = emit_fa(make(head=head, tile_s1=tile_s1, qk_preload=qk_preload))
    return text, check_text(text)


def functions(parsed: ParsedModule) -> dict[str, func.FuncOp]:
    return {op.sym_name.data: op for op in parsed.module.walk() if isinstance(op, func.FuncOp)}


# --------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("head, tile_s1, qk_preload", grid_params(GRID, DEFAULT, _grid_id))
def test_grid_config_is_rejected_or_emits_valid_ir(head: int, tile_s1: int, qk_preload: int) -> None:
    if not is_legal(head, tile_s1, qk_preload):
        with pytest.raises(ConfigError, match=r"^preload vs tile factor: qk_preload=1 needs k_tile_factor=1 \(tile_s1=cube_s1=128\), got tile_s1="):
            FAConfig(head=head, tile_s1=tile_s1, qk_preload=qk_preload)
        return
    text, parsed = emitted(head, tile_s1, qk_preload)
    assert print_pto(parsed.module) == text
    assert print_pto(check_text(print_pto(parsed.module)).module) == text


@pytest.mark.parametrize("head, tile_s1, qk_preload", grid_params(LEGAL, DEFAULT, _grid_id))
def test_cli_build_writes_the_emitted_text(tmp_path: Path, head: int, tile_s1: int, qk_preload: int) -> None:
    out = tmp_path / "sub" / "fa.pto"
    result = CliRunner().invoke(main, ["build", "--head", str(head), "--tile-s1", str(tile_s1),
                                       "--qk-preload", str(qk_preload), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == emitted(head, tile_s1, qk_preload)[0]
    flat = " ".join(result.output.split())  # rich wraps long lines at the terminal width
    config = make(head=head, tile_s1=tile_s1, qk_preload=qk_preload)
    assert " ".join(budget(config).table().split()) in flat
    assert f"config: {config.summary()}" in flat
    assert ("warning: qk_preload=4" in flat) == (qk_preload == 4)


def test_qk_preload_4_warns() -> None:
    with pytest.warns(UserWarning, match="qk_preload=4 risks the ptoas --enable-insert-sync event-id deadlock"):
        FAConfig(qk_preload=4)


def test_the_default_run_holds_every_pair_of_grid_values() -> None:
    """The pairwise cover the default run builds: every two of head, tile_s1 and qk_preload take
    together each pair of values the legal grid has, with fewer than half its points."""
    default = [p for p in LEGAL if p in DEFAULT]
    for i, j in itertools.combinations(range(3), 2):
        assert {(p[i], p[j]) for p in default} == {(p[i], p[j]) for p in LEGAL}, (i, j)
    assert len(default) < len(LEGAL) / 2


def test_illegal_grid_point_is_the_only_one() -> None:
    illegal = [p for p in GRID if p not in LEGAL]
    assert illegal == [(head, tile, 1) for head in (64, 96, 128, 192, 256) for tile in (256, 512)]


# --------------------------------------------------------------------------------------
# FAConfig and ProblemShape rules
# --------------------------------------------------------------------------------------

ILLEGAL_CONFIGS = {
    "head_72": (dict(head=72), "head dim: head=72 is not a kernel width: a multiple of 16 up to 128 (one D chunk) or of 32 up to 256 (two D chunks of whole cube fractals), (16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256)"),
    "head_256_128_rows": (dict(head=256, cube_s0=128), "cube tile: cube_s0=128, cube_s1=128; head=256 is built with 64-row Q blocks"),
    "tile_s1_2048": (dict(tile_s1=2048), "tile_s1: tile_s1=2048 must be one of (128, 256, 512, 1024)"),
    "tile_s1_1024_head_256": (dict(head=256, tile_s1=1024), "vector row slice: vec_s0=4 rows"),
    "tile_s1_not_multiple": (dict(tile_s1=192, cube_s1=128), "divisibility: cube_s1=128 must divide tile_s1=192"),
    "tile_s1_unsupported": (dict(tile_s1=192), "tile_s1: tile_s1=192 must be one of (128, 256, 512, 1024)"),
    "qk_preload_0": (dict(qk_preload=0), "qk_preload: qk_preload=0 must be >= 1"),
    "qk_preload_5": (dict(qk_preload=5), "preload vs slot ring: qk_preload=5 must be < slot_num - sync_period + 1 = 8 - 4 + 1 = 5"),
    "exp_ring": (dict(qk_preload=3, exp_ring=2), "exp ring: exp_ring=2 must equal qk_preload=3"),
    "slot_num_odd": (dict(slot_num=5, qk_preload=2), "slot ring reuse: slot_num=5 must be a multiple of its sync period 2"),
    "slot_num_4_preload_4": (dict(slot_num=4, qk_preload=4), "preload vs slot ring: qk_preload=4 must be < slot_num - sync_period + 1 = 4 - 2 + 1 = 3"),
    "slot_num_0": (dict(slot_num=0, qk_preload=1, tile_s1=128), "slot_num: slot_num=0 must be >= 1"),
    "preload_1_tile_256": (dict(qk_preload=1, tile_s1=256), "preload vs tile factor: qk_preload=1 needs k_tile_factor=1"),
    "out_dtype": (dict(out_dtype="i8"), "dtypes: in_dtype='f16', out_dtype='i8'; Q/K/V must be one of ('f16', 'bf16')"),
    "in_dtype_f32": (dict(in_dtype="f32"), "dtypes: in_dtype='f32', out_dtype='f32'; Q/K/V must be one of ('f16', 'bf16')"),
    "target": (dict(target="a5"), "target: target='a5'; only a2/a3"),
    "cube_tile": (dict(cube_s0=64), "cube tile: cube_s0=64, cube_s1=64"),
    "cube_sub_tile": (dict(cube_s1=32), "cube tile: cube_s0=128, cube_s1=32; head=128 is built with 128-row Q blocks and "
                                        "sub-tiles of 64 or 128 keys"),
}


@pytest.mark.parametrize("knobs, message", ILLEGAL_CONFIGS.values(), ids=ILLEGAL_CONFIGS.keys())
def test_illegal_config(knobs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        make(**knobs)
    assert str(info.value).startswith(message)


def test_illegal_fault_option() -> None:
    """Fault injection is a simulator run option (`RunOptions`), not a kernel knob."""
    with pytest.raises(ConfigError) as info:
        RunOptions(fault="bogus")
    assert str(info.value).startswith("fault injection: fault='bogus' is not one of drop_tfree, extra_tpop, swap_pipe_ids")


def test_legal_fault_configs() -> None:
    for fault in ("drop_tfree", "extra_tpop", "swap_pipe_ids"):
        assert RunOptions(fault=fault).fault == fault


SHAPES = {
    "kv_heads_not_divisor": (ProblemShape(heads=6, kv_heads=4), "grouped heads: heads=6 must be a multiple of kv_heads=4"),
    "kv_heads_zero": (ProblemShape(kv_heads=0), "problem shape: kv_heads=0 must be >= 1"),
    "window_below_minus_one": (ProblemShape(window=(3, -5)), "window: (3, -5) must be (left, right) with each >= -1 (-1 = unbounded)"),
    "window_without_mask": (ProblemShape(window=(-1, 0)),
                            "window: (-1, 0) needs a kernel with the window mod (FAConfig(mods=(WINDOW,)), --causal or --window)"),
    "batch_zero": (ProblemShape(batch=0), "problem shape: batch=0 must be >= 1"),
    "heads_zero": (ProblemShape(heads=0, kv_heads=1), "problem shape: heads=0 must be >= 1"),
}


@pytest.mark.parametrize("s0, s1", [(100, 1024), (128, 1000), (128, 512), (1, 1), (4097, 3)])
def test_any_sequence_lengths_are_accepted(s0: int, s1: int) -> None:
    """Ragged Q blocks and KV tiles, and fewer tiles than QK_PRELOAD, are handled by the kernel."""
    ProblemShape(s0=s0, s1=s1).check(make(tile_s1=256, qk_preload=3))


@pytest.mark.parametrize("shape, message", SHAPES.values(), ids=SHAPES.keys())
def test_problem_shape_check(shape: ProblemShape, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        shape.check(make(tile_s1=256, qk_preload=3))
    assert str(info.value) == message


def test_problem_shape_minimum_is_accepted() -> None:
    ProblemShape(s0=128, s1=768).check(make(tile_s1=256, qk_preload=3))
    ProblemShape(batch=2, heads=3, s0=256, s1=128).check(make(tile_s1=128, qk_preload=1))


# --------------------------------------------------------------------------------------
# Memory budget
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("head, tile_s1, qk_preload", grid_params(LEGAL, DEFAULT, _grid_id))
def test_budget_is_the_tile_plan(head: int, tile_s1: int, qk_preload: int) -> None:
    config = make(head=head, tile_s1=tile_s1, qk_preload=qk_preload)
    plan = budget(config)
    tiles = tile_plan(config)
    for row in plan.rows:
        names = [name for name, _ in row.items if not name.startswith("hidden_")]
        assert names == [t.name for t in tiles if t.loc == row.space]
        assert row.used == sum(b for _, b in row.items) <= row.capacity
        assert row.capacity == pipeline.CAPACITY[row.space]
    ub = next(r for r in plan.rows if r.space == "vec")
    hidden = [b for name, b in ub.items if name.startswith("hidden_rowexpand_tmp")]
    assert hidden == [pipeline.HIDDEN_ROWEXPAND_TMP_BYTES] * config.rowexpand_ops
    assert plan.gm_slot_bytes_per_block == sum(p.slot_bytes for p in config.pipes) * config.slot_num


def test_budget_alignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tile is counted rounded up to its space's planner alignment, as ptoas's PlanMemory does
    (256 B UB/L1, 4 KiB L0A/L0B/L0C)."""
    config = make()
    extra = [TileSpec("odd", "vector", "p", "vec", 3, 8, "f16"), TileSpec("odd_l0a", "cube", "qk", "left", 16, 16, "f16")]  # 48 B, 512 B
    monkeypatch.setattr(pipeline, "tile_plan", lambda c: tile_plan(c) + extra)
    plan = {row.space: dict(row.items) for row in budget(config).rows}
    assert plan["vec"]["odd"] == 256
    assert plan["left"]["odd_l0a"] == 4096


def test_budget_overflow_is_rejected_naming_space_and_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pipeline.CAPACITY, "vec", 64 * 1024)
    with pytest.raises(ConfigError) as info:
        make(head=128, tile_s1=512, qk_preload=3)
    message = str(info.value)
    assert message.startswith("memory budget exceeded (rule: local tiles must fit each on-chip space):")
    lines = message.splitlines()
    over = [line for line in lines if line.startswith("UB ")]
    assert len(over) == 1 and over[0].endswith("OVER")
    assert "65536" in over[0]
    for tile in ("s_tile", "red_tmp", "p_half", "pv_tile", "o_tile", "hidden_rowexpand_tmp0"):
        assert tile in over[0]
    assert not any(line.startswith(("L1 ", "L0A", "L0B", "L0C")) for line in lines)  # only the spaces over


@pytest.mark.parametrize("head, tile_s1, buffers, vec_s0", [(128, 128, 2, 32), (128, 256, 2, 16), (128, 512, 2, 8),
                                                          (64, 512, 2, 8), (192, 128, 2, 16), (192, 256, 2, 8), (192, 512, 1, 8),
                                                          (256, 512, 1, 8)])
def test_softmax_slices_are_double_buffered_while_they_keep_8_rows(head: int, tile_s1: int, buffers: int,
                                                                    vec_s0: int) -> None:
    """slice_buffers=2: two slice buffers (s_tile0/1, p_half0/1: the next slice loads while this one
    computes) when the halved slice keeps MIN_VEC_S0 = 8 rows; the slices of a tile still cover the
    core's rows; the IR emits one softmax slice per buffer in the slice loop, each on its own buffers."""
    # (the f32 x = S - m form, exp_f16 off: `sub_f16` has no f32 score tile, tests/test_sub_f16.py)
    config = make(head=head, tile_s1=tile_s1, qk_preload=2, slice_buffers=2 if buffers == 2 else 0, exp_f16=False)
    assert (config.vec_buffers, config.vec_s0) == (buffers, vec_s0)
    assert config.vec_s0 * config.slice_factor * config.vec_buffers == config.vec_rows
    names = {t.name: t for t in tile_plan(config) if t.core == "vector"}
    suffixes = [str(b) for b in range(buffers)] if buffers == 2 else [""]
    for base, dtype in (("s_tile", "f32"), ("p_half", config.in_dtype)):
        for suffix in suffixes:
            assert (names[base + suffix].rows, names[base + suffix].cols, names[base + suffix].dtype) == (vec_s0, tile_s1, dtype)
    vec_text = emit_fa(config).split(f"func.func @{argspec.VECTOR_FUNC_NAME}")[1]
    # one exp per slice buffer: exp(S - m) fused (f32 exp), or (exp_f16) S - m then an f16 texp of P
    exp_op = "pto.trowexpandsub" if config.exp_f16 else "pto.trowexpandexpdif"
    assert vec_text.count(exp_op) == buffers
    for suffix in suffixes:
        assert re.search(rf"pto.tcvt ins\(%s_tile{suffix} \{{", vec_text) and f"outs(%p_half{suffix} :" in vec_text


@pytest.mark.parametrize("tile_s1", [128, 256, 512])
def test_automatic_slice_buffers_take_the_tallest_slice_that_fits(tile_s1: int) -> None:
    """slice_buffers=0: one buffer of whole-height slices where that plan fits the UB (fewer
    vector instructions for the same work), two half-height buffers where it does not (a key
    padding mask's tiles); an explicit count outside 0..2 is refused with the rule."""
    plain = make(tile_s1=tile_s1, cube_rowsum=False)  # cube_rowsum's row-sum tiles need the UB of the taller slices at 128
    assert (plain.vec_buffers, plain.vec_s0) == (1, 64 * 128 // tile_s1)
    assert budget(plain).rows[0].used <= budget(plain).rows[0].capacity
    padded = make(tile_s1=tile_s1, key_padding=True, cube_rowsum=False)
    assert padded.vec_buffers == 2
    with pytest.raises(ConfigError, match="memory budget exceeded"):
        make(tile_s1=tile_s1, key_padding=True, slice_buffers=1, cube_rowsum=False)
    with pytest.raises(ConfigError, match=r"slice buffers.*slice_buffers=3 must be 0 \(automatic\), 1 or 2"):
        make(tile_s1=tile_s1, slice_buffers=3)


def test_budget_table_lists_every_space() -> None:
    table = budget(make()).table()
    for name in ("UB", "L1", "L0A", "L0B", "L0C", "GM slots per block"):
        assert name in table
    assert "OVER" not in table


def test_budget_from_tile_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`budget` sums whatever `tile_plan` lists: an oversized plan is reported in the table."""
    spec = TileSpec("huge", "vector", "p", "vec", 512, 128, "f32")
    assert spec.nbytes == 256 * 1024
    config = make()
    monkeypatch.setattr(pipeline, "tile_plan", lambda c: tile_plan(c) + [spec])
    plan = budget(config)
    ub = next(r for r in plan.rows if r.space == "vec")
    assert ub.used > ub.capacity and ("huge", 256 * 1024) in ub.items
    assert "huge 256K" in plan.table(only_over=True) and "OVER" in plan.table(only_over=True)


# --------------------------------------------------------------------------------------
# Structure of the emitted IR
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("head, tile_s1, qk_preload", grid_params(LEGAL, DEFAULT, _grid_id))
def test_pipes_on_each_side(head: int, tile_s1: int, qk_preload: int) -> None:
    config = make(head=head, tile_s1=tile_s1, qk_preload=qk_preload)
    funcs = functions(emitted(head, tile_s1, qk_preload)[1])
    for name, init_cls in ((argspec.CUBE_FUNC_NAME, d.AicInitializePipeOp), (argspec.VECTOR_FUNC_NAME, d.AivInitializePipeOp)):
        inits = [op for op in funcs[name].walk() if isinstance(op, d.PIPE_INIT_OPS)]
        assert all(isinstance(op, init_cls) and op.parent_op() is funcs[name] for op in inits)
        assert [(op.id_value, op.dir_value) for op in inits] == [(0, 1), (1, 2), (2, 1), (3, 2)][:len(config.pipes)]
        assert len(inits) == (4 if config.prescale_q else 3)
        for op, pipe in zip(inits, config.pipes):
            t = op.gm_slot_tensor.type
            assert op.slot_size.value.data == pipe.slot_bytes
            assert op.slot_num_value == config.slot_num
            if name == argspec.VECTOR_FUNC_NAME:  # half descriptor: slot_size is twice its bytes
                assert t.dims == (pipe.half_rows, pipe.cols) and 2 * t.nbytes == pipe.slot_bytes
            else:
                assert t.dims == (pipe.rows, pipe.cols) and t.nbytes == pipe.slot_bytes
    for op in parsed_ops(head, tile_s1, qk_preload):
        if isinstance(op, d.PIPE_DATA_OPS):
            assert op.split_value == 1


def parsed_ops(head: int, tile_s1: int, qk_preload: int):
    return emitted(head, tile_s1, qk_preload)[1].module.walk()


def _unit_loop(kernel: func.FuncOp) -> scf.ForOp:
    (unit_loop,) = [op for op in kernel.body.block.ops if isinstance(op, scf.ForOp)]
    return unit_loop


def _schedule_loops(kernel: func.FuncOp) -> list[scf.ForOp]:
    """The scf.for ops directly in the work-unit loop: the cube's prologue, steady and
    epilogue loops; the vectors' one fused loop."""
    return [op for op in _unit_loop(kernel).body.block.ops if isinstance(op, scf.ForOp)]


def _pipe_ops(region_op) -> Counter:
    return Counter((op.ROLE, op.id_value) for op in region_op.walk() if isinstance(op, d.PIPE_DATA_OPS))


# Pipe ops per schedule stage: (role, pipe id) -> count per iteration.
CUBE_SCHEDULE = (
    {("talloc", 0): 1, ("tpush", 0): 1},  # prologue: QK(t)
    {("tpop", 1): 1, ("tfree", 1): 1, ("talloc", 0): 1, ("tpush", 0): 1, ("talloc", 2): 1, ("tpush", 2): 1},  # PV(t) + QK(t+P)
    {("tpop", 1): 1, ("tfree", 1): 1, ("talloc", 2): 1, ("tpush", 2): 1},  # epilogue: PV(t)
)
VECTOR_SCHEDULE = (
    {("tpop", 2): 1, ("tfree", 2): 1},  # if k >= lo + P: GU(k - P)
    {("tpop", 0): 1, ("tfree", 0): 1, ("talloc", 1): 1, ("tpush", 1): 1},  # if k < hi: softmax(k)
)


@pytest.mark.parametrize("head, tile_s1", [(64, 128), (128, 256), (128, 512), (256, 256)])
def test_steady_state_starts_qk_before_it_waits_for_p(head: int, tile_s1: int) -> None:
    """In the cube's steady loop the QK entry is allocated and QK(t+P)'s first matmul issued
    before P(t) is popped, so the cube computes while the vectors finish P(t); the epilogue
    (no QK) pops P first."""
    _, parsed = emitted(head, tile_s1, 2)
    _, steady, epilogue = _schedule_loops(functions(parsed)[argspec.CUBE_FUNC_NAME])

    def order(loop) -> list[str]:
        names = []
        for op in loop.body.walk():
            if isinstance(op, d.PIPE_DATA_OPS) and (op.ROLE, op.id_value) in (("talloc", 0), ("tpop", 1)):
                names.append(f"{op.ROLE}{op.id_value}")
            elif isinstance(op, (d.TMatmulOp, d.TMatmulAccOp)):
                names.append("matmul")
        return names

    steady_order = order(steady)
    assert steady_order[0] == "talloc0" and steady_order[1] == "matmul" and "tpop1" in steady_order
    assert set(steady_order[1:steady_order.index("tpop1")]) == {"matmul"}  # QK's D chunks, then the pop
    assert order(epilogue)[0] == "tpop1" and "talloc0" not in order(epilogue)


@pytest.mark.parametrize("head, tile_s1, qk_preload", grid_params(LEGAL, DEFAULT, _grid_id))
def test_schedule_pipe_op_counts(head: int, tile_s1: int, qk_preload: int) -> None:
    text, parsed = emitted(head, tile_s1, qk_preload)
    funcs = functions(parsed)
    cube_loops = _schedule_loops(funcs[argspec.CUBE_FUNC_NAME])
    assert [dict(_pipe_ops(loop)) for loop in cube_loops] == list(CUBE_SCHEDULE)
    assert cube_loops[1].ub is cube_loops[2].lb  # steady ends where the epilogue starts
    (vec_loop,) = _schedule_loops(funcs[argspec.VECTOR_FUNC_NAME])
    stages = [op for op in vec_loop.body.block.ops if isinstance(op, scf.IfOp)]
    assert [dict(_pipe_ops(stage)) for stage in stages] == list(VECTOR_SCHEDULE)
    for name, loops in ((argspec.CUBE_FUNC_NAME, cube_loops), (argspec.VECTOR_FUNC_NAME, [vec_loop])):
        # Every pipe op of the function sits in one of the stages (the scaled-Q pipe, once per
        # unit, is tested in test_prescale.py).
        per_tile = [count for (_, pid), count in _pipe_ops(funcs[name]).items() if pid != 3]
        assert sum(per_tile) == sum(sum(c.values()) for c in map(_pipe_ops, loops))
    # For a unit with n visible tiles, down to fewer than P and one: the cube's trips are
    # min(P, n), max(0, n - P), min(P, n); the vectors' stages run n times each. Every pipe balances.
    for n in range(1, qk_preload + 6):
        cube, vec = Counter(), Counter()
        for stage, trip in zip(CUBE_SCHEDULE, (min(qk_preload, n), max(0, n - qk_preload), min(qk_preload, n))):
            for key, count in stage.items():
                cube[key] += count * trip
        for stage in VECTOR_SCHEDULE:
            for key, count in stage.items():
                vec[key] += count * n
        for producer, consumer, pid in ((cube, vec, 0), (vec, cube, 1), (cube, vec, 2)):
            assert producer[("talloc", pid)] == producer[("tpush", pid)] == n
            assert consumer[("tpop", pid)] == consumer[("tfree", pid)] == n
    # The static text agrees: two copies of each QK/PV op on the cube side, one of each stage on the vectors.
    cube_text = text.split(f"func.func @{argspec.VECTOR_FUNC_NAME}")[0].split(f"func.func @{argspec.CUBE_FUNC_NAME}")[1]
    assert cube_text.count("pto.talloc_to_aiv {id = 0,") == 2 and cube_text.count("pto.tpush_to_aiv(") == 4
    assert cube_text.count("pto.talloc_to_aiv {id = 2,") == 2 and cube_text.count("pto.tpop_from_aiv {id = 1,") == 2
    vec_text = text.split(f"func.func @{argspec.VECTOR_FUNC_NAME}")[1]
    assert vec_text.count("pto.tpop_from_aic {id = 0,") == 1 and vec_text.count("pto.tpop_from_aic {id = 2,") == 1


def test_entry_arguments_follow_argspec() -> None:
    """One argument spec: the entry's arguments are ENTRY_ARGS, names and types in order."""
    text, parsed = emitted(128, 256, 3)
    entry = functions(parsed)[argspec.ENTRY_NAME]
    assert "pto.entry" in entry.attributes
    args = entry.body.block.args
    assert [a.name_hint for a in args] == [a.name for a in argspec.ENTRY_ARGS]
    assert [a.type for a in args] == [parse_ir_type(a.ir_type) for a in argspec.ENTRY_ARGS]
    signature = ", ".join(f"%{a.name}: {a.ir_type}" for a in argspec.ENTRY_ARGS)
    assert f"func.func @{argspec.ENTRY_NAME}({signature}) attributes {{pto.entry}}" in text
    first = next(iter(entry.body.block.ops))
    assert isinstance(first, d.SetFftsOp) and first.ptr is args[0]
    callees = [op.callee.root_reference.data for op in entry.body.block.ops if isinstance(op, func.CallOp)]
    assert callees == [argspec.CUBE_FUNC_NAME, argspec.VECTOR_FUNC_NAME]


@pytest.mark.parametrize("head, tile_s1, qk_preload", grid_params(LEGAL, DEFAULT, _grid_id))
def test_alloc_tiles_are_the_tile_plan(head: int, tile_s1: int, qk_preload: int) -> None:
    """Every alloc_tile corresponds 1:1 to tile_plan(config): the budget's source of truth."""
    config = make(head=head, tile_s1=tile_s1, qk_preload=qk_preload)
    funcs = functions(emitted(head, tile_s1, qk_preload)[1])
    kind_of = {argspec.CUBE_FUNC_NAME: "cube", argspec.VECTOR_FUNC_NAME: "vector"}
    allocated = []
    for name, f in funcs.items():
        for op in f.walk():
            if isinstance(op, d.AllocTileOp):
                assert name in kind_of, f"alloc_tile in @{name}"
                assert op.parent_op() is f, "tiles are allocated once, at the top of the kernel function"
                allocated.append((kind_of[name], op.result.name_hint, op.result.type))
    planned = [(t.core, t.name, tile_type(t.loc, t.rows, t.cols, t.dtype, blayout=t.blayout, slayout=t.slayout,
                                          fractal=t.fractal, valid="dynamic" if t.dynamic else None))
               for t in tile_plan(config)]
    assert allocated == planned
    assert len({name for _, name, _ in allocated}) == len(allocated)


def _faulty(fault: str, **knobs) -> str:
    """The emitted kernel broken by the simulator's fault pass (`ptofa.sim.faults`)."""
    return fault_text(check_text(emit_fa(make(**knobs))), fault)


def test_fault_injection_builds() -> None:
    """Pipe-balance faults pass the static verifier (the simulator catches them); swapped
    pipe ids are caught statically when the QK and PV slots differ in shape."""
    check_text(_faulty("drop_tfree"))
    check_text(_faulty("extra_tpop"))
    same_slots = dict(head=128, tile_s1=128, qk_preload=2, cube_rowsum=False, qk_dtype="f32")  # QK and PV: 128x128 f32
    check_text(_faulty("swap_pipe_ids", **same_slots))
    with pytest.raises(PtoCheckError, match="pipe id 0: slot_size differs between cube \\(131072\\) and vector \\(65536\\)"):
        check_text(_faulty("swap_pipe_ids", head=128, tile_s1=256, cube_rowsum=False, qk_dtype="f32"))


# --------------------------------------------------------------------------------------
# CLI errors
# --------------------------------------------------------------------------------------


def test_cli_check_ok(tmp_path: Path) -> None:
    path = tmp_path / "fa.pto"
    path.write_text(emitted(128, 256, 3)[0])
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 0 and "ok" in result.output


def test_cli_check_broken_file(tmp_path: Path) -> None:
    text = emit_fa(make(head=128, tile_s1=256, qk_preload=3, exp_f16=False))  # the f32 exp: trowexpandexpdif
    bad_line = next(i for i, line in enumerate(text.splitlines()) if "pto.trowexpandexpdif" in line)
    lines = text.splitlines()
    lines[bad_line] = lines[bad_line].replace("pto.trowexpandexpdif", "pto.trecip", 1)
    lines[bad_line] = lines[bad_line].split(" ins(")[0] + " ins(%s_tile : !pto.tile_buf<vec, 32x256xf32, valid=?x?>) outs(%s_tile : !pto.tile_buf<vec, 32x256xf32, valid=?x?>)"
    path = tmp_path / "broken.pto"
    path.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1
    assert f"{path}:{bad_line + 1}: error: 'pto.trecip' in place" in result.output


def test_cli_check_ptoas_only_skips_the_launch_rules(tmp_path: Path) -> None:
    """A kernel with pipes but no set_ffts: ptoas compiles it, ptofa cannot launch it."""
    text = emitted(128, 256, 3)[0]
    lines = [line for line in text.splitlines() if "pto.set_ffts" not in line]
    path = tmp_path / "no_ffts.pto"
    path.write_text("\n".join(lines) + "\n")
    strict = CliRunner().invoke(main, ["check", str(path)])
    assert strict.exit_code == 1 and "set_ffts" in strict.output
    relaxed = CliRunner().invoke(main, ["check", "--ptoas-only", str(path)])
    assert relaxed.exit_code == 0, relaxed.output


def test_cli_check_parse_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pto"
    path.write_text("module {\n  func.func @f() {\n    pto.nonsense\n  }\n}\n")
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1
    assert f"{path}:3: error:" in result.output


@pytest.mark.parametrize("content, line, message", [
    (b"", 1, "not a kernel: no function"),
    (b"// only a comment\n", 1, "not a kernel: no function"),
    (b"module {\n  func.func @f() {\n    return\n  }\n}\n", 1, "not a kernel: no function carries an entry attribute"),
    (b"module {\n}\n// \xff\n", 3, "not UTF-8 text: byte 0xff at column 4"),
    (b"\xef\xbb\xbfmodule {\n}\n", 1, "a UTF-8 byte order mark starts the file"),
    (b"\x01module {\n}\n", 1, "Unexpected character"),
    (b"module {\n}\n`\n", 3, "Unexpected character"),
])
def test_cli_check_never_says_ok_to_what_is_not_a_kernel(tmp_path: Path, content: bytes, line: int, message: str) -> None:
    """Empty files, files without an entry, non-UTF-8 bytes, a BOM or a bad first character: an
    error line (exit 1), never a traceback and never `ok`."""
    path = tmp_path / "k.pto"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert f"{path}:{line}: error: {message}" in result.output and "Traceback" not in result.output
    assert ": ok" not in result.output


def test_cli_check_takes_files_and_folders_with_one_summary(tmp_path: Path) -> None:
    good = emitted(128, 256, 3)[0]
    (tmp_path / "sub").mkdir()
    for name in ("a.pto", "sub/b.pto"):
        (tmp_path / name).write_text(good)
    (tmp_path / "sub" / "bad.pto").write_text("module {\n  pto.nonsense\n}\n")
    extra = tmp_path / "c.pto"
    result = CliRunner().invoke(main, ["check", str(tmp_path / "sub"), str(tmp_path / "a.pto")])
    assert result.exit_code == 1
    assert f"{tmp_path / 'sub' / 'bad.pto'}:2: error:" in result.output
    assert "checked 3 files: 2 ok, 1 failed" in result.output
    extra.write_text(good)
    result = CliRunner().invoke(main, ["check", str(extra), str(tmp_path / "a.pto")])
    assert result.exit_code == 0 and "checked 2 files: 2 ok, 0 failed" in result.output
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    result = CliRunner().invoke(main, ["check", str(empty)])
    assert result.exit_code == 2 and "no .pto file under" in result.output


@pytest.mark.parametrize("args, rule", [
    (["--head", "72"], "head dim: head=72 is not a kernel width"),
    (["--tile-s1", "2048"], "tile_s1: tile_s1=2048"),
    (["--qk-preload", "0"], "qk_preload: qk_preload=0 must be >= 1"),
    (["--qk-preload", "5"], "preload vs slot ring: qk_preload=5"),
    (["--qk-preload", "1", "--tile-s1", "512"], "preload vs tile factor: qk_preload=1 needs k_tile_factor=1"),
])
def test_cli_build_illegal_config(tmp_path: Path, args: list[str], rule: str) -> None:
    out = tmp_path / "fa.pto"
    result = CliRunner().invoke(main, ["build", *args, "-o", str(out)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: invalid config: ") and rule in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("head, tile_s1, qk_preload", grid_params(LEGAL, DEFAULT, _grid_id))
def test_static_memory_check_agrees_with_the_budget(head: int, tile_s1: int, qk_preload: int) -> None:
    """The checker's liveness peak (what ptoas's planner needs at least) is the budget: on the
    cube every tile is live at once; on the vectors every tile is live in the unit loop, and so is
    every hidden trowexpand scratch there (ptoas's planner keeps each apart for the loop nest)."""
    from ptofa.ir.textio import peak_usage

    _, parsed = emitted(head, tile_s1, qk_preload)
    fns = functions(parsed)
    plan = {row.space: row.used for row in budget(make(head=head, tile_s1=tile_s1, qk_preload=qk_preload)).rows}
    cube = {space: peak.nbytes for space, peak in peak_usage(fns["fa_cube"]).items()}
    vector = {space: peak.nbytes for space, peak in peak_usage(fns["fa_vec"]).items()}
    assert cube == {space: plan[space] for space in ("mat", "left", "right", "acc")}
    assert vector == {"vec": plan["vec"]}
