"""caller.cpp, the ctypes argtypes and the entry's argument types all follow ptofa.kernels.argspec."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from ptofa.kernels import argspec
from ptofa.launch.npu import NpuLaunchError, call_values, check_launch_code, host_values, load_launcher
from ptofa.launch.plan import BuiltKernel, plan_forward
from ptofa.pipeline import ProblemShape
from ptofa.launch.toolchain import caller_cpp_path, render_caller_cpp
from ptofa.kernels.builtin_mods.window import window_mods

CALLER_TEXT = caller_cpp_path().read_text()

# C type in caller.cpp -> ctypes type the runner must pass.
CTYPES_OF_C_TYPE = {
    "uint32_t": ctypes.c_uint32,
    "void*": ctypes.c_void_p,
    "uint8_t*": ctypes.c_void_p,
    "int64_t": ctypes.c_int64,
    "float": ctypes.c_float,
}
# PTO IR argument type -> C++ type ptoas emits for it (docs/sources.md §3.1).
CXX_OF_IR_TYPE = {
    "!pto.ptr<i64>": "__gm__ int64_t*",
    "!pto.ptr<f32>": "__gm__ float*",
    "!pto.ptr<f16>": "__gm__ half*",
    "i64": "int64_t",
    "f32": "float",
}


def split_list(text: str) -> list[str]:
    return [" ".join(item.split()) for item in text.split(",")]


def launcher_signature() -> tuple[str, str, list[str]]:
    match = re.search(r'extern "C" (\w+) (\w+)\(([^)]*)\)\s*\{', CALLER_TEXT)
    assert match, "caller.cpp has no extern \"C\" launcher definition"
    return match.group(1), match.group(2), split_list(match.group(3))


def test_checked_in_caller_is_generated_from_argspec() -> None:
    assert CALLER_TEXT == render_caller_cpp(), "run: python -m ptofa.launch.toolchain gen-caller"


def test_caller_parameters_equal_argspec() -> None:
    return_type, name, params = launcher_signature()
    assert (return_type, name) == (argspec.LAUNCHER_RETURN_C_TYPE, argspec.LAUNCHER_NAME)
    assert params == argspec.launcher_c_params()


def test_caller_launch_arguments_equal_argspec() -> None:
    match = re.search(r"(\w+)<<<block_dim, nullptr, stream>>>\((.*?)\);", CALLER_TEXT, re.DOTALL)
    assert match, "caller.cpp does not launch <<<block_dim, nullptr, stream>>>"
    assert match.group(1) == argspec.ENTRY_NAME
    assert split_list(match.group(2)) == argspec.kernel_launch_args()


def test_caller_includes_the_kernel_and_checks_the_ffts_call() -> None:
    assert "#include KERNEL_CPP" in CALLER_TEXT
    checked_call = r"if \(rtGetC2cCtrlAddr\(&ffts_addr, &ffts_len\) != 0 \|\| ffts_addr == 0\) \{\s*return RC_FFTS_FAILED;"
    assert re.search(checked_call, CALLER_TEXT)
    codes = dict(re.findall(r"constexpr int32_t (RC_\w+) = (\d+);", CALLER_TEXT))
    assert codes == {"RC_OK": str(argspec.RC_OK), "RC_FFTS_FAILED": str(argspec.RC_FFTS_FAILED)}


def test_ctypes_argtypes_match_the_c_parameters() -> None:
    _, _, params = launcher_signature()
    c_types = [param.rsplit(" ", 1)[0] for param in params]
    assert [CTYPES_OF_C_TYPE[c_type] for c_type in c_types] == argspec.launcher_argtypes()


def test_entry_casts_and_host_types_agree_with_the_ir_types() -> None:
    host = {param.name: param for param in argspec.HOST_PARAMS}
    for arg in argspec.ENTRY_ARGS:
        cxx = CXX_OF_IR_TYPE[arg.ir_type]
        if arg.ir_type.startswith("!pto.ptr"):
            assert arg.cxx_cast == f"({cxx})", arg.name
        else:
            assert arg.cxx_cast == "" and host[arg.source].c_type == cxx, arg.name


def test_launch_code_errors_name_the_cause() -> None:
    check_launch_code(argspec.RC_OK)
    with pytest.raises(NpuLaunchError, match="rtGetC2cCtrlAddr failed"):
        check_launch_code(argspec.RC_FFTS_FAILED)
    with pytest.raises(NpuLaunchError, match="unknown code 7"):
        check_launch_code(7)


FAKE_LAUNCHER_C = """
#include <stdint.h>
uint32_t seen_block_dim; void* seen_stream; uint8_t* seen_pointers[{n_pointers}]; int64_t seen_ints[{n_ints}];
float seen_scale;
{return_type} {name}({params}) {{
    seen_block_dim = block_dim; seen_stream = stream;
    {record}
    return {rc};
}}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the fake launcher")
@pytest.mark.parametrize("variant", [False, True], ids=["plain", "masked-keypadding-lse-gqa"])
def test_ctypes_call_delivers_every_host_argument(tmp_path: Path, variant: bool) -> None:
    """A C launcher with argspec's signature, called through load_launcher with a launch plan's values."""
    from ptofa.pipeline import FAConfig

    config = FAConfig(mods=window_mods(), key_padding=True, lse=True, in_dtype="bf16") if variant else FAConfig()
    params = argspec.host_params(config)
    pointers = [p.name for p in params if p.c_type.endswith("*")]
    ints = [p.name for p in params if p.c_type == "int64_t"]
    record = [f"seen_pointers[{i}] = {name};" for i, name in enumerate(pointers)]
    record += [f"seen_ints[{i}] = {name};" for i, name in enumerate(ints)]
    record.append("seen_scale = scale;")
    source = tmp_path / "fake_launcher.c"
    source.write_text(
        FAKE_LAUNCHER_C.format(
            n_pointers=len(pointers), n_ints=len(ints), return_type=argspec.LAUNCHER_RETURN_C_TYPE,
            name=argspec.LAUNCHER_NAME, params=", ".join(argspec.launcher_c_params(config)),
            record="\n    ".join(record), rc=argspec.RC_FFTS_FAILED,
        )  # fmt: skip
    )
    so_path = tmp_path / "fake_launcher.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(so_path)], check=True)

    window = (7, 0) if variant else (-1, -1)
    shape = ProblemShape(batch=2, heads=6, s0=256, s1=1024, kv_heads=3 if variant else 6, window=window)
    tensors = {name: torch.zeros(4) for name in ("q", "k", "v", "o", "slots")}
    extra = dict(config=config, lse=torch.zeros(3), key_mask=torch.zeros(2, 1024, dtype=torch.int8)) if variant else {}
    args = argspec.entry_args(config)
    plan = plan_forward(config, shape, "910B2", scale=0.125, key_mask=extra.get("key_mask"), block_dim=5,
                        kernel=BuiltKernel("", config.summary(), argspec.ENTRY_NAME, args))
    values = call_values(plan.calls[0], {**tensors, **extra}, tensors["slots"], torch.device("cpu"))
    code = load_launcher(so_path, argspec.ENTRY_NAME, args)(plan.block_dim, ctypes.c_void_p(0xABC),
                                                            *host_values(args, values))
    library = ctypes.CDLL(str(so_path))

    assert code == argspec.RC_FFTS_FAILED
    assert ctypes.c_uint32.in_dll(library, "seen_block_dim").value == 5
    assert ctypes.c_void_p.in_dll(library, "seen_stream").value == 0xABC
    seen_pointers = (ctypes.c_void_p * len(pointers)).in_dll(library, "seen_pointers")
    expected_pointers = {**tensors, **{k: v for k, v in extra.items() if isinstance(v, torch.Tensor)}}
    assert list(seen_pointers) == [expected_pointers[name].data_ptr() for name in pointers]
    seen_ints = (ctypes.c_int64 * len(ints)).in_dll(library, "seen_ints")
    expected = {"batch": 2, "heads": 6, "kv_heads": 3 if variant else 6, "s0": 256, "s1": 1024}
    if variant:  # an unbounded right bound is passed as s0 + s1; the key mask has one row per batch
        expected.update(win_left=7, win_right=0, key_mask_stride=1024)
    assert dict(zip(ints, seen_ints)) == expected
    assert ctypes.c_float.in_dll(library, "seen_scale").value == 0.125


def test_emitted_entry_has_argspec_names_and_types() -> None:
    from ptofa.fa_builder import emit_fa
    from ptofa.pipeline import FAConfig

    match = re.search(rf"func\.func @{argspec.ENTRY_NAME}\(([^)]*)\) attributes \{{pto\.entry\}}", emit_fa(FAConfig()))
    assert match, f"no pto.entry function @{argspec.ENTRY_NAME} in the emitted .pto"
    emitted = [tuple(part.strip().lstrip("%").split(": ", 1)) for part in match.group(1).split(", %")]
    assert emitted == [(arg.name, arg.ir_type) for arg in argspec.ENTRY_ARGS]
