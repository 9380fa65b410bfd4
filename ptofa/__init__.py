"""ptofa: a FlashAttention forward kernel for Ascend A2/A3 written as PTO IR.

Modules, one concept each:
  dialect      the PTO dialect on xDSL (types, ops, custom syntax, verifiers)
  textio       parse / print / check `.pto` text
  api          the kernel-author API (`pto.*`, `tile.*`, `scalar.*`)
  argspec      the kernel entry's argument list (entry, caller.cpp, ctypes)
  pipeline     FAConfig, problem shapes, legality rules and memory budgets
  fa_builder   the four-stage FlashAttention builder
  sim          the CPU simulator of a parsed `.pto` module
  reference    torch reference attention and the accuracy rule
  toolchain    ptoas / bisheng invocation and the build cache
  runner       backends (sim, npu) behind one `run_case`
  sweep        parameter sweeps
  cli          the `run_fa` command
"""

__version__ = "0.1.0"
