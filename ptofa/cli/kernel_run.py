"""`run_fa run FILE.pto --arg NAME=VALUE ...`: run any kernel, not only FlashAttention. This module
parses the `--arg`s (`parse_arg`); `ptofa.cli.run.run_kernel_file` runs the kernel.

Each `--arg` gives one entry argument:

    --arg x=f32:1000x256     a tensor of that dtype and shape, filled from --seed (normal(0, 1)
                             for float types, integers in [-8, 8) for integer types)
    --arg x=zeros:f32:64     a tensor of zeros (outputs)
    --arg x=data.npy         a tensor loaded from a .npy file
    --arg rows=1000          a scalar (int, or float with a '.' or an exponent)

The run goes through `ptofa.run_kernel`; on the simulator it prints the timing model's
prediction, and `--timeline` / `--trace` draw it as for FlashAttention. `--out DIR` saves every
tensor argument after the run as DIR/NAME.npy.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy
import torch

from ptofa.cli.switches import InputError

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i8": torch.int8, "i16": torch.int16,
          "i32": torch.int32, "i64": torch.int64, "ui8": torch.uint8}
_TENSOR = re.compile(r"^(?:(zeros):)?([a-z0-9]+):(\d+(?:x\d+)*)$")


def parse_arg(text: str, generator: torch.Generator) -> tuple[str, object]:
    """One `NAME=VALUE` (see the module doc) -> (name, tensor or number); `InputError` if malformed."""
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise InputError(f"--arg {text!r}: expected NAME=VALUE (NAME an entry argument, VALUE dtype:shape, a .npy "
                         "file or a number)")
    if value.endswith(".npy"):
        path = Path(value)
        if not path.is_file():
            raise InputError(f"--arg {name}: {path} is not a file")
        return name, torch.from_numpy(numpy.ascontiguousarray(numpy.load(path)))
    match = _TENSOR.match(value)
    if match:
        zeros, dtype_name, dims = match.groups()
        if dtype_name not in DTYPES:
            raise InputError(f"--arg {name}: dtype {dtype_name} must be one of {', '.join(DTYPES)}")
        dtype, shape = DTYPES[dtype_name], [int(x) for x in dims.split("x")]
        if zeros:
            return name, torch.zeros(shape, dtype=dtype)
        if dtype.is_floating_point:
            return name, torch.randn(shape, generator=generator).to(dtype)
        return name, torch.randint(-8, 8, shape, generator=generator).to(dtype)
    try:
        return name, int(value)
    except ValueError:
        pass
    try:
        return name, float(value)
    except ValueError:
        raise InputError(f"--arg {name}={value}: not a number, a dtype:shape (e.g. f32:64x256) or a .npy file") from None
