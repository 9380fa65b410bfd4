"""Run any `.pto` kernel: check it, launch it on the simulator or an NPU, predict its time.

    import torch, ptofa
    x = torch.randn(1000, 256); y = torch.empty_like(x)
    run = ptofa.run_kernel("row_softmax.pto", {"x": x, "y": y, "rows": 1000}, block_dim=8)
    print(run.summary())          # the simulator's report and the timing model's prediction

`kernel` is `.pto` text, a path to a `.pto` file, or a module built with `ptofa.api`.
`args` maps the entry's argument names to torch tensors (GM buffers: pointer arguments,
written in place, element type as the pointer's) and Python numbers (scalar arguments).
Two arguments are not passed: the one the entry hands to `pto.set_ffts` (the launch supplies
the FFTS base) and, by ptofa's convention, a pointer `<name>_h` beside a pointer `<name>` (the
same buffer in another element type, e.g. FlashAttention's slot workspace).
The kernel is checked first (`ptofa.ir.textio.check_text`: a `PtoCheckError` with line
numbers); a wrong, missing or extra argument is a `KernelArgError` naming it.

On the simulator every block is executed and traced, and the timing model times the trace
(`ptofa.sim.kernel_timing.predict_kernel`: per-queue replay, block start-up, HBM floor).
On an NPU the `.so` is built by `run_fa compile`'s toolchain with a launcher generated from
the entry's signature, loaded with ctypes, and launched on the current stream.
"""

from __future__ import annotations

import ctypes
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from xdsl.dialects import builtin, func

from ptofa.ir import dialect as d
from ptofa.ir.textio import ParsedModule, check_text, is_entry, print_pto
from ptofa.kernels import argspec
from ptofa.launch.base import AUTO
from ptofa.sim import GmPointer, RunOptions, SimResult, simulate
from ptofa.sim.kernel_timing import kernel_summary, predict_kernel
from ptofa.sim.timing import TimingResult

# PTO element type -> the torch dtype a tensor argument must have.
TORCH_OF_ELEM = {
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i8": torch.int8, "i16": torch.int16,
    "i32": torch.int32, "i64": torch.int64, "ui8": torch.uint8,
}  # fmt: skip
BACKENDS = ("sim", "npu", AUTO)
FFTS_WORDS = 16  # the simulator's stand-in for the FFTS base (its flags need no address)


class KernelArgError(ValueError):
    """An argument of `run_kernel` does not fit the entry's signature."""


@dataclass(frozen=True)
class EntryParam:
    """One argument a caller of the kernel passes (a launcher parameter of `argspec`)."""

    name: str
    ir_type: str  # PTO IR spelling, e.g. "!pto.ptr<f32>" or "i64"
    elem: str | None  # pointer element type, None for a scalar

    @property
    def is_pointer(self) -> bool:
        return self.elem is not None


@dataclass
class Kernel:
    """A checked kernel: its text, parsed module, entry name, the entry's arguments
    (`argspec.EntryArg`: the FFTS base and aliased views marked by their source) and the
    parameters a caller passes (one per source, FFTS left out: the launch supplies it)."""

    text: str
    parsed: ParsedModule
    entry: str
    entry_args: tuple[argspec.EntryArg, ...]
    params: tuple[EntryParam, ...]
    path: Path | None = None


@dataclass
class KernelRun:
    """What `run_kernel` returns: where it ran, the simulator's report, the prediction."""

    kernel: Kernel
    backend: str
    block_dim: int
    wall_s: float
    sim: SimResult | None = None
    timing: TimingResult | None = None
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"@{self.kernel.entry} on {self.backend}, block_dim={self.block_dim}: ran in {self.wall_s:.2f} s wall"]
        if self.sim is not None:
            lines[0] += f" ({self.sim.steps} simulated op executions)"
        lines += self.warnings
        if self.timing is not None:
            lines.append(kernel_summary(self.timing))
        return "\n".join(lines)


def load_kernel(kernel: str | Path | builtin.ModuleOp) -> Kernel:
    """`.pto` text, a path or a built module -> a checked `Kernel` (raises `PtoCheckError`)."""
    path = None
    if isinstance(kernel, builtin.ModuleOp):
        text, label = print_pto(kernel), "<module>"
    elif isinstance(kernel, Path) or ("\n" not in kernel and "func.func" not in kernel):
        path = Path(kernel)
        if not path.is_file():
            raise FileNotFoundError(f"kernel: {path} is not a file (pass .pto text, a path or a module)")
        text, label = path.read_text(), str(path)
    else:
        text, label = kernel, "<pto>"
    parsed = check_text(text, label)
    entries = [op for op in parsed.module.body.ops if isinstance(op, func.FuncOp) and is_entry(op)]
    if len(entries) != 1:
        raise KernelArgError(f"kernel {label}: needs exactly one function with `attributes {{pto.entry}}`, "
                             f"found {len(entries)}")
    entry = entries[0]
    ffts = next((op.operands[0] for op in entry.body.ops if isinstance(op, d.SetFftsOp)), None)
    signature = [(value.name_hint or f"arg{value.index}", str(value.type)) for value in entry.body.block.args]
    entry_args = argspec.args_from_signature(signature, ffts=ffts.name_hint if ffts is not None else None)
    params = []
    for param in argspec.host_params_of(entry_args):
        elem = param.doc[len("!pto.ptr<"):-1] if param.doc.startswith("!pto.ptr<") else None
        params.append(EntryParam(param.name, param.doc, elem))
    return Kernel(text, parsed, entry.sym_name.data, entry_args, tuple(params), path)


def check_args(kernel: Kernel, args: dict[str, object]) -> None:
    """Every entry argument given once, with a tensor of the pointer's element type or a number."""
    names = [p.name for p in kernel.params]
    missing = [n for n in names if n not in args]
    extra = sorted(set(args) - set(names))
    if missing or extra:
        raise KernelArgError(f"@{kernel.entry}({', '.join(names)}): "
                             + "; ".join(part for part in (f"missing {missing}" if missing else "",
                                                            f"unknown {extra}" if extra else "") if part))
    for p in kernel.params:
        value = args[p.name]
        if p.is_pointer:
            if not isinstance(value, torch.Tensor):
                raise KernelArgError(f"%{p.name} : {p.ir_type} needs a torch tensor, got {type(value).__name__}")
            want = TORCH_OF_ELEM.get(p.elem)
            if want is None:
                raise NotImplementedError(f"%{p.name} : {p.ir_type}: element type {p.elem} has no torch dtype here")
            if value.dtype != want:
                raise KernelArgError(f"%{p.name} : {p.ir_type} needs a {want} tensor, got {value.dtype}")
            if not value.is_contiguous():
                raise KernelArgError(f"%{p.name}: the tensor must be contiguous (its bytes are the GM buffer)")
        elif isinstance(value, torch.Tensor) or not isinstance(value, (int, float)) or isinstance(value, bool):
            raise KernelArgError(f"%{p.name} : {p.ir_type} needs a Python number, got {type(value).__name__}")
        elif p.ir_type.startswith("i") and not isinstance(value, int):
            raise KernelArgError(f"%{p.name} : {p.ir_type} needs an int, got {value!r}")


def resolve_backend(backend: str) -> str:
    """sim / npu; `auto` is npu where an NPU with torch_npu is usable, else sim."""
    from ptofa.launch.npu import npu_available

    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} must be one of {BACKENDS}")
    if backend == AUTO:
        return "npu" if npu_available()[0] else "sim"
    return backend


def run_kernel(
    kernel: str | Path | builtin.ModuleOp,
    args: dict[str, object],
    block_dim: int,
    backend: str = AUTO,
    soc: str = "910B2",
    *,
    timing: bool = True,
    options: RunOptions | None = None,
) -> KernelRun:
    """Check `kernel`, run its entry on `block_dim` blocks and return a `KernelRun` (see the
    module doc). `timing` asks the simulator for the timing model's prediction; `options`
    are the simulator's run options (step limit, a fault, ...)."""
    loaded = kernel if isinstance(kernel, Kernel) else load_kernel(kernel)
    check_args(loaded, args)
    if block_dim < 1:
        raise KernelArgError(f"block_dim={block_dim} must be >= 1")
    name = resolve_backend(backend)
    if name == "npu":
        return _run_npu(loaded, args, block_dim)
    return _run_sim(loaded, args, block_dim, soc, timing, options)


def _run_sim(kernel: Kernel, args: dict[str, object], block_dim: int, soc: str, timing: bool,
             options: RunOptions | None) -> KernelRun:
    sim_args: dict[str, object] = {}
    for arg in kernel.entry_args:
        if arg.source == "ffts":  # the FFTS base: the simulator's flags need no address
            sim_args[arg.name] = GmPointer.of(np.zeros(FFTS_WORDS, dtype=np.int64))
            continue
        value = args[arg.source]
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                raise KernelArgError(f"%{arg.source}: the simulator needs CPU tensors, got one on {value.device}")
            sim_args[arg.name] = GmPointer.of(value).retyped(arg.ir_type[len("!pto.ptr<"):-1])
        else:
            sim_args[arg.name] = value
    opts = options or RunOptions()
    start = time.perf_counter()
    result = simulate(kernel.parsed, sim_args, block_dim, opts, trace=opts.trace or timing)
    run = KernelRun(kernel, "sim", block_dim, time.perf_counter() - start, sim=result, warnings=list(result.warnings))
    if timing:
        run.timing = predict_kernel(result.trace, soc, block_dim)
    return run


def _run_npu(kernel: Kernel, args: dict[str, object], block_dim: int) -> KernelRun:
    from ptofa.launch.npu import check_launch_code, require_npu
    from ptofa.launch.toolchain import compile_pto

    require_npu()
    with tempfile.TemporaryDirectory(prefix="ptofa-kernel-") as tmp:
        pto_path = Path(tmp) / f"{kernel.entry}.pto"
        pto_path.write_text(kernel.text)
        built = compile_pto(pto_path)
        entry = kernel.entry
        params = argspec.host_params_of(kernel.entry_args)
        launcher = getattr(ctypes.CDLL(str(built.so_path)), argspec.launcher_name(entry))
        launcher.argtypes = [ctypes.c_uint32, ctypes.c_void_p] + [p.ctype for p in params]
        launcher.restype = argspec.LAUNCHER_RESTYPE
    device = torch.device("npu")
    on_device = {n: (v.to(device) if isinstance(v, torch.Tensor) else v) for n, v in args.items()}
    host = [on_device[p.name].data_ptr() if isinstance(on_device[p.name], torch.Tensor) else on_device[p.name]
            for p in params]
    stream = torch.npu.current_stream().npu_stream
    start = time.perf_counter()
    check_launch_code(launcher(block_dim, stream, *host), argspec.launcher_name(entry))
    torch.npu.synchronize()
    wall = time.perf_counter() - start
    for n, v in args.items():
        if isinstance(v, torch.Tensor) and v.device.type != "npu":
            v.copy_(on_device[n].cpu())
    return KernelRun(kernel, "npu", block_dim, wall)

