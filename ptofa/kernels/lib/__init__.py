"""Reusable kernels beside FlashAttention, written with the kernel-author API (`ptofa.api`).

One module per kernel family: `softmax` (row softmax), `norms` (RMSNorm, LayerNorm), `rope`
(rotary embedding), `gemm` (tiled GEMM on the cube, and GEMM + activation finished on the vector
cores); `common` holds what they share. `library()` lists one build of each at its default
sizes: the catalog (`ptofa.kernels.catalog`) writes them, so a real ptoas compiles them, and
`tests/test_library.py` runs each against torch on the simulator with ragged sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import builtin


@dataclass(frozen=True)
class LibraryKernel:
    """One build of a library kernel: its catalog name, what it is, and its builder."""

    name: str
    summary: str
    build: Callable[[], builtin.ModuleOp]


def library() -> list[LibraryKernel]:
    """Each library kernel at the sizes the catalog holds."""
    from ptofa.kernels.lib import gemm, norms, rope, softmax

    return [
        LibraryKernel("lib_row_softmax_c256", "row softmax, [rows, 256] f32", lambda: softmax.build_row_softmax(256)),
        LibraryKernel("lib_rms_norm_d256", "RMSNorm, [rows, 256] f32", lambda: norms.build_rms_norm(256)),
        LibraryKernel("lib_rms_norm_d1024", "RMSNorm, [rows, 1024] f32 (8-row chunks)", lambda: norms.build_rms_norm(1024)),
        LibraryKernel("lib_layer_norm_d256", "LayerNorm, [rows, 256] f32", lambda: norms.build_layer_norm(256)),
        LibraryKernel("lib_rope_d128", "rotary embedding, head dim 128, f32", lambda: rope.build_rope(128)),
        LibraryKernel("lib_gemm_f16_f32", "tiled GEMM on the cube: f16 in, f32 out", lambda: gemm.build_gemm()),
        *[LibraryKernel(f"lib_gemm_{act}_f16", f"GEMM + {act} (cube -> C2V pipe -> vectors): f16 in, f16 out",
                        lambda act=act: gemm.build_gemm(act)) for act in gemm.ACTIVATIONS],
    ]
