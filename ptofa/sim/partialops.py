"""Semantics of `ptofa.ir.dialect.partial`.

The partial elementwise ops are simulated where PTO_IR_manual defines them: when both
sources' runtime valid regions equal dst's, d = f(a, b); what the hardware writes where only
one source is valid is implementation-defined, so that case is a `SimError`. The arg forms'
tie-breaking is the ISA's and is refused at compile time. `tsels` reads its mask as `tsel`
does (the packed predicate tcmp / tcmps write).
"""

from __future__ import annotations

import numpy as np

from ptofa.ir import dialect as d
from ptofa.ir.dialect import partial
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.memory import _unpack_predicate
from ptofa.sim.tileops import Fn, Slot, _same_valid
from ptofa.sim.op_costs import on_vector, vector_cycles

_PART = {d.TPartAddOp: np.add, d.TPartMulOp: np.multiply, d.TPartMaxOp: np.maximum, d.TPartMinOp: np.minimum}


@registry.semantics(*partial.PART_BINARY_OPS)
def part_binary(op, slot: Slot) -> Fn:
    ufunc, name = _PART[type(op)], op.name
    a, b, dst = slot(op.src0), slot(op.src1), slot(op.dst)

    def fn(vals):
        x, y, t = vals[a], vals[b], vals[dst]
        if x.v.shape != t.v.shape or y.v.shape != t.v.shape:
            raise SimError(f"{name}: source valid regions {x.v.shape} / {y.v.shape} differ from dst's {t.v.shape}; "
                           "what the hardware writes where only one source is valid is implementation-defined (not simulated)")
        ufunc(x.v, y.v, out=t.v)

    return fn


@registry.semantics(*partial.PART_ARG_OPS)
def part_arg(op, slot: Slot) -> Fn:
    raise SimError(f"{op.name}: the ISA's tie-breaking between equal values is not simulated")


@registry.semantics(d.TSelSOp)
def tsels(op, slot: Slot) -> Fn:
    """dst = src where the mask bit is 1, else the scalar (in dst's dtype)."""
    m, s, sc, dst = slot(op.mask), slot(op.src), slot(op.scalar), slot(op.dst)

    def fn(vals):
        x, t = vals[s], vals[dst]
        _same_valid("tsels src / dst", x, t)
        bits = _unpack_predicate(vals[m], t.vr, t.vc, "tsels")
        np.copyto(t.v, np.where(bits, x.v, np.asarray(vals[sc]).astype(t.v.dtype)))

    return fn


registry.cost(*partial.OPS, queue=on_vector, cycles=vector_cycles())
