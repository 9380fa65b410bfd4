"""The IR layer: what a `.pto` file is, independent of FlashAttention.

  dialect/   the PTO dialect on xDSL: types, ops with ptoas's syntax and verifiers
  target     A2/A3 facts: local memory capacities, alignment, ptoas's hidden scratch
  textio     parse / print / check `.pto` text (errors with line numbers), with ptoas's
             memory-planner limit (`peak_usage`, `memory_errors`)

May import: nothing else of ptofa (the bottom layer). The kernel-author API that builds
this IR is `ptofa.api`, one floor up.
"""
