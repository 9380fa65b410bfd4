"""Row and column tile ops: row reductions (trowmax / trowsum / trowmin) to a per-row
[R,1] vector, row broadcasts of a per-row vector (trowexpand*) and column broadcasts of
a [1,C] row (tcolexpand*)."""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition, opt_prop_def

from ptofa.ir.dialect.base import _ColExpandOp, _fail, _fail_build, _PrecisionAttrOp, _rowexpand_tmp_min_bytes, _RowExpandOp, _RowReduceOp
from ptofa.ir.dialect.types import DivPrecisionAttr


@irdl_op_definition
class TRowMaxOp(_RowReduceOp):
    """dst[i,0] = max_j src[i,j]"""

    name = "pto.trowmax"


@irdl_op_definition
class TRowSumOp(_RowReduceOp):
    """dst[i,0] = sum_j src[i,j]"""

    name = "pto.trowsum"


@irdl_op_definition
class TRowMinOp(_RowReduceOp):
    """dst[i,0] = min_j src[i,j]"""

    name = "pto.trowmin"


@irdl_op_definition
class TRowExpandSubOp(_RowExpandOp):
    """d = a - col"""

    name = "pto.trowexpandsub"


@irdl_op_definition
class TRowExpandMulOp(_RowExpandOp):
    """d = a * col"""

    name = "pto.trowexpandmul"


@irdl_op_definition
class TRowExpandDivOp(_RowExpandOp, _PrecisionAttrOp):
    """d = a / col (optional `{precisionType = #pto<div_precision high_precision>}`, which needs a tmp)"""

    name = "pto.trowexpanddiv"
    precisionType = opt_prop_def(DivPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = DivPrecisionAttr
    DTYPES: ClassVar[tuple[str, ...]] = ("f16", "f32")

    def verify_(self) -> None:
        super().verify_()
        if self.precisionType is not None and self.precisionType.value.data == "high_precision" and self.tmp is None:
            _fail(self, "tmp", "precisionType = high_precision needs a tmp tile (PTOAS TRowExpandDivOp::verify)")


@irdl_op_definition
class TRowExpandAddOp(_RowExpandOp):
    """d = a + col"""

    name = "pto.trowexpandadd"
    RULES: ClassVar[str] = "add"


@irdl_op_definition
class TRowExpandMaxOp(_RowExpandOp):
    """d = max(a, col)"""

    name = "pto.trowexpandmax"
    RULES: ClassVar[str] = "reduce"


@irdl_op_definition
class TRowExpandMinOp(_RowExpandOp):
    """d = min(a, col)"""

    name = "pto.trowexpandmin"
    RULES: ClassVar[str] = "reduce"


@irdl_op_definition
class TRowExpandExpdifOp(_RowExpandOp):
    """d = exp(a - col); a tmp is required (`ptofa.ir.target.EXPDIF_TMP_BYTES`)."""

    name = "pto.trowexpandexpdif"
    RULES: ClassVar[str] = "reduce"
    DTYPES: ClassVar[tuple[str, ...]] = ("f16", "f32")
    TMP_CONTRACT: ClassVar[bool] = False

    def verify_(self) -> None:
        super().verify_()
        if self.tmp is None:
            _fail_build(self, "scratch", "trowexpandexpdif needs a tmp tile: without one, pto-isa's A2/A3 "
                                         "TROWEXPANDEXPDIF broadcasts the column through a fixed 8 KiB of UB at 184 KiB "
                                         "(TMP_UB_OFFSET) that ptoas neither allocates nor reserves, so it can overwrite "
                                         "planned tiles; pass ins(%src, %col, %tmp : ...)",
                        consequence="on the NPU it can overwrite other tiles")
        need = _rowexpand_tmp_min_bytes(self.dst.type.valid[0])
        if self.tmp.type.nbytes < need:
            _fail_build(self, "scratch", f"tmp holds {self.tmp.type.nbytes} bytes; the column broadcast of {self.dst.type.valid[0]} "
                                         f"valid rows writes {need} (one 32-byte block per row, 256 bytes per 8 rows)",
                        consequence="on the NPU the broadcast overruns the tmp")


@irdl_op_definition
class TColExpandAddOp(_ColExpandOp):
    """d = a + row"""

    name = "pto.tcolexpandadd"


@irdl_op_definition
class TColExpandSubOp(_ColExpandOp):
    """d = a - row"""

    name = "pto.tcolexpandsub"


@irdl_op_definition
class TColExpandMulOp(_ColExpandOp):
    """d = a * row"""

    name = "pto.tcolexpandmul"


@irdl_op_definition
class TColExpandDivOp(_ColExpandOp):
    """d = a / row (f16/f32 on A2/A3; optional `{precisionType = #pto<div_precision ...>}`)"""

    name = "pto.tcolexpanddiv"
    DTYPES: ClassVar[tuple[str, ...]] = ("f16", "f32")
    precisionType = opt_prop_def(DivPrecisionAttr)  # noqa: N815
    PRECISION: ClassVar[type | None] = DivPrecisionAttr


@irdl_op_definition
class TColExpandMaxOp(_ColExpandOp):
    """d = max(a, row)"""

    name = "pto.tcolexpandmax"


@irdl_op_definition
class TColExpandMinOp(_ColExpandOp):
    """d = min(a, row)"""

    name = "pto.tcolexpandmin"


OPS = (
    TRowMaxOp,
    TRowSumOp,
    TRowMinOp,
    TRowExpandSubOp,
    TRowExpandMulOp,
    TRowExpandDivOp,
    TRowExpandAddOp,
    TRowExpandMaxOp,
    TRowExpandMinOp,
    TRowExpandExpdifOp,
    TColExpandAddOp,
    TColExpandSubOp,
    TColExpandMulOp,
    TColExpandDivOp,
    TColExpandMaxOp,
    TColExpandMinOp,
)
