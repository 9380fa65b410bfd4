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


# The window's kernel arguments (`builtin_mods/window.py`'s `Window.params`), here so that the argument
# lists, which are built on the host without the IR builder, read them from where the mod does.
WINDOW_PARAMS = (HostParam("win_left", "int64_t", ctypes.c_int64, "window left bound (unbounded: s0 + s1)"),
                 HostParam("win_right", "int64_t", ctypes.c_int64,
                           "window right bound (causal: 0; unbounded: s0 + s1)"))
