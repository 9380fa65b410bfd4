"""Cube (AIC) ops: tmatmul and tmatmul.acc."""

from __future__ import annotations

from typing import ClassVar

from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _check_matmul, _fail, _InsOutsOp, _tile
from ptofa.ir.dialect.types import AccPhaseAttr, TileBufType


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
