"""Bitwise, shift, power and remainder tile ops (A2/A3 vector unit), in the shapes of the
`vector` family: `tand` / `tor` / `txor` / `tshl` / `tshr` / `tnot` on integer tiles, their
scalar forms `tands` / `tors` / `txors` / `tshls` / `tshrs`, and `tpow` / `tpows`,
`trem` / `trems`, `tfmod` / `tfmods`. Some take an optional scratch tile, as ptoas writes
them (`ins(%a, %b, %tmp : A, B, T)`)."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def

from ptofa.ir.dialect.base import _BinaryOp, _check_vec, _fail, _PrecisionAttrOp, _ScalarOp, _tile, _UnaryOp
from ptofa.ir.dialect.types import FmodPrecisionAttr, PowPrecisionAttr, RemPrecisionAttr, TileBufType

_INTS = ("i16", "i32")
_FLOATS = ("f16", "f32")


def _check_elems(op, allowed: tuple[str, ...]) -> None:
    t = _tile(op, op.dst, "dst")
    if t.elem not in allowed:
        _fail(op, "dtype", f"{op.name} takes {'/'.join(allowed)} tiles, got {t.elem}")
    tmp = getattr(op, "tmp", None)
    if tmp is not None:
        _check_vec(op, [_tile(op, tmp, "tmp")])


class _IntBinaryOp(_BinaryOp):
    ALLOWED: ClassVar[tuple[str, ...]] = _INTS

    def verify_(self) -> None:
        super().verify_()
        _check_elems(self, self.ALLOWED)


class _TmpBinaryOp(_IntBinaryOp):
    lhs = operand_def(TileBufType)
    rhs = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True


class _IntScalarOp(_ScalarOp):
    ALLOWED: ClassVar[tuple[str, ...]] = _INTS

    def verify_(self) -> None:
        super().verify_()
        _check_elems(self, self.ALLOWED)


class _TmpScalarOp(_IntScalarOp):
    first = operand_def()
    second = operand_def()
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True


@irdl_op_definition
class TAndOp(_IntBinaryOp):
    """d = a & b"""

    name = "pto.tand"


@irdl_op_definition
class TOrOp(_IntBinaryOp):
    """d = a | b"""

    name = "pto.tor"


@irdl_op_definition
class TXorOp(_TmpBinaryOp):
    """d = a ^ b"""

    name = "pto.txor"


@irdl_op_definition
class TShlOp(_IntBinaryOp):
    """d = a << b"""

    name = "pto.tshl"


@irdl_op_definition
class TShrOp(_IntBinaryOp):
    """d = a >> b (arithmetic on signed types)"""

    name = "pto.tshr"


@irdl_op_definition
class TNotOp(_UnaryOp):
    """d = ~a"""

    name = "pto.tnot"

    def verify_(self) -> None:
        super().verify_()
        _check_elems(self, _INTS)


@irdl_op_definition
class TAndsOp(_IntScalarOp):
    """d = a & s"""

    name = "pto.tands"


@irdl_op_definition
class TOrsOp(_IntScalarOp):
    """d = a | s"""

    name = "pto.tors"


@irdl_op_definition
class TXorsOp(_TmpScalarOp):
    """d = a ^ s"""

    name = "pto.txors"


@irdl_op_definition
class TShlsOp(_IntScalarOp):
    """d = a << s"""

    name = "pto.tshls"


@irdl_op_definition
class TShrsOp(_IntScalarOp):
    """d = a >> s"""

    name = "pto.tshrs"


def _check_default_pow_precision(op) -> None:
    if op.precisionType is not None and op.precisionType.value.data == "high_precision":
        _fail(op, "precision", "A2/A3 does not support precisionType=high_precision (PTOAS TPowOp::verify)")


@irdl_op_definition
class TPowOp(_TmpBinaryOp, _PrecisionAttrOp):
    """d = a ** b"""

    name = "pto.tpow"
    ALLOWED: ClassVar[tuple[str, ...]] = _FLOATS + _INTS
    precisionType = opt_prop_def(PowPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = PowPrecisionAttr

    def verify_(self) -> None:
        super().verify_()
        _check_default_pow_precision(self)


@irdl_op_definition
class TPowsOp(_TmpScalarOp, _PrecisionAttrOp):
    """d = a ** s"""

    name = "pto.tpows"
    ALLOWED: ClassVar[tuple[str, ...]] = _FLOATS + _INTS
    precisionType = opt_prop_def(PowPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = PowPrecisionAttr

    def verify_(self) -> None:
        super().verify_()
        _check_default_pow_precision(self)


@irdl_op_definition
class TRemOp(_TmpBinaryOp, _PrecisionAttrOp):
    """d = a - floor(a / b) * b (the sign of b)"""

    name = "pto.trem"
    ALLOWED: ClassVar[tuple[str, ...]] = _FLOATS + _INTS
    precisionType = opt_prop_def(RemPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = RemPrecisionAttr


@irdl_op_definition
class TRemsOp(_TmpScalarOp):
    """d = a - floor(a / s) * s"""

    name = "pto.trems"
    ALLOWED: ClassVar[tuple[str, ...]] = _FLOATS + _INTS


@irdl_op_definition
class TFModOp(_IntBinaryOp, _PrecisionAttrOp):
    """d = fmod(a, b) (the sign of a)"""

    name = "pto.tfmod"
    ALLOWED: ClassVar[tuple[str, ...]] = _FLOATS + _INTS
    precisionType = opt_prop_def(FmodPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = FmodPrecisionAttr


@irdl_op_definition
class TFModsOp(_IntScalarOp):
    """d = fmod(a, s)"""

    name = "pto.tfmods"
    ALLOWED: ClassVar[tuple[str, ...]] = _FLOATS + _INTS


BINARY_OPS = (TAndOp, TOrOp, TXorOp, TShlOp, TShrOp, TPowOp, TRemOp, TFModOp)
SCALAR_OPS = (TAndsOp, TOrsOp, TXorsOp, TShlsOp, TShrsOp, TPowsOp, TRemsOp, TFModsOp)
OPS = (*BINARY_OPS, *SCALAR_OPS, TNotOp)
