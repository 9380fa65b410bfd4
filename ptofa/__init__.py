"""ptofa: FlashAttention kernels for Ascend A2/A3 written as PTO IR, with a CPU simulator.

Modules, one concept each (docs/architecture.md has the whole path):
  target       A2/A3 facts: local memory capacities, alignment, hidden scratch
  dialect/     the PTO dialect on xDSL (types, memory, vector, cube, pipes, runtime)
  textio       parse / print / check `.pto` text; memcheck: ptoas's memory planner limit
  api          the kernel-author API (`pto.*`, `tile.*`, `scalar.*`)
  argspec      the kernel entry's argument list (entry, caller.cpp, ctypes)
  pipeline     FAConfig, problem shapes, legality rules and memory budgets
  kernels/     shared kernel pieces and the FlashAttention forward kernel
  sim/         the CPU simulator of a parsed `.pto` module, its op registry and timing model
  reference    torch reference attention and the accuracy rule
  toolchain    ptoas / bisheng invocation and the build cache
  backend      the backend interface and registry; sim_backend and npu register there
  runner       `run_case`: build, dispatch to a backend, one result row
  sweep, bench parameter sweeps, NPU benchmark
  cli          the `run_fa` command
  attention    `attend` on torch tensors: input checks, the launch
  kernel_cache, tune  kernels in memory and on disk; configs ranked by the timing model
  ops          the `ptofa::flash_attn_fwd` torch custom op the functional calls go through
  functional   `flash_attn_func` (flash-attn's call) and `scaled_dot_product_attention` (torch's)
  infiniop     InfiniOp's FlashAttention descriptor interface and status codes
  serving      `flash_attn_varlen_func` (packed prefill), `flash_attn_with_kvcache` (paged decode)
  varlen, kvcache  the unit table, cu_seqlens rules, cache layouts and the per-sequence references
  backward     `attention_backward` (dq, dk, dv from O and LSE) on the backward kernels
               (kernels/fa_bwd, bwd_pipeline, bwd_timing, bwd_cli)

The attention calls are imported on first use, so `import ptofa` stays light:

    import ptofa
    out = ptofa.flash_attn_func(q, k, v, causal=True)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Public name -> the module that defines it (imported when the name is first used).
_LAZY = {
    "attend": "ptofa.attention.core",
    "flash_attn_func": "ptofa.attention.functional",
    "scaled_dot_product_attention": "ptofa.attention.functional",
    "infiniop": "ptofa.attention.infiniop",
    "flash_attn_varlen_func": "ptofa.attention.serving",
    "flash_attn_with_kvcache": "ptofa.attention.serving",
    "attention_backward": "ptofa.attention.backward",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'ptofa' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if module.__name__.rpartition(".")[2] == name else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
