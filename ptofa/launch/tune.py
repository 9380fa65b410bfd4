"""Automatic config from the timing model: rank the legal configs of a shape, pick the fastest.

    choice = tune(TuneShape(batch=1, heads=8, kv_heads=8, s0=2048, s1=2048, head=128))
    choice.config, choice.table        # the fastest FAConfig, every candidate ranked

Candidates: every legal (TILE_S1, QK_PRELOAD) of `TILE_S1S` x `PRELOADS` with the
call's head dim, dtypes and switches (QK_PRELOAD = 4 is left out: `FAConfig` warns of
ptoas's event-id deadlock there; a config that breaks a legality rule or warns is
skipped), with `prescale_q` on (off when the kernel writes LSE: `pipeline.lse_prescale`), each also with
paired Q blocks (`FAConfig.q_pair`: K and V loaded once per two Q blocks) where that is legal; then
the fastest of them with `prescale_q` off (the scaled-Q pipe delays each block's first QK, which
short units do not win back).

Prediction, per candidate: the simulator runs probes of one head with the call's head
dim, dtypes and switches, records their traces, and `ptofa.sim.timing.predict` replays
them; the result is the launch's busiest block plus the block start-up of each wave,
bounded below by the chip's shared L2 and HBM limits as in `predict` (`shared_limits.launch_floors_us`).

* Equal units (no mask): one block runs the first `PROBE_ROWS` rows' units back to back;
  its time is scaled by units per block of the real launch (the rule
  `timing.launch_cycles` uses for untraced blocks).
* A window with right bound 0 (causal, sliding window): Q blocks see different keys. Up
  to `MASKED_SAMPLES` Q blocks, spread over S0, each run alone with exactly the keys they
  see in the call; the other blocks' times are interpolated. The launch's units (each
  head a copy) go to the blocks as the kernel hands them out (`units.makespan`: the
  persistent loop's snake over the ranks, last Q block first).
* Other windows: the first `MASKED_PROBE_ROWS` rows' units, each on a block of its own,
  ranked longest first and handed out the same way. With S0 above that cap the probe has
  the visibility of the last rows (bottom-right alignment): an upper estimate, said in the
  ranking's `note`.

Results are kept per shape bucket (S0, S1 and batch rounded up to powers of two;
heads, head dim, dtypes, window, switches and chip exact): in memory and as JSON
under `cache_root()/tune`, keyed also by the builder and timing-model sources, so a
changed model never answers from an old ranking. `run_fa tune` (`ptofa.cli.tune_cli`) prints the table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import math
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy
import torch

import ptofa
from ptofa.kernels import units as schedule
from ptofa.kernels.builtin_mods.window import window_mods
from ptofa.launch.base import TORCH_DTYPES
from ptofa.launch.calls import blocks_for, forward_plan
from ptofa.launch.kernel_cache import atomic_write, builder_digest, cache_root, get_kernel
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, kernel_head, lse_prescale
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import SocSpec, get_soc
from ptofa.sim.shared_limits import launch_floors_us, limiting
from ptofa.sim.timing import predict
from ptofa.launch.sim import launch

TILE_S1S = (128, 256, 512, 1024)
PRELOADS = (1, 2, 3)
PROBE_ROWS = 256
MASKED_PROBE_ROWS = 1024
# Q blocks simulated per head for a window with right bound 0 (the others interpolated).
MASKED_SAMPLES = 8
TUNE_DIR = "tune"
FORMAT_VERSION = 2
# Sources whose change makes a stored ranking stale (besides the builder's, `builder_digest`).
MODEL_SOURCES = ("sim/timing.py", "sim/socspec.py", "sim/registry.py", "launch/tune.py")


@dataclass(frozen=True)
class TuneShape:
    """What the choice depends on: sizes, head dim, dtypes, window and the kernel's switches."""

    batch: int
    heads: int
    kv_heads: int
    s0: int
    s1: int
    head: int
    in_dtype: str = "f16"
    out_dtype: str | None = None
    window: tuple[int, int] = (-1, -1)
    key_padding: bool = False
    lse: bool = False
    soc: str = "910B2"
    cube_cores: int | None = None  # the chip's own count when None; an NPU's device may have fewer

    def spec(self) -> SocSpec:
        """The chip the ranking is for: `soc`'s facts with `cube_cores` cube cores (when given)."""
        return get_soc(self.soc).with_cube_cores(self.cube_cores)

    def bucket(self) -> TuneShape:
        """The shape whose ranking this one shares: S0, S1 and batch rounded up to powers of two."""
        return dataclasses.replace(self, s0=_pow2(self.s0), s1=_pow2(self.s1), batch=_pow2(self.batch))

    def problem(self) -> ProblemShape:
        return ProblemShape(self.batch, self.heads, self.s0, self.s1, kv_heads=self.kv_heads, window=self.window)

    def base_config(self) -> FAConfig:
        """The kernel at the width the head dim runs on (`kernel_head`: other head dims are zero-padded to it);
        `prescale_q` only without LSE (`lse_prescale`)."""
        return FAConfig(head=kernel_head(self.head), in_dtype=self.in_dtype, out_dtype=self.out_dtype,
                        mods=window_mods(self.window != (-1, -1)), key_padding=self.key_padding, lse=self.lse,
                        prescale_q=lse_prescale(self.lse))


@dataclass(frozen=True)
class Ranked:
    """One candidate's prediction (`error` set when it could not be predicted)."""

    tile_s1: int
    qk_preload: int
    predicted_us: float | None
    tflops: float | None
    bound: str | None
    error: str | None = None
    prescale_q: bool = True
    q_pair: bool = False


@dataclass(frozen=True)
class TuneResult:
    """The ranking of a bucket (fastest first) and the config it chose for the call."""

    shape: TuneShape
    table: tuple[Ranked, ...]
    config: FAConfig
    note: str


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@lru_cache(maxsize=1)
def model_digest() -> str:
    """sha256 of the builder and timing-model sources: part of every stored ranking's key."""
    package = Path(ptofa.__file__).parent
    digest = hashlib.sha256(builder_digest().encode())
    for name in MODEL_SOURCES:
        digest.update((package / name).read_bytes())
    return digest.hexdigest()


def candidates(base: FAConfig, s0: int | None = None) -> list[FAConfig]:
    """The legal (TILE_S1, QK_PRELOAD, q_pair) variants of `base` that do not warn; paired Q blocks only
    where a head has two Q blocks to pair (`s0` rows, when given, more than one block's): a unit of one
    block shares no K or V tile with anything."""
    legal = []
    for q_pair in (False, True) if s0 is None or s0 > base.cube_s0 else (False,):
        for tile_s1 in TILE_S1S:
            for qk_preload in PRELOADS:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    try:
                        legal.append(dataclasses.replace(base, tile_s1=tile_s1, qk_preload=qk_preload, exp_ring=None,
                                                         cube_s1=None, q_pair=q_pair))
                    except (ConfigError, Warning):
                        continue
    return legal


def probe_shape(shape: TuneShape, config: FAConfig) -> ProblemShape:
    """One head's rows on one block: S0 capped (see the module docstring), everything else as the call."""
    cap = MASKED_PROBE_ROWS if config.narrowing else PROBE_ROWS
    rows = min(shape.s0, max(cap, config.cube_s0))
    return ProblemShape(1, 1, rows, shape.s1, kv_heads=1, window=shape.window)


_PREDICTIONS = {"count": 0}


@lru_cache(maxsize=32)
def _probe_inputs(s0: int, s1: int, head: int, in_dtype: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V of a probe (seeded; read-only to the kernel), made once per size: every candidate
    config of a shape probes the same sizes, and the conversion to the input dtype is not free."""
    g = torch.Generator().manual_seed(0)
    dtype = TORCH_DTYPES[in_dtype]
    q = torch.randn(1, s0, 1, head, generator=g).to(dtype)
    k, v = (torch.randn(1, s1, 1, head, generator=g).to(dtype) for _ in range(2))
    return q, k, v


def _probe_block_us(config: FAConfig, probe: ProblemShape, spec, probe_blocks: int):
    """Simulate the probe on `probe_blocks` blocks with a trace; the timing model's replay of it."""
    q, k, v = _probe_inputs(probe.s0, probe.s1, config.head, config.in_dtype)
    o = torch.empty(1, probe.s0, 1, config.head, dtype=TORCH_DTYPES[config.out_dtype])
    lse = torch.empty(1, 1, probe.s0) if config.lse else None
    key_mask = torch.ones(probe.s1, dtype=torch.int8) if config.key_padding else None
    plan = forward_plan(get_kernel(config), config, probe, spec, scale=config.head ** -0.5, key_mask=key_mask,
                        block_dim=probe_blocks)
    (sim,) = launch(plan, {"q": q, "k": k, "v": v, "o": o, "lse": lse, "key_mask": key_mask},
                    options=RunOptions(trace=True))
    return predict(sim.trace, config, probe, soc=spec, block_dim=probe_blocks)


def longest_first_makespan(unit_us: list[float], blocks: int) -> float:
    """The busiest block's time when units, longest first, each go to the least loaded block:
    what a dynamic scheduler would reach, not what the kernel does (its static snake is
    `units.makespan`, which `busiest_block_us` uses)."""
    loads = [0.0] * blocks
    for us in sorted(unit_us, reverse=True):
        heapq.heapreplace(loads, loads[0] + us)
    return max(loads)


def masked_makespan(q_block_us: list[float], batch_heads: int, blocks: int) -> float:
    """The busiest block's time of a dense masked launch whose Q block i takes `q_block_us[i]`
    in each of `batch_heads` (batch, head) pairs: the kernel's ranks (last Q block first,
    `units.masked_q_block`) handed out by its persistent loop (`units.makespan`)."""
    q_blocks = len(q_block_us)
    ranked = [q_block_us[schedule.masked_q_block(r, batch_heads, q_blocks)] for r in range(q_blocks * batch_heads)]
    return schedule.makespan(ranked, blocks)


def sampled_q_blocks(q_blocks: int) -> list[int]:
    """At most `MASKED_SAMPLES` Q block indices, evenly spread from the first to the last."""
    n = min(q_blocks, MASKED_SAMPLES)
    return sorted({round(j * (q_blocks - 1) / (n - 1)) for j in range(n)}) if n > 1 else [0]


def left_window_unit_us(config: FAConfig, shape: TuneShape, spec) -> tuple[list[float], str, float]:
    """Each Q block's unit time of one head for a window with right bound 0 (causal, sliding),
    the bound of the last block's probe (the one that sees the most keys) and the GM bytes a
    unit moves (the sampled blocks' mean).

    Q block i alone, as the last block of a probe with S1' = S1 - S0 + (i + 1) * rows, sees
    exactly the keys it sees in the call (the window is bottom-right aligned and ends at its
    last row). Sampled blocks are simulated, the others interpolated by index.
    """
    rows, q_blocks = config.cube_s0, shape.problem().q_blocks(config)
    picks = sampled_q_blocks(q_blocks)
    timings = []
    for i in picks:
        block_rows = min(rows, shape.s0 - i * rows)
        probe_s1 = min(shape.s1, max(1, shape.s1 - shape.s0 + i * rows + block_rows))
        probe = ProblemShape(1, 1, block_rows, probe_s1, kv_heads=1, window=shape.window)
        timings.append(_probe_block_us(config, probe, spec, 1))
    unit_us = numpy.interp(range(q_blocks), picks, [t.block_us[0] for t in timings])
    gm_bytes = sum(t.gm_bytes_per_unit for t in timings) / len(timings)
    return [float(us) for us in unit_us], timings[-1].bound, gm_bytes


def busiest_block_us(config: FAConfig, shape: TuneShape, spec, block_dim: int) -> tuple[float, str, float]:
    """(the launch's busiest block in us, the bound the probe's replay names, the GM bytes one unit
    moves); see the module docstring."""
    units = shape.problem().work_units(config)
    if config.narrowing and shape.window[1] == 0:
        unit_us, bound, gm_bytes = left_window_unit_us(config, shape, spec)
        return masked_makespan(unit_us, shape.batch * shape.heads, block_dim), bound, gm_bytes
    probe = probe_shape(shape, config)
    probe_units = probe.work_units(config)
    if config.narrowing:  # unequal units: one per probe block, then dealt to the launch's blocks
        timed = _probe_block_us(config, probe, spec, probe_units)
        unit_us = sorted(list(timed.block_us.values()) * math.ceil(units / probe_units), reverse=True)
        return schedule.makespan(unit_us[:units], block_dim), timed.bound, timed.gm_bytes_per_unit
    timed = _probe_block_us(config, probe, spec, 1)  # equal units, back to back on one block
    return math.ceil(units / block_dim) * timed.block_us[0] / probe_units, timed.bound, timed.gm_bytes_per_unit


def launch_us(config: FAConfig, problem: ProblemShape, spec: SocSpec, block_dim: int, busiest: tuple[float, str, float]
              ) -> tuple[float, str]:
    """(predicted launch us, its bound) from `busiest_block_us`'s answer: the busiest block after the
    launch's start-ups, or the chip's shared L2 / HBM limit where that takes longer."""
    per_block, bound, gm_bytes = busiest
    l2_us, hbm_us = launch_floors_us(config, problem, spec, block_dim, gm_bytes)
    return limiting(per_block + spec.launch_start_us(block_dim), l2_us, hbm_us, bound)


def predict_config(config: FAConfig, shape: TuneShape) -> Ranked:
    """The predicted launch time of `config` on `shape` (see the module docstring)."""
    _PREDICTIONS["count"] += 1
    spec = shape.spec()
    problem = shape.problem()
    block_dim = blocks_for(problem.work_units(config), spec)
    kernel_us, bound = launch_us(config, problem, spec, block_dim, busiest_block_us(config, shape, spec, block_dim))
    return Ranked(config.tile_s1, config.qk_preload, kernel_us, problem.flops(config.head) / kernel_us / 1e6, bound,
                  prescale_q=config.prescale_q, q_pair=config.q_pair)


def prediction_count() -> int:
    """Predictions made in this process (a cached bucket adds none)."""
    return _PREDICTIONS["count"]


_MEMORY: dict[TuneShape, TuneResult] = {}
_LOCK = threading.Lock()


def _disk_path(bucket: TuneShape) -> Path:
    payload = json.dumps({"format": FORMAT_VERSION, "model": model_digest(), "shape": dataclasses.asdict(bucket)},
                         sort_keys=True)
    return cache_root() / TUNE_DIR / f"{hashlib.sha256(payload.encode()).hexdigest()[:32]}.json"


def _load(bucket: TuneShape) -> TuneResult | None:
    try:
        stored = json.loads(_disk_path(bucket).read_text())
        table = tuple(Ranked(**row) for row in stored["table"])
        return _result(bucket, table, stored["note"])
    except (OSError, ValueError, KeyError, TypeError, ConfigError):
        return None


def _store(result: TuneResult) -> None:
    payload = {"table": [dataclasses.asdict(row) for row in result.table], "note": result.note}
    try:
        atomic_write(_disk_path(result.shape), json.dumps(payload))
    except OSError:  # an unwritable cache costs the next process a tuning run, nothing else
        pass


def _result(bucket: TuneShape, table: tuple[Ranked, ...], note: str) -> TuneResult:
    best = next((row for row in table if row.predicted_us is not None), None)
    if best is None:
        reason = table[0].error if table else "no legal candidate"
        raise ConfigError(f"tune: no candidate config could be predicted for {bucket}: {reason}")
    return TuneResult(bucket, table, _config_of(bucket, best), note)


def _config_of(bucket: TuneShape, row: Ranked) -> FAConfig:
    return dataclasses.replace(bucket.base_config(), tile_s1=row.tile_s1, qk_preload=row.qk_preload,
                               prescale_q=row.prescale_q, exp_ring=None, cube_s1=None, q_pair=row.q_pair)


def rank(bucket: TuneShape) -> TuneResult:
    """Predict every candidate of `bucket` (no cache) and rank them, fastest first."""
    rows = sorted((_ranked(config, bucket) for config in candidates(bucket.base_config(), bucket.s0)), key=_order)
    if rows and rows[0].predicted_us is not None and rows[0].prescale_q:
        rows = sorted([*rows, _ranked(dataclasses.replace(_config_of(bucket, rows[0]), prescale_q=False), bucket)],
                      key=_order)
    note = "probes of one head, scaled to the launch"
    if bucket.window != (-1, -1) and bucket.window[1] != 0 and bucket.s0 > MASKED_PROBE_ROWS:
        note += f"; S0 capped at {MASKED_PROBE_ROWS} rows (the last rows: an upper estimate)"
    return _result(bucket, tuple(rows), note)


def _ranked(config: FAConfig, bucket: TuneShape) -> Ranked:
    try:
        return predict_config(config, bucket)
    except (RuntimeError, ValueError) as exc:  # a simulator report or timing error: the candidate drops out
        return Ranked(config.tile_s1, config.qk_preload, None, None, None, f"{type(exc).__name__}: {exc}",
                      config.prescale_q, config.q_pair)


def _order(row: Ranked) -> tuple:
    return row.predicted_us is None, row.predicted_us or 0.0, row.tile_s1, row.qk_preload, not row.prescale_q, row.q_pair


def tune(shape: TuneShape) -> TuneResult:
    """The ranking of `shape`'s bucket: from memory, else from disk, else predicted and stored."""
    bucket = shape.bucket()
    with _LOCK:
        result = _MEMORY.get(bucket) or _load(bucket)
        if result is None:
            result = rank(bucket)
            _store(result)
        _MEMORY[bucket] = result
    return result


def clear_tune_memory() -> None:
    """Forget this process's rankings (the disk entries stay)."""
    with _LOCK:
        _MEMORY.clear()


__all__ = ["Ranked", "TuneResult", "TuneShape", "candidates", "launch_us", "predict_config", "prediction_count", "rank",
           "tune"]
