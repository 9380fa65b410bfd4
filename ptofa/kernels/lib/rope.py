"""Rotary position embedding (RoPE, the rotate-half form of GPT-NeoX and Llama), vector cores only.

For a token t and each head, with the head's dim split in halves x1 | x2 and the token's angles
in cos[t], sin[t] (each dim/2 wide):

    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin

x and y are [tokens, heads * dim] f32 (BSND with B*S tokens), cos and sin [tokens, dim/2] f32.
Each vector core takes chunks of tokens (`common.row_chunks`), loads their cos / sin once and
rotates every head of them; the halves are column windows of the head (`slice_view`).
"""

from __future__ import annotations

from xdsl.dialects import builtin

from ptofa.api import pto, ptr_type, scalar, tile, tile_type
from ptofa.ir.textio import print_pto
from ptofa.kernels.lib.common import one_kind_kernel, row_chunks

CHUNK_TOKENS = 16
MAX_DIM = 512  # six [16, dim/2] f32 tiles


def build_rope(dim: int = 128) -> builtin.ModuleOp:
    """Entry `rope(x, cos, sin, y, tokens, heads)`: y = x rotated by the angles of its token (see the module doc)."""
    if dim % 16 or not 16 <= dim <= MAX_DIM:
        raise NotImplementedError(f"rope: dim={dim} must be a multiple of 16 (two 32-byte halves) in 16..{MAX_DIM}")
    args = [("x", ptr_type("f32")), ("cos", ptr_type("f32")), ("sin", ptr_type("f32")), ("y", ptr_type("f32")),
            ("tokens", builtin.i64), ("heads", builtin.i64)]
    return one_kind_kernel("rope", args, "vector", lambda a: _body(a, dim))


def _body(a, dim: int) -> None:
    r, half = CHUNK_TOKENS, dim // 2
    tokens = scalar.index_cast(a["tokens"], name="tokens")
    heads = scalar.index_cast(a["heads"], name="heads")
    halves = tile_type("vec", r, half, "f32", valid="dynamic")
    x1, x2, cos, sin, t1, t2 = (pto.alloc_tile(halves, n) for n in ("x1", "x2", "cos_t", "sin_t", "t1", "t2"))
    width = scalar.mul(heads, dim, name="width")
    x_all = pto.as_tensor(a["x"], [tokens, width], [width, 1], name="x_all")
    y_all = pto.as_tensor(a["y"], [tokens, width], [width, 1], name="y_all")
    cos_all = pto.as_tensor(a["cos"], [tokens, half], [half, 1], name="cos_all")
    sin_all = pto.as_tensor(a["sin"], [tokens, half], [half, 1], name="sin_all")
    with row_chunks(tokens, r) as (first, valid):
        for t in (x1, x2, cos, sin, t1, t2):
            tile.set_valid(t, valid, half)
        pto.load(pto.slice_view(cos_all, [first, 0], [valid, half], name="cos_rows"), cos)
        pto.load(pto.slice_view(sin_all, [first, 0], [valid, half], name="sin_rows"), sin)
        with pto.range(0, heads, name="head") as head:
            col1 = scalar.mul(head, dim, name="col1")
            col2 = scalar.add(col1, half, name="col2")
            pto.load(pto.slice_view(x_all, [first, col1], [valid, half], name="x1_part"), x1)
            pto.load(pto.slice_view(x_all, [first, col2], [valid, half], name="x2_part"), x2)
            tile.mul(x1, cos, out=t1)
            tile.mul(x2, sin, out=t2)
            tile.sub(t1, t2, out=t1)  # y1
            tile.mul(x2, cos, out=t2)
            tile.mul(x1, sin, out=x1)
            tile.add(t2, x1, out=t2)  # y2
            pto.store(t1, pto.slice_view(y_all, [first, col1], [valid, half], name="y1_part"))
            pto.store(t2, pto.slice_view(y_all, [first, col2], [valid, half], name="y2_part"))


def emit_rope(dim: int = 128) -> str:
    return print_pto(build_rope(dim))
