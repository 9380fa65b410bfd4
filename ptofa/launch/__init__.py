"""The launch layer: from a kernel and tensors to a finished run, one way for every caller.

  calls         `LaunchPlan`: the kernel calls (any built kernel, its block_dim, the argument
                values the plan owns), the workspace layout and the chip (`SocSpec`);
                planners over built kernels for the forward, split-KV + reduce, backward and
                any kernel; `bind`, the one place argument values are put together
  plan          the same planners taking configs: kernels fetched from the kernel cache
  sim, npu      `launch(plan, tensors)` on the simulator and on an Ascend device (ctypes);
                the backend interface's two backends (`run_fa run`)
  dispatch      `launch_on(backend, plan, tensors)`; the chip a backend plans for
  base          backend interface and registry (RunRequest, RunResult)
  toolchain     ptoas + bisheng to a `.so`
  kernel_cache  every kernel a plan runs (forward in memory and on disk; reduce, backward)
  varlen        work-unit tables of packed sequences (cu_seqlens rules)
  splitkv       split counts per unit (timing model); a dense shape as a split launch
  balance       `run_fa run --balance`: a dense shape split, checked and timed
  tune          configs ranked by the timing model per shape bucket

May import: `ptofa.ir`, `ptofa.api`, `ptofa.pipeline`, `ptofa.kernels`, `ptofa.fa_builder`,
`ptofa.reference`, `ptofa.sim`; never `ptofa.attention`, `ptofa.runner` or `ptofa.cli`
(`tests/test_imports.py`). Inside the layer the backends (`sim`, `npu`) and the split planner
import `calls` and the kernel cache, not `plan`, which sits above the kernel cache.
"""
