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

The run goes through the launch layer as every FlashAttention call does: a one-call
`LaunchPlan` (`calls.plan_kernel`) run by `sim.launch` or `npu.launch`. On the simulator every
block is executed and traced, and the timing model times the trace
(`ptofa.sim.kernel_timing.predict_kernel`: per-queue replay, block start-up, the shared L2 and HBM floors). On an
NPU the `.so` is built by `run_fa compile`'s toolchain with a launcher generated from the
entry's signature, loaded with ctypes, and launched on the current stream.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from xdsl.dialects import builtin, func

from ptofa.ir.textio import check_text, is_entry, print_pto
from ptofa.kernels import argspec
from ptofa.launch.base import AUTO
from ptofa.launch.dispatch import backend_soc, launch_on
from ptofa.launch.calls import BuiltKernel, plan_kernel
from ptofa.launch.toolchain import entry_signature
from ptofa.sim.executor import SimResult
from ptofa.sim.options import RunOptions
from ptofa.sim.kernel_timing import kernel_summary, predict_kernel
from ptofa.sim.timing import TimingResult

# PTO element type -> the torch dtype a tensor argument must have.
TORCH_OF_ELEM = {
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i8": torch.int8, "i16": torch.int16,
    "i32": torch.int32, "i64": torch.int64, "ui8": torch.uint8,
}  # fmt: skip
BACKENDS = ("sim", "npu", AUTO)


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
    """A checked kernel: the launch layer's `BuiltKernel` (text, parsed module, entry and its
    arguments: the FFTS base and aliased views marked by their source) and the parameters a
    caller passes (one per source, FFTS left out: the launch supplies it)."""

    built: BuiltKernel
    params: tuple[EntryParam, ...]
    path: Path | None = None

    @property
    def entry(self) -> str:
        return self.built.entry

    @property
    def text(self) -> str:
        return self.built.text


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
    found = entry_signature(text)
    if found is None or found[0] != entries[0].sym_name.data:
        raise KernelArgError(f"kernel {label}: the entry's signature must be on its `func.func` line "
                             "(as ptofa prints it)")
    entry, entry_args = found
    built = BuiltKernel(text, Path(label).stem if path else entry, entry, entry_args, parsed)
    params = []
    for param in argspec.host_params_of(entry_args):
        elem = param.doc[len("!pto.ptr<"):-1] if param.doc.startswith("!pto.ptr<") else None
        params.append(EntryParam(param.name, param.doc, elem))
    return Kernel(built, tuple(params), path)


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
    tensors = {n: v for n, v in args.items() if isinstance(v, torch.Tensor)}
    plan = plan_kernel(loaded.built, {n: v for n, v in args.items() if n not in tensors}, block_dim,
                       backend_soc(name, soc), outputs=tuple(tensors))
    opts = options or RunOptions()
    if timing and name == "sim":
        opts = dataclasses.replace(opts, trace=True)
    start = time.perf_counter()
    if name == "npu":
        from ptofa.launch.npu import require_npu

        require_npu()
        launch_on("npu", plan, tensors)
        torch.npu.synchronize()
        return KernelRun(loaded, "npu", block_dim, time.perf_counter() - start)
    for n, value in tensors.items():
        if value.device.type != "cpu":
            raise KernelArgError(f"%{n}: the simulator needs CPU tensors, got one on {value.device}")
    (result,) = launch_on("sim", plan, tensors, options=opts)
    run = KernelRun(loaded, "sim", block_dim, time.perf_counter() - start, sim=result, warnings=list(result.warnings))
    if timing:
        run.timing = predict_kernel(result.trace, plan.soc, block_dim)
    return run
