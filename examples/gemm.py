"""A GEMM on the cube: c[M, N] f32 = a[M, K] f16 @ b[K, N] f16, checked against torch on the
simulator and timed by the model; `--activation silu|relu` adds the vector cores' epilogue
(c f16 = act(a @ b)). The kernel is `ptofa/kernels/lib/gemm.py`; `docs/writing-a-kernel.md`
section 7 walks through it.

    python examples/gemm.py -o gemm.pto                       # write the .pto
    python examples/gemm.py --m 272 --n 400 --k 528 --block-dim 4   # simulate, check, predict
    python examples/gemm.py --activation silu --m 256 --n 256 --k 256
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import ptofa
from ptofa.kernels.lib.gemm import build_gemm, check_sizes, workspace_elems
from ptofa.reference import check_accuracy

ACT = {None: lambda x: x, "relu": torch.relu, "silu": torch.nn.functional.silu}


def run_gemm(a: torch.Tensor, b: torch.Tensor, block_dim: int, activation: str | None = None):
    """(c, the KernelRun, the accuracy against torch) of one simulated launch."""
    (m, k), n = a.shape, b.shape[1]
    check_sizes(m, n, k)
    args = {"a": a, "b": b, "m": m, "n": n, "k": k}
    if activation is None:
        c = torch.full((m, n), float("nan"))
    else:
        c = torch.full((m, n), float("nan"), dtype=torch.float16)
        args["slots"] = torch.zeros(workspace_elems(block_dim))
    run = ptofa.run_kernel(build_gemm(activation), {**args, "c": c}, block_dim, backend="sim")
    act = ACT[activation]
    # The accuracy rule: the error against float64 at most twice that of the same math in torch
    # in the kernel's precision (f16 operands, f32 products; an f16 output rounded once).
    exact = act(a.double() @ b.double())
    same_math = act(a.float() @ b.float())
    accuracy = check_accuracy(c, exact, same_math if activation is None else same_math.half())
    return c, run, accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", type=Path, help="write the .pto here and stop")
    parser.add_argument("--activation", choices=("silu", "relu"))
    for size, default in (("m", 272), ("n", 400), ("k", 528)):
        parser.add_argument(f"--{size}", type=int, default=default)
    parser.add_argument("--block-dim", type=int, default=4)
    opts = parser.parse_args()
    if opts.o is not None:
        from ptofa.ir.textio import print_pto

        opts.o.write_text(print_pto(build_gemm(opts.activation)))
        return
    g = torch.Generator().manual_seed(0)
    a = torch.randn(opts.m, opts.k, generator=g).half()
    b = torch.randn(opts.k, opts.n, generator=g).half()
    _, run, accuracy = run_gemm(a, b, opts.block_dim, opts.activation)
    print(accuracy)
    print(run.summary())


if __name__ == "__main__":
    main()
