"""A recording fake NPU for the launch-path tests: the device is the CPU, and every launcher
records its host arguments by name (in the order of the kernel text's own entry signature, as
`npu.launcher_of` loads them) and computes nothing unless `Calls.on_launch` does."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from ptofa.kernels import argspec

from ptofa.launch import npu
from ptofa.launch.toolchain import entry_signature

STREAM = 0x5EA


@dataclasses.dataclass
class Call:
    """One launcher call: its entry, text, block_dim, stream and host arguments by name, in
    order, with the int32 tables a serving launch reads (set by the serving tests)."""

    entry: str
    text: str
    block_dim: int
    stream: int
    values: dict[str, int | float]
    order: list[str]
    units: torch.Tensor | None = None
    block_table: torch.Tensor | None = None


class FakeStream:
    _as_parameter_ = STREAM


class Calls(list):
    """The recorded calls; `on_launch(call)`, when set, runs inside the launch (buffers still alive)."""

    on_launch = None


def install_fake_npu(monkeypatch: pytest.MonkeyPatch, module, cores: int,
                     annotate: Callable[[Call], None] = lambda call: None) -> Calls:
    """Make `module` (`ptofa.launch.npu`, whose `npu_device`, `npu_stream`, `cube_core_count` and
    `launcher_of` every NPU launch uses) launch on the fake NPU; `annotate` reads what it needs at
    launch time."""
    recorded = Calls()

    def launcher_of(text: str, summary: str) -> npu.EntryLauncher:
        entry, args = entry_signature(text)
        order = [p.name for p in argspec.host_params_of(args)]

        def launch(block_dim: int, stream: int, *values: int | float) -> int:
            assert len(values) == len(order)
            call = Call(entry, text, block_dim, stream, dict(zip(order, values)), order)
            annotate(call)
            recorded.append(call)
            if recorded.on_launch is not None:
                recorded.on_launch(call)
            return argspec.RC_OK

        return npu.EntryLauncher(launch, entry, args)

    monkeypatch.setattr(npu, "npu_available", lambda: (True, "fake NPU"))
    monkeypatch.setattr(module, "npu_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(module, "npu_stream", FakeStream)
    monkeypatch.setattr(module, "cube_core_count", lambda: cores)
    monkeypatch.setattr(module, "launcher_of", launcher_of)
    return recorded
