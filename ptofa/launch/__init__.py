"""The launch layer: from a kernel config and tensors to a finished run.

  base          backend interface and registry (RunRequest, RunResult)
  sim, npu      the two backends: the simulator and an Ascend device (ctypes)
  toolchain     ptoas + bisheng to a `.so`; kernel_cache: kernels in memory and on disk
  varlen        work-unit tables of packed sequences (cu_seqlens rules)
  splitkv       split-KV planning and the reduce kernel; dense_split, balance: a dense
                shape through the split launch
  serving_npu, backward_npu   NPU launches of the serving and backward kernels
  tune          configs ranked by the timing model per shape bucket

May import: `ptofa.ir`, `ptofa.api`, `ptofa.pipeline`, `ptofa.kernels`, `ptofa.sim`,
`ptofa.reference`; never `ptofa.attention` or `ptofa.cli`.
"""
