"""Predicted NPU times of the library's kernels (`ptofa.kernels.lib`) at one size each, from the
timing model over a simulated run, with what bounds each; the table of docs/writing-a-kernel.md
section 12 is this script's output.

    python examples/predict_library.py [--block-dim 24] [--rows 4096] [--gemm 1024]
"""

from __future__ import annotations

import argparse

import torch

import ptofa
from ptofa.kernels.lib import gemm, norms, rope, softmax


def cases(block_dim: int, rows: int, size: int):
    """(kernel, size, module, arguments) of each prediction: `rows` rows (tokens) for the vector
    kernels, a `size`^3 GEMM."""
    g = torch.Generator().manual_seed(0)
    dim, tokens, heads = 1024, rows, 8
    x = torch.randn(rows, dim, generator=g)
    yield "row softmax", f"{rows} x 256 f32", softmax.build_row_softmax(256), \
        {"x": x[:, :256].contiguous(), "y": torch.empty(rows, 256), "rows": rows}
    yield "RMSNorm", f"{rows} x {dim} f32", norms.build_rms_norm(dim), \
        {"x": x, "w": torch.randn(dim), "y": torch.empty_like(x), "rows": rows, "eps": 1e-6}
    yield "LayerNorm", f"{rows} x 256 f32", norms.build_layer_norm(256), \
        {"x": x[:, :256].contiguous(), "w": torch.randn(256), "b": torch.randn(256), "y": torch.empty(rows, 256),
         "rows": rows, "eps": 1e-5}
    angles = torch.randn(tokens, 64, generator=g)
    yield "rotary embedding", f"{tokens} tokens x {heads} heads x 128 f32", rope.build_rope(128), \
        {"x": torch.randn(tokens, heads * 128), "cos": angles.cos(), "sin": angles.sin(),
         "y": torch.empty(tokens, heads * 128), "tokens": tokens, "heads": heads}
    m = n = k = size
    a, b = torch.randn(m, k, generator=g).half(), torch.randn(k, n, generator=g).half()
    yield "GEMM", f"{m} x {n} x {k} f16 -> f32", gemm.build_gemm(), \
        {"a": a, "b": b, "c": torch.empty(m, n), "m": m, "n": n, "k": k}
    for act in gemm.ACTIVATIONS:
        yield f"GEMM + {act}", f"{m} x {n} x {k} f16 -> f16", gemm.build_gemm(act), \
            {"a": a, "b": b, "c": torch.empty(m, n).half(), "m": m, "n": n, "k": k,
             "slots": torch.zeros(gemm.workspace_elems(block_dim))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block-dim", type=int, default=24)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--gemm", type=int, default=1024)
    opts = parser.parse_args()
    block_dim = opts.block_dim
    print(f"| kernel | size | predicted (us, block_dim={block_dim}) | bound by | HBM floor (us) |")
    print("|---|---|---|---|---|")
    for name, size, module, args in cases(block_dim, opts.rows, opts.gemm):
        t = ptofa.run_kernel(module, args, block_dim, backend="sim").timing
        print(f"| {name} | {size} | {t.kernel_us:.1f} | {t.bound} | {t.hbm_bound_us:.1f} |")


if __name__ == "__main__":
    main()
