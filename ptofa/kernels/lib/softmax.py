"""Row softmax: y[r, :] = softmax(x[r, :]) over a [rows, cols] f32 tensor, vector cores only.

The kernel `docs/writing-a-kernel.md` builds step by step (`examples/row_softmax.py` writes it).
Each vector core takes chunks of `CHUNK_ROWS` rows in a strided loop (`common.row_chunks`); the
last chunk may be ragged, so every tile whose rows follow the chunk — the [R, cols] data and the
[R, 1] row statistics alike — has a runtime valid shape set before it is used.
"""

from __future__ import annotations

from xdsl.dialects import builtin

from ptofa.api import pto, ptr_type, scalar, tile, tile_type
from ptofa.ir.target import EXPDIF_TMP_BYTES
from ptofa.ir.textio import print_pto
from ptofa.kernels.lib.common import one_kind_kernel, row_chunks

CHUNK_ROWS = 16  # rows per vector core per step: a [16, 256] f32 tile is 16 KiB
MAX_COLS = 1024  # data and scratch tiles: 2 * 16 * 1024 * 4 = 128 KiB of the 192 KiB UB


def build_row_softmax(cols: int = 256) -> builtin.ModuleOp:
    """Entry `row_softmax(x, y, rows)`: y[r, :] = softmax(x[r, :]) for r < rows, x and y [rows, cols] f32."""
    if cols % 8 or not 8 <= cols <= MAX_COLS:
        raise NotImplementedError(f"row_softmax: cols={cols} must be a multiple of 8 (32-byte rows) in 8..{MAX_COLS}")
    args = [("x", ptr_type("f32")), ("y", ptr_type("f32")), ("rows", builtin.i64)]
    return one_kind_kernel("row_softmax", args, "vector",
                           lambda a: _body(a["x"], a["y"], scalar.index_cast(a["rows"], name="rows"), cols))


def _body(x, y, rows, cols: int) -> None:
    r = CHUNK_ROWS
    data = pto.alloc_tile(tile_type("vec", r, cols, "f32", valid="dynamic"), "data")  # starts full
    scratch = pto.alloc_tile(tile_type("vec", r, cols, "f32"), "scratch")
    expdif_tmp = pto.alloc_tile(tile_type("vec", 1, EXPDIF_TMP_BYTES // 4, "f32"), "expdif_tmp")
    # [R, 1] statistics: a column (DN) layout, valid rows follow the chunk like the data's.
    col = tile_type("vec", r, 1, "f32", valid="dynamic", blayout="col_major")
    row_max = pto.alloc_tile(col, "row_max")
    row_sum = pto.alloc_tile(col, "row_sum")

    x_all = pto.as_tensor(x, [rows, cols], [cols, 1], name="x_all")
    y_all = pto.as_tensor(y, [rows, cols], [cols, 1], name="y_all")
    with row_chunks(rows, r) as (first, valid):
        for t, c in ((data, cols), (row_max, 1), (row_sum, 1)):
            tile.set_valid(t, valid, c)
        pto.load(pto.slice_view(x_all, [first, 0], [valid, cols], name="x_rows"), data)
        tile.row_max(data, out=row_max, tmp=scratch)
        tile.row_expand_expdif(data, row_max, out=data, tmp=expdif_tmp)
        tile.row_sum(data, out=row_sum, tmp=scratch)
        tile.row_expand_div(data, row_sum, out=data)
        pto.store(data, pto.slice_view(y_all, [first, 0], [valid, cols], name="y_rows"))


def emit_row_softmax(cols: int = 256) -> str:
    return print_pto(build_row_softmax(cols))
