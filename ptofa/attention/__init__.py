"""Attention on torch tensors: the calls model code makes.

  core         `attend`: input checks and the launch of the forward kernel
  functional   flash-attn's `flash_attn_func`, torch's `scaled_dot_product_attention`
  ops          the `ptofa::flash_attn_fwd` custom op and its autograd
  serving      `flash_attn_varlen_func`, `flash_attn_with_kvcache`; kvcache: cache layouts
  backward     `attention_backward` (dq, dk, dv) on the backward kernels
  infiniop     InfiniOp's FlashAttention descriptor interface

May import: every lower layer (`ptofa.launch` and below); never `ptofa.cli`.
"""
