"""The kernels ptofa's builders emit, with their configs and argument lists.

  argspec        the entry argument list of every kernel (entry, caller.cpp, ctypes)
  common         pieces the kernel family shares: unit decoding, offsets, pipe setup,
                 the software-pipelined schedule over a tile range, ring selection
  window         the visible-tile arithmetic of a window mask, in IR
  units          the same on the host in plain integers, and the persistent loop's
                 schedule (which block runs which unit): for tables, planners, the tuner
  fa_fwd         the FlashAttention-2 forward kernel (four stages)
  fa_reduce      the split-KV reduce kernel (vector only)
  bwd_pipeline   `BwdConfig`: the backward's knobs, rules and tile plans; fa_bwd its kernels
  lib            reusable kernels beside FlashAttention: row softmax, RMSNorm, LayerNorm,
                 rotary embedding, GEMM, GEMM + activation (docs/writing-a-kernel.md)
  catalog        every kernel ptofa emits (the list a real ptoas must compile)

May import: `ptofa.ir`, `ptofa.api`, `ptofa.pipeline`; never the simulator, the launch
layer or anything torch-facing. (`ptofa.pipeline`, `FAConfig` and its rules, lives in
the package root under the name the design gives it.)
"""
