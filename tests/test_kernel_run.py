"""Any kernel through one path: `ptofa.run_kernel`, `run_fa run FILE.pto --arg ...`, the ragged-rows
rule, and the example kernel of docs/writing-a-kernel.md."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import ptofa
from ptofa.cli.main import main
from ptofa.ir.textio import PtoCheckError, check_text
from ptofa.kernels.fa_fwd import emit_fa
from ptofa.launch.kernel import KernelArgError, load_kernel, run_kernel
from ptofa.launch.toolchain import compile_pto
from ptofa.pipeline import FAConfig, ProblemShape, workspace_bytes
from ptofa.reference import check_accuracy, make_inputs, reference_fa
from ptofa.sim import SimError
from ptofa.sim.kernel_timing import gm_traffic_bytes

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "row_softmax.py"


@pytest.fixture(scope="module")
def example():
    return runpy.run_path(str(EXAMPLE))


@pytest.fixture(scope="module")
def softmax_pto(example, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kernel") / "row_softmax.pto"
    path.write_text(example["emit_row_softmax"]())
    return path


def softmax_rule(x: torch.Tensor, y: torch.Tensor):
    """The accuracy rule: error against float64 at most twice torch's float32 softmax's, plus a small term."""
    return check_accuracy(y, torch.softmax(x.double(), -1), torch.softmax(x, -1))


@pytest.mark.parametrize("rows, block_dim", [(100, 3), (16, 1), (1, 2), (257, 4)])
def test_example_kernel_through_run_kernel(example, rows: int, block_dim: int) -> None:
    """Ragged last chunks (100 = 6 * 16 + 4), a single row, more cores than chunks."""
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows)) * 4
    y = torch.full_like(x, float("nan"))
    run = ptofa.run_kernel(example["build_row_softmax"](), {"x": x, "y": y, "rows": rows}, block_dim, backend="sim")
    accuracy = softmax_rule(x, y)
    assert accuracy.passed, accuracy
    timing = run.timing
    assert timing is not None and timing.block_dim == block_dim
    assert timing.kernel_us >= timing.hbm_bound_us > 0
    # every row read once and written once: the HBM floor's traffic is exactly that
    assert gm_traffic_bytes(run.sim.trace) == 2 * rows * 256 * 4
    assert "Predicted" in run.summary() and "HBM" in run.summary()


def test_prediction_takes_the_hbm_floor_when_traffic_dominates(example) -> None:
    """Many rows on a few blocks: the floor is applied to the prediction, never under it."""
    rows = 512
    x = torch.randn(rows, 256)
    y = torch.empty_like(x)
    run = run_kernel(example["build_row_softmax"](), {"x": x, "y": y, "rows": rows}, 1, backend="sim")
    replayed = max(run.timing.block_us.values())
    assert run.timing.kernel_us == pytest.approx(max(run.timing.kernel_us, run.timing.hbm_bound_us))
    assert run.timing.kernel_us >= replayed
    assert run.timing.bound == ("HBM" if run.timing.hbm_bound_us >= run.timing.kernel_us else run.timing.bound)


def test_kernel_from_text_path_or_module_is_the_same(example, softmax_pto: Path) -> None:
    by_path, by_text = load_kernel(softmax_pto), load_kernel(softmax_pto.read_text())
    by_module = load_kernel(example["build_row_softmax"]())
    assert by_path.text == by_text.text == by_module.text
    assert [p.name for p in by_path.params] == ["x", "y", "rows"]


def test_argument_errors_name_the_argument(softmax_pto: Path) -> None:
    x = torch.zeros(4, 256)
    with pytest.raises(KernelArgError, match=r"missing \['rows'\]"):
        run_kernel(softmax_pto, {"x": x, "y": x}, 1, backend="sim")
    with pytest.raises(KernelArgError, match=r"unknown \['z'\]"):
        run_kernel(softmax_pto, {"x": x, "y": x, "rows": 4, "z": 1}, 1, backend="sim")
    with pytest.raises(KernelArgError, match=r"%x : !pto.ptr<f32> needs a torch.float32 tensor, got torch.float16"):
        run_kernel(softmax_pto, {"x": x.half(), "y": x, "rows": 4}, 1, backend="sim")
    with pytest.raises(KernelArgError, match=r"%rows : i64 needs an int"):
        run_kernel(softmax_pto, {"x": x, "y": x, "rows": 4.0}, 1, backend="sim")
    with pytest.raises(KernelArgError, match=r"block_dim=0"):
        run_kernel(softmax_pto, {"x": x, "y": x, "rows": 4}, 0, backend="sim")


def test_out_of_bounds_rows_are_a_simulator_report(softmax_pto: Path) -> None:
    """Claiming more rows than the buffers hold is caught, not written past the tensor."""
    x = torch.zeros(4, 256)
    with pytest.raises(SimError):
        run_kernel(softmax_pto, {"x": x, "y": torch.zeros(4, 256), "rows": 40}, 1, backend="sim")


def test_the_forward_kernel_runs_through_the_same_path() -> None:
    """A kernel with pipes and an FFTS argument: run_kernel supplies FFTS and the slots' second view."""
    config = FAConfig()
    shape = ProblemShape(1, 2, 100, 300)
    q, k, v = make_inputs(shape, config.head, seed=3)
    o = torch.zeros_like(q)
    block_dim = 2
    slots = torch.full((workspace_bytes(config, shape, block_dim) // 4,), float("nan"))
    kernel = load_kernel(emit_fa(config))
    assert "ffts" not in [p.name for p in kernel.params] and "slots_h" not in [p.name for p in kernel.params]
    args = {"slots": slots, "q": q, "k": k, "v": v, "o": o, "batch": 1, "heads": 2, "kv_heads": 2, "s0": 100,
            "s1": 300, "scale": config.head ** -0.5}
    run = run_kernel(kernel, args, block_dim, backend="sim")
    ref = reference_fa(q, k, v, config.head ** -0.5)
    accuracy = check_accuracy(o, ref.out32, ref.out_low)
    assert accuracy.passed, accuracy
    assert run.timing.kernel_us > 0


def test_cli_runs_a_pto_file_with_args(softmax_pto: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", str(softmax_pto), "--arg", "x=f32:50x256", "--arg", "y=zeros:f32:50x256",
                                       "--arg", "rows=50", "--block-dim", "2", "--backend", "sim", "--out", str(tmp_path),
                                       "--timeline", str(tmp_path / "t.svg"), "--trace", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    assert "Predicted" in result.output and "HBM" in result.output
    x, y = (torch.from_numpy(np.load(tmp_path / f"{name}.npy")) for name in ("x", "y"))
    assert softmax_rule(x, y).passed
    assert (tmp_path / "t.svg").stat().st_size > 0 and (tmp_path / "t.json").stat().st_size > 0


@pytest.mark.parametrize("arg, message", [
    ("x", "expected NAME=VALUE"),
    ("x=q32:4x256", "dtype q32 must be one of"),
    ("x=abc", "not a number, a dtype:shape"),
    ("x=missing.npy", "is not a file"),
])
def test_cli_bad_args_are_one_line_and_exit_2(softmax_pto: Path, arg: str, message: str) -> None:
    result = CliRunner().invoke(main, ["run", str(softmax_pto), "--arg", arg, "--block-dim", "1", "--backend", "sim"])
    assert result.exit_code == 2 and message in result.output


def test_cli_needs_block_dim_and_every_argument(softmax_pto: Path) -> None:
    base = ["run", str(softmax_pto), "--backend", "sim", "--arg", "x=f32:4x256", "--arg", "y=f32:4x256"]
    assert "--block-dim" in CliRunner().invoke(main, base + ["--arg", "rows=4"]).output
    missing = CliRunner().invoke(main, base + ["--block-dim", "1"])
    assert missing.exit_code == 2 and "missing ['rows']" in missing.output


def test_compile_dry_run_names_a_launcher_for_the_kernels_own_entry(softmax_pto: Path, tmp_path: Path) -> None:
    result = compile_pto(softmax_pto, tmp_path / "build", dry_run=True)
    ptoas, bisheng = result.commands
    assert ptoas[-1].endswith("row_softmax.cpp") and bisheng[-1].endswith("row_softmax.so")
    caller = Path(bisheng[-3])
    assert caller.name == "row_softmax.caller.cpp"
    text = caller.read_text()
    assert "call_row_softmax(" in text and "row_softmax<<<" in text and "fa_fwd" not in text


def _static_statistics(text: str) -> str:
    """The example with [R, 1] statistics of a static valid shape (the bug the rule catches)."""
    text = text.replace(" valid_row = %c16 valid_col = %c1 : !pto.tile_buf<vec, 16x1xf32, valid=?x?, blayout=col_major>",
                        " : !pto.tile_buf<vec, 16x1xf32, blayout=col_major>")
    lines = [line for line in text.splitlines(keepends=True)
             if "set_validshape %row_max" not in line and "set_validshape %row_sum" not in line]
    return "".join(lines).replace("16x1xf32, valid=?x?, blayout=col_major", "16x1xf32, blayout=col_major")


def test_ragged_rows_rule_names_the_line_and_ptoas_only_passes(softmax_pto: Path) -> None:
    bad = _static_statistics(softmax_pto.read_text())
    with pytest.raises(PtoCheckError) as caught:
        check_text(bad, "bad.pto")
    messages = [msg for _, msg in caught.value.errors]
    assert len(messages) == 4 and all("ragged rows" in msg and "valid=?x?" in msg for msg in messages)
    assert {msg.split("'")[1] for msg in messages} == {"pto.trowmax", "pto.trowsum", "pto.trowexpandexpdif",
                                                        "pto.trowexpanddiv"}
    check_text(bad, "bad.pto", launch_rules=False)  # ptoas compiles it: only ptofa's rules refuse it


def test_the_simulator_says_what_to_change_on_a_ragged_chunk(softmax_pto: Path) -> None:
    from ptofa.ir.textio import parse_pto
    from ptofa.sim import GmPointer, simulate

    parsed = parse_pto(_static_statistics(softmax_pto.read_text()))
    x = torch.randn(20, 256)
    with pytest.raises(SimError, match=r"dynamic valid shape \(valid=\?x\?\) and set_validshape it"):
        simulate(parsed, {"x": GmPointer.of(x), "y": GmPointer.of(torch.zeros(20, 256)), "rows": 20}, 1)


def test_example_script_writes_the_kernel(tmp_path: Path, softmax_pto: Path) -> None:
    import subprocess

    out = tmp_path / "k.pto"
    subprocess.run([sys.executable, str(EXAMPLE), "-o", str(out)], check=True)
    assert out.read_text() == softmax_pto.read_text()


def test_npu_backend_without_a_device_is_one_clear_error(softmax_pto: Path) -> None:
    from ptofa.launch.base import BackendUnavailable

    x = torch.zeros(4, 256)
    with pytest.raises(BackendUnavailable, match="npu backend"):
        run_kernel(softmax_pto, {"x": x, "y": x.clone(), "rows": 4}, 1, backend="npu")
    result = CliRunner().invoke(main, ["run", str(softmax_pto), "--arg", "x=f32:4x256", "--arg", "y=f32:4x256",
                                       "--arg", "rows=4", "--block-dim", "1", "--backend", "npu"])
    assert result.exit_code == 2 and "npu backend" in result.output
