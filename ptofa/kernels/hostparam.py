"""One parameter of a kernel's host launcher: `argspec` lists a kernel's, and a modification object
(`kernels/mods.py`) brings its own, so this sits below both. The parameters of the built-in mods live
here too, so that `argspec` (host side, imported by the launch layer) reaches no IR-building module."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass


@dataclass(frozen=True)
class HostParam:
    """One parameter of the `extern "C"` launcher after `block_dim` and `stream`."""

    name: str
    c_type: str  # C type in caller.cpp
    ctype: type  # ctypes type for argtypes
    doc: str


def mod_params(mods: tuple) -> list[HostParam]:
    """Every mod's kernel arguments, in mod order (each under its `mod<i>_` prefix)."""
    return [p for i, mod in enumerate(mods) for p in mod.params(f"mod{i}_")]


# `scoremods.Softcap`'s arguments (flash-attn's names, no prefix).
SOFTCAP_PARAMS = (HostParam("softcap", "float", ctypes.c_float, "softcap: scores = softcap * tanh(scores / softcap)"),
                  HostParam("softcap_rcp2", "float", ctypes.c_float, "2 / softcap"))
