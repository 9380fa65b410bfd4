"""Tiled GEMM on the cube, and GEMM + activation with the vector cores finishing each tile.

    gemm:            c[M, N] f32 = a[M, K] f16 @ b[K, N] f16           (f32 accumulation in L0C)
    gemm_<act>:      c[M, N] f16 = act(a @ b), act = silu or relu      (cube -> pipe -> vectors)

M, N and K are run-time sizes, multiples of 16 (the cube's fractal). The output is cut into
`BLOCK_M x BLOCK_N` tiles dealt out to the blocks in a strided (persistent) loop, so any block
count works; a tile at the bottom or right edge is ragged (runtime valid shapes). Per tile the
cube walks K in `BLOCK_K` steps: each step loads a [BLOCK_M, BLOCK_K] panel of a and a
[BLOCK_K, BLOCK_N] panel of b from GM into L1 (`mat`), moves them into L0A (`left`) and L0B
(`right`) and accumulates their product into the L0C (`acc`) tile; the first step initialises
the accumulator (`tile.matmul(..., accumulate=...)`: L0C is not zero-filled). The steps alternate
between two sets of L1 / L0 buffers (double buffering), so the loads of step k + 1 have their
own buffers and ptoas's inserted synchronisation lets them run under the matmul of step k.

With an activation, the cube hands each finished f32 tile to the block's two vector cores through
a C2V pipe (a GM slot ring, as FlashAttention's QK pipe): each vector core pops its half of the
rows, applies the activation, converts to f16 and stores it.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import builtin
from xdsl.ir import SSAValue

from ptofa.api import KernelModule, pto, ptr_type, scalar, tile, tile_type, view_type
from ptofa.ir.textio import print_pto
from ptofa.kernels.common import DEFAULT_SLOT_NUM, SPLIT

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64  # L0A/L0B: 2 x 16 KiB each; L0C: 64 KiB
FRACTAL = 16  # M, N and K are multiples of the cube's 16 x 16 fractal
ACTIVATIONS = ("silu", "relu")
PIPE_ID = 0
C2V = 1  # dir_mask: cube -> vector
SLOT_ELEMS = BLOCK_M * BLOCK_N  # one f32 tile per slot


def workspace_elems(block_dim: int) -> int:
    """f32 elements of the `slots` workspace a GEMM + activation launch on `block_dim` blocks needs:
    each block's ring of ptoas's default 8 slots of one f32 output tile."""
    return block_dim * DEFAULT_SLOT_NUM * SLOT_ELEMS


def check_sizes(m: int, n: int, k: int) -> None:
    """The sizes a launch supports: positive multiples of 16 (host-side check before a launch)."""
    for name, size in (("M", m), ("N", n), ("K", k)):
        if size <= 0 or size % FRACTAL:
            raise ValueError(f"gemm: {name}={size} must be a positive multiple of {FRACTAL} (the cube's fractal)")


def build_gemm(activation: str | None = None) -> builtin.ModuleOp:
    """Entry `gemm(a, b, c, m, n, k)` (c f32), or with an activation
    `gemm_<activation>(slots, a, b, c, m, n, k)` (c f16, `slots` a workspace of `workspace_elems`)."""
    if activation is not None and activation not in ACTIVATIONS:
        raise NotImplementedError(f"gemm: activation={activation!r} is not one of {ACTIVATIONS}")
    sizes = [("m", builtin.i64), ("n", builtin.i64), ("k", builtin.i64)]
    operands = [("a", ptr_type("f16")), ("b", ptr_type("f16"))]
    km = KernelModule("a3")
    if activation is None:
        args = [*operands, ("c", ptr_type("f32")), *sizes]
        with km.function("gemm", args, entry=True) as a:
            pto.call("gemm_cube", [a[name] for name, _ in args])
        with km.function("gemm_cube", args, kind="cube") as a:
            m, n, k = _sizes(a)
            c_all = pto.as_tensor(a["c"], [m, n], [n, 1], name="c_all")
            # L0C -> GM (the FIX pipe): each tile's valid rows x cols of c
            _cube(a, (m, n, k), lambda acc, m0, n0, rows, cols: pto.store(
                acc, pto.slice_view(c_all, [m0, n0], [rows, cols], name="c_tile")))
        return km.module
    entry = f"gemm_{activation}"
    args = [("slots", ptr_type("f32")), *operands, ("c", ptr_type("f16")), *sizes]
    with km.function(entry, [("ffts", ptr_type("i64")), *args], entry=True) as a:
        pto.set_ffts(a["ffts"])  # the C2V pipe's cross-core flags
        for kind in ("cube", "vec"):
            pto.call(f"{entry}_{kind}", [a[name] for name, _ in args])
    with km.function(f"{entry}_cube", args, kind="cube") as a:
        _init_pipe(a, "cube", BLOCK_M)
        _cube(a, _sizes(a), _push_tile)
    with km.function(f"{entry}_vec", args, kind="vector") as a:
        _init_pipe(a, "vector", BLOCK_M // 2)
        _vector(a, activation)
    return km.module


def _sizes(a: dict[str, SSAValue]) -> tuple[SSAValue, SSAValue, SSAValue]:
    return tuple(scalar.index_cast(a[name], name=name) for name in ("m", "n", "k"))


def _output_tiles(m: SSAValue, n: SSAValue, body: Callable[[SSAValue, SSAValue, SSAValue, SSAValue], None]) -> None:
    """body(m0, n0, rows, cols) for each output tile of this block (row-major tile order, strided
    over the blocks); the cube and the vector cores of a block walk the same tiles."""
    tiles_n = scalar.ceildiv(n, BLOCK_N, name="tiles_n")
    tiles = scalar.mul(scalar.ceildiv(m, BLOCK_M, name="tiles_m"), tiles_n, name="tiles")
    with pto.range(pto.get_block_idx(), tiles, pto.get_block_num(), name="t") as t:
        m0 = scalar.mul(scalar.div(t, tiles_n), BLOCK_M, name="m0")
        n0 = scalar.mul(scalar.rem(t, tiles_n), BLOCK_N, name="n0")
        body(m0, n0, scalar.min(scalar.sub(m, m0), BLOCK_M, name="rows"),
             scalar.min(scalar.sub(n, n0), BLOCK_N, name="cols"))


def _cube(a: dict[str, SSAValue], sizes: tuple[SSAValue, SSAValue, SSAValue], finish: Callable[..., None]) -> None:
    """Each output tile: acc = sum over K steps of a-panel @ b-panel, then finish(acc, m0, n0, rows, cols)."""
    m, n, k = sizes
    nz = dict(blayout="col_major", slayout="row_major", valid="dynamic")  # L1 staging: NZ fractals
    a_mat = [pto.alloc_tile(tile_type("mat", BLOCK_M, BLOCK_K, "f16", **nz), f"a_mat{i}") for i in range(2)]
    b_mat = [pto.alloc_tile(tile_type("mat", BLOCK_K, BLOCK_N, "f16", **nz), f"b_mat{i}") for i in range(2)]
    a_left = [pto.alloc_tile(tile_type("left", BLOCK_M, BLOCK_K, "f16", slayout="row_major", valid="dynamic"),
                             f"a_left{i}") for i in range(2)]
    b_right = [pto.alloc_tile(tile_type("right", BLOCK_K, BLOCK_N, "f16", slayout="col_major", valid="dynamic"),
                              f"b_right{i}") for i in range(2)]
    acc = pto.alloc_tile(tile_type("acc", BLOCK_M, BLOCK_N, "f32", blayout="col_major", slayout="row_major",
                                   fractal=1024, valid="dynamic"), "acc")
    a_all = pto.as_tensor(a["a"], [m, k], [k, 1], name="a_all")
    b_all = pto.as_tensor(a["b"], [k, n], [n, 1], name="b_all")
    k_steps = scalar.ceildiv(k, BLOCK_K, name="k_steps")

    def tile_body(m0: SSAValue, n0: SSAValue, rows: SSAValue, cols: SSAValue) -> None:
        tile.set_valid(acc, rows, cols)

        def k_step(step: SSAValue, buf: int, accumulate: bool | SSAValue) -> None:
            k0 = scalar.mul(step, BLOCK_K, name="k0")
            depth = scalar.min(scalar.sub(k, k0), BLOCK_K, name="depth")  # the last step may be short
            for t in (a_mat[buf], a_left[buf]):
                tile.set_valid(t, rows, depth)
            for t in (b_mat[buf], b_right[buf]):
                tile.set_valid(t, depth, cols)
            pto.load(pto.slice_view(a_all, [m0, k0], [rows, depth], name="a_panel"), a_mat[buf])
            pto.load(pto.slice_view(b_all, [k0, n0], [depth, cols], name="b_panel"), b_mat[buf])
            tile.mov(a_mat[buf], a_left[buf])
            tile.mov(b_mat[buf], b_right[buf])
            tile.matmul(a_left[buf], b_right[buf], out=acc, accumulate=accumulate)

        # Two K steps per iteration, one per buffer set; the first step of a tile initialises acc.
        with pto.range(0, k_steps, 2, name="ks") as ks:
            k_step(ks, 0, accumulate=scalar.gt(ks, 0, name="not_first"))
            odd = scalar.add(ks, 1, name="ks_odd")
            with pto.if_(scalar.lt(odd, k_steps)):
                k_step(odd, 1, accumulate=True)
        finish(acc, m0, n0, rows, cols)

    _output_tiles(m, n, tile_body)


def _init_pipe(a: dict[str, SSAValue], core: str, rows: int) -> None:
    """The C2V pipe on this block's slot ring; the cube declares a whole tile, each vector core half."""
    base = pto.add_ptr(a["slots"], scalar.mul(pto.get_block_idx(), DEFAULT_SLOT_NUM * SLOT_ELEMS), name="ring")
    slot = pto.as_tensor(base, [rows, BLOCK_N], [BLOCK_N, 1], name="slot")
    pto.init_pipe(core, PIPE_ID, C2V, SLOT_ELEMS * 4, slot)


def _push_tile(acc: SSAValue, m0: SSAValue, n0: SSAValue, rows: SSAValue, cols: SSAValue) -> None:
    """L0C -> the next slot of the C2V pipe, for the vector cores to finish."""
    entry = pto.talloc("cube", PIPE_ID, view_type([BLOCK_M, BLOCK_N], "f32"), SPLIT, name="c_entry")
    pto.store(acc, pto.slice_view(entry, [0, 0], [rows, cols], name="c_slot"))
    pto.tpush("cube", PIPE_ID, entry, SPLIT)


def _vector(a: dict[str, SSAValue], activation: str) -> None:
    """Each output tile: pop this core's half of its rows, c = act(tile) in f16."""
    m, n, _ = _sizes(a)
    half = BLOCK_M // 2
    x = pto.alloc_tile(tile_type("vec", half, BLOCK_N, "f32", valid="dynamic"), "x")
    t = pto.alloc_tile(tile_type("vec", half, BLOCK_N, "f32", valid="dynamic"), "t")
    y = pto.alloc_tile(tile_type("vec", half, BLOCK_N, "f16", valid="dynamic"), "y")
    c_all = pto.as_tensor(a["c"], [m, n], [n, 1], name="c_all")
    first = scalar.mul(pto.get_subblock_idx(), half, name="first")  # core 0 the upper rows, core 1 the lower

    def tile_body(m0: SSAValue, n0: SSAValue, rows: SSAValue, cols: SSAValue) -> None:
        entry = pto.tpop("vector", PIPE_ID, view_type([half, BLOCK_N], "f32"), SPLIT, name="c_entry")
        mine = scalar.min(scalar.max(scalar.sub(rows, first), 0), half, name="my_rows")
        with pto.if_(scalar.gt(mine, 0)):
            for tl in (x, t, y):
                tile.set_valid(tl, mine, cols)
            pto.load(pto.slice_view(entry, [0, 0], [mine, cols], name="c_half"), x)
            _activate(activation, x, t)
            tile.cvt(x, out=y)
            pto.store(y, pto.slice_view(c_all, [scalar.add(m0, first), n0], [mine, cols], name="c_rows"))
        pto.tfree("vector", PIPE_ID, entry, SPLIT)

    _output_tiles(m, n, tile_body)


def _activate(activation: str, x: SSAValue, t: SSAValue) -> None:
    """x = act(x) in place; `t` is scratch."""
    if activation == "relu":
        tile.relu(x, out=x)
        return
    tile.muls(x, -1.0, out=t)  # silu(x) = x / (1 + exp(-x)); exp overflows to inf and x / inf = 0
    tile.exp(t, out=t)
    tile.adds(t, 1.0, out=t)
    tile.div(x, t, out=x)


def emit_gemm(activation: str | None = None) -> str:
    return print_pto(build_gemm(activation))
