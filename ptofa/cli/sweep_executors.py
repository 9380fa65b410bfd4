"""Where a sweep's points run: one interface (`PointExecutor`) with this process, local worker
processes and Ray tasks behind it, and one point's run (`run_point`); `ptofa.cli.sweep.run_sweep`
is the one loop that drives them."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from types import ModuleType

import torch

from ptofa.cli.sweep_points import PointRuns, SweepPoint, package_versions
from ptofa.launch.base import BackendUnavailable, RunResult
from ptofa.pipeline import FAConfig


def _init_worker() -> None:
    # Ctrl-C reaches the whole process group; the parent decides when to stop,
    # and workers finish the point they are running.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # One intra-op thread per worker: the workers already fill the cores.
    torch.set_num_threads(1)


@dataclass(frozen=True)
class Job:
    """A valid point waiting for an executor: its config and the config's warnings (for the row)."""

    point: SweepPoint
    config: FAConfig
    config_warnings: list[str]


# What a finished job gives back: the point's result and the package versions of the process that
# ran it, or None when the run was interrupted (the sweep stops; the point runs again on resume).
TaskResult = tuple[RunResult, dict[str, str]] | None


def run_task(runs: PointRuns, config: FAConfig, point: SweepPoint, seed: int) -> TaskResult:
    """One point where an executor placed it (this process, a worker process or a Ray task)."""
    try:
        return run_point(runs, config, point, seed), package_versions()
    except KeyboardInterrupt:
        return None


class ExecutorUnavailable(RuntimeError):
    """The requested executor cannot run here (one clear line naming what to install)."""


class PointExecutor:
    """Where a sweep's points run. The sweep keeps `slots()` points submitted and not yet
    finished, so a stop waits for no more than those; `finished` returns the jobs done within
    `timeout` seconds (at least one if any is in flight and it ends in time). A task that dies
    outside the run function becomes an error row here; `BackendUnavailable` propagates."""

    def slots(self) -> int:
        raise NotImplementedError

    def submit(self, job: Job) -> None:
        raise NotImplementedError

    def finished(self, timeout: float) -> list[tuple[Job, TaskResult]]:
        raise NotImplementedError

    def close(self, abort: bool) -> None:
        """Release the workers; `abort` (the sweep ends with an exception) also stops the running points."""

    def __enter__(self) -> PointExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close(abort=exc_type is not None)


class InlineExecutor(PointExecutor):
    """One point at a time in this process (`jobs` = 1): nothing is pickled, so the run function
    may be a closure."""

    def __init__(self, runs: PointRuns, seed: int) -> None:
        self.runs = runs
        self.seed = seed
        self.queued: list[Job] = []

    def slots(self) -> int:
        return 1

    def submit(self, job: Job) -> None:
        self.queued.append(job)

    def finished(self, timeout: float) -> list[tuple[Job, TaskResult]]:
        job = self.queued.pop(0)
        return [(job, run_task(self.runs, job.config, job.point, self.seed))]


class PoolExecutor(PointExecutor):
    """Spawned worker processes on this machine (the default executor); the run function must be
    picklable (a module-level function)."""

    def __init__(self, runs: PointRuns, seed: int, workers: int) -> None:
        self.runs = runs
        self.seed = seed
        self.workers = workers
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_init_worker)
        self.in_flight: dict[Future, Job] = {}

    def slots(self) -> int:
        return self.workers

    def submit(self, job: Job) -> None:
        self.in_flight[self.pool.submit(run_task, self.runs, job.config, job.point, self.seed)] = job

    def finished(self, timeout: float) -> list[tuple[Job, TaskResult]]:
        done, _ = wait(self.in_flight, timeout=timeout, return_when=FIRST_COMPLETED)
        return [(self.in_flight.pop(future), future.result()) for future in done]

    def close(self, abort: bool) -> None:
        if abort:
            for worker in multiprocessing.active_children():
                worker.terminate()
        self.pool.shutdown(wait=True, cancel_futures=True)


RAY_MISSING = "--executor ray needs Ray, an optional extra of ptofa: pip install 'ptofa[ray]'"


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ExecutorUnavailable(RAY_MISSING) from None
    return ray


# A task whose worker or node is lost runs once more before its point becomes an error row: a lost
# node gets a second chance, a point that kills its worker every time does not hold the sweep long.
RAY_TASK_RETRIES = 1


def _ray_task(runs: PointRuns, config: FAConfig, point: SweepPoint, seed: int) -> TaskResult:
    # Each task holds one CPU of the cluster: one intra-op thread, as in a local worker.
    torch.set_num_threads(1)
    return run_task(runs, config, point, seed)


class RayExecutor(PointExecutor):
    """Each point a Ray task of one CPU, on the cluster at `address` (as `ray.init` takes it:
    "auto", "HOST:PORT", "ray://HOST:PORT") or, with no address, on a local Ray started for the
    sweep with `jobs` CPUs (default: this machine's) and shut down at its end. A process already
    connected to Ray (`ray.init` called before) sweeps on that cluster and stays connected.

    The run function is pickled to the workers, so every node needs the same ptofa (and its
    dependencies) installed. `jobs` caps the points in flight; without it the sweep keeps as
    many in flight as the cluster has CPUs, read again at every poll (a cluster that grows is used).
    """

    def __init__(self, runs: PointRuns, seed: int, address: str | None, jobs: int | None) -> None:
        self.ray = ray = import_ray()
        self.runs = runs
        self.seed = seed
        self.jobs = jobs
        self.versions = package_versions()
        self.connected_here = not ray.is_initialized()
        if not self.connected_here and address is not None:
            raise ValueError(f"address={address!r}: this process is already connected to Ray; leave address None")
        if self.connected_here:
            quiet = dict(log_to_driver=False, logging_level=logging.WARNING)
            if address is None:
                ray.init(address="local", num_cpus=jobs or os.cpu_count() or 1, include_dashboard=False, **quiet)
            else:
                ray.init(address=address, **quiet)
        self.task = ray.remote(num_cpus=1, max_retries=RAY_TASK_RETRIES)(_ray_task)
        self.in_flight: dict = {}  # ray.ObjectRef -> Job

    def slots(self) -> int:
        cpus = int(self.ray.cluster_resources().get("CPU", 0))
        return max(1, min(cpus, self.jobs) if self.jobs else cpus)

    def submit(self, job: Job) -> None:
        self.in_flight[self.task.remote(self.runs, job.config, job.point, self.seed)] = job

    def finished(self, timeout: float) -> list[tuple[Job, TaskResult]]:
        ray = self.ray
        ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=0)
        results = []
        for ref in ready:
            job = self.in_flight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:
                cause = getattr(exc, "cause", None) or exc
                if isinstance(cause, BackendUnavailable):
                    raise cause from None
                message = f"ray task failed: {type(cause).__name__}: {cause}"
                result = RunResult.start(job.config, job.point.shape, job.point.backend, status="error",
                                         message=message), self.versions
            results.append((job, result))
        return results

    def close(self, abort: bool) -> None:
        if abort:
            for ref in self.in_flight:
                self.ray.cancel(ref, force=True)
        if self.connected_here:
            self.ray.shutdown()


EXECUTORS = ("local", "ray")


def check_executor(executor: str, address: str | None) -> None:
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r} must be one of {EXECUTORS}")
    if address is not None and executor != "ray":
        raise ValueError(f"address={address!r} is for executor='ray', not {executor!r}")
    if executor == "ray":
        import_ray()


def make_executor(
    executor: str, runs: PointRuns, seed: int, jobs: int | None, points: int, address: str | None = None
) -> PointExecutor:
    """The executor for `points` points: "local" runs them in this process (`jobs` = 1 or a single
    point) or in `jobs` spawned worker processes (default: the CPUs); "ray" as `RayExecutor`."""
    check_executor(executor, address)
    if executor == "ray":
        return RayExecutor(runs, seed, address, jobs)
    workers = min(jobs or os.cpu_count() or 1, points)
    return InlineExecutor(runs, seed) if workers <= 1 else PoolExecutor(runs, seed, workers)


def run_point(runs: PointRuns, config: FAConfig, point: SweepPoint, seed: int) -> RunResult:
    """Run one valid point. A crash of the run function becomes an "error" row instead of ending the sweep;
    `BackendUnavailable` and `KeyboardInterrupt` propagate. A key-padding kernel gets the random ragged
    mask of `ptofa.reference.make_key_mask` (from the seed); its valid lengths go to `extra["key_lengths"]`."""
    kwargs: dict = {} if config.head == point.head else {"head_dims": (point.head, point.head)}
    lengths = None
    if config.key_padding:
        from ptofa.reference import make_key_mask

        kwargs["key_mask"], lengths = make_key_mask(point.batch, point.s1, seed)
    run_fn = runs.of(point)
    try:
        result = run_fn(config, point.shape, backend=point.backend, seed=seed, timing=True, **kwargs)
    except (BackendUnavailable, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - one broken point must not lose the others
        result = RunResult.start(config, point.shape, point.backend, status="error", message=f"{type(exc).__name__}: {exc}")
    if lengths is not None:
        result.extra["key_lengths"] = [int(n) for n in lengths]
    if config.head != point.head:  # the row is the point's head dim; the kernel ran at its width
        result.head, result.extra["kernel_head"] = point.head, config.head
    return result
