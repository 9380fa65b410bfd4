#!/usr/bin/env bash
# The build script ships with the package as ptofa/npu/compile.sh; this runs it from a checkout.
exec "$(dirname "${BASH_SOURCE[0]}")/ptofa/npu/compile.sh" "$@"
