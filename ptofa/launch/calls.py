"""Launch plans over built kernels: everything one call runs, decided once, for either backend.

    plan = forward_plan(kernel, config, shape, soc, scale=0.125)   # `plan.plan_forward` fetches the kernel
    sim.launch(plan, {"q": q, "k": k, "v": v, "o": o})             # or npu.launch(plan, tensors)

A `LaunchPlan` is the chip (`SocSpec`), the workspace's size and the kernel calls in launch
order; a `KernelCall` is one kernel (any built kernel: its text, parsed module and entry
arguments), its block_dim and the argument values the plan owns: the sizes, the scale and
window bounds, host-built tables (the varlen unit table, the reduce table) and `Workspace`
regions (slot rings, split-KV partials) of the one workspace buffer. The caller's tensors
(q, k, v, o, lse, key_mask, block_table; the backward's gradients) are given at launch, by
entry-argument name. `bind` merges the two for a call and refuses an entry argument without
a value: it is the one place argument values are put together, for the simulator and the
NPU alike, in the order the entry declares (`argspec`).

The planners here (`forward_plan`, `split_plan`, `backward_plan`, `plan_kernel`) take the built
kernels and the chip, so the default block count is min(work units, `soc.cube_cores`)
everywhere; they import no kernel builder, so the backends (`ptofa.launch.sim`, `npu`) and the
split planner sit right above the simulator and the kernel cache. `ptofa.launch.plan` has the
same planners taking configs (`plan_forward`, `plan_split`, `plan_backward`): they fetch the
kernels from the kernel cache (`ptofa.launch.kernel_cache`) and call these. The split counts
of a split-KV launch are decided by `ptofa.launch.splitkv` and handed to `split_plan`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from ptofa.ir.textio import ParsedModule, check_text
from ptofa.kernels import argspec
from ptofa.kernels.builtin_mods.softcap import Softcap
from ptofa.kernels.builtin_mods.window import window_mods
from ptofa.kernels.dropout import cut as dropout_cut
from ptofa.kernels.bwd_pipeline import BwdConfig, work_units
from ptofa.launch.varlen import reduce_table, unit_table, varlen_shape
from ptofa.pipeline import UNIT_TABLE, ConfigError, FAConfig, ProblemShape, workspace_bytes
from ptofa.sim.socspec import SocSpec, get_soc


@dataclass(frozen=True)
class Workspace:
    """A region of the plan's workspace buffer, from `offset` bytes; the entry argument's own
    element type says how the kernel addresses it."""

    offset: int = 0


@dataclass(frozen=True, eq=False)
class BuiltKernel:
    """Any emitted kernel: its `.pto` text, a name for builds and messages, and its entry
    (name and arguments, `argspec.EntryArg`); parsed and verified once, on first use."""

    text: str
    name: str
    entry: str
    args: tuple[argspec.EntryArg, ...]
    given_parsed: ParsedModule | None = field(default=None, repr=False)

    @functools.cached_property
    def parsed(self) -> ParsedModule:
        """The parsed and verified module (the one given, else parsed from the text once)."""
        return self.given_parsed or check_text(self.text, f"{self.name}.pto")

    @classmethod
    def of_text(cls, text: str, name: str) -> BuiltKernel:
        """A kernel from its text alone: the entry and its arguments as the text declares them."""
        from ptofa.launch.toolchain import entry_signature

        found = entry_signature(text)
        if found is None:
            raise ValueError(f"kernel {name}: no function with `attributes {{pto.entry}}` in its text")
        return cls(text, name, *found)


@dataclass(frozen=True)
class KernelCall:
    """One kernel launch of a plan: the kernel, its blocks, and the values the plan owns, by host
    parameter name (`argspec.EntryArg.source`): scalars, host tables, `Workspace` regions."""

    kernel: object  # `BuiltKernel`, or `kernel_cache.Kernel` of a forward config
    block_dim: int
    values: Mapping[str, object]
    name: str = "forward"

    @property
    def args(self) -> tuple[argspec.EntryArg, ...]:
        return self.kernel.args

    @property
    def entry(self) -> str:
        return self.kernel.entry


@dataclass(frozen=True)
class LaunchPlan:
    """The kernel calls of one call of ptofa, in order (they run on one stream, each after the
    last), on `soc`, with one workspace of `workspace_bytes`. `outputs` are the tensors the
    kernels write (the NPU launch copies them back to a caller's host tensors); `config`,
    `shape` and `split` (`splitkv.Plan`, for a varlen launch) describe what was planned."""

    calls: tuple[KernelCall, ...]
    soc: SocSpec
    workspace_bytes: int
    outputs: tuple[str, ...] = ("o", "lse")
    config: object = None
    shape: ProblemShape | None = None
    split: object = None
    workspace_rule: str = ""  # what the workspace holds, for a too-small caller's buffer

    @property
    def block_dim(self) -> int:
        """Blocks of the first (main) launch."""
        return self.calls[0].block_dim

    @property
    def num_splits(self) -> int:
        return 1 if self.split is None else self.split.num_splits

    @property
    def table(self) -> torch.Tensor | None:
        return None if self.split is None else self.split.table

    def call(self, name: str) -> KernelCall:
        return next(c for c in self.calls if c.name == name)

    def describe(self) -> str:
        return "unsplit" if self.split is None else self.split.describe()

    def check_workspace(self, have: int) -> None:
        """`ConfigError` naming both sizes when a caller's workspace of `have` bytes is too small."""
        if have < self.workspace_bytes:
            raise ConfigError(f"workspace: {have} bytes, but {self.workspace_rule} needs {self.workspace_bytes} "
                              f"({self.workspace_parts})")

    @property
    def workspace_parts(self) -> str:
        return "slot rings + partial O and LSE" if self.num_splits > 1 else "slot rings"


def key_mask_stride(mask: torch.Tensor | None, s1: int) -> int:
    """Elements between batches of a normalised key mask: S1 for [B, S1], 0 for a shared [S1] (or none)."""
    return 0 if mask is None or mask.dim() == 1 else s1


def alibi_stride(slopes: torch.Tensor | None) -> int:
    """Elements between batches of ALiBi slopes: N for [B, N], 0 for [N] (or none)."""
    return 0 if slopes is None or slopes.dim() == 1 else int(slopes.shape[-1])


def runtime_values(shape: ProblemShape, scale: float, *, bounds: tuple[int, int] | None = None,
                   key_mask: torch.Tensor | None = None, units: torch.Tensor | None = None,
                   max_pages: int = 0, softcap: float = 0.0, alibi: torch.Tensor | None = None,
                   dropout: tuple[float, int, int] | None = None) -> dict[str, object]:
    """The scalar arguments every FlashAttention entry takes its values from (an entry reads the
    ones it declares): sizes, scale, window bounds (`shape.window_bounds()` unless `bounds`, whose
    right bound may be negative: torch's top-left causal), key-mask stride, unit count, pages,
    the softcap mod's (none when off: a softcap kernel then finds no value), the ALiBi slopes' batch stride."""
    left, right = shape.window_bounds() if bounds is None else bounds
    return {"batch": shape.batch, "heads": shape.heads, "kv_heads": shape.kv_heads, "s0": shape.s0, "s1": shape.s1,
            "scale": float(scale), "win_left": left, "win_right": right,
            "key_mask_stride": key_mask_stride(key_mask, shape.s1),
            "num_units": 0 if units is None else int(units.shape[0]), "max_pages": max_pages,
            **(Softcap.values(softcap) if softcap else {}), "alibi_stride": alibi_stride(alibi), **dropout_values(dropout)}


def dropout_values(dropout: tuple[float, int, int] | None) -> dict[str, object]:
    """The dropout kernel's scalars for (p, seed, offset) (`kernels/dropout.py`; None: off)."""
    p, seed, offset = dropout or (0.0, 0, 0)
    return {"drop_seed": seed, "drop_offset": offset, "drop_cut": float(1 - dropout_cut(p)),
            "drop_scale": 1.0 / (1.0 - p)}


def bind(call: KernelCall, tensors: Mapping[str, object]) -> dict[str, object]:
    """The value of each host parameter of `call`'s entry (`argspec.host_params_of`), by name: the
    plan's own, else the caller's tensor (None: no buffer); `ValueError` naming a missing one."""
    values = {**tensors, **call.values}
    bound = {}
    for param in argspec.host_params_of(call.args):
        if param.name not in values:
            raise ValueError(f"entry argument {param.name!r} of {call.entry}: the launch has no value for it")
        bound[param.name] = values[param.name]
    return bound


def check_block_dim(block_dim) -> int:
    if isinstance(block_dim, bool) or not isinstance(block_dim, int) or block_dim < 1:
        raise ValueError(f"block_dim={block_dim!r} must be >= 1")
    return block_dim


def blocks_for(units: int, soc: SocSpec, block_dim: int | None = None) -> int:
    """`block_dim` when given, else one block per work unit up to the chip's cube cores."""
    return check_block_dim(block_dim) if block_dim is not None else max(1, min(units, soc.cube_cores))


# --------------------------------------------------------------------------------------
# Forward, split-KV and reduce
# --------------------------------------------------------------------------------------


def forward_plan(kernel, config: FAConfig, shape: ProblemShape, soc: str | SocSpec, *, scale: float,
                 bounds: tuple[int, int] | None = None, key_mask: torch.Tensor | None = None,
                 block_dim: int | None = None, units: torch.Tensor | None = None, max_pages: int = 0,
                 softcap: float = 0.0, alibi: torch.Tensor | None = None,
                 dropout: tuple[float, int, int] | None = None) -> LaunchPlan:
    """One launch of `kernel`, the forward kernel of `config` (a varlen kernel reads `units`;
    `dropout`: (p, seed, offset) of a dropout kernel)."""
    soc = get_soc(soc)
    count = shape.work_units(config) if units is None else int(units.shape[0])
    blocks = blocks_for(count, soc, block_dim)
    values = {**runtime_values(shape, scale, bounds=bounds, key_mask=key_mask, units=units, max_pages=max_pages,
                               softcap=softcap, alibi=alibi, dropout=dropout),
              "slots": Workspace(0), "units": units, "partials": None}
    call = KernelCall(kernel, blocks, values)
    return LaunchPlan((call,), soc, workspace_bytes(config, shape, blocks), config=config, shape=shape,
                      workspace_rule=f"{blocks} blocks of slot rings")


def reduce_rows(config: FAConfig, shape: ProblemShape) -> tuple[int, int]:
    """(heads, rows per head) the reduce kernel addresses: (N, total_q), or (1, total_q * N) after GQA
    packing, whose O rows and [total_q, N] LSE are one contiguous run of rows."""
    return (1, shape.s0 * shape.heads) if config.gqa_pack else (shape.heads, shape.s0)


def reduce_block_dim(reduce_units: int, cube_cores: int) -> int:
    """Blocks of the reduce launch: one per reduce unit (`varlen.reduce_table` entry), up to the cube cores."""
    return max(1, min(reduce_units, cube_cores))


def split_plan(kernel, reduce, split, shape: ProblemShape, soc: str | SocSpec, *, scale: float, max_pages: int = 0,
               block_dim: int | None = None, softcap: float = 0.0, alibi: torch.Tensor | None = None,
               dropout: tuple[float, int, int] | None = None) -> LaunchPlan:
    """The launch of a varlen split decision (`splitkv.Plan`: config, unit table, split counts): the
    forward kernel `kernel`, and when a unit has more than one split, the reduce kernel `reduce`
    (`kernel_cache.reduce_kernel`; None when the config does not split) over the split units'
    partials, which lie after the slot rings in the workspace."""
    soc = get_soc(soc)
    config, table = split.config, split.table
    most = max(table[:, UNIT_TABLE.index("splits")].tolist(), default=1)
    if most > split.num_splits:
        raise ConfigError(f"split-KV: a unit of the table has {most} splits, more than num_splits={split.num_splits}")
    blocks = block_dim or split.block_dim
    values = {**runtime_values(shape, scale, units=table, max_pages=max_pages, softcap=softcap, alibi=alibi,
                               dropout=dropout),
              "slots": Workspace(0), "units": table}
    slot_bytes = config.gm_slot_bytes_per_block * blocks
    values["partials"] = Workspace(slot_bytes) if config.split_kv else None
    calls = [KernelCall(kernel, blocks, values)]
    reduced = reduce_table(config, table, shape.heads, shape.heads // shape.kv_heads) if config.split_kv else None
    if reduced is not None and reduced.shape[0]:
        heads, rows = reduce_rows(config, shape)
        calls.append(KernelCall(reduce, reduce_block_dim(int(reduced.shape[0]), soc.cube_cores),
                                {"partials": Workspace(slot_bytes), "units": reduced, "heads": heads, "s0": rows,
                                 "num_units": int(reduced.shape[0])}, "reduce"))
    rule = (f"split-KV with num_splits={split.num_splits} on {blocks} blocks" if config.split_kv
            else f"{blocks} blocks of slot rings")
    return LaunchPlan(tuple(calls), soc, workspace_bytes(config, shape, blocks, split.num_splits if config.split_kv
                                                         else 1), config=config, shape=shape, split=split,
                      workspace_rule=rule)


def dense_as_varlen(config: FAConfig, batch: int, s0: int, s1: int, heads: int, kv_heads: int,
                    window: tuple[int, int]):
    """A dense problem as B equal packed sequences: the varlen config, its shape and `table_of(config,
    num_splits)`, its unit table (the one conversion the split dense calls and `--balance` use)."""
    vconfig = dataclasses.replace(config, varlen=True, mods=config.mods + window_mods(window != (-1, -1) and not config.narrowing))
    vshape = varlen_shape([s0] * batch, [s1] * batch, heads, kv_heads, window)
    vshape.check(vconfig)

    def table_of(c: FAConfig, n) -> torch.Tensor:
        return unit_table(c, [s0] * batch, [s1] * batch, heads, window, n)

    return vconfig, vshape, table_of


# --------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------


def backward_plan(kernels: Mapping[str, object], config: BwdConfig, shape: ProblemShape, soc: str | SocSpec, *,
                  scale: float,
                  bounds: tuple[int, int] | None = None, key_mask: torch.Tensor | None = None,
                  block_dim: int | None = None, softcap: float = 0.0, alibi: torch.Tensor | None = None,
                  tables: Mapping[str, torch.Tensor] | None = None,
                  dropout: tuple[float, int, int] | None = None) -> LaunchPlan:
    """`config.kernels` in order (dq, dkdv; or prep, dkdv, post; built: `kernels` by name), each with its
    own region of slot rings in the workspace (the vector-only post has none).

    A `varlen` config runs packed sequences (`shape` of `varlen.varlen_shape`) as one batch of
    S0 = total_q query and S1 = total_k key rows: the dq and dkdv kernels walk `tables`, their unit
    tables by kernel name (`varlen.backward_tables`), and the row-wise prep and post run over all rows."""
    soc = get_soc(soc)
    scalars = runtime_values(shape, scale, bounds=bounds, key_mask=key_mask, softcap=softcap, alibi=alibi,
                             dropout=dropout)
    if config.varlen:
        missing = [kernel for kernel in config.kernels if kernel in ("dq", "dkdv") and kernel not in (tables or {})]
        if missing:
            raise ValueError(f"backward_plan: a varlen config needs the unit tables of {missing} "
                             f"(varlen.backward_tables)")
        scalars["batch"] = 1
    calls, offset = [], 0
    for kernel in config.kernels:
        table = (tables or {}).get(kernel) if config.varlen else None
        if table is not None:
            units = int(table.shape[0])
        else:
            units = work_units(config, kernel, scalars["batch"], shape.heads, shape.kv_heads, shape.s0, shape.s1)
        blocks = blocks_for(units, soc, block_dim)
        values = dict(scalars)
        if table is not None:
            values.update(units=table, num_units=units)
        if config.pipes(kernel):
            values["slots"] = Workspace(offset)
            offset += config.slot_bytes_per_block(kernel) * blocks
        calls.append(KernelCall(kernels[kernel], blocks, values, kernel))
    return LaunchPlan(tuple(calls), soc, offset, outputs=("dq", "dk", "dv", "dsum", "dq_acc"), config=config,
                      shape=shape, workspace_rule="the backward's slot rings")


# --------------------------------------------------------------------------------------
# Any kernel
# --------------------------------------------------------------------------------------


def plan_kernel(kernel: BuiltKernel, values: Mapping[str, object], block_dim: int, soc: str | SocSpec = "910B2",
                workspace: int = 0, outputs: tuple[str, ...] = ()) -> LaunchPlan:
    """One launch of any built kernel with the given argument values (by host parameter name; the
    caller's tensors may also come at launch), on `block_dim` blocks."""
    call = KernelCall(kernel, check_block_dim(block_dim), dict(values), kernel.entry)
    return LaunchPlan((call,), get_soc(soc), workspace, outputs=outputs, workspace_rule=f"{kernel.entry}")


__all__ = ["BuiltKernel", "KernelCall", "LaunchPlan", "Workspace", "backward_plan", "bind", "blocks_for",
           "dense_as_varlen", "forward_plan", "key_mask_stride", "plan_kernel", "reduce_block_dim", "reduce_rows",
           "runtime_values", "split_plan"]
