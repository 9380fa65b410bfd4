"""A kernel of your own: softmax over the rows of a [rows, 256] fp32 tensor, vector cores only.

The walk-through in `docs/writing-a-kernel.md` builds this file step by step. Run it:

    python examples/row_softmax.py -o row_softmax.pto        # build and write the .pto
    run_fa check row_softmax.pto
    run_fa run row_softmax.pto --arg x=f32:1000x256 --arg y=f32:1000x256 --arg rows=1000 --block-dim 8

Each vector core (two per block: `core = block_idx * 2 + subblock_idx`) takes chunks of
`CHUNK_ROWS` rows in a strided loop; the last chunk may be ragged, so every tile whose rows
follow the chunk — the [R, 256] data and the [R, 1] row statistics alike — has a runtime
valid shape set before it is used.
"""

from __future__ import annotations

import sys
from pathlib import Path

from xdsl.dialects import builtin

from ptofa.api import F32, KernelModule, pto, ptr_type, scalar, tile, tile_type
from ptofa.ir.target import EXPDIF_TMP_BYTES
from ptofa.ir.textio import print_pto

COLS = 256
CHUNK_ROWS = 16  # rows per vector core per step: 16 KiB of f32 data per tile
ENTRY = "row_softmax"
VECTOR = "row_softmax_vec"


def build_row_softmax() -> builtin.ModuleOp:
    """Entry `row_softmax(x, y, rows)`: y[r, :] = softmax(x[r, :]) for r < rows."""
    km = KernelModule("a3")
    args = [("x", ptr_type("f32")), ("y", ptr_type("f32")), ("rows", builtin.i64)]
    with km.function(ENTRY, args, entry=True) as a:
        # No pipes, so no `set_ffts`: the entry only calls the vector function.
        pto.call(VECTOR, [a["x"], a["y"], a["rows"]])
    with km.function(VECTOR, args, kind="vector") as a:
        _vector_body(a["x"], a["y"], scalar.index_cast(a["rows"], name="rows"))
    return km.module


def _vector_body(x, y, rows) -> None:
    r = CHUNK_ROWS
    data = pto.alloc_tile(tile_type("vec", r, COLS, "f32", valid="dynamic"), "data")  # starts full
    scratch = pto.alloc_tile(tile_type("vec", r, COLS, "f32"), "scratch")
    expdif_tmp = pto.alloc_tile(tile_type("vec", 1, EXPDIF_TMP_BYTES // 4, "f32"), "expdif_tmp")
    # [R, 1] statistics: a column (DN) layout, valid rows follow the chunk like the data's.
    col = tile_type("vec", r, 1, "f32", valid="dynamic", blayout="col_major")
    row_max = pto.alloc_tile(col, "row_max")
    row_sum = pto.alloc_tile(col, "row_sum")

    x_all = pto.as_tensor(x, [rows, COLS], [COLS, 1], name="x_all")
    y_all = pto.as_tensor(y, [rows, COLS], [COLS, 1], name="y_all")
    cores = scalar.mul(pto.get_block_num(), 2, name="cores")
    core = scalar.add(scalar.mul(pto.get_block_idx(), 2), pto.get_subblock_idx(), name="core")
    chunks = scalar.ceildiv(rows, r, name="chunks")
    with pto.range(core, chunks, cores, name="chunk") as chunk:
        first = scalar.mul(chunk, r, name="first_row")
        valid = scalar.min(scalar.sub(rows, first), r, name="valid_rows")
        for t, cols in ((data, COLS), (row_max, 1), (row_sum, 1)):
            tile.set_valid(t, valid, cols)
        pto.load(pto.slice_view(x_all, [first, 0], [valid, COLS], name="x_rows"), data)
        tile.row_max(data, out=row_max, tmp=scratch)
        tile.row_expand_expdif(data, row_max, out=data, tmp=expdif_tmp)
        tile.row_sum(data, out=row_sum, tmp=scratch)
        tile.row_expand_div(data, row_sum, out=data)
        pto.store(data, pto.slice_view(y_all, [first, 0], [valid, COLS], name="y_rows"))


def emit_row_softmax() -> str:
    return print_pto(build_row_softmax())


if __name__ == "__main__":
    out = Path(sys.argv[sys.argv.index("-o") + 1]) if "-o" in sys.argv else None
    text = emit_row_softmax()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
