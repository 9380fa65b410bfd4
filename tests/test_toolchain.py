"""ptofa.launch.toolchain and compile.sh: command lines, missing tools, the build cache."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ptofa.launch import toolchain
from ptofa.kernels.builtin_mods.window import window_mods
from ptofa.launch.toolchain import (
    PTOAS_FLAGS,
    Tools,
    ToolchainError,
    ToolNotFound,
    compile_cmd,
    compile_commands,
    compile_pto,
    locate_tools,
)

REPO = Path(__file__).resolve().parents[1]
COMPILE_SH = REPO / "ptofa" / "npu" / "compile.sh"
SAMPLE_PTO = REPO / "tests" / "data" / "fa_tiny.pto"

FAKE_TOOL = """#!/usr/bin/env bash
# Fake {name}: prints a version, or records its argv (one line per argument, then ---) and writes its -o file.
if [[ "$1" == --version ]]; then echo "{name} 9.9-fake"; exit 0; fi
{{ printf '%s\\n' "$0" "$@"; echo ---; }} >> "$FAKE_TOOL_LOG"
if [[ "${{FAKE_TOOL_FAIL:-}}" == {name} ]]; then echo "{name}: error: fake failure" >&2; exit 3; fi
out=""
while [[ $# -gt 0 ]]; do [[ "$1" == -o ]] && out="$2"; shift; done
echo "// output of fake {name}" > "$out"
"""


def recorded_commands(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    commands, current = [], []
    for line in log.read_text().splitlines():
        if line == "---":
            commands.append(current)
            current = []
        else:
            current.append(line)
    return commands


@pytest.fixture
def no_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment with no ptoas, bisheng or pto-isa (PATH is an empty directory)."""
    empty_bin = tmp_path / "empty_bin"
    empty_bin.mkdir()
    for name in ("PTOAS", "BISHENG", "PTO_LIB_PATH", "ASCEND_HOME_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(empty_bin))
    monkeypatch.setenv("PTOFA_CACHE", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tools:
    """Fake ptoas and bisheng that record their argv in $FAKE_TOOL_LOG, and a fake pto-isa checkout."""
    bin_dir = tmp_path / "fake_bin"
    bin_dir.mkdir()
    paths = {}
    for name in ("ptoas", "bisheng"):
        tool = bin_dir / name
        tool.write_text(FAKE_TOOL.format(name=name))
        tool.chmod(0o755)
        paths[name] = str(tool)
    pto_lib = tmp_path / "pto-isa"
    (pto_lib / "include").mkdir(parents=True)
    monkeypatch.setenv("PTOAS", paths["ptoas"])
    monkeypatch.setenv("BISHENG", paths["bisheng"])
    monkeypatch.setenv("PTO_LIB_PATH", str(pto_lib))
    monkeypatch.setenv("PTOFA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_TOOL_LOG", str(tmp_path / "tool_log.txt"))
    return Tools(paths["ptoas"], paths["bisheng"], str(pto_lib))


@pytest.fixture
def pto_file(tmp_path: Path) -> Path:
    path = tmp_path / "kernels" / "fa.pto"
    path.parent.mkdir()
    path.write_text("module {}\n")
    return path


def bash_array(name: str) -> tuple[str, ...]:
    match = re.search(rf"^{name}=\((.*?)\)$", COMPILE_SH.read_text(), re.MULTILINE | re.DOTALL)
    assert match, f"compile.sh has no {name}=(...) array"
    return tuple(shlex.split(match.group(1)))


# --- compile.sh and Python build the same commands ----------------------------------------------


def test_compile_sh_flag_arrays_equal_python_flags() -> None:
    assert bash_array("PTOAS_FLAGS") == toolchain.PTOAS_FLAGS
    assert bash_array("BISHENG_FLAGS") == toolchain.BISHENG_FLAGS


def test_flags_are_the_mixed_cube_vector_recipe() -> None:
    assert toolchain.PTOAS_FLAGS == ("--pto-arch=a3", "--enable-insert-sync")
    flags = toolchain.BISHENG_FLAGS
    for required in ("-cce-enable-mix", "--npu-arch=dav-2201", "-DMEMORY_BASE", "-xcce", "-shared", "-fPIC"):
        assert required in flags
    assert flags[flags.index("-cce-aicore-stack-size=0x8000") - 1] == "-mllvm"


def test_compile_sh_runs_the_python_commands_and_writes_the_same_metadata(
    fake_tools: Tools, pto_file: Path, tmp_path: Path
) -> None:
    build = tmp_path / "build_sh"
    done = subprocess.run(
        ["bash", str(COMPILE_SH), str(pto_file), "-o", str(build)], capture_output=True, text=True,
        env={**os.environ, "PYTHON": sys.executable}
    )
    assert done.returncode == 0, done.stderr
    assert recorded_commands(tmp_path / "tool_log.txt") == compile_commands(pto_file, build, fake_tools)
    assert (build / "fa.so").is_file()
    key = toolchain.build_key(pto_file.read_bytes(), fake_tools)
    assert (build / "metadata.txt").read_text() == toolchain.metadata_text(key)
    assert "ptoas_version: ptoas 9.9-fake" in (build / "metadata.txt").read_text()


def test_compile_commands_pass_kernel_cpp_and_caller(fake_tools: Tools, pto_file: Path, tmp_path: Path) -> None:
    ptoas_argv, bisheng_argv = compile_commands(pto_file, tmp_path / "out", fake_tools)
    kernel_cpp = tmp_path / "out" / "fa.cpp"
    assert ptoas_argv == [
        fake_tools.ptoas, "--pto-arch=a3", "--enable-insert-sync", str(pto_file), "-o", str(kernel_cpp),
    ]  # fmt: skip
    assert bisheng_argv[:2] == [fake_tools.bisheng, f"-I{fake_tools.pto_lib_path}/include"]
    assert bisheng_argv[-4:] == [
        f'-DKERNEL_CPP="{kernel_cpp}"',
        str(REPO / "ptofa" / "npu" / "caller.cpp"),
        "-o",
        str(tmp_path / "out" / "fa.so"),
    ]


# --- missing tools -----------------------------------------------------------------------------


def test_find_tools_names_every_missing_piece(no_tools: Path) -> None:
    with pytest.raises(ToolNotFound) as raised:
        toolchain.find_tools()
    lines = raised.value.missing
    assert len(lines) == 3
    assert lines[0].startswith("ptoas: not found") and "PTOAS=" in lines[0] and "pip install ptoas" in lines[0]
    assert lines[1].startswith("bisheng: not found") and "ASCEND_HOME_PATH" in lines[1] and "BISHENG=" in lines[1]
    assert lines[2].startswith("pto-isa headers: PTO_LIB_PATH is not set")
    assert all("\n" not in line for line in lines)


def test_env_vars_pointing_at_nothing_are_named(no_tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_executable = no_tools / "ptoas.txt"
    not_executable.write_text("")
    monkeypatch.setenv("PTOAS", str(not_executable))
    monkeypatch.setenv("BISHENG", str(no_tools / "nowhere" / "bisheng"))
    monkeypatch.setenv("PTO_LIB_PATH", str(no_tools))
    expected = f"ptoas: PTOAS={not_executable} is not an executable file; {toolchain.INSTALL_PTOAS}"
    assert toolchain.find_ptoas() == (None, expected)
    assert f"BISHENG={no_tools}/nowhere/bisheng is not an executable file" in toolchain.find_bisheng()[1]
    assert toolchain.find_pto_lib_path()[1].startswith(f"pto-isa headers: {no_tools}/include is not a directory")


def test_bisheng_is_found_under_ascend_home(no_tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bisheng = no_tools / "ascend" / "compiler" / "ccec_compiler" / "bin" / "bisheng"
    bisheng.parent.mkdir(parents=True)
    bisheng.write_text("#!/bin/sh\n")
    bisheng.chmod(0o755)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(no_tools / "ascend"))
    assert toolchain.find_bisheng() == (str(bisheng), "")


def test_compile_command_without_tools_exits_2_with_one_line_per_missing_piece(no_tools: Path, pto_file: Path) -> None:
    result = CliRunner().invoke(compile_cmd, [str(pto_file), "-o", str(no_tools / "build")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["ptoas", "bisheng", "pto-isa headers"]
    assert all(line.startswith("error: ") for line in lines)


def test_compile_sh_without_tools_exits_2_with_one_line_per_missing_piece(no_tools: Path, pto_file: Path) -> None:
    env = {**os.environ, "PATH": f"{no_tools / 'empty_bin'}:/usr/bin:/bin"}
    if any(shutil.which(tool, path=env["PATH"]) for tool in ("ptoas", "bisheng")):
        pytest.skip("ptoas or bisheng is installed in /usr/bin or /bin")
    done = subprocess.run(["/bin/bash", str(COMPILE_SH), str(pto_file)], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("error: ptoas: not found") and "PTOAS=" in lines[0]
    assert lines[1].startswith("error: bisheng: not found") and "BISHENG=" in lines[1]
    assert lines[2].startswith("error: pto-isa headers: PTO_LIB_PATH is not set")


def _ptoas_only(fake_tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BISHENG", "PTO_LIB_PATH", "ASCEND_HOME_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # bash for the fake tools; no bisheng there (else skip)
    if shutil.which("bisheng"):
        pytest.skip("a bisheng is installed in /usr/bin or /bin")


ANY_KERNEL = """\
module {
  func.func @row_scale(%x: !pto.ptr<f32>, %n: i32) attributes {pto.entry} {
    func.return
  }
}
"""


def test_compile_with_ptoas_alone_writes_the_cpp_and_the_launcher(
    fake_tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel developer without CANN: `run_fa compile` runs ptoas, writes <entry>.cpp and the
    launcher source, and says it stopped before bisheng (exit 2, the missing pieces named)."""
    _ptoas_only(fake_tools, monkeypatch)
    pto = tmp_path / "mine.pto"
    pto.write_text(ANY_KERNEL)
    out = tmp_path / "out"
    result = CliRunner().invoke(compile_cmd, [str(pto), "-o", str(out)])
    assert result.exit_code == 2
    assert (out / "row_scale.cpp").read_text() == "// output of fake ptoas\n"
    assert "call_row_scale" in (out / "row_scale.caller.cpp").read_text()
    assert "stopped before bisheng" in result.stderr and "error: bisheng" in result.stderr
    assert not (out / "row_scale.so").exists()


def test_compile_sh_with_ptoas_alone_writes_the_cpp_and_the_launcher(
    fake_tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ptoas_only(fake_tools, monkeypatch)
    pto = tmp_path / "mine.pto"
    pto.write_text(ANY_KERNEL)
    out = tmp_path / "out_sh"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["/bin/bash", str(REPO / "compile.sh"), str(pto), "-o", str(out)], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert (out / "row_scale.cpp").is_file() and "call_row_scale" in (out / "row_scale.caller.cpp").read_text()
    assert "stopped before bisheng" in done.stderr


def test_the_wheel_ships_compile_sh_and_caller_cpp() -> None:
    """pyproject's package data names npu/*.sh and npu/*.cpp, and both exist there."""
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ptofa"]
    npu = REPO / "ptofa" / "npu"
    for pattern in data:
        assert list(npu.parent.glob(pattern)), pattern
    assert (npu / "compile.sh").stat().st_mode & 0o111


# --- dry run -----------------------------------------------------------------------------------


def test_dry_run_without_tools_prints_the_commands_with_placeholders(no_tools: Path, pto_file: Path) -> None:
    build = no_tools / "build"
    result = CliRunner().invoke(compile_cmd, [str(pto_file), "-o", str(build), "--dry-run"])
    assert result.exit_code == 0, result.output
    printed = [shlex.split(line) for line in result.stdout.strip().splitlines()]
    assert printed == compile_commands(pto_file, build, Tools("ptoas", "bisheng", "$PTO_LIB_PATH"))
    assert printed[1][1] == "-I$PTO_LIB_PATH/include"
    assert [line.split(":")[1].strip() for line in result.stderr.strip().splitlines()] == [
        "ptoas", "bisheng", "pto-isa headers",
    ]  # fmt: skip
    assert not build.exists()


def test_dry_run_with_tools_prints_their_paths_and_runs_nothing(
    fake_tools: Tools, pto_file: Path, tmp_path: Path
) -> None:
    result = CliRunner().invoke(compile_cmd, [str(pto_file), "-o", str(tmp_path / "build"), "--dry-run"])
    assert result.exit_code == 0
    printed = [shlex.split(line) for line in result.stdout.strip().splitlines()]
    assert printed == compile_commands(pto_file, tmp_path / "build", fake_tools)
    assert result.stderr == ""
    assert recorded_commands(tmp_path / "tool_log.txt") == []


def test_every_option_has_help() -> None:
    for option in compile_cmd.params:
        if option.param_type_name == "option":
            assert option.help, option.name


# --- compile_pto and the cache -----------------------------------------------------------------


def test_compile_pto_runs_the_commands_then_hits_the_cache(fake_tools: Tools, pto_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "tool_log.txt"
    first = compile_pto(pto_file, tmp_path / "build1")
    assert not first.cache_hit
    assert recorded_commands(log) == first.commands == compile_commands(pto_file, tmp_path / "build1", fake_tools)
    assert first.so_path == tmp_path / "build1" / "fa.so" and first.so_path.is_file()

    second = compile_pto(pto_file, tmp_path / "build2")
    assert second.cache_hit and second.commands == []
    assert len(recorded_commands(log)) == 2, "the cache hit must not run the tools again"
    assert (tmp_path / "build2" / "fa.so").read_text() == first.so_path.read_text()
    assert (tmp_path / "build2" / "metadata.txt").is_file()

    in_cache = compile_pto(pto_file)
    assert in_cache.cache_hit and in_cache.so_path == first.cache_entry / "fa.so"
    assert in_cache.cache_entry.parent == tmp_path / "cache"


def test_cache_key_changes_with_the_pto_text_and_the_config(fake_tools: Tools, pto_file: Path, tmp_path: Path) -> None:
    first = compile_pto(pto_file, config_summary="head=128")
    other_config = compile_pto(pto_file, config_summary="head=64")
    pto_file.write_text("module { }\n")
    other_text = compile_pto(pto_file, config_summary="head=128")
    assert not other_config.cache_hit and not other_text.cache_hit
    assert len({first.cache_entry, other_config.cache_entry, other_text.cache_entry}) == 3
    assert len(recorded_commands(tmp_path / "tool_log.txt")) == 6
    assert "config: head=64" in (other_config.cache_entry / "metadata.txt").read_text()


def test_no_cache_rebuilds(fake_tools: Tools, pto_file: Path, tmp_path: Path) -> None:
    compile_pto(pto_file, tmp_path / "build")
    rebuilt = compile_pto(pto_file, tmp_path / "build", use_cache=False)
    assert not rebuilt.cache_hit
    assert len(recorded_commands(tmp_path / "tool_log.txt")) == 4


def test_a_failing_tool_raises_with_its_exit_code_and_stderr_and_is_not_cached(
    fake_tools: Tools, pto_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TOOL_FAIL", "bisheng")
    with pytest.raises(ToolchainError, match=r"bisheng failed with exit code 3.*\n.*fake failure"):
        compile_pto(pto_file, tmp_path / "build")
    monkeypatch.delenv("FAKE_TOOL_FAIL")
    assert not compile_pto(pto_file, tmp_path / "build").cache_hit


def test_compile_command_builds_and_reports_the_cache_hit(fake_tools: Tools, pto_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(compile_cmd, [str(pto_file), "-o", str(tmp_path / "build")])
    second = runner.invoke(compile_cmd, [str(pto_file), "-o", str(tmp_path / "build")])
    assert first.exit_code == 0 and first.stdout.startswith("built: ")
    assert second.exit_code == 0 and second.stdout.startswith("cached build: ")


# --- real tools (skip without them) ------------------------------------------------------------


@pytest.mark.ptoas
def test_real_ptoas_compiles_the_hand_written_sample(tmp_path: Path) -> None:
    sample = tmp_path / SAMPLE_PTO.name  # a copy: the launcher is rendered beside the .pto
    shutil.copy(SAMPLE_PTO, sample)
    ptoas_argv = compile_commands(sample, tmp_path)[0]
    done = subprocess.run(ptoas_argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert 'extern "C" __global__ AICORE void attn_tiny(' in (tmp_path / "attn_tiny.cpp").read_text()


@pytest.mark.bisheng
def test_real_toolchain_builds_the_emitted_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ptofa.fa_builder import emit_fa
    from ptofa.pipeline import FAConfig

    monkeypatch.setenv("PTOFA_CACHE", str(tmp_path / "cache"))
    config = FAConfig()
    pto_path = tmp_path / "fa.pto"
    pto_path.write_text(emit_fa(config))
    built = compile_pto(pto_path, tmp_path / "build", config_summary=config.summary())
    assert built.so_path.is_file() and built.so_path.stat().st_size > 0
    metadata = (tmp_path / "build" / "metadata.txt").read_text()
    assert "ptoas_version: " in metadata and "bisheng_version: " in metadata
    assert compile_pto(pto_path, config_summary=config.summary()).cache_hit


def _catalog():
    """Every kernel ptofa emits (`ptofa.kernels.catalog`): forward grid and switches, reduce, backward."""
    from ptofa.kernels.catalog import kernels

    return [pytest.param(k, id=k.name) for k in kernels()]


@pytest.mark.ptoas
@pytest.mark.parametrize("kernel", _catalog())
def test_real_ptoas_compiles_every_emitted_kernel(kernel, tmp_path: Path) -> None:
    """Every kernel of the catalog compiles unedited, with a global entry in the C++."""
    tools = locate_tools()[0]
    pto_path = tmp_path / f"{kernel.name}.pto"
    pto_path.write_text(kernel.emit())
    cpp = tmp_path / f"{kernel.name}.cpp"
    done = subprocess.run([tools.ptoas, *PTOAS_FLAGS, str(pto_path), "-o", str(cpp)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{kernel.summary}\n{done.stderr}"
    assert 'extern "C" __global__ AICORE void ' in cpp.read_text(), kernel.summary


# --- any kernel: a launcher from its own entry signature, files named after the entry ---------


ROW_KERNEL = """\
module {
  func.func @row_scale(%x: !pto.ptr<f32>, %y: !pto.ptr<bf16>, %flags: !pto.ptr<i8>, %rows: i64, %n: i32, %alpha: f32) attributes {pto.entry} {
    func.return
  }
}
"""


def test_any_entry_gets_its_own_launcher_and_file_names(fake_tools: Tools, tmp_path: Path) -> None:
    pto = tmp_path / "mine.pto"
    pto.write_text(ROW_KERNEL)
    ptoas_argv, bisheng_argv = compile_commands(pto, tmp_path / "out", fake_tools)
    assert ptoas_argv[-1] == str(tmp_path / "out" / "row_scale.cpp")
    assert bisheng_argv[-1] == str(tmp_path / "out" / "row_scale.so")
    caller = Path(bisheng_argv[-3])
    assert caller == tmp_path / "mine.caller.cpp" and caller != toolchain.caller_cpp_path()
    text = caller.read_text()
    assert 'extern "C" int32_t call_row_scale(' in text
    for param in ("uint8_t* x", "uint8_t* y", "uint8_t* flags", "int64_t rows", "int32_t n", "float alpha"):
        assert param in text
    assert "(__gm__ float*)x" in text and "(__gm__ bfloat16_t*)y" in text and "(__gm__ int8_t*)flags" in text
    assert "row_scale<<<block_dim, nullptr, stream>>>" in text
    assert "rtGetC2cCtrlAddr" not in text  # no set_ffts in the entry: no FFTS base to fetch


def test_the_ffts_argument_is_the_one_set_ffts_takes(tmp_path: Path) -> None:
    text = ROW_KERNEL.replace("%x: !pto.ptr<f32>,", "%base: !pto.ptr<i64>, %x: !pto.ptr<f32>,").replace(
        "    func.return", "    pto.set_ffts %base : !pto.ptr<i64>\n    func.return")
    entry, args = toolchain.entry_signature(text)
    assert entry == "row_scale" and [a.source for a in args][:2] == ["ffts", "x"]
    caller = toolchain.render_caller_cpp(args, entry)
    assert "rtGetC2cCtrlAddr" in caller and "(__gm__ int64_t*)ffts_addr" in caller
    assert "uint8_t* base" not in caller  # fetched by the launcher, not a host parameter


def test_a_scalar_type_the_launcher_cannot_pass_is_named() -> None:
    with pytest.raises(NotImplementedError, match=r"%h: scalar type f16"):
        toolchain.entry_signature(ROW_KERNEL.replace("%alpha: f32", "%h: f16"))


def _random_switch_sets(count: int, seed: int = 20261127):
    """`count` seeded random legal switch sets of the forward and backward builders, beyond the
    catalog's fixed combinations (what `run_fa build` accepts: any width, any switches)."""
    import random
    import warnings

    from ptofa.fa_builder import emit_fa
    from ptofa.kernels.builtin_mods.alibi import Alibi
    from ptofa.kernels.builtin_mods.softcap import Softcap
    from ptofa.kernels.bwd_pipeline import BwdConfig
    from ptofa.kernels.fa_bwd import emit_bwd
    from ptofa.pipeline import SUPPORTED_HEAD, SUPPORTED_TILE_S1, ConfigError, FAConfig

    rng, found = random.Random(seed), []
    while len(found) < count:
        coin = rng.random
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if coin() < 0.6:
                    kw = dict(head=rng.choice(SUPPORTED_HEAD), tile_s1=rng.choice(SUPPORTED_TILE_S1),
                              qk_preload=rng.randint(1, 4), in_dtype=rng.choice(["f16", "bf16"]),
                              out_dtype=rng.choice([None, "f32", "f16", "bf16"]), window=coin() < .5,
                              key_padding=coin() < .3, lse=coin() < .4, varlen=coin() < .4, prescale_q=coin() < .7,
                              softmax_dtype=rng.choice(["f32", "f32", "f16"]),
                              mods=(Softcap(),) * (coin() < .3) + (Alibi(),) * (coin() < .3))
                    kw["mods"] += window_mods(kw.pop("window"))
                    if kw["varlen"]:
                        kw.update(page_size=rng.choice([0, 256]), split_kv=coin() < .3, gqa_pack=coin() < .3)
                    config = FAConfig(**kw)
                    found.append((f"fwd {config.summary()}", lambda c=config: emit_fa(c)))
                else:
                    head, dtype, window = rng.choice(SUPPORTED_HEAD), rng.choice(["f16", "bf16"]), coin() < .5
                    config = BwdConfig(head=head, in_dtype=dtype, atomic_dq=coin() < .4, key_padding=coin() < .3,
                                       mods=(Softcap(),) * (coin() < .3) + (Alibi(),) * (coin() < .3) + window_mods(window),
                                       varlen=coin() < .3)
                    kernel = rng.choice(["dq", "dkdv"])
                    found.append((f"bwd {kernel} {config}", lambda c=config, k=kernel: emit_bwd(c, k)))
        except (ConfigError, NotImplementedError):
            continue
    return found


@pytest.mark.ptoas
@pytest.mark.parametrize("summary, emit", _random_switch_sets(24), ids=[f"random{i}" for i in range(24)])
def test_real_ptoas_compiles_random_switch_sets(summary: str, emit, tmp_path: Path) -> None:
    """Any legal switch set compiles unedited, not only the catalog's (24 seeded draws per run)."""
    tools = locate_tools()[0]
    pto_path = tmp_path / "k.pto"
    pto_path.write_text(emit())
    done = subprocess.run([tools.ptoas, *PTOAS_FLAGS, str(pto_path), "-o", str(tmp_path / "k.cpp")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{summary}\n{done.stderr}"


LEVEL3_KERNEL = """\
module {
  func.func @k() attributes {pto.kernel_kind = #pto.kernel_kind<vector>} {
    %c0 = arith.constant 0 : i64
    %a = pto.alloc_tile addr = %c0 : !pto.tile_buf<vec, 16x16xf32>
    return
  }
  func.func @e() attributes {pto.entry} {
    func.call @k() : () -> ()
    return
  }
}
"""


def test_check_and_compile_take_ptoas_s_level(fake_tools: Tools, tmp_path: Path) -> None:
    """An allocation with its own `addr` needs ptoas's --pto-level=level3: `run_fa check` refuses it
    at ptoas's default level2 with ptoas's words, accepts it at level3, and `run_fa compile
    --pto-level level3` passes the flag to ptoas."""
    from ptofa.cli.main import main

    pto = tmp_path / "l3.pto"
    pto.write_text(LEVEL3_KERNEL)
    refused = CliRunner().invoke(main, ["check", str(pto)])
    assert refused.exit_code == 1 and "unexpected 'addr' operand: only supported when --pto-level=level3" in refused.output
    assert CliRunner().invoke(main, ["check", "--pto-level", "level3", str(pto)]).exit_code == 0
    result = CliRunner().invoke(compile_cmd, [str(pto), "-o", str(tmp_path / "b"), "--pto-level", "level3", "--dry-run"])
    assert result.exit_code == 0 and "--pto-level=level3" in result.output.splitlines()[0]


@pytest.mark.ptoas
@pytest.mark.parametrize("level, compiles", [("level2", False), ("level3", True)])
def test_real_ptoas_agrees_on_the_level(level: str, compiles: bool, tmp_path: Path) -> None:
    from ptofa.ir.textio import PtoCheckError, check_text

    pto = tmp_path / "l3.pto"
    pto.write_text(LEVEL3_KERNEL)
    done = subprocess.run(compile_commands(pto, tmp_path, level=level)[0], capture_output=True, text=True)
    assert (done.returncode == 0) == compiles, done.stderr
    try:
        check_text(LEVEL3_KERNEL, level=level)
        accepted = True
    except PtoCheckError:
        accepted = False
    assert accepted == compiles
