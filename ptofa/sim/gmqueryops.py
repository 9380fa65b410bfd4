"""Semantics of `ptofa.ir.dialect.gmquery`: the queries read the runtime view's shape or strides
and the tile's valid shape; `tprefetch` is refused (what a prefetched tile holds before a tload is the ISA's
cache behaviour, not data a program may rely on)."""

from __future__ import annotations

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.tileops import Fn, Slot
from ptofa.sim.op_costs import scalar_cycles, transfer_cycles


@registry.semantics(d.GetTensorViewDimOp, d.GetTensorViewStrideOp)
def view_query(op, slot: Slot) -> Fn:
    view, index, res, name = slot(op.tensor_view), slot(op.dim_index), slot(op.result), op.name
    field = "shape" if isinstance(op, d.GetTensorViewDimOp) else "strides"

    def fn(vals):
        values = getattr(vals[view], field)
        i = vals[index]
        if not 0 <= i < len(values):
            raise SimError(f"{name}: dimension {i} is outside the rank-{len(values)} view")
        vals[res] = values[i]

    return fn


@registry.semantics(d.GetValidShapeOp)
def get_validshape(op, slot: Slot) -> Fn:
    src, rows, cols = slot(op.source), slot(op.valid_row), slot(op.valid_col)

    def fn(vals):
        t = vals[src]
        vals[rows], vals[cols] = t.vr, t.vc

    return fn


@registry.semantics(d.TPrefetchOp)
def tprefetch(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: prefetch is a cache hint whose tile contents are not simulated (use pto.tload)")


@registry.semantics(d.MakePrefetchAsyncContextOp, d.GetPrefetchAsyncSessionOp, d.TPrefetchAsyncOp)
def prefetch_async(op, slot: Slot) -> Fn:
    """An asynchronous L2 prefetch changes no data a program reads: the context, session and
    event are tokens (`pto.comm.wait_async_event` on a prefetch event returns true at once)."""
    res = slot(op.results[0])
    token = ("prefetch", op.name)

    def fn(vals):
        vals[res] = token

    return fn


registry.cost(*d.gmquery.VIEW_QUERY_OPS, *d.gmquery.PREFETCH_ASYNC_OPS, queue="S", cycles=scalar_cycles)
registry.cost(d.TPrefetchOp, queue="MTE2", cycles=transfer_cycles)
