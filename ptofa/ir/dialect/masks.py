"""Masks, iota and padding (vector tile ops): ttri, tcmp / tcmps (an i8 packed-predicate
dst), tsel, tci and tfillpad; and `hidden_scratch`, the UB scratch tile ptoas materializes for
an op written without a tmp operand (a row reduction, a row expand, tsel or tci). The sizes are
ptoas's, in `ptofa.ir.target` (`HIDDEN_TSEL_TMP`, `HIDDEN_TCI_TMP`, row expands'). (`trowexpandexpdif` gets none from ptoas; the verifier requires its tmp,
`ptofa.ir.target.EXPDIF_TMP_BYTES`.)"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, IndexType, IntegerAttr, IntegerType, i32
from xdsl.ir import Attribute, Operation
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from ptofa.ir.dialect.base import _check_vec_row_major, _fail, _InsOutsOp, _RowExpandOp, _RowReduceOp, _same_extent, _tile, _VEC_DTYPES
from ptofa.ir.dialect.types import CmpModeAttr, TileBufType, _dims_str, elem_bytes
from ptofa.ir.target import HIDDEN_ROWEXPAND_TMP_BYTES, HIDDEN_TCI_TMP, HIDDEN_TSEL_TMP  # noqa: F401 (re-exported)


_MASK_SRC_DTYPES = ("i16", "i32", "f16", "f32")  # tcmps on A2/A3
_TCMP_DTYPES = ("i32", "f16", "f32")  # tcmp on A2/A3
_TSEL_DTYPES = ("i16", "i32", "f16", "bf16", "f32")  # tsel on A2/A3


def _is_scalar_type(t: Attribute) -> bool:
    return isinstance(t, (Float16Type, Float32Type, BFloat16Type, IntegerType, IndexType))


@irdl_op_definition
class TTriOp(_InsOutsOp):
    """`pto.ttri ins(%diag {upperOrLower = 1 : i32} : i32) outs(%m : T)`: a 0/1 triangular tile.

    Lower (upperOrLower = 0, the default) sets 1 where col <= row + diag, upper (1) where
    col >= row + diag (docs/sources.md §3.3).
    """

    name = "pto.ttri"
    INNER_ATTRS: ClassVar[bool] = True
    diagonal = operand_def()
    dst_ = operand_def(TileBufType)
    upperOrLower = prop_def(IntegerAttr)  # noqa: N815

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        which = attrs.pop("upperOrLower", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if which is None:
            return {"upperOrLower": IntegerAttr(0, i32)}
        if not isinstance(which, IntegerAttr):
            parser.raise_error(f"{cls.name}: upperOrLower must be an integer, got {which}", start)
        return {"upperOrLower": IntegerAttr(which.value.data, i32)}

    def _print_attrs(self, printer: Printer) -> None:
        if self.upper_or_lower != 0:
            printer.print_string(f" {{upperOrLower = {self.upper_or_lower} : i32}}")

    @property
    def upper_or_lower(self) -> int:
        return self.upperOrLower.value.data

    def verify_(self) -> None:
        d = _tile(self, self.dst, "dst")
        _check_vec_row_major(self, d, "dst")
        if not isinstance(self.diagonal.type, IntegerType):
            _fail(self, "operand type", f"expects diagonal to be an integer operand, got {self.diagonal.type}")
        if self.upper_or_lower not in (0, 1):
            _fail(self, "upperOrLower", f"expects upperOrLower to be 0 (lower) or 1 (upper), got {self.upper_or_lower}")
        if d.elem not in _VEC_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 dst element type to be f16/f32/i16/i32, got {d.elem}")


class _CmpOp(_InsOutsOp):
    """Shared parts of tcmps / tcmp: `{cmpMode = #pto<cmp lt>}` inside `ins(...)`, an i8 packed-predicate dst."""

    INNER_ATTRS: ClassVar[bool] = True
    DEFAULT_MODE: ClassVar[str | None] = None

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        mode = attrs.pop("cmpMode", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if mode is None:
            return {"cmpMode": CmpModeAttr(cls.DEFAULT_MODE)} if cls.DEFAULT_MODE else {}
        if not isinstance(mode, CmpModeAttr):
            parser.raise_error(f"{cls.name}: cmpMode must be #pto<cmp eq|ne|lt|le|gt|ge>, got {mode}", start)
        return {"cmpMode": mode}

    def _print_attrs(self, printer: Printer) -> None:
        mode = self.properties.get("cmpMode")
        if mode is not None:
            printer.print_string(f" {{cmpMode = {mode.text}}}")

    @property
    def mode(self) -> str:
        mode = self.properties.get("cmpMode")
        return mode.value.data if mode is not None else "eq"

    def _check_mask_dst(self, src: TileBufType) -> TileBufType:
        d = _tile(self, self.dst, "dst")
        if d.space != "vec":
            _fail(self, "memory space", f"dst must be loc=vec, got {d.describe()}")
        if d.elem != "i8":
            _fail(self, "dtype", f"expects dst element type to be i8 (a packed predicate, one bit per element), got {d.elem}")
        if not _same_extent(src.valid[0], d.valid[0]):
            _fail(self, "shape agreement", f"expects src and dst to have the same valid rows, got {src.valid[0]} and {d.valid[0]}")
        if not d.is_row_major:
            _fail(self, "layout", f"dst must be blayout=row_major, got {d.describe()} col_major")
        return d


@irdl_op_definition
class TCmpSOp(_CmpOp):
    """`pto.tcmps ins(%src, %s {cmpMode = #pto<cmp lt>} : T, f32) outs(%mask : Ti8)`: compare with a scalar.

    The i8 dst holds one bit per element, LSB first, rows packed densely (docs/sources.md §3.3).
    """

    name = "pto.tcmps"
    N_INS: ClassVar[int] = 2
    DEFAULT_MODE: ClassVar[str | None] = "eq"
    src = operand_def(TileBufType)
    scalar = operand_def()
    dst_ = operand_def(TileBufType)
    cmpMode = opt_prop_def(CmpModeAttr)  # noqa: N815

    def verify_(self) -> None:
        s = _tile(self, self.src, "src")
        if s.space != "vec":
            _fail(self, "memory space", f"src must be loc=vec, got {s.describe()}")
        if s.elem not in _MASK_SRC_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 tcmps input element type to be i16/i32/f16/f32, got {s.elem}")
        if not _is_scalar_type(self.scalar.type):
            _fail(self, "operand type", f"expects scalar to be integer, index, or float, got {self.scalar.type}")
        self._check_mask_dst(s)


@irdl_op_definition
class TCmpOp(_CmpOp):
    """`pto.tcmp ins(%a, %b {cmpMode = #pto<cmp gt>} : T, T) outs(%mask : Ti8)`: compare two tiles."""

    name = "pto.tcmp"
    N_INS: ClassVar[int] = 2
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    cmpMode = opt_prop_def(CmpModeAttr)  # noqa: N815

    def verify_(self) -> None:
        a, b = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1")
        for t, role in ((a, "src0"), (b, "src1")):
            if t.space != "vec":
                _fail(self, "memory space", f"{role} must be loc=vec, got {t.describe()}")
        if a.dtype != b.dtype:
            _fail(self, "dtype", f"expects src0 and src1 to have the same element type, got {a.elem} and {b.elem}")
        if a.elem not in _TCMP_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 tcmp input element type to be i32/f16/f32, got {a.elem}")
        if not (_same_extent(a.valid[0], b.valid[0]) and _same_extent(a.valid[1], b.valid[1])):
            _fail(self, "shape agreement", f"expects src0 and src1 to have the same valid shape, got {_dims_str(a.valid)} and {_dims_str(b.valid)}")
        self._check_mask_dst(a)


@irdl_op_definition
class TSelOp(_InsOutsOp):
    """`pto.tsel ins(%mask, %a, %b[, %tmp] : M, T, T[, Tt]) outs(%d : T)`: d = mask bit ? a : b.

    Without a tmp ptoas allocates a hidden i32 1x16 UB tile (`hidden_scratch`).
    """

    name = "pto.tsel"
    N_INS: ClassVar[int] = 3
    HAS_TMP: ClassVar[bool] = True
    mask = operand_def(TileBufType)
    src0 = operand_def(TileBufType)
    src1 = operand_def(TileBufType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        m = _tile(self, self.mask, "mask")
        a, b, d = _tile(self, self.src0, "src0"), _tile(self, self.src1, "src1"), _tile(self, self.dst, "dst")
        for t, role in ((a, "src0"), (b, "src1"), (d, "dst")):
            _check_vec_row_major(self, t, role)
        if not (a.dtype == b.dtype == d.dtype):
            _fail(self, "dtype", f"expects src0, src1, and dst to have the same element type, got {a.elem}, {b.elem}, {d.elem}")
        if a.elem not in _TSEL_DTYPES:
            _fail(self, "dtype", f"expects A2/A3 tsel src0, src1, and dst element type to be i16/i32/f16/bf16/f32, got {a.elem}")
        if m.space != "vec" or m.elem != "i8":
            _fail(self, "mask", f"mask must be a loc=vec i8 tile (the packed predicate of tcmp/tcmps), got {m.describe()}")
        if not (_same_extent(a.valid[0], d.valid[0]) and _same_extent(a.valid[1], d.valid[1])
                and _same_extent(b.valid[0], d.valid[0]) and _same_extent(b.valid[1], d.valid[1])):
            _fail(self, "shape agreement", f"src0 {_dims_str(a.valid)}, src1 {_dims_str(b.valid)} and dst {_dims_str(d.valid)} valid shapes differ")
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            if t.space != "vec" or elem_bytes(t.dtype) != 4:
                _fail(self, "tmp", f"expects A2/A3 tsel tmp to be a loc=vec tile of a 4-byte element type, got {t.describe()}")


@irdl_op_definition
class TCIOp(_InsOutsOp):
    """`pto.tci ins(%start[, %tmp] : i32[, Tt]) outs(%ci : !pto.tile_buf<vec, 1xNxi32>)`: dst[0][j] = start + j.

    `{descending = true}` after `outs(...)` gives start - j. On A2/A3 ptoas adds a hidden f32
    tmp tile when none is given (`hidden_scratch`).
    """

    name = "pto.tci"
    HAS_TMP: ClassVar[bool] = True
    start = operand_def(IntegerType)
    tmp = opt_operand_def(TileBufType)
    dst_ = operand_def(TileBufType)
    descending = opt_prop_def(IntegerAttr)

    @classmethod
    def _props_from_attrs(cls, parser: Parser, attrs: dict[str, Attribute], start: int | None = None) -> dict[str, Attribute]:
        attrs = dict(attrs)
        desc = attrs.pop("descending", None)
        if attrs:
            parser.raise_error(f"{cls.name}: unexpected attributes {sorted(attrs)}", start)
        if desc is None:
            return {}
        if not isinstance(desc, IntegerAttr) or desc.value.data not in (0, 1, -1):  # i1 true parses as -1
            parser.raise_error(f"{cls.name}: descending must be true or false, got {desc}", start)
        return {"descending": IntegerAttr(1, IntegerType(1))} if desc.value.data else {}

    def _print_attrs(self, printer: Printer) -> None:
        if self.is_descending:
            printer.print_string(" {descending = true}")

    @property
    def is_descending(self) -> bool:
        return self.descending is not None and bool(self.descending.value.data)

    def verify_(self) -> None:
        d = _tile(self, self.dst, "dst")
        if d.space != "vec":
            _fail(self, "memory space", f"dst must be loc=vec, got {d.describe()}")
        if d.elem not in ("i16", "i32"):
            _fail(self, "dtype", f"expects dst element type to be i16/i32, got {d.elem}")
        if self.start.type != d.dtype:
            _fail(self, "dtype", f"expects S and dst element type to be exactly the same type, got {self.start.type} and {d.elem}")
        if d.cols.data == 1:
            _fail(self, "shape", "expects dst cols to be different from 1")
        if d.rows.data != 1:
            _fail(self, "shape", f"tci fills one row (dst[0][j] = start + j): dst must be 1xN, got {d.rows.data}x{d.cols.data}")
        if self.tmp is not None:
            t = _tile(self, self.tmp, "tmp")
            need = HIDDEN_TCI_TMP[int(d.elem[1:])][1]
            if t.space != "vec" or elem_bytes(t.dtype) != 4 or not t.is_row_major or t.is_boxed:
                _fail(self, "tmp", f"expects A2/A3 tmp to be a loc=vec ND tile of a 4-byte element type, got {t.describe()}")
            if t.nbytes < need:
                _fail(self, "tmp", f"expects A2/A3 tmp capacity to be at least {need} bytes for a {d.elem} dst, got {t.nbytes}")


@irdl_op_definition
class TFillPadOp(_InsOutsOp):
    """`pto.tfillpad ins(%src : S) outs(%dst : D)`: copy src's valid region, fill the rest of dst.

    The fill value is dst's `pad` field: 1 zero, 2 max (+inf), 3 min (-inf); 0 (null) is rejected.
    """

    name = "pto.tfillpad"
    src = operand_def(TileBufType)
    dst_ = operand_def(TileBufType)

    def verify_(self) -> None:
        s, d = _tile(self, self.src, "src"), _tile(self, self.dst, "dst")
        if elem_bytes(s.dtype) != elem_bytes(d.dtype):
            _fail(self, "dtype", f"expects sizeof(src element) == sizeof(dst element), got {s.elem} and {d.elem}")
        expanded = s.shape != d.shape
        if s.rows.data > d.rows.data or s.cols.data > d.cols.data:
            _fail(self, "shape agreement", f"expects each dst physical shape dimension to be >= src, got src {s.shape[0]}x{s.shape[1]}, dst {d.shape[0]}x{d.shape[1]}")
        if expanded and (s.space != "vec" or d.space != "vec"):
            _fail(self, "memory space", "expects expanded TFILLPAD only for loc=vec")
        if s.space == "mat" and d.space == "mat" and s != d:
            _fail(self, "type agreement", "expects src/dst tile types to be lowerable to TFILLPAD for loc=mat (identical types)")
        if d.pad.data == 0:
            _fail(self, "pad value", f"expects dst PadVal != Null for tfillpad (dst {d.describe()} has pad=0; give it pad=1 zero, 2 max or 3 min)")


OPS = (
    TTriOp,
    TCmpSOp,
    TCmpOp,
    TSelOp,
    TCIOp,
    TFillPadOp,
)


def hidden_scratch(op: Operation) -> tuple[str, str, int] | None:
    """The UB scratch ptoas allocates for `op` written without a tmp operand: (space, shape, bytes)."""
    if isinstance(op, _RowExpandOp) and op.tmp is None:
        return ("vec", "1x2048xf32", HIDDEN_ROWEXPAND_TMP_BYTES)
    if isinstance(op, _RowReduceOp) and op.tmp is None:
        t = op.src.type
        assert isinstance(t, TileBufType)
        return ("vec", f"{t.rows.data}x{t.cols.data}x{t.elem}", t.nbytes)
    if isinstance(op, TSelOp) and op.tmp is None:
        return ("vec", *HIDDEN_TSEL_TMP)
    if isinstance(op, TCIOp) and op.tmp is None:
        t = op.dst.type
        assert isinstance(t, TileBufType)
        width = t.dtype.width.data if isinstance(t.dtype, IntegerType) else 32
        return ("vec", *HIDDEN_TCI_TMP.get(width, HIDDEN_TCI_TMP[32]))
    return None
