"""Cube (AIC) ops: tmatmul and tmatmul.acc."""

from __future__ import annotations

from typing import ClassVar

from xdsl.ir import Attribute, Operation
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _fail, _InsOutsOp, _tile
from ptofa.ir.dialect.types import AccPhaseAttr, TileBufType


_MATMUL_DTYPES = {("f32", "f16", "f16"), ("f32", "bf16", "bf16"), ("f32", "f32", "f32"), ("i32", "i8", "i8")}


def _check_matmul(op: Operation, a: TileBufType, b: TileBufType, c: TileBufType) -> None:
    for t, loc, role in ((a, "left", "lhs"), (b, "right", "rhs"), (c, "acc", "dst")):
        if t.space != loc:
            _fail(op, "memory space", f"{role} must be loc={loc}, got loc={t.space}")
    if (c.elem, a.elem, b.elem) not in _MATMUL_DTYPES:
        _fail(op, "dtype triple", f"(dst {c.elem}; lhs {a.elem}, rhs {b.elem}) is not one of {sorted(_MATMUL_DTYPES)}")
    (m, k), (k2, n), (m2, n2) = a.shape, b.shape, c.shape
    if k != k2 or m != m2 or n != n2:
        _fail(op, "shape agreement", f"lhs {m}x{k} @ rhs {k2}x{n} -> dst {m2}x{n2}: need lhs[M,K], rhs[K,N], dst[M,N]")
    for name, v in (("m", m), ("k", k), ("n", n)):
        if v > 4095:
            _fail(op, "matmul dims", f"{name}={v} must be <= 4095")


class _AccPhaseOp(_InsOutsOp):
    """A matmul with ptoas's optional `{accPhase = #pto<acc_phase partial|final>}` after `outs(...)`."""

    accPhase = opt_prop_def(AccPhaseAttr)  # noqa: N815 (ptoas's attribute name)

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        phase = attrs.pop("accPhase", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if phase is None:
            return {}
        if not isinstance(phase, AccPhaseAttr):
            parser.raise_error(f"{cls.name}: accPhase must be #pto<acc_phase ...>, got {phase}", start)
        return {"accPhase": phase}

    def _print_attrs(self, printer: Printer) -> None:
        if self.accPhase is not None:
            printer.print_string(f" {{accPhase = {self.accPhase.text}}}")


@irdl_op_definition
class TMatmulOp(_AccPhaseOp):
    """`pto.tmatmul ins(%a, %b : L, R) outs(%c : C)`: C = A @ B with f32 accumulation."""

    name = "pto.tmatmul"
    N_INS: ClassVar[int] = 2
    lhs = operand_def(TileBufType)
    rhs = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        _check_matmul(self, _tile(self, self.lhs, "lhs"), _tile(self, self.rhs, "rhs"), _tile(self, self.dst, "dst"))


@irdl_op_definition
class TMatmulAccOp(_AccPhaseOp):
    """`pto.tmatmul.acc ins(%c, %a, %b : C, L, R) outs(%c : C)`: C_out = C_in + A @ B."""

    name = "pto.tmatmul.acc"
    N_INS: ClassVar[int] = 3
    acc_in = operand_def(TileBufType)
    lhs = operand_def(TileBufType)
    rhs = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        c = _tile(self, self.dst, "dst")
        _check_matmul(self, _tile(self, self.lhs, "lhs"), _tile(self, self.rhs, "rhs"), c)
        if self.acc_in.type != c:
            _fail(self, "type agreement", f"acc_in {self.acc_in.type} and dst {c} must have the same tile type")


OPS = CUBE_ONLY_OPS = (TMatmulOp, TMatmulAccOp)
