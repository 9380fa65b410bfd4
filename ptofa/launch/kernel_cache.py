"""The kernel cache: one emitted kernel per `FAConfig`, in memory and on disk.

    kernel = get_kernel(config)      # emitted once per machine, parsed once per process

An `FAConfig` is the whole variant: head, tiles, preload depth, dtypes, the switches
(masked, key_padding, lse, varlen, page_size) and the target. Its kernel is kept

* in memory (`Kernel`: the `.pto` text, the parsed module the simulator runs, the
  entry and its arguments), so a second call in a process emits, parses and compiles nothing;
* on disk under `cache_root()/kernels/<key>.pto`, so a new process reads the text
  instead of emitting it. The simulator still parses that text once per process (an
  xDSL module is not stored); the NPU path compiles it through `ptofa.launch.toolchain`,
  whose builds live under `cache_root()/builds` keyed by the text and tool versions.

The key hashes `FORMAT_VERSION`, the ptofa version, every field of the config and the
source of the modules that write kernels (`BUILDER_SOURCES`), so an entry written by
another builder is never reused. Writes are atomic (a temp file renamed in place);
an entry whose text does not match the checksum beside it is ignored and rewritten.

The root is `$PTOFA_CACHE_DIR`, else `platformdirs.user_cache_dir("ptofa")` (which
honours `$XDG_CACHE_HOME`). `run_fa cache info` / `run_fa cache clear` show and empty it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import click

import ptofa
from ptofa.kernels import argspec
from ptofa.kernels.bwd_pipeline import BwdConfig, entry_args
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.kernels.fa_fwd import emit_fa
from ptofa.kernels.fa_reduce import emit_reduce
from ptofa.launch.calls import BuiltKernel
from ptofa.pipeline import FAConfig
from ptofa.ir.textio import check_text
from ptofa.launch.toolchain import CACHE_ENV, ptofa_cache_root as cache_root  # noqa: F401 (re-exported)

FORMAT_VERSION = 1
KERNELS_DIR = "kernels"
# One character per disk lookup that missed memory ("h" disk hit, "e" emitted), appended by every process.
STATS_LOG = "stats.log"
# What ptofa writes under the cache root: emitted kernels, NPU builds (`ptofa.launch.toolchain`),
# tuned rankings (`ptofa.launch.tune`), the lookup log. `run_fa cache clear` deletes these only.
OWNED = (KERNELS_DIR, "builds", "tune", STATS_LOG)
# Modules whose source decides the emitted text (relative to the package).
BUILDER_SOURCES = ("kernels", "ir", "api.py", "pipeline.py")



@lru_cache(maxsize=1)
def builder_digest() -> str:
    """sha256 over the builder's source files (path and bytes), computed once per process."""
    package = Path(ptofa.__file__).parent
    digest = hashlib.sha256()
    for name in BUILDER_SOURCES:
        path = package / name
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(package)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def kernel_key(config: FAConfig) -> str:
    """The disk entry's name: a hash of the format, ptofa version, config fields and builder source."""
    payload = {
        "format": FORMAT_VERSION,
        "ptofa": ptofa.__version__,
        "builder": builder_digest(),
        "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "auto"},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _record(event: str) -> None:
    """Append one lookup outcome to the shared log (an append of one byte needs no lock)."""
    try:
        cache_root().mkdir(parents=True, exist_ok=True)
        with open(cache_root() / STATS_LOG, "a") as log:
            log.write(event)
    except OSError:
        pass


def disk_stats() -> tuple[int, int]:
    """(disk hits, emits) of every process since the cache was last cleared."""
    try:
        log = (cache_root() / STATS_LOG).read_text()
    except OSError:
        return 0, 0
    return log.count("h"), log.count("e")


def read_entry(config: FAConfig) -> str | None:
    """The stored text of `config`, or None when absent, unreadable or not matching its checksum."""
    path = cache_root() / KERNELS_DIR / f"{kernel_key(config)}.pto"
    try:
        text = path.read_text()
        meta = json.loads(path.with_suffix(".json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return text if isinstance(meta, dict) and meta.get("sha256") == _sha(text) else None


def write_entry(config: FAConfig, text: str) -> None:
    """Store `text` with its checksum and config (the checksum last: an entry is valid once it matches)."""
    path = cache_root() / KERNELS_DIR / f"{kernel_key(config)}.pto"
    atomic_write(path, text)
    meta = {"sha256": _sha(text), "config": config.summary(), "ptofa": ptofa.__version__}
    atomic_write(path.with_suffix(".json"), json.dumps(meta, sort_keys=True))


@dataclass
class Kernel:
    """One emitted kernel and what each backend made of it (filled on first use)."""

    config: FAConfig
    text: str
    _parsed: object | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def parsed(self):
        """The parsed and verified module the simulator runs (parsed once per process)."""
        with self._lock:
            if self._parsed is None:
                self._parsed = check_text(self.text, f"<ptofa kernel {self.config.summary()}>")
                _count("parses")
            return self._parsed

    @property
    def name(self) -> str:
        return self.config.summary()

    @property
    def entry(self) -> str:
        return argspec.ENTRY_NAME

    @property
    def args(self) -> tuple[argspec.EntryArg, ...]:
        """The entry's arguments (`argspec.entry_args` of the config)."""
        return argspec.entry_args(self.config)


class KernelCacheInfo(NamedTuple):
    """In-process counters: memory hits, misses (disk or emit), entries in memory, disk hits, emits, parses."""

    hits: int
    misses: int
    size: int
    disk_hits: int = 0
    emits: int = 0
    parses: int = 0


_KERNELS: dict[FAConfig, Kernel] = {}
_LOCK = threading.RLock()
_STATS = dict.fromkeys(("hits", "misses", "disk_hits", "emits", "parses"), 0)


def _count(name: str) -> None:
    with _LOCK:
        _STATS[name] += 1


def get_kernel(config: FAConfig) -> Kernel:
    """The kernel of `config`: from memory, else from disk, else emitted (and stored)."""
    with _LOCK:
        kernel = _KERNELS.get(config)
        if kernel is not None:
            _STATS["hits"] += 1
            return kernel
        _STATS["misses"] += 1
        text = read_entry(config)
        if text is not None:
            _STATS["disk_hits"] += 1
            _record("h")
        else:
            text = emit_fa(config)
            _STATS["emits"] += 1
            _record("e")
            try:
                write_entry(config, text)
            except OSError:  # a read-only or full cache directory costs the next process an emit, nothing else
                pass
        kernel = _KERNELS[config] = Kernel(config, text)
        return kernel


@lru_cache(maxsize=32)
def reduce_kernel(config: FAConfig) -> BuiltKernel:
    """The split-KV reduce kernel of `config` (emitted and parsed once per config, in memory only)."""
    return BuiltKernel(emit_reduce(config), f"fa_reduce_{config.head}_{config.out_dtype}", argspec.REDUCE_ENTRY_NAME,
                       argspec.reduce_entry_args(config))


def split_kernels(config: FAConfig) -> tuple[Kernel, BuiltKernel | None]:
    """The kernels of a split-KV launch of `config`: its forward kernel and, when it splits, the reduce kernel."""
    return get_kernel(config), reduce_kernel(config) if config.split_kv else None


@lru_cache(maxsize=64)
def backward_kernel(config: BwdConfig, kernel: str) -> BuiltKernel:
    """The backward kernel `kernel` of `config` (emitted and parsed once, in memory only)."""
    return BuiltKernel(emit_bwd(config, kernel), f"fa_bwd_{kernel}", argspec.BWD_ENTRY_NAMES[kernel],
                       argspec.args_from_signature(list(entry_args(config, kernel))))


def backward_kernels(config: BwdConfig) -> dict[str, BuiltKernel]:
    """Every kernel of the backward `config`, by name, in launch order."""
    return {kernel: backward_kernel(config, kernel) for kernel in config.kernels}


def kernel_cache_info() -> KernelCacheInfo:
    """The in-process counters and entry count."""
    with _LOCK:
        return KernelCacheInfo(_STATS["hits"], _STATS["misses"], len(_KERNELS), _STATS["disk_hits"],
                               _STATS["emits"], _STATS["parses"])


def clear_kernel_cache(disk: bool = False) -> None:
    """Forget this process's kernels and counters; with `disk`, also delete what ptofa stores
    under the cache root (`OWNED`; anything else a user keeps there stays)."""
    with _LOCK:
        _KERNELS.clear()
        _STATS.update(dict.fromkeys(_STATS, 0))
    if not disk:
        return
    for name in OWNED:
        path = cache_root() / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def disk_usage() -> dict[str, tuple[int, int]]:
    """(files, bytes) of each folder under the cache root (kernels, builds, tune, ...)."""
    root = cache_root()
    usage: dict[str, tuple[int, int]] = {}
    for child in sorted(root.iterdir()) if root.is_dir() else ():
        files = [p for p in child.rglob("*") if p.is_file()] if child.is_dir() else [child]
        usage[child.name] = (len(files), sum(p.stat().st_size for p in files))
    return usage


@click.group("cache")
def cache_cmd() -> None:
    """Show or empty ptofa's cache (emitted kernels, NPU builds, tuned configs)."""


@cache_cmd.command("info")
def cache_info_cmd() -> None:
    """Print the cache root and the entries and bytes under it."""
    root = cache_root()
    click.echo(f"root: {root}")
    usage = disk_usage()
    kernels = len(list((root / KERNELS_DIR).glob("*.pto"))) if (root / KERNELS_DIR).is_dir() else 0
    hits, emits = disk_stats()
    click.echo(f"kernels: {kernels} entries; since the last clear: {hits} disk hits, {emits} misses (emitted)")
    for name, (files, size) in usage.items():
        click.echo(f"{name}: {files} files, {size} bytes")
    click.echo(f"total: {sum(s for _, s in usage.values())} bytes")


@cache_cmd.command("clear")
def cache_clear_cmd() -> None:
    """Delete the kernels, builds and rankings ptofa stored under the cache root."""
    before = sum(size for name, (_, size) in disk_usage().items() if name in OWNED)
    clear_kernel_cache(disk=True)
    click.echo(f"cleared {cache_root()} ({before} bytes)")


__all__ = [
    "Kernel",
    "KernelCacheInfo",
    "cache_root",
    "clear_kernel_cache",
    "get_kernel",
    "kernel_cache_info",
    "kernel_key",
]
