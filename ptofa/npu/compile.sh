#!/usr/bin/env bash
# Build any kernel's .pto into a loadable .so, the same steps as `run_fa compile`
# (ptofa/launch/toolchain.py builds the same command lines; tests/test_toolchain.py keeps them equal).
# Installed with the package (ptofa/npu/compile.sh); the repository's ./compile.sh runs this one.
#
#   compile.sh fa.pto [-o build/]
#
# Tools: PTOAS (else ptoas on PATH), BISHENG (else $ASCEND_HOME_PATH/compiler/ccec_compiler/bin/bisheng,
# else bisheng on PATH), PTO_LIB_PATH (a pto-isa checkout with include/).
# Writes build/<entry>.cpp, build/<entry>.so and build/metadata.txt, named after the file's
# pto.entry function (fa_fwd.cpp, fa_fwd.so). The launcher `call_<entry>` is the one ptofa renders
# for the file's own entry signature (the checked-in caller.cpp for the default forward kernel),
# found with $PYTHON (default python3), which must import ptofa.
# Exit code 2 when a tool is missing; with ptoas alone it writes <entry>.cpp and the launcher
# source <entry>.caller.cpp, then says it stopped before bisheng.
set -euo pipefail

PTOAS_FLAGS=(--pto-arch=a3 --enable-insert-sync)
BISHENG_FLAGS=(
    -fPIC -shared -O2 -std=c++17
    -Wno-macro-redefined -Wno-ignored-attributes -fstack-protector-strong -D_FORTIFY_SOURCE=2
    -xcce -Xhost-start -Xhost-end
    -mllvm -cce-aicore-stack-size=0x8000
    -mllvm -cce-aicore-function-stack-size=0x8000
    -mllvm -cce-aicore-record-overflow=true
    -mllvm -cce-aicore-addr-transform
    -mllvm -cce-aicore-dcci-insert-for-scalar=false
    -cce-enable-mix --npu-arch=dav-2201 -DMEMORY_BASE -std=gnu++17
)

INSTALL_PTOAS="install ptoas (pip install ptoas, or a PTOAS release) or set PTOAS=/path/to/ptoas"
INSTALL_BISHENG="install CANN and \`source <ascend-toolkit>/set_env.sh\` (sets ASCEND_HOME_PATH), or set BISHENG=/path/to/bisheng"
INSTALL_PTO_ISA="clone pto-isa (github.com/hw-native-sys/pto-isa, at or after commit 0a15e15c) and export PTO_LIB_PATH=/path/to/pto-isa"

usage() { echo "usage: $0 FILE.pto [-o BUILD_DIR]" >&2; exit 1; }

pto_file=""
build_dir="build"
while [[ $# -gt 0 ]]; do
    case "$1" in
        -o) [[ $# -ge 2 ]] || usage; build_dir="$2"; shift 2 ;;
        -h|--help) usage ;;
        *) [[ -z "$pto_file" ]] || usage; pto_file="$1"; shift ;;
    esac
done
[[ -n "$pto_file" ]] || usage
[[ -f "$pto_file" ]] || { echo "error: input: $pto_file is not a file" >&2; exit 1; }

missing=0
if [[ -n "${PTOAS:-}" ]]; then
    ptoas="$PTOAS"
    [[ -f "$ptoas" && -x "$ptoas" ]] || { echo "error: ptoas: PTOAS=$ptoas is not an executable file; $INSTALL_PTOAS" >&2; missing=1; }
elif ptoas="$(command -v ptoas)"; then
    :
else
    echo "error: ptoas: not found (\$PTOAS unset, no ptoas on PATH); $INSTALL_PTOAS" >&2; missing=1
fi

if [[ -n "${BISHENG:-}" ]]; then
    bisheng="$BISHENG"
    [[ -f "$bisheng" && -x "$bisheng" ]] || { echo "error: bisheng: BISHENG=$bisheng is not an executable file; $INSTALL_BISHENG" >&2; missing=1; }
elif [[ -n "${ASCEND_HOME_PATH:-}" && -x "$ASCEND_HOME_PATH/compiler/ccec_compiler/bin/bisheng" ]]; then
    bisheng="$ASCEND_HOME_PATH/compiler/ccec_compiler/bin/bisheng"
elif bisheng="$(command -v bisheng)"; then
    :
else
    echo "error: bisheng: not found (\$BISHENG unset, not under \$ASCEND_HOME_PATH, not on PATH); $INSTALL_BISHENG" >&2; missing=1
fi

if [[ -z "${PTO_LIB_PATH:-}" ]]; then
    echo "error: pto-isa headers: PTO_LIB_PATH is not set; $INSTALL_PTO_ISA" >&2; missing=1
elif [[ ! -d "$PTO_LIB_PATH/include" ]]; then
    echo "error: pto-isa headers: $PTO_LIB_PATH/include is not a directory; $INSTALL_PTO_ISA" >&2; missing=1
fi
[[ $missing -eq 0 || -n "${ptoas:-}" && -x "${ptoas:-}" ]] || exit 2

mkdir -p "$build_dir"
build_dir="$(cd "$build_dir" && pwd)"
pto_file="$(cd "$(dirname "$pto_file")" && pwd)/$(basename "$pto_file")"
caller_cpp="$("${PYTHON:-python3}" -m ptofa.launch.toolchain caller "$pto_file")" || {
    echo "error: launcher: ${PYTHON:-python3} -m ptofa.launch.toolchain failed (set PYTHON to a python with ptofa)" >&2; exit 2; }

entry="$(sed -n 's/.*func\.func @\([A-Za-z_][A-Za-z0-9_]*\)(.*attributes {[^}]*pto\.entry.*/\1/p' "$pto_file" | head -n1)"
entry="${entry:-$(basename "$pto_file" .pto)}"

"$ptoas" "${PTOAS_FLAGS[@]}" "$pto_file" -o "$build_dir/$entry.cpp"
if [[ $missing -ne 0 ]]; then
    cp "$caller_cpp" "$build_dir/$entry.caller.cpp"
    echo "wrote $build_dir/$entry.cpp and $build_dir/$entry.caller.cpp; stopped before bisheng (see the errors above)" >&2
    exit 2
fi
"$bisheng" "-I$PTO_LIB_PATH/include" "${BISHENG_FLAGS[@]}" \
    "-DKERNEL_CPP=\"$build_dir/$entry.cpp\"" "$caller_cpp" -o "$build_dir/$entry.so"

# Same names as ptofa.launch.toolchain.metadata_text.
{
    echo "pto_sha256: $(sha256sum "$pto_file" | cut -d' ' -f1)"
    echo "caller_sha256: $(sha256sum "$caller_cpp" | cut -d' ' -f1)"
    echo "ptoas_version: $("$ptoas" --version 2>&1 | head -n1)"
    echo "bisheng_version: $("$bisheng" --version 2>&1 | head -n1)"
    echo "pto_lib_path: $PTO_LIB_PATH"
    echo "flags: ${PTOAS_FLAGS[*]} ${BISHENG_FLAGS[*]}"
} > "$build_dir/metadata.txt"
echo "built: $build_dir/$entry.so"
