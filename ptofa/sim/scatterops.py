"""Semantics of `pto.tscatter` (`ptofa.ir.dialect.scatter`): index mode writes
dst[i, idx[i, j]] = src[i, j] over src's valid region (an index outside dst's columns is a
`SimError`; later columns win on a repeated index, as a sequential loop writes); the
mask-pattern mode is refused, as where in each group of four the hardware places the element
is not stated in PTO_IR_manual."""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import on_vector, vector_cycles


@registry.semantics(d.TScatterOp)
def tscatter(op, slot: Slot) -> Fn:
    if op.indexes is None:
        raise SimError(f"{op.name}: the mask-pattern mode is not simulated (element placement within a group is the ISA's)")
    src, idx, dst, name = slot(op.src), slot(op.indexes), slot(op.dst), op.name

    def fn(vals):
        s, i, t = vals[src], vals[idx], vals[dst]
        rows, cols = s.v.shape
        index = np.asarray(i.v[:rows, :cols], dtype=np.int64)
        if index.shape != (rows, cols):
            raise SimError(f"{name}: indexes valid {i.v.shape} do not cover src's {s.v.shape}")
        if rows > t.v.shape[0] or (index.size and (index.min() < 0 or index.max() >= t.v.shape[1])):
            raise SimError(f"{name}: an index lies outside dst's {t.v.shape[0]}x{t.v.shape[1]} valid region")
        for r in range(rows):
            t.v[r, index[r]] = s.v[r]

    return fn


registry.cost(d.TScatterOp, queue=on_vector, cycles=vector_cycles())
