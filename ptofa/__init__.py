"""ptofa: FlashAttention kernels for Ascend A2/A3 written as PTO IR, with a CPU simulator.

Layers, bottom first (each imports only the ones below; docs/architecture.md has the whole path):
  ir/          A2/A3 facts, the PTO dialect on xDSL, `.pto` text in/out and checks
  api          the kernel-author API (`pto.*`, `tile.*`, `scalar.*`)
  pipeline     FAConfig, problem shapes, legality rules and memory budgets
  kernels/     the forward, reduce and backward kernels, their argument lists, the catalog
  reference    torch reference attention and the accuracy rule
  sim/         the CPU simulator of a parsed `.pto` module, its op registry and timing model
  launch/      launch plans and the one launch per backend (simulator, NPU), split-KV and
               varlen planning, toolchain, kernel cache, tuning
  attention/   `attend`, the seven flash-attn calls (flash-attn 2.x's signatures), SDPA, the custom
               ops, backward, InfiniOp; ring and Ulysses attention over torch.distributed
  runner, cli/ `run_case` and the `run_fa` command

The attention calls are imported on first use, so `import ptofa` stays light:

    import ptofa
    out = ptofa.flash_attn_func(q, k, v, causal=True)

The seven flash-attn calls take flash-attn 2.x's signatures, so `import ptofa as flash_attn`
(or `sys.modules["flash_attn"] = ptofa` before code that imports flash_attn) swaps them in.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Public name -> the module that defines it (imported when the name is first used).
_LAZY = {
    "attend": "ptofa.attention.core",
    "flash_attn_func": "ptofa.attention.functional",
    "flash_attn_qkvpacked_func": "ptofa.attention.functional",
    "flash_attn_kvpacked_func": "ptofa.attention.functional",
    "scaled_dot_product_attention": "ptofa.attention.functional",
    "infiniop": "ptofa.attention.infiniop",
    "flash_attn_varlen_func": "ptofa.attention.serving",
    "flash_attn_varlen_qkvpacked_func": "ptofa.attention.serving",
    "flash_attn_varlen_kvpacked_func": "ptofa.attention.serving",
    "flash_attn_with_kvcache": "ptofa.attention.serving",
    "attention_backward": "ptofa.attention.backward",
    "run_kernel": "ptofa.launch.kernel",
    "ring_flash_attn_func": "ptofa.attention.ring",
    "ring_flash_attn_varlen_func": "ptofa.attention.ring",
    "zigzag_shard": "ptofa.attention.zigzag",
    "zigzag_unshard": "ptofa.attention.zigzag",
    "zigzag_shard_varlen": "ptofa.attention.zigzag",
    "zigzag_unshard_varlen": "ptofa.attention.zigzag",
    "ulysses_flash_attn_func": "ptofa.attention.ulysses",
    "flex_attention": "ptofa.attention.flex",
    "create_block_mask": "ptofa.attention.flex",
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
