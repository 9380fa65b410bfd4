"""The FlashAttention kernel's argument list: the one source of truth.

Three things must agree on it: the `pto.entry` function the builder emits, the
`extern "C"` launcher in `caller.cpp`, and the ctypes `argtypes` the NPU runner
sets. All three come from `entry_args(config)` / `host_params(config)` here: the
list depends on the kernel's switches (dtypes, LSE output, key mask, window
bounds). `ENTRY_ARGS` / `HOST_PARAMS` are the lists of the default config, whose
`caller.cpp` is checked in; other configs render theirs at build time.

Host side: the launcher takes `block_dim`, a stream and one pointer per GM
buffer. The FFTS address is not a host parameter: the launcher fetches it with
`rtGetC2cCtrlAddr`. The slot workspace is one buffer passed to the kernel twice,
as `f32` and as input-dtype pointer, so that each ring can be addressed in its own
element type (docs/sources.md §3.6).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ptofa.kernels.hostparam import HostParam, mod_params

ENTRY_NAME = "fa_fwd"
CUBE_FUNC_NAME = "fa_cube"
VECTOR_FUNC_NAME = "fa_vec"
LAUNCHER_NAME = "call_fa_fwd"
REDUCE_ENTRY_NAME = "fa_reduce"
REDUCE_FUNC_NAME = "fa_reduce_vec"
BWD_ENTRY_NAMES = {kernel: f"fa_bwd_{kernel}" for kernel in ("dq", "prep", "dkdv", "post")}  # -> its entry (kernels/fa_bwd.py)
LAUNCHERS = {entry: f"call_{entry}" for entry in (ENTRY_NAME, REDUCE_ENTRY_NAME, *BWD_ENTRY_NAMES.values())}  # ptofa's entries -> launcher


@dataclass(frozen=True)
class EntryArg:
    """One argument of the `pto.entry` function."""

    name: str
    ir_type: str  # PTO IR spelling of the argument type
    source: str  # host parameter it comes from, or "ffts"
    cxx_cast: str  # the cast caller.cpp applies when launching


# C and ctypes spelling of each GM element type a kernel argument may point to.
_C_ELEM = {"f16": "half", "bf16": "bfloat16_t", "f32": "float", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t",
           "i64": "int64_t", "ui8": "uint8_t", "ui16": "uint16_t", "ui32": "uint32_t", "ui64": "uint64_t"}


def launcher_name(entry: str) -> str:
    """The host launcher `caller.cpp` defines for an entry: `call_<entry>`."""
    return f"call_{entry}"


def _default_config():
    from ptofa.pipeline import FAConfig

    return FAConfig()


def host_params(config=None) -> tuple[HostParam, ...]:
    """The launcher's parameters after block_dim and stream, for the kernel of `config`."""
    c = config or _default_config()
    ptr = "uint8_t*"
    params = [
        HostParam("slots", ptr, ctypes.c_void_p, "GM slot workspace, per block"),
        HostParam("q", ptr, ctypes.c_void_p, f"Q [B, S0, N, D] {c.in_dtype}"),
        HostParam("k", ptr, ctypes.c_void_p, f"K [B, S1, KVN, D] {c.in_dtype}"),
        HostParam("v", ptr, ctypes.c_void_p, f"V [B, S1, KVN, D] {c.in_dtype}"),
        HostParam("o", ptr, ctypes.c_void_p, f"O [B, S0, N, D] {c.out_dtype}"),
    ]
    if c.lse:
        params.append(HostParam("lse", ptr, ctypes.c_void_p, "LSE [B, N, S0] f32"))
    if c.key_padding:
        params.append(HostParam("key_mask", ptr, ctypes.c_void_p, "key mask [B, S1] (or [S1]) i8, 1 = key takes part"))
    if c.varlen:
        params.append(HostParam("units", ptr, ctypes.c_void_p, "varlen unit table [num_units, pipeline.UNIT_FIELDS] i32"))
    if c.page_size:
        params.append(HostParam("block_table", ptr, ctypes.c_void_p, "paged cache: page of each [sequence, page] i32"))
    if c.split_kv:
        params.append(HostParam("partials", ptr, ctypes.c_void_p,
                                "split-KV partial O [splits, total_q, N, D] then LSE [splits, N, total_q] f32"))
    params += [
        HostParam("batch", "int64_t", ctypes.c_int64, "B (sequences)"),
        HostParam("heads", "int64_t", ctypes.c_int64, "N (query heads)"),
        HostParam("kv_heads", "int64_t", ctypes.c_int64, "KVN (key/value heads, divides N)"),
        HostParam("s0", "int64_t", ctypes.c_int64, "query length (varlen: total_q)"),
        HostParam("s1", "int64_t", ctypes.c_int64, "key/value length (varlen: total_k)"),
    ]
    if c.varlen:
        params.append(HostParam("num_units", "int64_t", ctypes.c_int64, "entries of the unit table"))
    if c.page_size:
        params.append(HostParam("max_pages", "int64_t", ctypes.c_int64, "block table row length"))
    params.append(HostParam("scale", "float", ctypes.c_float, "softmax scale, 1/sqrt(D) by default"))
    if c.narrowing:  # (the window's bounds)
        params += c.narrowing.params("")
    if c.key_padding:
        params.append(HostParam("key_mask_stride", "int64_t", ctypes.c_int64, "elements between batches of the key mask (0: shared)"))
    if c.dropout:
        params += [HostParam("drop_seed", "int64_t", ctypes.c_int64, "dropout generator seed (int32 range)"),
                   HostParam("drop_offset", "int64_t", ctypes.c_int64, "dropout generator offset (int32 range)"),
                   HostParam("drop_cut", "float", ctypes.c_float, "1 - the generator's keep threshold (dropout.cut)"),
                   HostParam("drop_scale", "float", ctypes.c_float, "1 / (1 - dropout_p)")]
    if c.block_ranges:
        params.append(HostParam("tile_ranges", ptr, ctypes.c_void_p, "each unit's KV tile ranges [units, 4] i32 "
                                                                     "(kernels/mods.py)"))
    return tuple(params + mod_params(c.score_mods))


def entry_args(config=None) -> tuple[EntryArg, ...]:
    """The `pto.entry` function's arguments for the kernel of `config`."""
    c = config or _default_config()
    elem = {"q": c.in_dtype, "k": c.in_dtype, "v": c.in_dtype, "o": c.out_dtype, "lse": "f32", "key_mask": "i8", "units": "i32",
            "block_table": "i32", "partials": "f32",
            "tile_ranges": "i32"}
    args = [
        EntryArg("ffts", "!pto.ptr<i64>", "ffts", "(__gm__ int64_t*)"),
        EntryArg("slots", "!pto.ptr<f32>", "slots", "(__gm__ float*)"),
        EntryArg("slots_h", f"!pto.ptr<{c.in_dtype}>", "slots", f"(__gm__ {_C_ELEM[c.in_dtype]}*)"),
    ]
    for param in host_params(c)[1:]:
        if param.c_type.endswith("*"):
            dt = elem.get(param.name) or param.doc.split()[-1]  # a mod's pointer names its element type last
            args.append(EntryArg(param.name, f"!pto.ptr<{dt}>", param.name, f"(__gm__ {_C_ELEM[dt]}*)"))
        else:
            args.append(EntryArg(param.name, "f32" if param.c_type == "float" else "i64", param.name, ""))
    return tuple(args)


def reduce_entry_args(config) -> tuple[EntryArg, ...]:
    """The split-KV reduce kernel's entry arguments (`kernels/fa_reduce.py`): the FFTS base (set as
    in every entry, though the reduce has no cross-core flags), the partials the forward kernel
    wrote, O (and LSE) in the forward kernel's varlen layout, the reduce table
    (`pipeline.REDUCE_TABLE`) and the sizes."""
    c = config
    args = [EntryArg("ffts", "!pto.ptr<i64>", "ffts", "(__gm__ int64_t*)"),
            EntryArg("partials", "!pto.ptr<f32>", "partials", "(__gm__ float*)"),
            EntryArg("o", f"!pto.ptr<{c.out_dtype}>", "o", f"(__gm__ {_C_ELEM[c.out_dtype]}*)")]
    if c.lse:
        args.append(EntryArg("lse", "!pto.ptr<f32>", "lse", "(__gm__ float*)"))
    args.append(EntryArg("units", "!pto.ptr<i32>", "units", "(__gm__ int32_t*)"))
    args += [EntryArg(name, "i64", name, "") for name in ("heads", "s0", "num_units")]
    return tuple(args)


# Scalar entry argument types the generated launcher takes: IR type -> (C type, ctypes type).
_C_OF_IR = {"i64": ("int64_t", ctypes.c_int64), "i32": ("int32_t", ctypes.c_int32), "i16": ("int16_t", ctypes.c_int16),
            "i8": ("int8_t", ctypes.c_int8), "f32": ("float", ctypes.c_float)}


def args_from_signature(signature: list[tuple[str, str]], ffts: str | None = "ffts") -> tuple[EntryArg, ...]:
    """The entry arguments of a `.pto`, from its `(name, type)` signature: what `run_fa compile`
    renders a launcher for, for ptofa's kernels and any other. `ffts` names the argument the
    entry passes to `pto.set_ffts` (the launcher fetches it; None: the kernel has no pipes).
    One convention of ptofa's kernels: an argument `<name>_h` beside a pointer `<name>` is the
    same GM buffer seen in another element type (the slot workspace), one host parameter."""
    names = {name for name, _ in signature}
    args = []
    for name, ir_type in signature:
        if ir_type.startswith("!pto.ptr<"):
            elem = ir_type[len("!pto.ptr<"):-1]
            if elem not in _C_ELEM:
                raise NotImplementedError(f"entry argument %{name}: pointer element type {elem} has no launcher "
                                          f"C type (supported: {', '.join(_C_ELEM)})")
            source = "ffts" if name == ffts else name
            if name.endswith("_h") and name[:-2] in names:
                source = name[:-2]
            args.append(EntryArg(name, ir_type, source, f"(__gm__ {_C_ELEM[elem]}*)"))
        elif ir_type in _C_OF_IR:
            args.append(EntryArg(name, ir_type, name, ""))
        else:
            raise NotImplementedError(f"entry argument %{name}: scalar type {ir_type} cannot be passed by the "
                                      f"generated launcher (supported: {', '.join(_C_OF_IR)})")
    return tuple(args)


def host_params_of(args: tuple[EntryArg, ...]) -> tuple[HostParam, ...]:
    """The launcher parameters that feed `args` (one per source; ffts is fetched by the launcher)."""
    params, seen = [], set()
    for arg in args:
        if arg.source == "ffts" or arg.source in seen:
            continue
        seen.add(arg.source)
        if arg.ir_type.startswith("!pto.ptr<"):
            params.append(HostParam(arg.source, "uint8_t*", ctypes.c_void_p, arg.ir_type))
        else:
            c_type, ctype = _C_OF_IR[arg.ir_type]
            params.append(HostParam(arg.source, c_type, ctype, arg.ir_type))
    return tuple(params)


# The plain forward kernel's lists (FAConfig() defaults): the checked-in caller.cpp.
HOST_PARAMS: tuple[HostParam, ...] = host_params()
ENTRY_ARGS: tuple[EntryArg, ...] = entry_args()

# Launcher return codes (caller.cpp returns them; the runner maps them to errors).
RC_OK = 0
RC_FFTS_FAILED = 1  # rtGetC2cCtrlAddr failed or returned a null FFTS address
LAUNCHER_RETURN_C_TYPE = "int32_t"
LAUNCHER_RESTYPE = ctypes.c_int32


_CXX_KEYWORDS = frozenset({"do", "for", "if", "int", "float", "new", "delete", "case", "default", "char", "long"})


def c_ident(name: str) -> str:
    """`name` as a C++ identifier in the launcher: an argument named like a C++ keyword (the
    backward kernels' `do`, for dO) gets a trailing underscore, so the launcher compiles."""
    return f"{name}_" if name in _CXX_KEYWORDS else name


def launcher_argtypes(config=None) -> list[type]:
    """ctypes argtypes of the launcher: block_dim, stream, then the host parameters."""
    return [ctypes.c_uint32, ctypes.c_void_p] + [p.ctype for p in host_params(config)]


def launcher_c_params(config=None, args: tuple[EntryArg, ...] | None = None) -> list[str]:
    """The launcher's C parameter list, as written in caller.cpp (of `config`, or of `args`)."""
    params = host_params(config) if args is None else host_params_of(args)
    return ["uint32_t block_dim", "void* stream"] + [f"{p.c_type} {c_ident(p.name)}" for p in params]


def kernel_launch_args(config=None, args: tuple[EntryArg, ...] | None = None) -> list[str]:
    """The expressions caller.cpp passes to the entry, in entry-argument order."""
    out = []
    for arg in entry_args(config) if args is None else args:
        expr = "ffts_addr" if arg.source == "ffts" else c_ident(arg.source)
        out.append(f"{arg.cxx_cast}{expr}" if arg.cxx_cast else expr)
    return out
