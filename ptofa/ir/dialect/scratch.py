"""`hidden_scratch`: the UB scratch tile ptoas materializes for an op written without a
tmp operand (a row reduction, a row expand, tsel or tci). The sizes are ptoas's: tsel and
tci in `masks` (`HIDDEN_TSEL_TMP`, `HIDDEN_TCI_TMP`), row expands in `ptofa.ir.target`.
(`trowexpandexpdif` gets none from ptoas; the verifier requires its tmp, `ptofa.ir.target.EXPDIF_TMP_BYTES`.)"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Operation

from ptofa.ir.dialect.masks import HIDDEN_TCI_TMP, HIDDEN_TSEL_TMP, TCIOp, TSelOp
from ptofa.ir.dialect.rowcol import _RowExpandOp, _RowReduceOp
from ptofa.ir.dialect.types import TileBufType
from ptofa.ir.target import HIDDEN_ROWEXPAND_TMP_BYTES


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
