"""Time of `run_fa tune` on a cold cache, the whole command in a fresh process.

    python benchmarks/bench_tune.py [--repeat 3] [--tree DIR] [--baseline DIR] [-- tune options]

Runs `run_fa tune --s0 2048 --s1 2048 --heads 8 --head-dim 128 --causal` (or the tune
options after `--`) `--repeat` times, each in a new process with `PTOFA_CACHE_DIR` set to
a fresh temporary directory, so every run emits, parses, simulates and ranks every
candidate (no kernel or ranking from disk). Prints each run's wall time and CPU time
(user + system of the child) and the best of each. On a machine shared with other jobs
the CPU time is the steadier number, but it too grows with the load, so two versions are
compared with `--baseline DIR`: runs of the baseline checkout and of `--tree` (default:
this checkout) alternate, and the ratio of their best CPU times is printed. A checkout's
directory goes first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_TUNE = ["--s0", "2048", "--s1", "2048", "--heads", "8", "--head-dim", "128", "--causal"]
TREE = Path(__file__).resolve().parent.parent


def run_once(tree: Path, tune_args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one `run_fa tune` in a new process on an empty cache."""
    with tempfile.TemporaryDirectory(prefix="ptofa-bench-tune-") as cache:
        env = dict(os.environ, PTOFA_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])))
        code = "import sys; sys.argv[0] = 'run_fa'; from ptofa.cli.main import main; main()"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        # cwd: not a checkout, whose ptofa `python -c` would import before PYTHONPATH's
        subprocess.run([sys.executable, "-c", code, "tune", *tune_args], env=env, check=True, cwd=cache,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    argv = sys.argv[1:]
    tune_args = DEFAULT_TUNE
    if "--" in argv:
        split = argv.index("--")
        argv, tune_args = argv[:split], argv[split + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=TREE, help="checkout whose ptofa runs (default: this one)")
    ap.add_argument("--baseline", type=Path, default=None, help="a second checkout, run alternately with --tree")
    opts = ap.parse_args(argv)
    trees = [opts.tree] if opts.baseline is None else [opts.baseline, opts.tree]
    print(f"run_fa tune {' '.join(tune_args)}  (cold cache)")
    runs: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for i in range(opts.repeat):
        for tree in trees:
            wall, cpu = run_once(tree, tune_args)
            runs[tree].append((wall, cpu))
            print(f"  run {i + 1} {tree}: wall {wall:6.2f} s   cpu {cpu:6.2f} s")
    best = {tree: min(c for _, c in rows) for tree, rows in runs.items()}
    for tree, rows in runs.items():
        print(f"best {tree}: wall {min(w for w, _ in rows):.2f} s   cpu {best[tree]:.2f} s")
    if opts.baseline is not None:
        print(f"speed-up (best cpu, baseline / tree): {best[opts.baseline] / best[opts.tree]:.2f}x")


if __name__ == "__main__":
    main()
