"""End to end on the simulator: build the kernel, run the parsed `.pto`, check against torch.

The CI subset covers the cases issue 4 names (both sides of the 8-slot ring wrap,
TILE_S1 = 512, every QK_PRELOAD, head dim 64 and 128, more work units than blocks,
S0 > 128); of the full config x S1 grid the default run takes a pairwise cover, the rest
is marked `slow`.
"""

from __future__ import annotations

import dataclasses

import re
import warnings

import pytest
from click.testing import CliRunner

from ptofa.cli.main import main
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.runner import run_case
from ptofa.sim.options import RunOptions
from ptofa.kernels.builtin_mods.window import window_mods
from pairwise import grid_params, pairwise_cover


def _config(head: int, tile_s1: int, qk_preload: int) -> FAConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # qk_preload=4 warns about ptoas, not about the simulator
        return FAConfig(head=head, tile_s1=tile_s1, qk_preload=qk_preload)


CI_CASES = [
    # (head, tile_s1, qk_preload, batch, heads, s0, s1, block_dim)
    (128, 256, 3, 1, 1, 128, 1024, None),  # 4 tiles: no ring wrap
    (128, 256, 3, 1, 1, 128, 2048, None),  # 8 tiles: exactly the ring
    (128, 256, 3, 1, 1, 128, 4096, None),  # 16 tiles: wraps, back-pressure
    (128, 256, 3, 1, 1, 128, 8192, None),  # 32 tiles: > 2 x slot_num
    (128, 512, 3, 1, 1, 128, 8192, None),
    (128, 128, 1, 1, 1, 128, 2048, None),
    (128, 256, 2, 1, 1, 128, 4096, None),
    (128, 256, 4, 1, 1, 128, 4096, None),
    (128, 512, 4, 1, 1, 128, 8192, None),
    (64, 256, 3, 1, 1, 128, 4096, None),
    (64, 512, 2, 1, 1, 128, 2048, None),
    (128, 256, 3, 2, 3, 256, 2048, 5),  # 12 units on 5 blocks (3, 3, 2, 2, 2 units each)
    (128, 256, 3, 1, 2, 384, 2304, None),  # S0 > 128; 9 tiles
    (128, 256, 3, 1, 1, 128, 2560, 1),  # tile counts 10, 11, 12: residues mod the credit period
    (128, 256, 3, 1, 1, 128, 2816, 1),
    (128, 256, 3, 1, 1, 128, 3072, 1),
    (128, 256, 3, 1, 1, 128, 768, None),  # S1 = QK_PRELOAD * TILE_S1: prologue and epilogue only
    (128, 256, 2, 1, 1, 128, 768, None),  # S1 = (QK_PRELOAD + 1) * TILE_S1
]


@pytest.mark.parametrize("head,tile_s1,qk_preload,batch,heads,s0,s1,block_dim", CI_CASES)
def test_sim_matches_reference(head, tile_s1, qk_preload, batch, heads, s0, s1, block_dim):
    config = _config(head, tile_s1, qk_preload)
    shape = ProblemShape(batch, heads, s0, s1)
    result = run_case(config, shape, backend="sim", seed=1, block_dim=block_dim)
    assert result.status == "pass", result.message
    assert result.err is not None and result.err <= result.tolerance
    assert result.err < 1e-3  # the hardware kernels' own tolerance (docs/sources.md §4.4)
    if block_dim:
        assert result.block_dim == block_dim


def _legal_grid() -> list[tuple[int, int, int, int]]:
    """Every legal (head, tile_s1, qk_preload, s1) of the issue's grid; illegal points are tested in test_builder."""
    points = []
    for head in (64, 128):
        for tile_s1 in (128, 256, 512):
            for qk_preload in (1, 2, 3, 4):
                for s1 in (1024, 2048, 4096, 8192):
                    try:
                        ProblemShape(1, 2, 256, s1).check(_config(head, tile_s1, qk_preload))
                    except ConfigError:
                        continue
                    points.append((head, tile_s1, qk_preload, s1))
    return points


# The default run takes a pairwise cover of the grid, shortest S1 first; the rest is `slow`.
FULL_GRID = _legal_grid()
FULL_GRID_DEFAULT = set(pairwise_cover(FULL_GRID, cost=lambda point: point[-1]))


@pytest.mark.parametrize("head,tile_s1,qk_preload,s1",
                         grid_params(FULL_GRID, FULL_GRID_DEFAULT, lambda point: "-".join(map(str, point))))
def test_full_grid(head, tile_s1, qk_preload, s1):
    """B=1, N=2, S0=256 (4 work units) on 3 blocks, every legal config and S1."""
    result = run_case(_config(head, tile_s1, qk_preload), ProblemShape(1, 2, 256, s1), backend="sim", seed=2, block_dim=3)
    assert result.status == "pass", result.message


def test_legal_grid_size():
    # per head: TILE 128: 4 preloads x 4 S1; TILE 256 and 512: preloads 2..4 x 4 S1 (the schedule
    # shrinks for S1 < P*TILE_S1, so no S1 is rejected any more).  2 x (16 + 12 + 12) = 80
    assert len(_legal_grid()) == 80


def test_runtime_scale_and_wrong_reference(monkeypatch):
    """The scale is a runtime argument; a reference that disagrees makes the check fail."""
    import ptofa.launch.base as backend
    from ptofa.reference import reference_fa

    config = _config(128, 256, 3)
    shape = ProblemShape(1, 1, 128, 1024)
    assert run_case(config, shape, backend="sim", scale=0.5).status == "pass"
    monkeypatch.setattr(backend, "reference_fa", lambda q, k, v, s, *rest: reference_fa(q, k, v, 1.5 * s, *rest))
    bad = run_case(config, shape, backend="sim")
    assert bad.status == "fail" and bad.err > bad.tolerance


@pytest.mark.parametrize(
    "fault,tile_s1,expected",
    [
        ("drop_tfree", 256, "SimImbalance"),
        ("extra_tpop", 256, "pipe deadlock"),
        ("swap_pipe_ids", 128, "pipe deadlock"),  # equal slot shapes: the verifier cannot see it
        ("swap_pipe_ids", 256, "slot_size differs"),  # different slot shapes: the verifier does
    ],
)
def test_fault_injection_reports(fault, tile_s1, expected):
    # without cube_rowsum, whose PV slots (D + 16 row-sum columns) never equal the QK slots, and with
    # S in f32 as P·V's output is (an f16 QK slot differs from the PV slot in its element type)
    config = dataclasses.replace(_config(128, tile_s1, 2), cube_rowsum=False, exp_f16=False, qk_dtype="f32")
    result = run_case(config, ProblemShape(1, 1, 128, 4096), backend="sim", options=RunOptions(fault=fault))
    assert result.status in ("deadlock", "error")
    assert expected in result.message


def test_deadlock_report_names_op_line_and_counters():
    result = run_case(_config(128, 256, 3), ProblemShape(1, 1, 128, 2048), backend="sim",
                      options=RunOptions(fault="extra_tpop"))
    assert result.status == "deadlock"
    msg = result.message
    assert "pto.tpop_from_aic (line " in msg
    assert "pipe 2" in msg and "push" in msg and "pop" in msg and "free" in msg
    assert "last ops:" in msg


def test_cli_run_prints_a_row_and_exits_zero():
    res = CliRunner().invoke(main, ["run", "--backend", "sim", "--heads", "1", "--s0", "128", "--s1", "1024"])
    assert res.exit_code == 0, res.output
    assert "pass" in res.output and "128x1024" in res.output
    assert "Predicted" in res.output


@pytest.mark.parametrize("fault", ["drop_tfree", "extra_tpop", "swap_pipe_ids"])
def test_cli_fault_exit_code(fault):
    res = CliRunner().invoke(main, ["run", "--backend", "sim", "--heads", "1", "--s0", "128", "--s1", "4096",
                                    "--tile-s1", "128", "--qk-preload", "2", "--inject-fault", fault])
    assert res.exit_code == 1, res.output
    assert "pass" not in res.output.split("status")[-1].split("\n")[2]


def test_cli_run_npu_without_npu_exits_2():
    res = CliRunner().invoke(main, ["run", "--backend", "npu", "--s1", "1024"])
    assert res.exit_code == 2
    assert len([ln for ln in res.output.splitlines() if ln.strip()]) == 1


def test_cli_run_auto_falls_back_to_sim():
    res = CliRunner().invoke(main, ["run", "--backend", "auto", "--heads", "1", "--s0", "128", "--s1", "768"])
    assert res.exit_code == 0, res.output
    assert " sim " in res.output


def test_cli_run_rejects_bad_shape_with_rule():
    res = CliRunner().invoke(main, ["run", "--heads", "2", "--kv-heads", "3"])
    assert res.exit_code == 2
    assert "grouped heads: heads=2 must be a multiple of kv_heads=3" in res.output


def test_keep_dir_holds_the_pto(tmp_path):
    result = run_case(_config(128, 256, 2), ProblemShape(1, 1, 128, 512), backend="sim", keep_dir=tmp_path)
    assert result.status == "pass"
    text = (tmp_path / "fa.pto").read_text()
    assert "func.func @fa_fwd" in text


def test_injected_fault_text_is_kept_and_reports_name_its_lines(tmp_path):
    """The builder emits the real kernel; the simulator breaks the parsed module and the
    mutated text, whose lines the report names, is written beside it."""
    result = run_case(_config(128, 256, 3), ProblemShape(1, 1, 128, 2048), backend="sim", keep_dir=tmp_path,
                      options=RunOptions(fault="extra_tpop"))
    assert result.status == "deadlock"
    assert "extra_entry" not in (tmp_path / "fa.pto").read_text()
    lines = (tmp_path / "fa.extra_tpop.pto").read_text().split("\n")
    line = int(re.search(r"blocked in pto.tpop_from_aic \(line (\d+)\) on pipe 2", result.message).group(1))
    assert "%extra_entry = pto.tpop_from_aic {id = 2, split = 1}" in lines[line - 1]
    assert "pto.trowexpanddiv" in lines[line]


def test_timeline_written(tmp_path):
    svg = tmp_path / "t.svg"
    result = run_case(_config(128, 256, 3), ProblemShape(1, 1, 128, 2048), backend="sim", timing=True, timeline=svg)
    assert result.status == "pass"
    assert result.predicted_us and result.predicted_us > 0
    assert svg.read_text().lstrip().startswith("<")


@pytest.mark.parametrize("head,tile_s1,qk_preload,variant", [
    (128, 256, 3, {}), (128, 512, 4, {}), (64, 128, 1, {}), (64, 512, 2, {}),
    (128, 512, 4, dict(mods=window_mods(), key_padding=True, lse=True)), (96, 256, 2, dict(in_dtype="bf16", out_dtype="f32", lse=True)),
    (192, 256, 3, dict(mods=window_mods(), lse=True)), (256, 512, 4, dict(key_padding=True, in_dtype="bf16")),
    (128, 1024, 2, {}), (64, 1024, 3, dict(mods=window_mods(), lse=True)),
])
def test_simulator_memory_peak_equals_the_budget(head, tile_s1, qk_preload, variant):
    """The budget (from tile_plan + hidden scratch) and the simulator's live-byte count agree exactly."""
    import torch

    from ptofa.launch.base import TORCH_DTYPES
    from ptofa.fa_builder import emit_fa
    from ptofa.pipeline import budget
    from ptofa.runner import sim_kernel_args
    from ptofa.sim import simulate
    from ptofa.ir.textio import check_text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = FAConfig(head=head, tile_s1=tile_s1, qk_preload=qk_preload, **variant)
    s1 = qk_preload * tile_s1
    shape = ProblemShape(1, 1, 128, s1, window=(-1, 0) if config.narrowing else (-1, -1))
    dt = TORCH_DTYPES[config.in_dtype]
    q, kv = torch.zeros((1, 128, 1, head), dtype=dt), torch.zeros((1, s1, 1, head), dtype=dt)
    o = torch.zeros((1, 128, 1, head), dtype=TORCH_DTYPES[config.out_dtype])  # two units at 64-row Q blocks
    args = sim_kernel_args(config, shape, q, kv, kv.clone(), o, 1, 0.1,
                           lse=torch.zeros(1, 1, 128) if config.lse else None,
                           key_mask=torch.ones(s1, dtype=torch.int8) if config.key_padding else None)
    peak = simulate(check_text(emit_fa(config)), args, 1).peak_bytes
    planned = {row.space: row.used for row in budget(config).rows}
    assert peak[(0, "vec0")]["vec"] == peak[(0, "vec1")]["vec"] == planned["vec"]
    for space in ("mat", "left", "right", "acc"):
        assert peak[(0, "cube")][space] == planned[space]


@pytest.mark.parametrize("head,tile_s1,buffers", [(128, 256, 1), (128, 256, 2), (128, 512, 2), (192, 512, 1)])
def test_rowexpand_count_in_the_emitted_vector_function(head, tile_s1, buffers):
    from ptofa.fa_builder import emit_fa

    config = FAConfig(head=head, tile_s1=tile_s1, qk_preload=3, slice_buffers=buffers)
    assert config.vec_buffers == buffers
    text = emit_fa(config)
    vector_func = text[text.index("func.func @fa_vec"):]
    ops = [line.split("ins(")[1].split(":")[0] for line in vector_func.splitlines() if "pto.trowexpand" in line]
    # ptoas's hidden scratch goes to the ops written without a tmp: the final div, and gu's mul
    # unless the cube sums P's rows (then gu's two muls broadcast through the first exp_tmp);
    # every exp of a slice (trowexpandexpdif, or with exp_f16 trowexpandsub), one per slice buffer,
    # passes its own exp_tmp tile.
    # sub_f16's f16 subtraction (one per slice buffer) has no f16 scratch to take: it is hidden too.
    without_tmp = [ins for ins in ops if ins.count("%") == 2]
    subs = buffers * config.sub_f16
    assert len(without_tmp) == config.rowexpand_ops == (1 if config.cube_rowsum else 2) + subs
    exp_op = "pto.trowexpandsub" if config.exp_f16 else "pto.trowexpandexpdif"
    slice_exp = [line for line in vector_func.splitlines() if exp_op in line]
    gu_muls = [line for line in vector_func.splitlines() if "pto.trowexpandmul" in line]
    assert len(slice_exp) == buffers and sum("%exp_tmp" in line for line in slice_exp) == buffers - subs
    assert all("%exp_tmp" in line for line in (gu_muls if config.cube_rowsum else []))


@pytest.mark.parametrize("slot_num,qk_preload", [(4, 2), (6, 3)])
def test_other_slot_counts_are_emitted_and_simulated(slot_num, qk_preload):
    config = FAConfig(tile_s1=128, qk_preload=qk_preload, slot_num=slot_num)
    from ptofa.fa_builder import emit_fa

    assert f"slot_num = {slot_num}" in emit_fa(config)
    result = run_case(config, ProblemShape(1, 1, 128, 2048), backend="sim")
    assert result.status == "pass", result.message


def test_simulator_benchmark_runs_and_checks():
    """benchmarks/bench_sim.py on a small shape: it builds its arguments from the same config it emits."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "benchmarks" / "bench_sim.py"
    done = subprocess.run([sys.executable, str(script), "--s0", "128", "--s1", "512", "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ratio sim / reference" in done.stdout and "\npass: err=" in done.stdout
