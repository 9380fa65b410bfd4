"""RMSNorm and LayerNorm over the last dim of a [rows, dim] f32 tensor, vector cores only.

    rms_norm:   y = x / sqrt(mean(x^2) + eps) * w
    layer_norm: y = (x - mean(x)) / sqrt(var(x) + eps) * w + b      (biased variance, as torch)

Each vector core takes chunks of rows (`common.row_chunks`). The per-row statistics are [R, 1]
column tiles (what `row_sum` writes and `row_expand_*` read); their scalar math (divide by dim,
add eps, 1/sqrt) runs on the [1, R] row view of the same storage (`tile.reshape`), because ptoas
refuses `trsqrt` on a column-major tile. The weight and bias rows are loaded once per core and
broadcast down the rows (`col_expand_*`).
"""

from __future__ import annotations

from xdsl.dialects import builtin
from xdsl.ir import SSAValue

from ptofa.api import F32, pto, ptr_type, scalar, tile, tile_type
from ptofa.ir.textio import print_pto
from ptofa.kernels.lib.common import one_kind_kernel, row_chunks

MAX_DIM = 1024  # three [R, dim] f32 tiles (input, work, row_sum scratch) in the 192 KiB UB


def chunk_rows(dim: int) -> int:
    """Rows per step: 16, or 8 above 512 columns (three [R, dim] tiles stay under 100 KiB)."""
    return 16 if dim <= 512 else 8


def _check_dim(kernel: str, dim: int) -> None:
    if dim % 8 or not 8 <= dim <= MAX_DIM:
        raise NotImplementedError(f"{kernel}: dim={dim} must be a multiple of 8 (32-byte rows) in 8..{MAX_DIM}")


def build_rms_norm(dim: int = 256) -> builtin.ModuleOp:
    """Entry `rms_norm(x, w, y, rows, eps)`: y = x * rsqrt(mean(x^2, -1) + eps) * w, x and y
    [rows, dim] f32, w [dim] f32."""
    _check_dim("rms_norm", dim)
    args = [("x", ptr_type("f32")), ("w", ptr_type("f32")), ("y", ptr_type("f32")), ("rows", builtin.i64),
            ("eps", F32)]
    return one_kind_kernel("rms_norm", args, "vector", lambda a: _norm(a, dim, center=False))


def build_layer_norm(dim: int = 256) -> builtin.ModuleOp:
    """Entry `layer_norm(x, w, b, y, rows, eps)`: y = (x - mean) * rsqrt(var + eps) * w + b over the
    last dim, x and y [rows, dim] f32, w and b [dim] f32."""
    _check_dim("layer_norm", dim)
    args = [("x", ptr_type("f32")), ("w", ptr_type("f32")), ("b", ptr_type("f32")), ("y", ptr_type("f32")),
            ("rows", builtin.i64), ("eps", F32)]
    return one_kind_kernel("layer_norm", args, "vector", lambda a: _norm(a, dim, center=True))


def _norm(a: dict[str, SSAValue], dim: int, center: bool) -> None:
    r = chunk_rows(dim)
    rows = scalar.index_cast(a["rows"], name="rows")
    data = tile_type("vec", r, dim, "f32", valid="dynamic")
    x_t, work = pto.alloc_tile(data, "x_t"), pto.alloc_tile(data, "work")
    scratch = pto.alloc_tile(tile_type("vec", r, dim, "f32"), "scratch")  # row_sum's folds
    col = tile_type("vec", r, 1, "f32", valid="dynamic", blayout="col_major")
    stat_col, rstd_col = pto.alloc_tile(col, "stat_col"), pto.alloc_tile(col, "rstd_col")
    # The same storage as [1, R] rows, where the scalar math on the statistics is legal.
    stat_row, rstd_row = tile.reshape(stat_col, 1, r, name="stat_row"), tile.reshape(rstd_col, 1, r, name="rstd_row")
    params = [name for name in ("w", "b") if name in a]
    rows_of = {name: pto.alloc_tile(tile_type("vec", 1, dim, "f32"), f"{name}_row") for name in params}
    for name in params:
        vector = pto.as_tensor(a[name], [1, dim], [dim, 1], name=f"{name}_all")
        pto.load(pto.slice_view(vector, [0, 0], [1, dim], name=f"{name}_part"), rows_of[name])

    inv_dim = scalar.const(1.0 / dim, F32, name="inv_dim")
    x_all = pto.as_tensor(a["x"], [rows, dim], [dim, 1], name="x_all")
    y_all = pto.as_tensor(a["y"], [rows, dim], [dim, 1], name="y_all")
    with row_chunks(rows, r) as (first, valid):
        for t, cols in ((x_t, dim), (work, dim), (stat_col, 1), (rstd_col, 1)):
            tile.set_valid(t, valid, cols)
        pto.load(pto.slice_view(x_all, [first, 0], [valid, dim], name="x_rows"), x_t)
        if center:  # work = x - mean(x); its squares go to x_t, which is free from here on
            tile.row_sum(x_t, out=stat_col, tmp=scratch)
            tile.muls(stat_row, inv_dim, out=stat_row)
            tile.row_expand_sub(x_t, stat_col, out=work)
            tile.mul(work, work, out=x_t)
            centered, squares = work, x_t
        else:
            tile.mul(x_t, x_t, out=work)
            centered, squares = x_t, work
        tile.row_sum(squares, out=stat_col, tmp=scratch)
        tile.muls(stat_row, inv_dim, out=stat_row)  # mean of the squares: the (biased) variance for LayerNorm
        tile.adds(stat_row, a["eps"], out=stat_row)
        tile.rsqrt(stat_row, out=rstd_row)
        tile.row_expand_mul(centered, rstd_col, out=work)
        tile.col_expand_mul(work, rows_of["w"], out=work)
        if center:
            tile.col_expand_add(work, rows_of["b"], out=work)
        pto.store(work, pto.slice_view(y_all, [first, 0], [valid, dim], name="y_rows"))


def emit_rms_norm(dim: int = 256) -> str:
    return print_pto(build_rms_norm(dim))


def emit_layer_norm(dim: int = 256) -> str:
    return print_pto(build_layer_norm(dim))
