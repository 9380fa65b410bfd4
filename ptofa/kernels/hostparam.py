"""One parameter of a kernel's host launcher: `argspec` lists a kernel's, and a modification object
(`kernels/mods.py`) brings its own, so this sits below both."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ptofa.pipeline import mod_prefixes


@dataclass(frozen=True)
class HostParam:
    """One parameter of the `extern "C"` launcher after `block_dim` and `stream`."""

    name: str
    c_type: str  # C type in caller.cpp
    ctype: type  # ctypes type for argtypes
    doc: str


def mod_params(mods: tuple) -> list[HostParam]:
    """Every mod's kernel arguments, in mod order (each under its prefix, `pipeline.mod_prefixes`)."""
    return [p for mod, prefix in zip(mods, mod_prefixes(mods)) for p in mod.params(prefix)]
