"""Where a backward unit's rows are (`ptofa.kernels.fa_bwd`): the batch of a uniform launch, or the
packed sequence of a varlen one (`BwdConfig.varlen`), whose units the dq and dkdv kernels read from the
host's unit table (`ptofa.launch.varlen.backward_tables`, `pipeline.UNIT_TABLE`'s fields).

`c` is the kernel's `_Common` (args, block_num, heads, s0, s1, window, config) or, for `stat_view`, anything
with `args`, `heads` and `s0`; `u` a dq or dkdv unit (`b`, and `q_start` / `k_start` of packed
sequences, else None).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from xdsl.ir import SSAValue

from ptofa.api import pto, scalar
from ptofa.pipeline import UNIT_FIELDS, UNIT_TABLE

if TYPE_CHECKING:
    from ptofa.kernels.builtin_mods.window import WindowBounds


def stat_view(c, name: str, h: SSAValue, b: SSAValue | None, q0: SSAValue, n: SSAValue):
    """[1, n] window of LSE or D ([B, N, S0] f32) at (b, h, q0); b None: of [N, S0] at (h, q0) (packed
    sequences, q0 a packed row)."""
    bh = h if b is None else scalar.add(scalar.mul(b, c.heads), h)
    off = scalar.add(scalar.mul(bh, c.s0), q0)
    view = pto.as_tensor(pto.add_ptr(c.args[name], off), [1, n], [n, 1], name=f"{name}_view")
    return pto.slice_view(view, [0, 0], [1, n], name=f"{name}_part")

# The fields of a `pipeline.UNIT_TABLE` entry the backward reads. In the dkdv kernel's table `head`
# is the KV head and `q_block` the unit's KV block (`ptofa.launch.varlen.backward_tables`).
_TABLE_FIELDS = ("q_start", "q_len", "k_start", "k_len", "head", "q_block")


def table_unit(c, rank: SSAValue) -> dict[str, SSAValue]:
    """The table entry of rank `rank` (`pto.load_scalar`, as the forward varlen kernel reads it): the
    table is longest first and the kernels hand its ranks out in the forward's snake over the
    persistent loop's waves (`common.snake_rank` of the loop index; `ptofa.kernels.units.schedule`
    on the host)."""
    rec = scalar.mul(rank, UNIT_FIELDS, name="unit_rec")
    # seq: the row of [B, N] ALiBi slopes, and dropout's sequence index b (`kernels/dropout.py`)
    names = _TABLE_FIELDS + (("seq",) if any(m.indexed for m in c.config.score_mods) or c.config.dropout else ())
    return {name: scalar.index_cast(pto.load_scalar(c.args["units"], scalar.add(rec, UNIT_TABLE.index(name))),
                                    name=name) for name in names}


def table_units(c) -> SSAValue:
    return scalar.index_cast(c.args["num_units"], name="units")


def sequence_window(c, f: dict[str, SSAValue]) -> WindowBounds | None:
    """The window of a unit's sequence: the launch's bounds on its own diagonal k_len - q_len."""
    if c.window is None:
        return None
    return dataclasses.replace(c.window, diag=scalar.sub(f["k_len"], f["q_len"], name="diag"))


def packed_row(c, u, q: SSAValue | None = None) -> SSAValue:
    """Row (of the B * S0 query rows) of query q of the unit's sequence, its first row without q:
    b S0 + q, or q_start + q for packed sequences."""
    if u.q_start is None:
        first = scalar.mul(u.b, c.s0)
        return first if q is None else scalar.add(first, q)
    return u.q_start if q is None else scalar.add(u.q_start, q)


def packed_key(c, u, k: SSAValue | None = None) -> SSAValue:
    """Row (of the B * S1 key rows) of key k of the unit's sequence (`packed_row` for keys)."""
    if u.k_start is None:
        first = scalar.mul(u.b, c.s1)
        return first if k is None else scalar.add(first, k)
    return u.k_start if k is None else scalar.add(u.k_start, k)


def stat(c, u, name: str, h: SSAValue, q: SSAValue, n: SSAValue):
    """`stat_view` of LSE or D at query q of the unit's sequence."""
    if u.q_start is None:
        return stat_view(c, name, h, u.b, q, n)
    return stat_view(c, name, h, None, scalar.add(u.q_start, q), n)


__all__ = ["packed_key", "packed_row", "sequence_window", "stat", "stat_view", "table_unit", "table_units"]
