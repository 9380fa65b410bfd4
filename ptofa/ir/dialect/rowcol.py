"""Row and column tile ops: row reductions (trowmax / trowsum / trowmin) to a per-row
[R,1] vector, row broadcasts of a per-row vector (trowexpand*) and column broadcasts of
a [1,C] row (tcolexpand*)."""

from __future__ import annotations

from typing import ClassVar

from xdsl.ir import Operation
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def

from xdsl.utils.exceptions import VerifyException

from ptofa.ir.dialect.base import _fail, _fail_build, _InsOutsOp, _tile
from ptofa.ir.dialect.types import DYN, DivPrecisionAttr, TileBufType, _dims_str, elem_bytes
from ptofa.ir.dialect.vector import _check_vec, _check_vec_row_major, _PrecisionAttrOp, _same_extent, _valid_compatible
from ptofa.ir.target import rowexpand_tmp_min_bytes


def _check_col_vector(op: Operation, col: TileBufType, rows: int, role: str, nd_valid_cols: int | None = None) -> None:
    """A per-row vector: DN [R,1], or ND with `nd_valid_cols` valid columns (default 32 bytes' worth)."""
    if nd_valid_cols is None:
        nd_valid_cols = 32 // elem_bytes(col.dtype)
    if col.space != "vec":
        _fail(op, "memory space", f"{role} must be loc=vec, got loc={col.space}")
    if not col.is_row_major:
        if col.valid[1] not in (1, DYN):
            _fail(op, "shape agreement", f"{role} DN column vector needs 1 valid column, got {col.valid[1]}")
    elif col.valid[1] not in (nd_valid_cols, DYN):
        _fail(op, "shape agreement", f"{role} row_major per-row vector needs {nd_valid_cols} valid columns, got {col.valid[1]}")
    if col.valid[0] != DYN and rows != DYN and col.valid[0] != rows:
        _fail(op, "shape agreement", f"{role} valid rows {col.valid[0]} != {rows} rows of the tile")


class _RowReduceOp(_InsOutsOp):
    """`ins(%src[, %tmp] : S[, T]) outs(%dst : D)`: per-row reduction to [R,1]."""

    src = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, d])
        if not s.is_row_major or s.is_boxed:
            _fail(self, "layout", f"src must be ND (row_major, none_box), got {s.blayout.data}, {s.slayout.data}")
        if s.dtype != d.dtype:
            _fail(self, "dtype", f"src {s.elem} != dst {d.elem}")
        if 0 in s.valid:
            _fail(self, "shape agreement", f"src valid dims must be non-zero, got {_dims_str(s.valid)}")
        _check_col_vector(self, d, s.valid[0], "dst", nd_valid_cols=1)  # ND dst: valid cols = 1 (pto-ir.md 9)
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            if t.space != "vec" or t.dtype != s.dtype:
                _fail(self, "operand type", f"tmp must be a loc=vec {s.elem} tile, got {t.describe()}")
            if s.elem in ("f16", "f32") and t.nbytes < s.nbytes:
                _fail(self, "tmp size", f"tmp of {t.nbytes} bytes is smaller than the src ({s.nbytes} bytes)")


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


def _rowexpand_tmp_min_bytes(valid_rows: int) -> int:
    """ptoas's minimum tmp of an A2/A3 trowexpand (PTOAS getTRowExpandTmpMinBytes): one 32-byte
    block per valid row, 256 bytes per 8 rows, 7680 from 256 rows on, 8 KiB for a dynamic count."""
    if valid_rows == DYN:
        return 8192
    return rowexpand_tmp_min_bytes(valid_rows) if valid_rows < 256 else 30 * 256


class _RowExpandOp(_InsOutsOp):
    """`ins(%a, %col[, %tmp] : T, C[, Tt]) outs(%d : T)`: per-row broadcast d[i,j] = f(a[i,j], col[i,0]).

    ptoas's A2/A3 verifiers differ by op (PTOAS PTO.cpp, TRowExpand*Op::verify), and `RULES`
    says which: "binary" (sub, mul, div) checks element types and a row-major dst only;
    "add" also src0 = dst valid shape, a row-major src0 and the per-row operand's shape;
    "reduce" (max, min, expdif) that one of src0 / src1 matches dst and the other is a per-row
    vector (DN [R,1], or ND with 32 bytes of valid columns). With a tmp (not expdif) the
    per-row operand is a DN column (mode 1) and the tmp holds at least a 32-byte block per
    valid row.
    """

    N_INS: ClassVar[int] = 2
    src = operand_def(TileBufType)
    col = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    HAS_TMP: ClassVar[bool] = True
    RULES: ClassVar[str] = "binary"
    DTYPES: ClassVar[tuple[str, ...]] = ("i16", "i32", "f16", "f32")
    TMP_CONTRACT: ClassVar[bool] = True

    def verify_(self) -> None:
        s, c, d = _tile(self, self.src, "src0"), _tile(self, self.col, "src1"), _tile(self, self.dst, "dst")
        _check_vec(self, [s, c, d])
        if not (s.dtype == c.dtype == d.dtype) or s.elem not in self.DTYPES:
            _fail(self, "dtype", f"src0/src1/dst must share one of {'/'.join(self.DTYPES)}, got {s.elem}, {c.elem}, {d.elem}")
        if not d.is_row_major:
            _fail(self, "layout", f"dst must be blayout=row_major, got {d.blayout.data}")
        if self.RULES == "add":
            if not s.is_row_major:
                _fail(self, "layout", f"src0 must be blayout=row_major, got {s.blayout.data}")
            if not _valid_compatible(s.valid, d.valid):
                _fail(self, "shape agreement", f"src0 valid {_dims_str(s.valid)} != dst valid {_dims_str(d.valid)}")
            _check_col_vector(self, c, d.valid[0], "src1")
        elif self.RULES == "reduce":
            self._verify_full_and_broadcast(s, c, d)
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            _check_vec(self, [t])
            if t.dtype != d.dtype:
                _fail(self, "dtype", f"tmp and dst must have the same element type, got tmp {t.elem}, dst {d.elem}")
            if self.TMP_CONTRACT:
                expanded = c if _valid_compatible(s.valid, d.valid) else s
                if expanded.is_row_major or expanded.valid[1] not in (1, DYN):
                    _fail(self, "layout", "with a tmp, the per-row operand must be a DN [R,1] column (mode 1)")
                need = _rowexpand_tmp_min_bytes(d.valid[0])
                if t.nbytes < need:
                    _fail(self, "scratch", f"tmp holds {t.nbytes} bytes; the column broadcast of {d.valid[0]} valid rows "
                                           f"writes {need} (one 32-byte block per row, 256 bytes per 8 rows)")

    def _verify_full_and_broadcast(self, s: TileBufType, c: TileBufType, d: TileBufType) -> None:
        if DYN not in d.valid and 0 in d.valid:
            if d.valid == (0, 0):
                return
            _fail(self, "shape agreement", f"dst valid dims must be non-zero, got {_dims_str(d.valid)}")
        for full, bcast, names in ((s, c, ("src0", "src1")), (c, s, ("src1", "src0"))):
            if not _valid_compatible(full.valid, d.valid) or not full.is_row_major:
                continue
            try:
                _check_col_vector(self, bcast, d.valid[0], names[1])
                if self.tmp is not None and self.TMP_CONTRACT and bcast.is_row_major:
                    _fail(self, "layout", f"{names[1]} must be a DN column when a tmp is given")
            except VerifyException:
                if full is c or not _valid_compatible(c.valid, d.valid):
                    raise
                continue
            return
        _fail(self, "shape agreement", f"one of src0 / src1 must match dst valid {_dims_str(d.valid)} and the other be a "
                                       f"per-row vector, got {_dims_str(s.valid)} and {_dims_str(c.valid)}")


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


class _ColExpandOp(_PrecisionAttrOp):
    """`ins(%a, %row : T, Tr) outs(%d : T)`: per-column broadcast d[r,c] = f(a[r,c], row[0,c])."""

    N_INS: ClassVar[int] = 2
    src = operand_def(TileBufType)
    row = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    DTYPES: ClassVar[tuple[str, ...]] = ("i16", "i32", "f16", "f32")

    def verify_(self) -> None:
        s, r, d = _tile(self, self.src, "src0"), _tile(self, self.row, "src1"), _tile(self, self.dst, "dst")
        for t, role in ((s, "src0"), (r, "src1"), (d, "dst")):
            _check_vec_row_major(self, t, role)
        if not (s.dtype == r.dtype == d.dtype) or s.elem not in self.DTYPES:
            _fail(self, "dtype", f"expects A2/A3 {self.name[4:]} element type to be {'/'.join(self.DTYPES)} (one dtype), got {s.elem}, {r.elem}, {d.elem}")
        if s.shape != d.shape:
            _fail(self, "shape agreement", f"expects src0/dst to have same shape, got {s.shape[0]}x{s.shape[1]} and {d.shape[0]}x{d.shape[1]}")
        if not _valid_compatible(s.valid, d.valid):
            _fail(self, "shape agreement", f"src0 valid {_dims_str(s.valid)} != dst valid {_dims_str(d.valid)}")
        if not _same_extent(r.valid[1], d.valid[1]):
            _fail(self, "shape agreement", f"expects src1 valid_shape[1] to equal dst valid_shape[1], got {r.valid[1]} and {d.valid[1]}")


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
