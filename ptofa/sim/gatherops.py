"""Semantics and costs of `pto.mgather` / `pto.mscatter` (`ptofa.ir.dialect.gathers`): indexed
GM reads into a vec tile and indexed writes from one, with the out-of-bounds and atomic
modes of docs/PTO_IR_manual.md. An index the hardware leaves undefined (out of range with
mode `undefined`, two elements scattered to one place without an atomic mode) is a
`SimError`, never a silent choice."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import transfer_cycles

_ATOMIC = {"add": np.add, "max": np.maximum, "min": np.minimum}


def _resolve(name: str, idx: np.ndarray, n: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(indices folded into [0, n), mask of the ones to use) under the out-of-bounds `mode`."""
    idx = idx.astype(np.int64).reshape(-1)
    inside = (idx >= 0) & (idx < n)
    if mode == "clamp":
        return np.clip(idx, 0, n - 1), np.ones_like(inside)
    if mode == "wrap":
        return np.mod(idx, n), np.ones_like(inside)
    if mode in ("zero", "skip"):
        return np.where(inside, idx, 0), inside
    if not inside.all():
        bad = int(idx[~inside][0])
        raise SimError(f"{name}: index {bad} is outside the table's [0, {n}); out-of-range indices are undefined on hardware "
                       "(give an out-of-bounds mode)")
    return idx, inside


def _table(name: str, view, row_mode: bool) -> np.ndarray:
    a = view.array()
    if row_mode and a.ndim < 2:
        raise SimError(f"{name}: a row-mode table must have rank >= 2, got shape {a.shape}")
    return a


@registry.semantics(d.MGatherOp)
def mgather(op: d.MGatherOp, slot: Slot) -> Fn:
    if op.dst.type.space != "vec":
        raise SimError(f"{op.name}: the GM -> L1 (loc=mat) gather is not simulated")
    mem, idx, dst = slot(op.mem), slot(op.idx), slot(op.dst)
    row_mode = op.mode("coalesce") == "row"
    oob = op.mode("gatherOob", "undefined")
    name = op.name

    def fn(vals):
        a, t = _table(name, vals[mem], row_mode), vals[dst]
        ix = vals[idx].v
        if row_mode:
            rows = a.reshape(-1, a.shape[-1]) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1, a.shape[-1])
            if rows.shape[1] < t.vc:
                raise SimError(f"{name}: table rows have {rows.shape[1]} elements, dst rows need {t.vc}")
            sel, use = _resolve(name, ix, rows.shape[0], oob)
            if sel.size != t.vr:
                raise SimError(f"shape agreement: {name}: {sel.size} row indices for {t.vr} dst rows")
            got = rows[sel, : t.vc]
            got[~use] = 0
        else:
            flat = a.reshape(-1)
            sel, use = _resolve(name, ix, flat.size, oob)
            if sel.size != t.v.size:
                raise SimError(f"shape agreement: {name}: {sel.size} indices for the {t.vr}x{t.vc} dst")
            got = flat[sel].reshape(t.v.shape)
            got.reshape(-1)[~use] = 0
        t.v[...] = got

    return fn


@registry.semantics(d.MScatterOp)
def mscatter(op: d.MScatterOp, slot: Slot) -> Fn:
    src, idx, mem = slot(op.src), slot(op.idx), slot(op.mem)
    coalesce = op.mode("coalesce")
    row_mode = coalesce == "row" or (coalesce is None and op.idx.type.valid[1] in (0, 1) and op.src.type.valid[1] != 1)
    atomic = _ATOMIC.get(op.mode("scatterAtomicOp", "none"))
    oob = op.mode("scatterOob", "undefined")
    name = op.name

    def fn(vals):
        s, a = vals[src], _table(name, vals[mem], row_mode)
        ix = vals[idx].v
        lead = a.shape[:-1] if row_mode else a.shape
        n = int(np.prod(lead))
        sel, use = _resolve(name, ix, n, oob)
        data = s.v if row_mode else s.v.reshape(-1)
        if sel.size != data.shape[0]:
            raise SimError(f"shape agreement: {name}: {sel.size} indices for {data.shape[0]} {'rows' if row_mode else 'elements'} of src")
        sel, data = sel[use], data[use]
        if atomic is None and np.unique(sel).size != sel.size:
            raise SimError(f"{name}: two {'rows' if row_mode else 'elements'} scatter to one place without an atomic mode; "
                           "their order is undefined on hardware")
        where = np.unravel_index(sel, lead)
        if row_mode:
            where = (*where, slice(0, s.vc))
        if atomic is None:
            a[where] = data
        else:
            atomic.at(a, where, data.astype(a.dtype))

    return fn


def _indexed_cycles(op, queue: str, soc) -> float:
    """A DMA of the moved elements as 4-byte words (the trace records elements): a lower bound,
    with no public figure for the per-element gather overhead."""
    return transfer_cycles(replace(op, nbytes=op.nbytes or 4 * op.elems), queue, soc)


registry.cost(d.MGatherOp, queue="MTE2", cycles=_indexed_cycles)
registry.cost(d.MScatterOp, queue="MTE3", cycles=_indexed_cycles)
