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
"""

__version__ = "0.1.0"
