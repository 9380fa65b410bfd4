"""Build a `.pto` file into a loadable `.so`: ptoas, then bisheng with `caller.cpp`.

The command lines are built here once (`compile_commands`); `compile.sh` at the
top of the repository runs the same argv lists and a test keeps the two equal.

    ptoas   --pto-arch=a3 --enable-insert-sync fa.pto -o BUILD/<entry>.cpp
    bisheng -I$PTO_LIB_PATH/include <mix-mode flags> -DKERNEL_CPP="BUILD/<entry>.cpp" caller.cpp -o BUILD/<entry>.so

The build's files are named after the file's `pto.entry` function (`fa_fwd.cpp`,
`fa_fwd.so` for the forward kernel), and its launcher `call_<entry>` is rendered from the
entry's own signature (`render_caller_cpp`): any kernel, not only FlashAttention.

(docs/sources.md §1.3, §3.8; a2 and a3 share code generation, so `--pto-arch=a3` and
`--npu-arch=dav-2201` serve both.) Builds are cached under `$PTOFA_CACHE`
(default: `builds` under ptofa's cache root, `ptofa_cache_root`) by a
key over the `.pto` text, `caller.cpp`, the flags, the tool versions and the pto-isa
path, so a sweep does not rebuild a kernel it has already built.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import click
import platformdirs

from ptofa.kernels import argspec

PTOAS_FLAGS: tuple[str, ...] = ("--pto-arch=a3", "--enable-insert-sync")

# Mixed cube+vector build of caller.cpp (docs/sources.md §3.8, the pto-dsl recipe used with
# CANN 8.5 on 910B). The later -std=gnu++17 overrides -std=c++17; kept as verified.
BISHENG_FLAGS: tuple[str, ...] = (
    "-fPIC", "-shared", "-O2", "-std=c++17",
    "-Wno-macro-redefined", "-Wno-ignored-attributes", "-fstack-protector-strong", "-D_FORTIFY_SOURCE=2",
    "-xcce", "-Xhost-start", "-Xhost-end",
    "-mllvm", "-cce-aicore-stack-size=0x8000",
    "-mllvm", "-cce-aicore-function-stack-size=0x8000",
    "-mllvm", "-cce-aicore-record-overflow=true",
    "-mllvm", "-cce-aicore-addr-transform",
    "-mllvm", "-cce-aicore-dcci-insert-for-scalar=false",
    "-cce-enable-mix", "--npu-arch=dav-2201", "-DMEMORY_BASE", "-std=gnu++17",
)  # fmt: skip

METADATA_NAME = "metadata.txt"
BISHENG_UNDER_ASCEND_HOME = Path("compiler/ccec_compiler/bin/bisheng")

INSTALL_PTOAS = "install ptoas (pip install ptoas, or a PTOAS release) or set PTOAS=/path/to/ptoas"
INSTALL_BISHENG = (
    "install CANN and `source <ascend-toolkit>/set_env.sh` (sets ASCEND_HOME_PATH), "
    "or set BISHENG=/path/to/bisheng"
)
INSTALL_PTO_ISA = "clone pto-isa (github.com/hw-native-sys/pto-isa, at or after commit 0a15e15c) and export PTO_LIB_PATH=/path/to/pto-isa"


class ToolchainError(RuntimeError):
    """ptoas or bisheng is missing or failed."""


class ToolNotFound(ToolchainError):
    """One or more build tools are missing; one line per missing piece."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__("\n".join(missing))
        self.missing = missing


def caller_cpp_path() -> Path:
    """`caller.cpp` as installed with the package."""
    return Path(str(resources.files("ptofa") / "npu" / "caller.cpp"))


@dataclass(frozen=True)
class Tools:
    """Where the build tools are. In a dry run missing ones hold placeholder names."""

    ptoas: str
    bisheng: str
    pto_lib_path: str


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_ptoas() -> tuple[str | None, str]:
    """(path or None, why not): `$PTOAS`, else `ptoas` on PATH."""
    from_env = os.environ.get("PTOAS")
    if from_env:
        if _executable(from_env):
            return from_env, ""
        return None, f"ptoas: PTOAS={from_env} is not an executable file; {INSTALL_PTOAS}"
    on_path = shutil.which("ptoas")
    if on_path:
        return on_path, ""
    return None, f"ptoas: not found ($PTOAS unset, no ptoas on PATH); {INSTALL_PTOAS}"


def find_bisheng() -> tuple[str | None, str]:
    """(path or None, why not): `$BISHENG`, else under `$ASCEND_HOME_PATH`, else on PATH."""
    from_env = os.environ.get("BISHENG")
    if from_env:
        if _executable(from_env):
            return from_env, ""
        return None, f"bisheng: BISHENG={from_env} is not an executable file; {INSTALL_BISHENG}"
    ascend_home = os.environ.get("ASCEND_HOME_PATH")
    if ascend_home:
        under_home = str(Path(ascend_home) / BISHENG_UNDER_ASCEND_HOME)
        if _executable(under_home):
            return under_home, ""
    on_path = shutil.which("bisheng")
    if on_path:
        return on_path, ""
    looked_in = f"{ascend_home}/{BISHENG_UNDER_ASCEND_HOME}" if ascend_home else "$ASCEND_HOME_PATH (unset)"
    return None, f"bisheng: not found ($BISHENG unset, not in {looked_in}, not on PATH); {INSTALL_BISHENG}"


def find_pto_lib_path() -> tuple[str | None, str]:
    """(pto-isa checkout or None, why not): `$PTO_LIB_PATH`, which must contain `include/`."""
    pto_lib = os.environ.get("PTO_LIB_PATH")
    if not pto_lib:
        return None, f"pto-isa headers: PTO_LIB_PATH is not set; {INSTALL_PTO_ISA}"
    if not (Path(pto_lib) / "include").is_dir():
        return None, f"pto-isa headers: {pto_lib}/include is not a directory; {INSTALL_PTO_ISA}"
    return pto_lib, ""


def locate_tools() -> tuple[Tools, list[str]]:
    """The tools found, placeholder names for missing ones, and one message per missing piece."""
    ptoas, ptoas_missing = find_ptoas()
    bisheng, bisheng_missing = find_bisheng()
    pto_lib, pto_lib_missing = find_pto_lib_path()
    tools = Tools(ptoas or "ptoas", bisheng or "bisheng", pto_lib or "$PTO_LIB_PATH")
    missing = [m for m in (ptoas_missing, bisheng_missing, pto_lib_missing) if m]
    return tools, missing


def find_tools() -> Tools:
    """All three pieces, or `ToolNotFound` naming each missing one."""
    tools, missing = locate_tools()
    if missing:
        raise ToolNotFound(missing)
    return tools


def entry_signature(pto_text: str) -> tuple[str, tuple[argspec.EntryArg, ...]] | None:
    """The `pto.entry` function a `.pto` text defines and its arguments as declared, or None:
    what the launcher is rendered from, so the host side marshals in this order too. The
    argument that the entry passes to `pto.set_ffts` is the FFTS base the launcher fetches."""
    match = re.search(r"func\.func @(\w+)\(([^)]*)\)\s*attributes\s*\{[^}]*\bpto\.entry\b", pto_text)
    if match is None:
        return None
    entry, params = match.group(1), match.group(2)
    body_start = match.end()
    next_func = pto_text.find("func.func", body_start)
    body = pto_text[body_start: next_func if next_func >= 0 else len(pto_text)]
    ffts = re.search(r"pto\.set_ffts\s+%(\w+)", body)
    signature = [(m.group(1), m.group(2).strip()) for m in re.finditer(r"%(\w+)\s*:\s*([^,]+)", params)]
    return entry, argspec.args_from_signature(signature, ffts=ffts.group(1) if ffts else None)


def build_names(pto_path: Path | str) -> tuple[str, str]:
    """(kernel C++ name, `.so` name) of a build: after the file's entry (after the file's own
    name for a file without one, which ptoas will refuse anyway)."""
    pto_path = Path(pto_path)
    found = entry_signature(pto_path.read_text()) if pto_path.is_file() else None
    stem = found[0] if found else pto_path.stem
    return f"{stem}.cpp", f"{stem}.so"


def caller_for(pto_path: Path | str) -> tuple[Path, str]:
    """The launcher source for a `.pto` and its text: the checked-in `caller.cpp` when the
    entry's signature is the default kernel's, else one rendered for the file's own entry
    signature (kernel variants, the reduce and backward kernels, any kernel of your own),
    written beside the `.pto` as `<stem>.caller.cpp`."""
    pto_path = Path(pto_path)
    default = caller_cpp_path()
    found = entry_signature(pto_path.read_text()) if pto_path.is_file() else None
    if found is None:
        return default, default.read_text()
    entry, args = found
    if args == argspec.ENTRY_ARGS and entry == argspec.ENTRY_NAME:
        return default, default.read_text()
    text = render_caller_cpp(args, entry)
    path = pto_path.with_name(pto_path.stem + ".caller.cpp")
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path, text


def compile_commands(pto_path: Path | str, build_dir: Path | str, tools: Tools | None = None,
                     level: str = "level2") -> list[list[str]]:
    """The exact argv lists that turn `pto_path` into `build_dir/<entry>.so` (what compile.sh runs).
    `level`: ptoas's --pto-level (level3: the allocations carry their own addresses)."""
    tools = tools or locate_tools()[0]
    build_dir = Path(build_dir).absolute()
    cpp_name, so_name = build_names(pto_path)
    kernel_cpp = build_dir / cpp_name
    level_flag = [] if level == "level2" else [f"--pto-level={level}"]
    ptoas_argv = [tools.ptoas, *PTOAS_FLAGS, *level_flag, str(Path(pto_path).absolute()), "-o", str(kernel_cpp)]
    bisheng_argv = [
        tools.bisheng,
        f"-I{tools.pto_lib_path}/include",
        *BISHENG_FLAGS,
        f'-DKERNEL_CPP="{kernel_cpp}"',
        str(caller_for(pto_path)[0]),
        "-o",
        str(build_dir / so_name),
    ]
    return [ptoas_argv, bisheng_argv]


@lru_cache(maxsize=None)
def _tool_version_cached(tool: str, mtime_ns: int, size: int) -> str:
    done = subprocess.run([tool, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    lines = done.stdout.splitlines()
    return lines[0] if lines else ""


def tool_version(tool: str) -> str:
    """First line of `tool --version`, cached per binary (path, mtime, size)."""
    stat = os.stat(tool)
    return _tool_version_cached(tool, stat.st_mtime_ns, stat.st_size)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_key(pto_text: bytes, tools: Tools, config_summary: str | None = None,
              caller_text: str | None = None) -> dict[str, str]:
    """Everything the `.so` depends on; its hash names the cache entry."""
    return {
        "config": config_summary or "",
        "pto_sha256": _sha256(pto_text),
        "caller_sha256": _sha256((caller_text or caller_cpp_path().read_text()).encode()),
        "ptoas_version": tool_version(tools.ptoas),
        "bisheng_version": tool_version(tools.bisheng),
        "pto_lib_path": tools.pto_lib_path,
        "flags": shlex.join(PTOAS_FLAGS + BISHENG_FLAGS),
    }


CACHE_ENV = "PTOFA_CACHE_DIR"


def ptofa_cache_root() -> Path:
    """ptofa's cache root: `$PTOFA_CACHE_DIR`, else the user cache directory of ptofa (the kernel
    cache, `ptofa.launch.kernel_cache`, keeps its `kernels` there, this module its `builds`)."""
    return Path(os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("ptofa"))


def cache_root() -> Path:
    """`$PTOFA_CACHE`, else the `builds` folder of ptofa's cache root (`ptofa_cache_root`)."""
    return Path(os.environ.get("PTOFA_CACHE") or ptofa_cache_root() / "builds")


def metadata_text(key: dict[str, str]) -> str:
    """metadata.txt: one `name: value` line per build-key field (compile.sh writes the same lines).

    `config` is written only when a config summary was given; compile.sh has none.
    """
    return "".join(f"{name}: {value}\n" for name, value in key.items() if name != "config" or value)


@dataclass
class CompileResult:
    """Where a build's artefacts are, and how they were obtained."""

    so_path: Path | None
    kernel_cpp: Path | None
    commands: list[list[str]]
    cache_hit: bool = False
    cache_entry: Path | None = None
    missing_tools: list[str] = field(default_factory=list)


def _run(argv: list[str], step: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise ToolchainError(f"{step} failed with exit code {done.returncode}: {shlex.join(argv)}\n{tail}")


def _build(pto_path: Path, build_dir: Path, tools: Tools, key: dict[str, str], level: str = "level2") -> list[list[str]]:
    build_dir.mkdir(parents=True, exist_ok=True)
    commands = compile_commands(pto_path, build_dir, tools, level)
    for argv, step in zip(commands, ("ptoas", "bisheng")):
        _run(argv, step)
    (build_dir / METADATA_NAME).write_text(metadata_text(key))
    return commands


def _artefacts(pto_path: Path) -> tuple[str, str, str]:
    return (*build_names(pto_path), METADATA_NAME)


def _copy_artefacts(src: Path, dst: Path, names: tuple[str, ...]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(src / name, dst / name)


def compile_pto(
    pto_path: Path | str,
    out_dir: Path | str | None = None,
    dry_run: bool = False,
    config_summary: str | None = None,
    use_cache: bool = True,
    level: str = "level2",
) -> CompileResult:
    """Build `pto_path` into `<entry>.so`, reusing a cached build when the key matches.

    With `out_dir` the build runs there (the same commands as `compile.sh -o out_dir`)
    and is stored in the cache; a cache hit copies the cached artefacts there. Without
    it the cache entry itself is the build directory (load the `.so` from there: its
    path is unique per key, so `dlopen` never returns a stale kernel). A dry run
    returns the commands without running anything and needs no tools.
    """
    pto_path = Path(pto_path)
    if dry_run:
        tools, missing = locate_tools()
        build_dir = Path(out_dir) if out_dir is not None else cache_root() / "<key>"
        return CompileResult(None, None, compile_commands(pto_path, build_dir, tools, level), missing_tools=missing)

    tools = find_tools()
    if not pto_path.is_file():
        raise ToolchainError(f"input: {pto_path} is not a file")
    key = build_key(pto_path.read_bytes(), tools, f"{config_summary} {level}" if level != "level2" else config_summary,
                    caller_for(pto_path)[1])
    artefacts = _artefacts(pto_path)
    cpp_name, so_name, _ = artefacts
    entry = cache_root() / _sha256(json.dumps(key, sort_keys=True).encode())[:20]
    if not use_cache:
        build_dir = Path(out_dir or tempfile.mkdtemp(prefix="ptofa-build-"))
        commands = _build(pto_path, build_dir, tools, key, level)
        return CompileResult(build_dir / so_name, build_dir / cpp_name, commands)

    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sweeps: one build per key
        hit = all((entry / name).is_file() for name in artefacts)
        commands: list[list[str]] = []
        if hit:
            if out_dir is not None:
                _copy_artefacts(entry, Path(out_dir), artefacts)
        elif out_dir is not None:
            commands = _build(pto_path, Path(out_dir), tools, key, level)
            _copy_artefacts(Path(out_dir), entry, artefacts)
        else:
            commands = _build(pto_path, entry, tools, key, level)
    result_dir = Path(out_dir) if out_dir is not None else entry
    return CompileResult(
        result_dir / so_name, result_dir / cpp_name, commands, cache_hit=hit, cache_entry=entry
    )


def emit_cpp(pto_path: Path | str, out_dir: Path | str, level: str = "level2") -> tuple[Path, Path]:
    """The ptoas step alone (no bisheng, no pto-isa): `out_dir/<entry>.cpp` and the launcher source
    `out_dir/<entry>.caller.cpp`, for a kernel developer without CANN."""
    ptoas, missing = find_ptoas()
    if ptoas is None:
        raise ToolNotFound([missing])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tools = Tools(ptoas, "bisheng", "$PTO_LIB_PATH")
    _run(compile_commands(pto_path, out_dir, tools, level)[0], "ptoas")
    cpp_name = build_names(pto_path)[0]
    launcher = out_dir / cpp_name.replace(".cpp", ".caller.cpp")
    launcher.write_text(caller_for(pto_path)[1])
    return out_dir / cpp_name, launcher


@click.command("compile")
@click.argument("pto_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o", "--out-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("build"),
    show_default=True, help="Directory for <entry>.cpp, <entry>.so and metadata.txt (named after the file's entry).",
)  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the ptoas and bisheng command lines and run nothing.")
@click.option("--no-cache", is_flag=True, help="Rebuild even if an identical build is cached, and do not store it.")
@click.option("--pto-level", "pto_level", type=click.Choice(["level1", "level2", "level3"]), default="level2",
              show_default=True, help="ptoas's --pto-level (level3: every allocation carries its 'addr').")
def compile_cmd(pto_file: Path, out_dir: Path, dry_run: bool, no_cache: bool, pto_level: str) -> None:
    """Compile PTO_FILE with ptoas and bisheng into OUT_DIR/<entry>.so, with a launcher
    `call_<entry>` generated from the file's entry signature (same steps as compile.sh).
    With ptoas but no bisheng or pto-isa: OUT_DIR/<entry>.cpp and <entry>.caller.cpp, then exit 2
    naming what is missing."""
    if dry_run:
        result = compile_pto(pto_file, out_dir, dry_run=True, level=pto_level)
        for argv in result.commands:
            click.echo(shlex.join(argv))
        for line in result.missing_tools:
            click.echo(f"missing: {line}", err=True)
        return
    if not pto_file.is_file():
        raise click.BadParameter(f"{pto_file} is not a file", param_hint="PTO_FILE")
    try:
        result = compile_pto(pto_file, out_dir, use_cache=not no_cache, level=pto_level)
    except ToolNotFound as missing:
        for line in missing.missing:
            click.echo(f"error: {line}", err=True)
        if find_ptoas()[0] is not None:  # ptoas alone: the C++ and its launcher, then stop
            try:
                cpp, launcher = emit_cpp(pto_file, out_dir, pto_level)
            except ToolchainError as failure:
                raise click.ClickException(str(failure)) from failure
            click.echo(f"wrote {cpp} (kernel C++) and {launcher} (launcher); stopped before bisheng", err=True)
        click.get_current_context().exit(2)
    except ToolchainError as failure:
        raise click.ClickException(str(failure)) from failure
    how = "cached build" if result.cache_hit else "built"
    click.echo(f"{how}: {result.so_path} (kernel C++ {result.kernel_cpp})")


CALLER_TEMPLATE = """\
// Generated from ptofa/kernels/argspec.py by `python -m ptofa.launch.toolchain gen-caller`; do not edit.
// Host launcher of {what}. bisheng compiles this file in mix mode
// with -DKERNEL_CPP="\\"<ptoas output>\\"" (docs/sources.md §3.8, compile.sh).
#include <cstdint>

#include KERNEL_CPP
{ffts_decl}
constexpr int32_t RC_OK = {rc_ok};
constexpr int32_t RC_FFTS_FAILED = {rc_ffts_failed};

extern "C" {return_type} {launcher}({params})
{{{ffts_fetch}
    {entry}<<<block_dim, nullptr, stream>>>({launch_args});
    return RC_OK;
}}
"""


FFTS_DECL = """
extern "C" int32_t rtGetC2cCtrlAddr(uint64_t* addr, uint32_t* len);
"""
FFTS_FETCH = """
    // The entry's first argument is the FFTS base that cube/vector cross-core flags use.
    uint64_t ffts_addr = 0;
    uint32_t ffts_len = 0;
    if (rtGetC2cCtrlAddr(&ffts_addr, &ffts_len) != 0 || ffts_addr == 0) {
        return RC_FFTS_FAILED;
    }"""


def render_caller_cpp(args: tuple | None = None, entry: str = argspec.ENTRY_NAME) -> str:
    """caller.cpp text for an entry's argument list: the default FlashAttention kernel's
    (checked in as ptofa/npu/caller.cpp), a kernel variant's, or the `args` of any entry
    (`entry_signature`); the launcher is `call_<entry>`, and it fetches the FFTS base only
    for an entry that takes one (`set_ffts`: kernels with pipes)."""
    separator = ",\n" + " " * 8
    entry_list = argspec.entry_args() if args is None else args
    has_ffts = any(arg.source == "ffts" for arg in entry_list)
    return CALLER_TEMPLATE.format(
        what="the FlashAttention kernel" if entry in argspec.LAUNCHERS else f"the kernel {entry}",
        ffts_decl=FFTS_DECL if has_ffts else "",
        ffts_fetch=FFTS_FETCH if has_ffts else "",
        rc_ok=argspec.RC_OK,
        rc_ffts_failed=argspec.RC_FFTS_FAILED,
        return_type=argspec.LAUNCHER_RETURN_C_TYPE,
        launcher=argspec.launcher_name(entry),
        params="\n" + " " * 8 + separator.join(argspec.launcher_c_params(args=args)),
        entry=entry,
        launch_args="\n" + " " * 8 + separator.join(argspec.kernel_launch_args(args=args)),
    )


@click.group()
def _main() -> None:
    """ptofa toolchain maintenance."""


@_main.command("gen-caller")
@click.option(
    "--check", is_flag=True, help="Exit 1 if the checked-in caller.cpp differs from argspec instead of writing it."
)
def _gen_caller(check: bool) -> None:
    """Write ptofa/npu/caller.cpp from ptofa/kernels/argspec.py."""
    target = caller_cpp_path()
    text = render_caller_cpp()
    if check:
        if target.read_text() != text:
            click.echo(f"{target} is out of date with ptofa/kernels/argspec.py; run python -m ptofa.launch.toolchain gen-caller")
            sys.exit(1)
        return
    target.write_text(text)
    click.echo(f"wrote {target}")


@_main.command("caller")
@click.argument("pto_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def _caller(pto_file: Path) -> None:
    """Print the path of PTO_FILE's launcher source (rendered beside it unless it is the checked-in
    caller.cpp): what compile.sh passes to bisheng."""
    click.echo(caller_for(pto_file)[0])


if __name__ == "__main__":
    _main()
