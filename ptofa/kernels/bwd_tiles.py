"""The backward kernels' tile plumbing that needs nothing of the kernels' state (`ptofa.kernels.fa_bwd`):
pipe entry types, the cube's L0 operands, column chunks between GM and L1 / L0C, the first-or-accumulate
matmul, the key mask's additive bias, and D = diag(dO O^T) from the cube to the vectors."""

from __future__ import annotations

from xdsl.ir import SSAValue

from ptofa.api import pto, scalar, tile, view_type
from ptofa.kernels.bwd_pipeline import BwdConfig, chunk_names, operand_tiles, resident_roles
from ptofa.pipeline import PipeSpec


def pipe_entry(pipe: PipeSpec, core: str):
    return view_type([pipe.rows if core == "cube" else pipe.half_rows, pipe.cols], pipe.dtype)


class Operands:
    """The cube's L0A / L0B operands (`bwd_pipeline.operand_tiles`): `unit` moves the unit-level ones that
    have a tile of their own into L0 once per work unit; `use` returns a role's tile, first moving the
    operand in from its L1 tile unless it stayed there for the unit."""

    def __init__(self, config: BwdConfig, kernel: str, tiles: dict[str, SSAValue]) -> None:
        self.names, self.resident, self.tiles = operand_tiles(config, kernel), resident_roles(config, kernel), tiles

    def unit(self, role: str, mat: SSAValue, rows: SSAValue | int, cols: SSAValue | int) -> None:
        if role in self.resident:
            self._move(role, mat, rows, cols)

    def use(self, role: str, mat: SSAValue, rows: SSAValue | int, cols: SSAValue | int) -> SSAValue:
        if role in self.resident:
            return self.tiles[self.names[role]]
        return self._move(role, mat, rows, cols)

    def _move(self, role: str, mat: SSAValue, rows: SSAValue | int, cols: SSAValue | int) -> SSAValue:
        dst = self.tiles[self.names[role]]
        tile.set_valid(dst, rows, cols)
        tile.mov(mat, dst)
        return dst


def load_chunks(tl: dict[str, SSAValue], names: list[str], view: SSAValue, rows: SSAValue, dc: int,
                 ops: Operands | None = None, roles: list[str] | None = None) -> None:
    """Columns [j dc, (j + 1) dc) of `view`'s first `rows` rows -> L1 tile names[j] (and, unit-level, to L0)."""
    for j, name in enumerate(names):
        tile.set_valid(tl[name], rows, dc)
        pto.load(pto.slice_view(view, [0, j * dc], [rows, dc], name=f"{name}_part"), tl[name])
        if ops is not None:
            ops.unit(roles[j], tl[name], rows, dc)


def store_chunks(tl: dict[str, SSAValue], names: list[str], view: SSAValue, rows: SSAValue, dc: int,
                  atomic: str | None = None) -> None:
    """L0C tiles names[j] -> columns [j dc, (j + 1) dc) of `view`'s first `rows` rows."""
    for j, name in enumerate(names):
        part = pto.slice_view(view, [0, j * dc], [rows, dc], name=f"{name}_part")
        if atomic:
            pto.store(tl[name], part, atomic=atomic)
        else:
            pto.store(tl[name], part)


def matmul_first_or_acc(step: SSAValue, first: SSAValue, a: SSAValue, b: SSAValue, acc: SSAValue) -> None:
    """acc = a b on a unit's first step, acc += a b after it (L0C accumulators are not zero-filled)."""
    with pto.if_(scalar.eq(step, first)):
        tile.matmul(a, b, out=acc)
    with pto.if_(scalar.ne(step, first)):
        tile.matmul(a, b, out=acc, accumulate=True)


def key_bias(args: dict[str, SSAValue], tl: dict[str, SSAValue], consts: dict[str, SSAValue], b: SSAValue,
             key0: SSAValue, n: SSAValue) -> None:
    """kpm_f32 = the key mask of keys [key0, key0 + n) of batch b as an additive bias: 0 for a key
    that takes part, -3e38 for a padding key (the forward kernel's bias, so P is exactly 0 there)."""
    for name in ("kpm_i8", "kpm_f16", "kpm_f32"):
        tile.set_valid(tl[name], 1, n)
    off = scalar.add(scalar.mul(b, scalar.index_cast(args["key_mask_stride"])), key0)
    view = pto.as_tensor(pto.add_ptr(args["key_mask"], off), [1, n], [n, 1], name="kpm_view")
    pto.load(pto.slice_view(view, [0, 0], [1, n], name="kpm_part"), tl["kpm_i8"])
    tile.cvt(tl["kpm_i8"], out=tl["kpm_f16"])
    tile.cvt(tl["kpm_f16"], out=tl["kpm_f32"])
    tile.muls(tl["kpm_f32"], consts["pos"], out=tl["kpm_f32"])  # 1 -> 3e38, 0 -> 0
    tile.adds(tl["kpm_f32"], consts["neg"], out=tl["kpm_f32"])  # -> 0 / -3e38


def gram_to_entry(c: BwdConfig, tl: dict[str, SSAValue], ops: Operands, o_t: SSAValue, rows: SSAValue, piece: int,
                  mat: str, right: str, acc: str, entry: SSAValue) -> None:
    """G = dO O^T of a unit's `rows` query rows (f32) -> columns [0, rows) of C2V `entry`, `piece` columns at
    a time through L0C tile `acc`. The left operands are the unit's dO tiles (roles `do`, per D chunk), the
    ones dP = dO V^T takes; O^T comes through the DN view `o_t` [D, rows] into ZN mat tiles `mat` and right
    operands `right` (per D chunk), as V^T does for dP. Where O_i = V_j (one visible key) G_ii and dP_ij are
    then the same products summed in the same K order: bit-equal (`ptofa.sim.tileops.tmatmul`)."""
    dc = c.d_chunk

    def band(p: int, cols: SSAValue) -> None:
        tile.set_valid(tl[acc], rows, cols)
        for j, (m, r, lr, lm) in enumerate(zip(chunk_names(c, mat), chunk_names(c, right), chunk_names(c, "do"),
                                               chunk_names(c, "do_mat"))):
            tile.set_valid(tl[m], dc, cols)
            pto.load(pto.slice_view(o_t, [j * dc, p * piece], [dc, cols], name="oT_part"), tl[m])
            rt = ops.use(r, tl[m], dc, cols)
            lt = ops.use(lr, tl[lm], rows, dc)
            tile.matmul(lt, rt, out=tl[acc], accumulate=j > 0)
        pto.store(tl[acc], pto.slice_view(entry, [0, p * piece], [rows, cols], name="gram_band"))

    band(0, scalar.min(rows, piece, name="gram_cols"))
    for p in range(1, -(-c.dq_block_q // piece)):
        # in [0, piece]; common.clamp would lengthen the import chain
        cols = scalar.min(scalar.max(scalar.sub(rows, p * piece), 0), piece)
        with pto.if_(scalar.gt(cols, 0)):
            band(p, cols)


def gram_eye(tl: dict[str, SSAValue], vr: int) -> None:
    """gram_eye = the [vr, vr] identity, once per kernel: ttri's upper triangle (col >= row) times its
    lower one (col <= row), the lower one built in `gram` (free until the first unit)."""
    for name in ("gram", "gram_eye"):
        tile.set_valid(tl[name], vr, vr)
    tile.tri(0, out=tl["gram_eye"], upper=True)
    tile.tri(0, out=tl["gram"])
    tile.mul(tl["gram_eye"], tl["gram"], out=tl["gram_eye"])


def gram_diagonal(tl: dict[str, SSAValue], entry: SSAValue, row_base: SSAValue, n: SSAValue, vr: int,
                  out_col: SSAValue) -> None:
    """out_col[r] = G[row_base + r, row_base + r] for this core's n > 0 rows (`entry`: its half of the
    C2V slot, G in the first columns): its [n, n] diagonal block times the identity, row-summed. The
    products off the diagonal are +-0, so each sum is G_ii exactly. Rows n .. vr - 1 of `out_col` get
    the sums of stale rows (as every per-row tile of a ragged block: never stored)."""
    for name in ("gram", "gram_eye"):
        tile.set_valid(tl[name], n, n)
    pto.load(pto.slice_view(entry, [0, row_base], [n, n], name="gram_rows"), tl["gram"])
    tile.mul(tl["gram"], tl["gram_eye"], out=tl["gram"])
    for name in ("gram", "gram_tmp"):  # the columns past n are stale: sum the n products of each row
        tile.set_valid(tl[name], vr, n)
    tile.row_sum(tl["gram"], out=out_col, tmp=tl["gram_tmp"])
