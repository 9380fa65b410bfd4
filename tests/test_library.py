"""The reusable kernels of `ptofa.kernels.lib`: each against torch on the simulator with ragged
sizes (a last row chunk or output tile that is cut short, more cores than work), each compiled
by a real ptoas (marked `ptoas`), and their size rules."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ptofa
from ptofa.ir.textio import print_pto
from ptofa.kernels.lib import gemm, library, norms, rope, softmax
from ptofa.reference import check_accuracy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _run(module, args: dict, block_dim: int):
    run = ptofa.run_kernel(module, args, block_dim, backend="sim")
    assert run.timing is not None and run.timing.kernel_us > 0 and run.timing.bound
    return run


@pytest.mark.parametrize("rows, cols, block_dim", [(37, 64, 2), (5, 512, 4)])
def test_row_softmax(rows: int, cols: int, block_dim: int) -> None:
    x = _randn(rows, cols, seed=rows) * 3
    y = torch.full_like(x, float("nan"))
    _run(softmax.build_row_softmax(cols), {"x": x, "y": y, "rows": rows}, block_dim)
    assert check_accuracy(y, torch.softmax(x.double(), -1), torch.softmax(x, -1)).passed


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("rows, dim, block_dim", [(37, 256, 2), (13, 1024, 1), (3, 64, 4)])
def test_rms_norm(rows: int, dim: int, block_dim: int) -> None:
    x, w, eps = _randn(rows, dim, seed=1) * 2, _randn(dim, seed=2), 1e-6
    y = torch.full_like(x, float("nan"))
    _run(norms.build_rms_norm(dim), {"x": x, "w": w, "y": y, "rows": rows, "eps": eps}, block_dim)
    accuracy = check_accuracy(y, _rms(x.double(), w.double(), eps), _rms(x, w, eps))
    assert accuracy.passed, accuracy


@pytest.mark.parametrize("rows, dim, block_dim", [(37, 256, 3), (5, 96, 4)])
def test_layer_norm(rows: int, dim: int, block_dim: int) -> None:
    x, w, b, eps = _randn(rows, dim, seed=3) + 1.5, _randn(dim, seed=4), _randn(dim, seed=5), 1e-5
    y = torch.full_like(x, float("nan"))
    _run(norms.build_layer_norm(dim), {"x": x, "w": w, "b": b, "y": y, "rows": rows, "eps": eps}, block_dim)
    ref = [F.layer_norm(x.to(dt), (dim,), w.to(dt), b.to(dt), eps) for dt in (torch.float64, torch.float32)]
    accuracy = check_accuracy(y, *ref)
    assert accuracy.passed, accuracy


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int) -> torch.Tensor:
    tokens, half = cos.shape
    x = x.view(tokens, heads, 2 * half)
    x1, x2, c, s = x[..., :half], x[..., half:], cos[:, None], sin[:, None]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).reshape(tokens, -1)


@pytest.mark.parametrize("tokens, heads, dim, block_dim", [(37, 3, 128, 2), (5, 1, 64, 4)])
def test_rope(tokens: int, heads: int, dim: int, block_dim: int) -> None:
    x, angles = _randn(tokens, heads * dim, seed=6), _randn(tokens, dim // 2, seed=7) * 3
    cos, sin = angles.cos(), angles.sin()
    y = torch.full_like(x, float("nan"))
    _run(rope.build_rope(dim), {"x": x, "cos": cos, "sin": sin, "y": y, "tokens": tokens, "heads": heads}, block_dim)
    accuracy = check_accuracy(y, _rope(x.double(), cos.double(), sin.double(), heads), _rope(x, cos, sin, heads))
    assert accuracy.passed, accuracy


@pytest.fixture(scope="module")
def gemm_example():
    return runpy.run_path(str(EXAMPLES / "gemm.py"))


# Ragged edge tiles in M and N, a short last K step, an odd and an even count of K steps, one
# fractal, more blocks than tiles; with an activation, tiles whose rows leave the second vector
# core with none (M = 48) or a few (M = 80).
@pytest.mark.parametrize("m, n, k, block_dim, activation", [
    (48, 160, 208, 3, None),
    (272, 144, 80, 4, None),
    (16, 16, 16, 2, None),
    (128, 256, 512, 1, None),
    (48, 272, 144, 3, "silu"),
    (272, 144, 80, 2, "silu"),
    (80, 272, 48, 2, "relu"),
])
def test_gemm(gemm_example, m: int, n: int, k: int, block_dim: int, activation: str | None) -> None:
    a, b = _randn(m, k, seed=m).half(), _randn(k, n, seed=n).half()
    c, run, accuracy = gemm_example["run_gemm"](a, b, block_dim, activation)
    assert accuracy.passed, accuracy
    assert run.timing.flops == 2 * m * n * k


def test_gemm_sizes_must_be_multiples_of_16(gemm_example) -> None:
    with pytest.raises(ValueError, match=r"K=40 must be a positive multiple of 16"):
        gemm.check_sizes(16, 32, 40)
    with pytest.raises(ValueError, match=r"M=100"):
        gemm_example["run_gemm"](torch.zeros(100, 16).half(), torch.zeros(16, 16).half(), 1)


@pytest.mark.parametrize("build, size, message", [
    (norms.build_rms_norm, 2048, r"rms_norm: dim=2048 must be a multiple of 8"),
    (norms.build_layer_norm, 100, r"layer_norm: dim=100"),
    (rope.build_rope, 72, r"rope: dim=72 must be a multiple of 16"),
    (softmax.build_row_softmax, 12, r"row_softmax: cols=12"),
    (gemm.build_gemm, "gelu", r"activation='gelu' is not one of"),
])
def test_unsupported_sizes_name_the_argument(build, size, message: str) -> None:
    with pytest.raises(NotImplementedError, match=message):
        build(size)


def test_examples_write_their_kernels(tmp_path: Path) -> None:
    for script, text in (("gemm.py", print_pto(gemm.build_gemm())), ("row_softmax.py", softmax.emit_row_softmax())):
        out = tmp_path / "k.pto"
        subprocess.run([sys.executable, str(EXAMPLES / script), "-o", str(out)], check=True)
        assert out.read_text() == text


@pytest.mark.ptoas
@pytest.mark.parametrize("kernel", library(), ids=lambda k: k.name)
def test_real_ptoas_compiles_the_library(kernel, tmp_path: Path) -> None:
    from ptofa.launch.toolchain import compile_commands

    pto_path = tmp_path / f"{kernel.name}.pto"
    pto_path.write_text(print_pto(kernel.build()))
    done = subprocess.run(compile_commands(pto_path, tmp_path)[0], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{kernel.name}\n{done.stderr}"


def test_predict_library_prints_a_row_per_kernel(tmp_path: Path) -> None:
    """The script behind the docs' table of predicted times, at small sizes."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "predict_library.py"), "--block-dim", "2", "--rows", "40",
                           "--gemm", "144"], capture_output=True, text=True, timeout=600, check=True)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 7 and all(float(row.split("|")[3]) > 0 for row in rows)
