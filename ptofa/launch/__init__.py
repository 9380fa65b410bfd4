"""The launch layer: from a kernel and tensors to a finished run, one way for every caller.

  plan          `LaunchPlan`: the kernel calls (any built kernel, its block_dim, the argument
                values the plan owns), the workspace layout and the chip (`SocSpec`);
                planners for the forward, split-KV + reduce, backward and any kernel; `bind`,
                the one place argument values are put together
  sim, npu      `launch(plan, tensors)` on the simulator and on an Ascend device (ctypes);
                the backend interface's two backends (`run_fa run`)
  dispatch      `launch_on(backend, plan, tensors)`; the chip a backend plans for
  base          backend interface and registry (RunRequest, RunResult)
  toolchain     ptoas + bisheng to a `.so`; kernel_cache: kernels in memory and on disk
  varlen        work-unit tables of packed sequences (cu_seqlens rules)
  splitkv       split counts per unit (timing model); dense_split, balance: a dense shape as
                a split launch
  tune          configs ranked by the timing model per shape bucket

May import: `ptofa.ir`, `ptofa.api`, `ptofa.pipeline`, `ptofa.kernels`, `ptofa.fa_builder`,
`ptofa.reference`, `ptofa.sim`; never `ptofa.attention`, `ptofa.runner` or `ptofa.cli`
(`tests/test_imports.py`).
"""
