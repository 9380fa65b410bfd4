"""The `run_fa` command line: the top floor.

  main         the `run_fa` group and its commands (build, check, run, compile, ...)
  switches     the kernel switches shared by build, run and sweep
  sweep, bench parameter sweeps; NPU benchmark
  bwd_cli, serving_cli, serving_run   `--backward`, `--decode` / `--num-splits` runs

May import: everything below it.
"""
