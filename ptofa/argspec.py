"""The FlashAttention kernel's argument list: the one source of truth.

Three things must agree on it: the `pto.entry` function the builder emits, the
`extern "C"` launcher in `caller.cpp`, and the ctypes `argtypes` the NPU runner
sets. The builder reads `ENTRY_ARGS`; `caller.cpp` and the ctypes list are
derived from `HOST_PARAMS` / `ENTRY_ARGS` here and checked by a test.

Host side: the launcher takes `block_dim`, a stream and one pointer per GM
buffer. The FFTS address is not a host parameter: the launcher fetches it with
`rtGetC2cCtrlAddr`. The slot workspace is one buffer passed to the kernel twice,
as `f32` and as `f16` pointer, so that each ring can be addressed in its own
element type (pto-ir.md 10.7).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

ENTRY_NAME = "fa_fwd"
CUBE_FUNC_NAME = "fa_cube"
VECTOR_FUNC_NAME = "fa_vec"
LAUNCHER_NAME = "call_fa_fwd"


@dataclass(frozen=True)
class HostParam:
    """One parameter of the `extern "C"` launcher after `block_dim` and `stream`."""

    name: str
    c_type: str  # C type in caller.cpp
    ctype: type  # ctypes type for argtypes
    doc: str


@dataclass(frozen=True)
class EntryArg:
    """One argument of the `pto.entry` function."""

    name: str
    ir_type: str  # PTO IR spelling of the argument type
    source: str  # host parameter it comes from, or "ffts"
    cxx_cast: str  # the cast caller.cpp applies when launching


HOST_PARAMS: tuple[HostParam, ...] = (
    HostParam("slots", "uint8_t*", ctypes.c_void_p, "GM slot workspace, fp32 elements, per block"),
    HostParam("q", "uint8_t*", ctypes.c_void_p, "Q [B, S0, N, D] fp16"),
    HostParam("k", "uint8_t*", ctypes.c_void_p, "K [B, S1, N, D] fp16"),
    HostParam("v", "uint8_t*", ctypes.c_void_p, "V [B, S1, N, D] fp16"),
    HostParam("o", "uint8_t*", ctypes.c_void_p, "O [B, S0, N, D] fp32"),
    HostParam("batch", "int64_t", ctypes.c_int64, "B"),
    HostParam("heads", "int64_t", ctypes.c_int64, "N"),
    HostParam("s0", "int64_t", ctypes.c_int64, "query length"),
    HostParam("s1", "int64_t", ctypes.c_int64, "key/value length"),
    HostParam("scale", "float", ctypes.c_float, "softmax scale, 1/sqrt(D) by default"),
)

ENTRY_ARGS: tuple[EntryArg, ...] = (
    EntryArg("ffts", "!pto.ptr<i64>", "ffts", "(__gm__ int64_t*)"),
    EntryArg("slots", "!pto.ptr<f32>", "slots", "(__gm__ float*)"),
    EntryArg("slots_h", "!pto.ptr<f16>", "slots", "(__gm__ half*)"),
    EntryArg("q", "!pto.ptr<f16>", "q", "(__gm__ half*)"),
    EntryArg("k", "!pto.ptr<f16>", "k", "(__gm__ half*)"),
    EntryArg("v", "!pto.ptr<f16>", "v", "(__gm__ half*)"),
    EntryArg("o", "!pto.ptr<f32>", "o", "(__gm__ float*)"),
    EntryArg("batch", "i64", "batch", ""),
    EntryArg("heads", "i64", "heads", ""),
    EntryArg("s0", "i64", "s0", ""),
    EntryArg("s1", "i64", "s1", ""),
    EntryArg("scale", "f32", "scale", ""),
)

# Launcher return codes (caller.cpp returns them; the runner maps them to errors).
RC_OK = 0
RC_FFTS_FAILED = 1  # rtGetC2cCtrlAddr failed or returned a null FFTS address
LAUNCHER_RETURN_C_TYPE = "int32_t"
LAUNCHER_RESTYPE = ctypes.c_int32


def launcher_argtypes() -> list[type]:
    """ctypes argtypes of the launcher: block_dim, stream, then HOST_PARAMS."""
    return [ctypes.c_uint32, ctypes.c_void_p] + [p.ctype for p in HOST_PARAMS]


def launcher_c_params() -> list[str]:
    """The launcher's C parameter list, as written in caller.cpp."""
    return ["uint32_t block_dim", "void* stream"] + [f"{p.c_type} {p.name}" for p in HOST_PARAMS]


def kernel_launch_args() -> list[str]:
    """The expressions caller.cpp passes to the entry, in ENTRY_ARGS order."""
    out = []
    for arg in ENTRY_ARGS:
        expr = "ffts_addr" if arg.source == "ffts" else arg.source
        out.append(f"{arg.cxx_cast}{expr}" if arg.cxx_cast else expr)
    return out


def _check_consistency() -> None:
    host_names = {p.name for p in HOST_PARAMS}
    for arg in ENTRY_ARGS:
        if arg.source != "ffts" and arg.source not in host_names:
            raise AssertionError(f"entry arg {arg.name} comes from unknown host param {arg.source}")


_check_consistency()
