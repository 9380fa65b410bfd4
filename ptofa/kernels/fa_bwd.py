"""The FlashAttention-2 backward as two mixed cube/vector kernels (see `ptofa.kernels.bwd_pipeline`).

dq kernel, unit = (batch, q head, Q block); first

    cube:    G = dO O^T                             -> sdp slot  (the unit's first entry)
    vectors: D = diag(G) of each core's rows        -> GM (`dsum`), for this kernel and the dkdv kernel

then per visible KV tile t:

    cube:    S = Q K_t^T, dP = dO V_t^T           -> sdp slot  (produce, `preload` tiles ahead)
    vectors: P = exp(scale S - LSE), dS = scale P (dP - D)   -> pds slot
    cube:    dQ (+)= dS K_t                         (consume; dQ stays in L0C, stored once)

  D = rowsum(dO * O) comes from the cube so that it is dP's own sum where O is a row of V (one
  visible key): the same dO operands, O^T loaded as V^T is, the same K order; dP - D is then exactly
  0 as in the references (`bwd_tiles.gram_to_entry`), and so are dQ and dK.

dkdv kernel, unit = (batch, kv head, KV block); per step (q head h of the group, visible Q block):

    cube:    S^T = K Q^T, dP^T = V dO^T             -> sdp slot
    vectors: P^T = exp(scale S^T - LSE), dS^T = scale P^T (dP^T - D)   -> pds slot
    cube:    dV (+)= P^T dO, dK (+)= dS^T Q         (dK, dV stay in L0C, stored once)

Every transposed operand (K^T, V^T, Q^T, dO^T) is the right operand of its matmul,
loaded through a DN GM view into a ZN mat tile: the verified K^T form of the forward.
Masked kernels visit only the tiles / blocks the window leaves visible (the forward's
visible-range arithmetic, seen from either side) and mask tiles that cross a bound with
`ttri`. A unit that sees nothing stores nothing: the host passes zeroed dQ, dK, dV.
With a key mask (`key_padding`) the vectors add the forward kernel's bias (0 / -3e38 per key)
to the scores before the exp, so P, and with it dS, is exactly 0 for a padding key.

Packed sequences (`BwdConfig.varlen`): loop index u of either kernel works on the entry of its
host-built unit table (longest first) that the forward's snake gives it (`units.schedule`), read
with `pto.load_scalar` as the forward varlen kernel does: the sequence's query and key starts and
lengths, the head and the block (and with ALiBi the sequence's index: its row of [B, N] slopes).
Views, visible ranges, masks and ALiBi's bias use the sequence's lengths and its own diagonal
k_len - q_len; GM rows are the packed rows (one batch of total_q / total_k rows). Where a unit's
rows are is `ptofa.kernels.bwd_varlen`.

Atomic-dQ mode (`BwdConfig.atomic_dq`; the dq kernel is not run):

    prep:            cube: G = dO O^T -> gd slot; vectors: D = diag(G) -> GM, and the f32 dQ
                     accumulator's rows zeroed
    dkdv, per step, after dK:  vectors: dS = (dS^T rows)^T by `ttrans` -> dsq slot
                               cube:    dQ_part = dS_0 K_0 + dS_1 K_1 (K_i: the keys of vector
                                        core i, in L1 for the whole unit), atomic-add tstore
                                        into the f32 dQ accumulator (zeroed by prep)
    post (vectors):  dQ f32 -> input dtype
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from xdsl.dialects import builtin
from xdsl.ir import SSAValue

from ptofa.kernels.argspec import BWD_ENTRY_NAMES
from ptofa.api import F32, I32, KernelModule, parse_ir_type, pto, scalar, tile
from ptofa.kernels.bwd_pipeline import BwdConfig, chunk_names, dkdv_passes, entry_args, grad_accs, tile_plan
from ptofa.kernels.bwd_varlen import packed_key, packed_row, sequence_window, stat, stat_view, table_unit, table_units
from ptofa.kernels.bwd_tiles import (Operands, gram_diagonal, gram_eye, gram_to_entry, key_bias, load_chunks,
                                     matmul_first_or_acc, pipe_entry, store_chunks)
from ptofa.kernels.common import SPLIT, alloc, clamp, init_pipes, produce_ahead, row_offset, snake_rank
from ptofa.kernels import dropout
from ptofa.kernels.mods import RANGE_FIELDS, Site, UnitSite
from ptofa.kernels.scoremods import apply_backward, apply_setup, apply_unit
from ptofa.kernels.builtin_mods.window import WINDOW, TileRange, WindowBounds
from ptofa.pipeline import VEC_CORES, PipeSpec
from ptofa.ir.textio import print_pto

NEG = -3.0e38  # additive mask value: finite, exp gives exactly 0


@dataclass
class _Common:
    """Runtime sizes and this block's slot rings, derived the same way on both cores."""

    config: BwdConfig
    kernel: str
    args: dict[str, SSAValue]
    block_idx: SSAValue
    block_num: SSAValue
    batch: SSAValue
    heads: SSAValue
    kv_heads: SSAValue
    group: SSAValue
    s0: SSAValue
    s1: SSAValue
    q_stride: SSAValue
    kv_stride: SSAValue
    window: WindowBounds | None
    bases: dict[str, SSAValue]


def _common(config: BwdConfig, kernel: str, args: dict[str, SSAValue]) -> _Common:
    batch, heads, kv_heads, s0, s1 = (scalar.index_cast(args[n], name=n) for n in ("batch", "heads", "kv_heads", "s0", "s1"))
    block_idx, block_num = pto.get_block_idx(), pto.get_block_num()
    sdp, pds, *more = config.pipes(kernel)
    per_block = config.slot_bytes_per_block(kernel) // 4
    sdp_base = pto.add_ptr(args["slots"], scalar.mul(block_idx, per_block), name="sdp_ring")
    h_block = pto.add_ptr(args["slots_h"], scalar.mul(block_idx, 2 * per_block), name="slot_h_block")
    pds_base = pto.add_ptr(h_block, sdp.slot_bytes * config.slot_num // 2, name="pds_ring")
    bases = {"sdp": sdp_base, "pds": pds_base}
    if more:  # the dsq ring follows the pds ring (both in the input dtype)
        bases["dsq"] = pto.add_ptr(pds_base, pds.slot_bytes * config.slot_num // 2, name="dsq_ring")
    window = None
    if config.narrowing:  # packed sequences: each unit's own diagonal (`bwd_varlen.sequence_window`)
        window = config.narrowing.bounds(args) if config.varlen else config.narrowing.bounds(args, s0, s1)
    return _Common(config, kernel, args, block_idx, block_num, batch, heads, kv_heads,
                   scalar.div(heads, kv_heads, name="group"), s0, s1,
                   scalar.mul(heads, config.head, name="q_stride"), scalar.mul(kv_heads, config.head, name="kv_stride"),
                   window, bases)


# ======================================================================================
# Vector pieces shared by both kernels
# ======================================================================================


@dataclass
class _Vec:
    c: _Common
    tiles: dict[str, SSAValue]
    consts: dict[str, SSAValue]
    row_base: SSAValue  # first row of this core's half of the slot
    mod_state: dict = field(default_factory=dict)  # the mods' values from their setup and unit hooks (`mods.UnitSite`)
    drop: dropout.DropoutTiles | None = None  # `dropout`: the generator's tiles


def _store_half(v: _Vec, entry: SSAValue, col0: int, cols: SSAValue, src: str = "s_tile") -> None:
    """`src` (f32) -> out_half (input dtype) -> columns [col0, col0 + cols) of this core's pds rows."""
    tl, vr = v.tiles, v.c.config.vec_rows(v.c.kernel)
    tile.set_valid(tl["out_half"], vr, cols)
    tile.cvt(tl[src], out=tl["out_half"])
    pto.store(tl["out_half"], pto.slice_view(entry, [0, col0], [vr, cols], name="pds_rows"))


def _load_scores(v: _Vec, entry: SSAValue, cols: SSAValue, width: int, with_dp: bool = True) -> None:
    """s_tile = scale * S (columns [0, cols)), dp_tile = dP (columns [width, width + cols)) `with_dp`."""
    tl, vr = v.tiles, v.c.config.vec_rows(v.c.kernel)
    for name in ("s_tile", "dp_tile", "mask_tmp"):
        tile.set_valid(tl[name], vr, cols)
    pto.load(pto.slice_view(entry, [0, 0], [vr, cols], name="s_rows"), tl["s_tile"])
    if with_dp:
        pto.load(pto.slice_view(entry, [0, width], [vr, cols], name="dp_rows"), tl["dp_tile"])
    tile.muls(tl["s_tile"], v.consts["scale"], out=tl["s_tile"])


def _drop_dp(v: _Vec, b: SSAValue, h: SSAValue, i0: SSAValue, j0: SSAValue, cols: SSAValue, transposed: bool,
             with_dp: bool = True) -> None:
    """drop_keep = the forward's keep factor times 1 / (1 - p) on this step's tile (`kernels/dropout.py`;
    `transposed`: rows are keys), and dP (dP^T) times it: dS = P (dP dropped - D)."""
    c, tl = v.c, v.tiles
    vr = c.config.vec_rows(c.kernel)
    bh = scalar.index_cast(scalar.add(scalar.mul(b, c.heads), h), I32, name="drop_bh")
    keys = [scalar.index_cast(scalar.index_cast(c.args[n]), I32, name=n) for n in ("drop_seed", "drop_offset")]
    keep = dropout.keep_factor(v.drop, keys[0], keys[1], bh, i0, j0, vr, cols, c.args["drop_cut"], transposed)
    tile.muls(keep, c.args["drop_scale"], out=keep)
    if with_dp:
        tile.mul(tl["dp_tile"], keep, out=tl["dp_tile"])


# ======================================================================================
# dq kernel
# ======================================================================================


@dataclass
class _QUnit:
    b: SSAValue | None  # None for packed sequences (one batch of rows)
    h: SSAValue
    g: SSAValue
    q0: SSAValue  # in the sequence
    q_rows: SSAValue
    tiles: TileRange
    s0: SSAValue  # the sequence's queries and keys (S0, S1 of a uniform batch)
    s1: SSAValue
    window: WindowBounds | None
    q_start: SSAValue | None = None  # packed sequences: the sequence's first query and key row
    k_start: SSAValue | None = None
    seq: SSAValue | None = None  # packed sequences with ALiBi or dropout: the sequence's index
    full: tuple[SSAValue, SSAValue] | None = None  # block ranges: the tiles no mask entry hides


def _unit_ranges(c: _Common, unit: SSAValue, name: str) -> tuple[TileRange, tuple[SSAValue, SSAValue]]:
    """A unit's [lo, hi) and unmasked [full_lo, full_hi) from the host's table `name` (`mods.RANGE_FIELDS`)."""
    rec = scalar.mul(unit, len(RANGE_FIELDS), name="range_rec")
    lo, hi, *full = (scalar.index_cast(pto.load_scalar(c.args[name], scalar.add(rec, i)), name=f"r_{field}")
                     for i, field in enumerate(RANGE_FIELDS))
    return TileRange(lo, hi), tuple(full)


def _table_entry(c: _Common, unit: SSAValue) -> dict[str, SSAValue]:
    """The varlen table entry loop index `unit` works on: its rank in the forward's snake (`common.snake_rank`)."""
    return table_unit(c, snake_rank(unit, c.block_num, table_units(c)))


def _q_unit(c: _Common, unit: SSAValue) -> _QUnit:
    cfg = c.config
    if cfg.varlen:
        f = _table_entry(c, unit)
        q0 = scalar.mul(f["q_block"], cfg.dq_block_q, name="q0")
        q_rows = scalar.min(scalar.sub(f["q_len"], q0), cfg.dq_block_q, name="q_rows")
        window = sequence_window(c, f)
        return _QUnit(None, f["head"], scalar.div(f["head"], c.group, name="g"), q0, q_rows,
                      (cfg.narrowing or WINDOW).visible_keys(window, q0, q_rows, f["k_len"], cfg.dq_block_kv), f["q_len"], f["k_len"], window,
                      f["q_start"], f["k_start"], f.get("seq"))
    q_blocks = scalar.ceildiv(c.s0, cfg.dq_block_q, name="q_blocks")
    q_block = scalar.rem(unit, q_blocks, name="q_block")
    bh = scalar.div(unit, q_blocks, name="bh")
    b, h = scalar.div(bh, c.heads, name="b"), scalar.rem(bh, c.heads, name="h")
    q0 = scalar.mul(q_block, cfg.dq_block_q, name="q0")
    q_rows = scalar.min(scalar.sub(c.s0, q0), cfg.dq_block_q, name="q_rows")
    g = scalar.div(h, c.group, name="g")
    tiles, full = _unit_ranges(c, unit, "q_tile_ranges") if cfg.block_ranges else (
        (cfg.narrowing or WINDOW).visible_keys(c.window, q0, q_rows, c.s1, cfg.dq_block_kv), None)
    return _QUnit(b, h, g, q0, q_rows, tiles, c.s0, c.s1, c.window, full=full)


def _dq_units(c: _Common) -> SSAValue:
    if c.config.varlen:
        return table_units(c)
    return scalar.mul(scalar.mul(c.batch, c.heads), scalar.ceildiv(c.s0, c.config.dq_block_q), name="units")


def _dq_cube(config: BwdConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, "dq", args)
    sdp, pds = config.pipes("dq")
    init_pipes((sdp, pds), c.bases, "cube", config.slot_num)
    tl = {spec.name: alloc(spec) for spec in tile_plan(config, "dq") if spec.core == "cube"}
    ops = Operands(config, "dq", tl)
    d, dc, bkv = config.head, config.d_chunk, config.dq_block_kv
    with pto.range(c.block_idx, _dq_units(c), c.block_num, name="unit") as unit:
        u = _q_unit(c, unit)
        q_off = row_offset(packed_row(c, u, u.q0), u.h, c.heads, d)
        kv_off = row_offset(packed_key(c, u), u.g, c.kv_heads, d)
        for name in ("q", "do"):
            view = pto.as_tensor(pto.add_ptr(args[name], q_off), [u.q_rows, d], [c.q_stride, 1], name=f"{name}_view")
            load_chunks(tl, chunk_names(config, f"{name}_mat"), view, u.q_rows, dc, ops, chunk_names(config, name))
        ot = pto.as_tensor(pto.add_ptr(args["o"], q_off), [d, u.q_rows], [1, c.q_stride], layout="dn", name="oT_view")
        entry = pto.talloc("cube", sdp.pipe_id, pipe_entry(sdp, "cube"), SPLIT, name="gram_entry")
        gram_to_entry(config, tl, ops, ot, u.q_rows, bkv, "vt_mat", "vt", "dp_acc", entry)
        pto.tpush("cube", sdp.pipe_id, entry, SPLIT)
        kt = pto.as_tensor(pto.add_ptr(args["k"], kv_off), [d, u.s1], [1, c.kv_stride], layout="dn", name="kT_view")
        vt = pto.as_tensor(pto.add_ptr(args["v"], kv_off), [d, u.s1], [1, c.kv_stride], layout="dn", name="vT_view")
        k_view = pto.as_tensor(pto.add_ptr(args["k"], kv_off), [u.s1, d], [c.kv_stride, 1], name="k_view")

        def keys(t: SSAValue) -> SSAValue:
            return scalar.min(scalar.sub(u.s1, scalar.mul(t, bkv)), bkv, name="keys")

        def produce(t: SSAValue) -> None:
            n, j0 = keys(t), scalar.mul(t, bkv, name="j0")
            entry = pto.talloc("cube", sdp.pipe_id, pipe_entry(sdp, "cube"), SPLIT, name="sdp_entry")
            for left, view, mat, right, acc, col in (("q", kt, "kt_mat", "kt", "s_acc", 0),
                                                     ("do", vt, "vt_mat", "vt", "dp_acc", bkv)):
                tile.set_valid(tl[acc], u.q_rows, n)
                for j, (m, r, lr, lm) in enumerate(zip(chunk_names(config, mat), chunk_names(config, right),
                                                       chunk_names(config, left), chunk_names(config, f"{left}_mat"))):
                    tile.set_valid(tl[m], dc, n)
                    pto.load(pto.slice_view(view, [j * dc, j0], [dc, n], name="t_part"), tl[m])
                    rt = ops.use(r, tl[m], dc, n)
                    lt = ops.use(lr, tl[lm], u.q_rows, dc)
                    tile.matmul(lt, rt, out=tl[acc], accumulate=j > 0)
                pto.store(tl[acc], pto.slice_view(entry, [0, col], [u.q_rows, n], name="sdp_band"))
            pto.tpush("cube", sdp.pipe_id, entry, SPLIT)

        def consume(t: SSAValue) -> None:
            n = keys(t)
            entry = pto.tpop("cube", pds.pipe_id, pipe_entry(pds, "cube"), SPLIT, name="pds_entry")
            tile.set_valid(tl["ds_mat"], u.q_rows, n)
            pto.load(pto.slice_view(entry, [0, 0], [u.q_rows, n], name="ds_band"), tl["ds_mat"])
            ds = ops.use("ds", tl["ds_mat"], u.q_rows, n)
            for j, (m, r, acc) in enumerate(zip(chunk_names(config, "k_mat"), chunk_names(config, "k"),
                                                chunk_names(config, "dq_acc"))):
                tile.set_valid(tl[m], n, dc)
                pto.load(pto.slice_view(k_view, [scalar.mul(t, bkv), j * dc], [n, dc], name="k_part"), tl[m])
                rt = ops.use(r, tl[m], n, dc)
                tile.set_valid(tl[acc], u.q_rows, dc)
                matmul_first_or_acc(t, u.tiles.lo, ds, rt, tl[acc])
            pto.tfree("cube", pds.pipe_id, entry, SPLIT)

        produce_ahead(u.tiles, config.preload, produce, consume)
        with pto.if_(scalar.gt(u.tiles.hi, u.tiles.lo)):
            dq_view = pto.as_tensor(pto.add_ptr(args["dq"], q_off), [u.q_rows, d], [c.q_stride, 1], name="dq_view")
            store_chunks(tl, chunk_names(config, "dq_acc"), dq_view, u.q_rows, dc)


def _dq_vector(config: BwdConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, "dq", args)
    sdp, pds = config.pipes("dq")
    init_pipes((sdp, pds), c.bases, "vector", config.slot_num)
    tl = {spec.name: alloc(spec) for spec in tile_plan(config, "dq") if spec.core == "vector"}
    consts = {"neg": scalar.const(NEG, F32, name="neg"), "zero": scalar.const(0.0, F32, name="zero"), "scale": args["scale"]}
    if config.key_padding:
        consts["pos"] = scalar.const(-NEG, F32, name="pos")
    vr, bkv = config.vec_rows("dq"), config.dq_block_kv
    v = _Vec(c, tl, consts, scalar.mul(pto.get_subblock_idx(), vr, name="row_base"))
    lse_col = tile.reshape(tl["lse_all"], vr, 1, name="lse_col", blayout="col_major")
    dsum_row = tile.reshape(tl["dsum_col"], 1, vr, name="dsum_row")
    gram_eye(tl, vr)
    apply_setup(config.score_mods, UnitSite(tl, c.args, v.mod_state, vr))
    v.drop = _drop_tiles(config, tl, vr, config.dq_block_kv)
    with pto.range(c.block_idx, _dq_units(c), c.block_num, name="unit") as unit:
        u = _q_unit(c, unit)
        n = clamp(scalar.sub(u.q_rows, v.row_base), 0, vr)
        row0 = scalar.add(u.q0, v.row_base, name="core_q0")
        apply_unit(config.score_mods, UnitSite(tl, c.args, v.mod_state, vr, _seq(u), u.h))
        has_rows = scalar.gt(n, 0)
        packed0 = row0 if u.q_start is None else scalar.add(u.q_start, row0, name="packed_q0")
        _dsum(c, tl, v.row_base, consts["zero"], u.b, u.h, packed0, n, has_rows, dsum_row, sdp)
        with pto.if_(has_rows):
            tile.set_valid(tl["stat_row"], 1, n)
            pto.load(stat_view(c, "lse", u.h, u.b, packed0, n), tl["stat_row"])
        tile.set_valid(tl["stat_row"], 1, vr)
        tile.adds(tl["stat_row"], consts["zero"], out=tl["lse_all"])
        with pto.range(u.tiles.lo, u.tiles.hi, name="t") as t:
            cols = scalar.min(scalar.sub(u.s1, scalar.mul(t, bkv)), bkv, name="keys")
            entry = pto.tpop("vector", sdp.pipe_id, pipe_entry(sdp, "vector"), SPLIT, name="sdp_entry")
            out = pto.talloc("vector", pds.pipe_id, pipe_entry(pds, "vector"), SPLIT, name="pds_entry")
            _load_scores(v, entry, cols, bkv)
            if config.dropout:  # (before the mods' dP - D)
                _drop_dp(v, _seq(u), u.h, row0, scalar.mul(t, bkv), cols, transposed=False)
            if config.score_mods:  # dP - D now, times the mods' derivative (key positions for mods that read them)
                tile.row_expand_sub(tl["dp_tile"], tl["dsum_col"], out=tl["dp_tile"])
                k0 = scalar.mul(t, bkv) if any(m.indexed for m in config.score_mods) else None
                site = Site(tl["s_tile"], tl["mask_tmp"], tl["exp_tmp"], tl, c.args, _seq(u), u.h, row0, k0, cols, vr, bkv, t,
                            u.full, NEG, seq_lens=(u.s0, u.s1), state=v.mod_state)
                apply_backward(config.score_mods, site, tl["dp_tile"])
            if config.narrowing:
                config.narrowing.mask_tile(u.window, tl["s_tile"], tl["mask_tmp"], consts["neg"], row0, scalar.mul(t, bkv), vr, cols,
                                 transposed=False)
            if config.key_padding:
                key_bias(c.args, tl, consts, u.b, scalar.mul(t, bkv), cols)
                tile.col_expand_add(tl["s_tile"], tl["kpm_f32"], out=tl["s_tile"])
            tile.row_expand_expdif(tl["s_tile"], lse_col, out=tl["s_tile"], tmp=tl["exp_tmp"])  # P = exp(scale S - LSE)
            if not config.score_mods:
                tile.row_expand_sub(tl["dp_tile"], tl["dsum_col"], out=tl["dp_tile"])
            tile.mul(tl["s_tile"], tl["dp_tile"], out=tl["s_tile"])
            tile.muls(tl["s_tile"], consts["scale"], out=tl["s_tile"])  # dS, with the softmax scale folded in
            _store_half(v, out, 0, cols)
            pto.tfree("vector", sdp.pipe_id, entry, SPLIT)
            pto.tpush("vector", pds.pipe_id, out, SPLIT)


def _dsum(c: _Common | _Prep, tl: dict[str, SSAValue], row_base: SSAValue, zero: SSAValue, b: SSAValue | None,
          h: SSAValue, row0: SSAValue, n: SSAValue, has_rows: SSAValue, dsum_row: SSAValue, pipe: PipeSpec) -> None:
    """D = diag(G) of this core's rows (G = dO O^T, the cube's C2V entry on `pipe`) -> dsum_col, and to GM
    for the dkdv kernel (b None: row0 is a packed row)."""
    vr = c.config.vec_rows(c.kernel)
    entry = pto.tpop("vector", pipe.pipe_id, pipe_entry(pipe, "vector"), SPLIT, name="gram_entry")
    with pto.if_(has_rows):
        gram_diagonal(tl, entry, row_base, n, vr, tl["dsum_col"])
    pto.tfree("vector", pipe.pipe_id, entry, SPLIT)
    with pto.if_(has_rows):
        tile.set_valid(tl["stat_row"], 1, vr)
        tile.adds(dsum_row, zero, out=tl["stat_row"])
        tile.set_valid(tl["stat_row"], 1, n)
        pto.store(tl["stat_row"], stat_view(c, "dsum", h, b, row0, n))


# ======================================================================================
# dkdv kernel
# ======================================================================================


@dataclass
class _KvUnit:
    b: SSAValue | None  # None for packed sequences
    g: SSAValue
    k0: SSAValue  # in the sequence
    k_rows: SSAValue
    blocks: TileRange  # visible Q blocks (the same for every q head of the group)
    steps: TileRange  # group x visible Q blocks, flattened
    s0: SSAValue  # the sequence's queries and keys (S0, S1 of a uniform batch)
    s1: SSAValue
    window: WindowBounds | None
    q_start: SSAValue | None = None  # packed sequences: the sequence's first query and key row
    k_start: SSAValue | None = None
    seq: SSAValue | None = None  # packed sequences with ALiBi or dropout: the sequence's index
    full: tuple[SSAValue, SSAValue] | None = None  # block ranges: the Q blocks no mask entry hides


def _kv_units(c: _Common) -> SSAValue:
    if c.config.varlen:
        return table_units(c)
    return scalar.mul(scalar.mul(c.batch, c.kv_heads), scalar.ceildiv(c.s1, c.config.block_kv), name="units")


def _kv_unit(c: _Common, unit: SSAValue) -> _KvUnit:
    cfg = c.config
    if cfg.varlen:  # the table's q_block is the unit's KV block, its head the KV head
        f = _table_entry(c, unit)
        k0 = scalar.mul(f["q_block"], cfg.block_kv, name="k0")
        k_rows = scalar.min(scalar.sub(f["k_len"], k0), cfg.block_kv, name="k_rows")
        window = sequence_window(c, f)
        blocks = (cfg.narrowing or WINDOW).visible_queries(window, k0, k_rows, f["q_len"], cfg.block_q)
        per_head = scalar.sub(blocks.hi, blocks.lo, name="q_steps")
        return _KvUnit(None, f["head"], k0, k_rows, blocks,
                       TileRange(scalar.const(0), scalar.mul(per_head, c.group, name="steps")), f["q_len"], f["k_len"],
                       window, f["q_start"], f["k_start"], f.get("seq"))
    kv_blocks = scalar.ceildiv(c.s1, cfg.block_kv, name="kv_blocks")
    kv_block = scalar.rem(unit, kv_blocks, name="kv_block")
    bg = scalar.div(unit, kv_blocks, name="bg")
    k0 = scalar.mul(kv_block, cfg.block_kv, name="k0")
    k_rows = scalar.min(scalar.sub(c.s1, k0), cfg.block_kv, name="k_rows")
    blocks, full = _unit_ranges(c, unit, "kv_tile_ranges") if cfg.block_ranges else (
        (cfg.narrowing or WINDOW).visible_queries(c.window, k0, k_rows, c.s0, cfg.block_q), None)
    per_head = scalar.sub(blocks.hi, blocks.lo, name="q_steps")
    return _KvUnit(scalar.div(bg, c.kv_heads, name="b"), scalar.rem(bg, c.kv_heads, name="g"), k0, k_rows, blocks,
                   TileRange(scalar.const(0), scalar.mul(per_head, c.group, name="steps")), c.s0, c.s1, c.window,
                   full=full)


def _step(c: _Common, u: _KvUnit, s: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
    """Step s of a unit -> (q head, first query row, query rows)."""
    per_head = scalar.sub(u.blocks.hi, u.blocks.lo)
    h = scalar.add(scalar.mul(u.g, c.group), scalar.div(s, per_head), name="h")
    q0 = scalar.mul(scalar.add(u.blocks.lo, scalar.rem(s, per_head)), c.config.block_q, name="q0")
    return h, q0, scalar.min(scalar.sub(u.s0, q0), c.config.block_q, name="q_cols")


def _dkdv_cube(config: BwdConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, "dkdv", args)
    sdp, pds, *_ = config.pipes("dkdv")
    init_pipes(config.pipes("dkdv"), c.bases, "cube", config.slot_num)
    tl = {spec.name: alloc(spec) for spec in tile_plan(config, "dkdv") if spec.core == "cube"}
    ops = Operands(config, "dkdv", tl)
    d, dc, bq = config.head, config.d_chunk, config.block_q
    with pto.range(c.block_idx, _kv_units(c), c.block_num, name="unit") as unit:
        u = _kv_unit(c, unit)
        kv_off = row_offset(packed_key(c, u, u.k0), u.g, c.kv_heads, d)
        for name in ("k", "v"):
            view = pto.as_tensor(pto.add_ptr(args[name], kv_off), [u.k_rows, d], [c.kv_stride, 1], name=f"{name}_view")
            load_chunks(tl, chunk_names(config, f"{name}_mat"), view, u.k_rows, dc, ops, chunk_names(config, name))
        keys = _key_pieces(c, u, tl, kv_off) if config.atomic_dq else []

        def head_views(h: SSAValue, transposed: bool) -> dict[str, SSAValue]:
            off = row_offset(packed_row(c, u), h, c.heads, d)
            if transposed:
                return {n: pto.as_tensor(pto.add_ptr(args[n], off), [d, u.s0], [1, c.q_stride], layout="dn",
                                         name=f"{n}T_view") for n in ("q", "do")}
            return {n: pto.as_tensor(pto.add_ptr(args[n], off), [u.s0, d], [c.q_stride, 1], name=f"{n}_view")
                    for n in ("q", "do")}

        def producer(with_dp: bool):
            def produce(s: SSAValue) -> None:
                h, q0, n = _step(c, u, s)
                views = head_views(h, transposed=True)
                entry = pto.talloc("cube", sdp.pipe_id, pipe_entry(sdp, "cube"), SPLIT, name="sdp_entry")
                stages = (("k", "q", "qt_mat", "qt", "st_acc", 0), ("v", "do", "dot_mat", "dot", "dpt_acc", bq))
                for left, src, mat, right, acc, col in stages[:2 if with_dp else 1]:
                    tile.set_valid(tl[acc], u.k_rows, n)
                    for j, (m, r, lr, lm) in enumerate(zip(chunk_names(config, mat), chunk_names(config, right),
                                                           chunk_names(config, left), chunk_names(config, f"{left}_mat"))):
                        tile.set_valid(tl[m], dc, n)
                        pto.load(pto.slice_view(views[src], [j * dc, q0], [dc, n], name="t_part"), tl[m])
                        rt = ops.use(r, tl[m], dc, n)
                        lt = ops.use(lr, tl[lm], u.k_rows, dc)
                        tile.matmul(lt, rt, out=tl[acc], accumulate=j > 0)
                    pto.store(tl[acc], pto.slice_view(entry, [0, col], [u.k_rows, n], name="sdp_band"))
                pto.tpush("cube", sdp.pipe_id, entry, SPLIT)
            return produce

        def consumer(grads: tuple[str, ...]):
            def consume(s: SSAValue) -> None:
                h, q0, n = _step(c, u, s)
                views = head_views(h, transposed=False)
                entry = pto.tpop("cube", pds.pipe_id, pipe_entry(pds, "cube"), SPLIT, name="pds_entry")
                stages = {"dv": ("pt_mat", "pt", 0, "do"), "dk": ("dst_mat", "dst", bq, "q")}
                for grad in grads:
                    mat, left, col, src = stages[grad]
                    tile.set_valid(tl[mat], u.k_rows, n)
                    pto.load(pto.slice_view(entry, [0, col], [u.k_rows, n], name="pds_band"), tl[mat])
                    lt = ops.use(left, tl[mat], u.k_rows, n)
                    for j, (m, r, a) in enumerate(zip(chunk_names(config, f"{src}_mat"), chunk_names(config, src),
                                                      accs[grad])):
                        tile.set_valid(tl[m], n, dc)
                        pto.load(pto.slice_view(views[src], [q0, j * dc], [n, dc], name="g_part"), tl[m])
                        rt = ops.use(r, tl[m], n, dc)
                        tile.set_valid(tl[a], u.k_rows, dc)
                        matmul_first_or_acc(s, u.steps.lo, lt, rt, tl[a])
                pto.tfree("cube", pds.pipe_id, entry, SPLIT)
                if config.atomic_dq and "dk" in grads:
                    _dq_atomic(c, u, tl, ops, keys, h, q0, n)
            return consume

        accs = grad_accs(config)
        for grads in dkdv_passes(config):
            produce_ahead(u.steps, config.preload, producer("dk" in grads), consumer(grads))
            with pto.if_(scalar.gt(u.steps.hi, 0)):
                for name in ("dk", "dv"):
                    if name in grads:
                        view = pto.as_tensor(pto.add_ptr(args[name], kv_off), [u.k_rows, d], [c.kv_stride, 1],
                                             name=f"{name}_view")
                        store_chunks(tl, accs[name], view, u.k_rows, dc)


def _key_pieces(c: _Common, u: _KvUnit, tl: dict[str, SSAValue], kv_off: SSAValue) -> list[SSAValue]:
    """Keys of vector core i (rows [i * block_kv / 2, ...) of the unit's K block, maybe none) -> kp{i}_mat
    (per D chunk), once per unit: the right operands of dQ = dS K. Returns each piece's key count."""
    cfg, d, half = c.config, c.config.head, c.config.block_kv // VEC_CORES
    k_view = pto.as_tensor(pto.add_ptr(c.args["k"], kv_off), [u.k_rows, d], [c.kv_stride, 1], name="k_view")
    counts = []
    for core in range(VEC_CORES):
        keys = clamp(scalar.sub(u.k_rows, core * half), 0, half)
        counts.append(keys)
        with pto.if_(scalar.gt(keys, 0)):
            for j, name in enumerate(chunk_names(cfg, f"kp{core}_mat")):
                tile.set_valid(tl[name], keys, cfg.d_chunk)
                pto.load(pto.slice_view(k_view, [core * half, j * cfg.d_chunk], [keys, cfg.d_chunk], name="k_piece"),
                         tl[name])
    return counts


def _dq_atomic(c: _Common, u: _KvUnit, tl: dict[str, SSAValue], ops: Operands, keys: list[SSAValue], h: SSAValue,
               q0: SSAValue, n: SSAValue) -> None:
    """dQ[q0:q0+n] += dS K_unit, atomically: dS arrives as the two vector cores' pieces
    [n, keys of core i] (stacked in the dsq slot); piece i meets kp{i}_mat (per D chunk). The dS^T
    mat / left tiles and the Q right tiles are free again after dK's matmuls."""
    cfg, d, dc = c.config, c.config.head, c.config.d_chunk
    dsq = cfg.pipes("dkdv")[2]
    entry = pto.tpop("cube", dsq.pipe_id, pipe_entry(dsq, "cube"), SPLIT, name="dsq_entry")
    accs = chunk_names(cfg, "dqp_acc")
    for name in accs:
        tile.set_valid(tl[name], n, dc)
    for core, count in enumerate(keys):
        with pto.if_(scalar.gt(count, 0)):
            tile.set_valid(tl["dst_mat"], n, count)
            pto.load(pto.slice_view(entry, [core * cfg.block_q, 0], [n, count], name="ds_piece"), tl["dst_mat"])
            lt = ops.use("dst", tl["dst_mat"], n, count)
            for role, mat, acc in zip(chunk_names(cfg, "q"), chunk_names(cfg, f"kp{core}_mat"), accs):
                rt = ops.use(role, tl[mat], count, dc)
                tile.matmul(lt, rt, out=tl[acc], accumulate=core > 0)
    pto.tfree("cube", dsq.pipe_id, entry, SPLIT)
    off = row_offset(packed_row(c, u, q0), h, c.heads, d)
    view = pto.as_tensor(pto.add_ptr(c.args["dq_acc"], off), [n, d], [c.q_stride, 1], name="dq_acc_view")
    store_chunks(tl, accs, view, n, dc, atomic="add")


def _dkdv_vector(config: BwdConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, "dkdv", args)
    init_pipes(config.pipes("dkdv"), c.bases, "vector", config.slot_num)
    tl = {spec.name: alloc(spec) for spec in tile_plan(config, "dkdv") if spec.core == "vector"}
    consts = {"neg": scalar.const(NEG, F32, name="neg"), "minus_one": scalar.const(-1.0, F32, name="minus_one"),
              "scale": args["scale"]}
    if config.key_padding:
        consts.update(pos=scalar.const(-NEG, F32, name="pos"), zero=scalar.const(0.0, F32, name="zero"))
    vr = config.vec_rows("dkdv")
    v = _Vec(c, tl, consts, scalar.mul(pto.get_subblock_idx(), vr, name="row_base"))
    kbias_col = tile.reshape(tl["kbias_row"], vr, 1, name="kbias_col", blayout="col_major") if config.key_padding else None
    apply_setup(config.score_mods, UnitSite(tl, c.args, v.mod_state, vr))
    v.drop = _drop_tiles(config, tl, vr, config.block_q)
    with pto.range(c.block_idx, _kv_units(c), c.block_num, name="unit") as unit:
        u = _kv_unit(c, unit)
        if config.key_padding:
            _unit_key_bias(v, u)
        for grads in dkdv_passes(config):
            _dkdv_vector_steps(v, u, kbias_col, grads)


def _dkdv_vector_steps(v: _Vec, u: _KvUnit, kbias_col: SSAValue | None, grads: tuple[str, ...]) -> None:
    """One pass of the vectors over a dkdv unit's steps: P^T (for dV) and / or dS^T (for dK) -> pds slot."""
    c, tl, consts = v.c, v.tiles, v.consts
    config, (sdp, pds, *_) = c.config, c.config.pipes("dkdv")
    vr, bq = config.vec_rows("dkdv"), config.block_q
    with pto.range(u.steps.lo, u.steps.hi, name="s") as s:
        h, q0, n = _step(c, u, s)
        entry = pto.tpop("vector", sdp.pipe_id, pipe_entry(sdp, "vector"), SPLIT, name="sdp_entry")
        out = pto.talloc("vector", pds.pipe_id, pipe_entry(pds, "vector"), SPLIT, name="pds_entry")
        _load_scores(v, entry, n, bq, with_dp="dk" in grads)
        if config.dropout:  # rows are keys k0 + row_base + r, columns queries q0 + c (before the mods' dP - D)
            _drop_dp(v, _seq(u), h, q0, scalar.add(u.k0, v.row_base), n, transposed=True, with_dp="dk" in grads)
        for name in ("stat_row", "nlse_row"):
            tile.set_valid(tl[name], 1, n)
        if config.score_mods:  # dP^T - D now, times the mods' derivative; rows are keys, columns queries
            if "dk" in grads:
                _minus_dsum(v, u, h, q0, n)
            k0, t = ((scalar.add(u.k0, v.row_base), scalar.div(q0, bq, name="q_block"))
                     if any(m.indexed for m in config.score_mods) else (None, None))  # (positions for mods that read them)
            site = Site(tl["s_tile"], tl["mask_tmp"], tl.get("mods_row_tmp"), tl, c.args, _seq(u), h, q0, k0, n, vr, bq, t,
                        u.full, NEG, transposed=True, seq_lens=(u.s0, u.s1), state=v.mod_state)
            apply_backward(config.score_mods, site, tl["dp_tile"] if "dk" in grads else None)
        pto.load(stat(c, u, "lse", h, q0, n), tl["stat_row"])
        tile.muls(tl["stat_row"], consts["minus_one"], out=tl["nlse_row"])
        if config.narrowing:
            config.narrowing.mask_tile(u.window, tl["s_tile"], tl["mask_tmp"], consts["neg"], scalar.add(u.k0, v.row_base), q0, vr, n,
                             transposed=True)
        if kbias_col is not None:
            tile.row_expand_add(tl["s_tile"], kbias_col, out=tl["s_tile"])
        tile.col_expand_add(tl["s_tile"], tl["nlse_row"], out=tl["s_tile"])
        tile.exp(tl["s_tile"], out=tl["s_tile"])  # P^T = exp(scale S^T - LSE)
        if "dv" in grads and config.dropout:  # dV takes the dropped P^T; dS^T the undropped one
            tile.mul(tl["drop_keep"], tl["s_tile"], out=tl["drop_keep"])
            _store_half(v, out, 0, n, src="drop_keep")
        elif "dv" in grads:
            _store_half(v, out, 0, n)
        if "dk" in grads:
            if not config.score_mods:
                _minus_dsum(v, u, h, q0, n)
            tile.mul(tl["s_tile"], tl["dp_tile"], out=tl["s_tile"])
            tile.muls(tl["s_tile"], consts["scale"], out=tl["s_tile"])  # dS^T, with the softmax scale folded in
            _store_half(v, out, bq, n)
        pto.tfree("vector", sdp.pipe_id, entry, SPLIT)
        pto.tpush("vector", pds.pipe_id, out, SPLIT)
        if config.atomic_dq and "dk" in grads:
            _push_ds_piece(v, n)


def _minus_dsum(v: _Vec, u: _KvUnit, h: SSAValue, q0: SSAValue, n: SSAValue) -> None:
    """dp_tile = dP^T - D of the step's query columns (D through stat_row)."""
    c, tl = v.c, v.tiles
    pto.load(stat(c, u, "dsum", h, q0, n), tl["stat_row"])
    tile.muls(tl["stat_row"], v.consts["minus_one"], out=tl["stat_row"])
    tile.col_expand_add(tl["dp_tile"], tl["stat_row"], out=tl["dp_tile"])


def _drop_tiles(config: BwdConfig, tl: dict[str, SSAValue], rows: int, cols: int) -> dropout.DropoutTiles | None:
    if not config.dropout:
        return None
    keep = tl["drop_keep" if "drop_keep" in tl else "mask_tmp"]  # dq: dP is dropped before mask_tmp's other uses
    return dropout.DropoutTiles.make(tl["drop_bits"], keep, tl["drop_cols"], tl["drop_rows"], tl["drop_tmp"], rows, cols)


def _seq(u: _QUnit | _KvUnit) -> SSAValue:
    """The unit's batch, or its packed sequence's index."""
    return u.b if u.b is not None else u.seq


def _unit_key_bias(v: _Vec, u: _KvUnit) -> None:
    """kbias_row = the key-mask bias of this core's rows (keys) of the unit, once per unit. Rows past
    the unit's last key (all of them on a core without keys) keep stale values: the cube never
    reads those rows back."""
    c, tl, vr = v.c, v.tiles, v.c.config.vec_rows("dkdv")
    keys = clamp(scalar.sub(u.k_rows, v.row_base), 0, vr)
    with pto.if_(scalar.gt(keys, 0)):
        key_bias(c.args, tl, v.consts, u.b, scalar.add(u.k0, v.row_base), keys)
        tile.set_valid(tl["kpm_f32"], 1, vr)
        tile.adds(tl["kpm_f32"], v.consts["zero"], out=tl["kbias_row"])


def _push_ds_piece(v: _Vec, n: SSAValue) -> None:
    """This core's dS^T rows (out_half, input dtype) transposed to its dS piece [n, keys] -> dsq slot."""
    tl, vr, dsq = v.tiles, v.c.config.vec_rows("dkdv"), v.c.config.pipes("dkdv")[2]
    entry = pto.talloc("vector", dsq.pipe_id, pipe_entry(dsq, "vector"), SPLIT, name="dsq_entry")
    tile.set_valid(tl["ds_piece"], n, vr)
    tile.trans(tl["out_half"], tl["ds_piece"], tmp=tl["trans_tmp"])
    pto.store(tl["ds_piece"], pto.slice_view(entry, [0, 0], [n, vr], name="ds_rows"))
    pto.tpush("vector", dsq.pipe_id, entry, SPLIT)


# ======================================================================================
# Prep and post kernels (atomic dQ mode; post vector-only)
# ======================================================================================


@dataclass
class _Prep:
    """The prep kernel's sizes, as `_Common` names them for `_dsum` and `stat_view`."""

    config: BwdConfig
    args: dict[str, SSAValue]
    batch: SSAValue
    heads: SSAValue
    s0: SSAValue
    q_blocks: SSAValue
    kernel: str = "prep"


def _prep(config: BwdConfig, args: dict[str, SSAValue]) -> _Prep:
    batch, heads, s0 = (scalar.index_cast(args[n], name=n) for n in ("batch", "heads", "s0"))
    return _Prep(config, args, batch, heads, s0, scalar.ceildiv(s0, config.dq_block_q, name="q_blocks"))


def _prep_units(p: _Prep, body: Callable[[SSAValue, SSAValue, SSAValue], None]) -> None:
    """body(b, h, q0): one unit per (batch, head, dq_block_q rows from q0), as the dq kernel's."""
    units = scalar.mul(scalar.mul(p.batch, p.heads), p.q_blocks, name="units")
    with pto.range(pto.get_block_idx(), units, pto.get_block_num(), name="unit") as unit:
        bh = scalar.div(unit, p.q_blocks, name="bh")
        body(scalar.div(bh, p.heads, name="b"), scalar.rem(bh, p.heads, name="h"),
             scalar.mul(scalar.rem(unit, p.q_blocks), p.config.dq_block_q, name="q0"))


def _gd_ring(config: BwdConfig, args: dict[str, SSAValue], core: str) -> PipeSpec:
    """The prep kernel's `gd` pipe, initialised on this block's ring for `core`."""
    gd, = config.pipes("prep")
    ring = pto.add_ptr(args["slots"], scalar.mul(pto.get_block_idx(), config.slot_bytes_per_block("prep") // 4),
                       name="gd_ring")
    init_pipes((gd,), {"gd": ring}, core, config.slot_num)
    return gd


def _prep_cube(config: BwdConfig, args: dict[str, SSAValue]) -> None:
    """G = dO O^T of each unit's rows -> gd slot (the dq kernel's first message, on its own)."""
    p, gd = _prep(config, args), _gd_ring(config, args, "cube")
    tl = {spec.name: alloc(spec) for spec in tile_plan(config, "prep") if spec.core == "cube"}
    ops = Operands(config, "prep", tl)
    d, stride = config.head, scalar.mul(p.heads, config.head, name="q_stride")

    def unit(b: SSAValue, h: SSAValue, q0: SSAValue) -> None:
        rows = scalar.min(scalar.sub(p.s0, q0), config.dq_block_q, name="q_rows")
        off = row_offset(scalar.add(scalar.mul(b, p.s0), q0), h, p.heads, d)
        view = pto.as_tensor(pto.add_ptr(args["do"], off), [rows, d], [stride, 1], name="do_view")
        load_chunks(tl, chunk_names(config, "do_mat"), view, rows, config.d_chunk, ops, chunk_names(config, "do"))
        ot = pto.as_tensor(pto.add_ptr(args["o"], off), [d, rows], [1, stride], layout="dn", name="oT_view")
        entry = pto.talloc("cube", gd.pipe_id, pipe_entry(gd, "cube"), SPLIT, name="gram_entry")
        gram_to_entry(config, tl, ops, ot, rows, config.dq_block_q, "ot_mat", "ot", "g_acc", entry)
        pto.tpush("cube", gd.pipe_id, entry, SPLIT)

    _prep_units(p, unit)


def _prep_vector(config: BwdConfig, args: dict[str, SSAValue]) -> None:
    """D = diag(G) for every (batch, head, row), G from the cube: the dq kernel's first step on its own.
    It also zeroes the same rows of the f32 dQ accumulator the dkdv kernel adds into: in the launch
    sequence itself, so the adds never depend on a host memset being ordered before them on the right stream."""
    p, gd = _prep(config, args), _gd_ring(config, args, "vector")
    tl = {spec.name: alloc(spec) for spec in tile_plan(config, "prep") if spec.core == "vector"}
    d, vr = config.head, config.vec_rows("prep")
    zero = scalar.const(0.0, F32, name="zero")
    row_base = scalar.mul(pto.get_subblock_idx(), vr, name="row_base")
    dsum_row = tile.reshape(tl["dsum_col"], 1, vr, name="dsum_row")
    gram_eye(tl, vr)
    tile.set_valid(tl["zeros"], vr, d)
    tile.fill(zero, tl["zeros"])

    def unit(b: SSAValue, h: SSAValue, q0: SSAValue) -> None:
        row0 = scalar.add(q0, row_base, name="core_q0")
        n = clamp(scalar.sub(p.s0, row0), 0, vr)
        has_rows = scalar.gt(n, 0)
        _dsum(p, tl, row_base, zero, b, h, row0, n, has_rows, dsum_row, gd)
        with pto.if_(has_rows):
            off = row_offset(scalar.add(scalar.mul(b, p.s0), row0), h, p.heads, d)
            view = pto.as_tensor(pto.add_ptr(args["dq_acc"], off), [n, d], [scalar.mul(p.heads, d), 1],
                                 name="dq_acc_rows")
            tile.set_valid(tl["zeros"], n, d)
            pto.store(tl["zeros"], pto.slice_view(view, [0, 0], [n, d], name="dq_acc_part"))

    _prep_units(p, unit)


def _post_vector(config: BwdConfig, args: dict[str, SSAValue]) -> None:
    """dQ (f32 accumulator) -> dQ in the input dtype, `vec_rows` rows of [B * S0 * N, D] per core and unit."""
    tl = {spec.name: alloc(spec) for spec in tile_plan(config, "post")}
    d, vr = config.head, config.vec_rows("post")
    batch, heads, s0 = (scalar.index_cast(args[n], name=n) for n in ("batch", "heads", "s0"))
    total = scalar.mul(scalar.mul(batch, s0), heads, name="rows")
    units = scalar.ceildiv(total, config.dq_block_q, name="units")
    row_base = scalar.mul(pto.get_subblock_idx(), vr, name="row_base")
    with pto.range(pto.get_block_idx(), units, pto.get_block_num(), name="unit") as unit:
        row0 = scalar.add(scalar.mul(unit, config.dq_block_q), row_base, name="row0")
        n = clamp(scalar.sub(total, row0), 0, vr)
        with pto.if_(scalar.gt(n, 0)):
            off = scalar.mul(row0, d)
            src = pto.as_tensor(pto.add_ptr(args["dq_acc"], off), [n, d], [d, 1], name="acc_rows")
            dst = pto.as_tensor(pto.add_ptr(args["dq"], off), [n, d], [d, 1], name="dq_rows")
            for name in ("dq_f32", "dq_out"):
                tile.set_valid(tl[name], n, d)
            pto.load(pto.slice_view(src, [0, 0], [n, d], name="acc_part"), tl["dq_f32"])
            tile.cvt(tl["dq_f32"], out=tl["dq_out"])
            pto.store(tl["dq_out"], pto.slice_view(dst, [0, 0], [n, d], name="dq_part"))


# ======================================================================================
# Modules
# ======================================================================================

_BUILDERS = {"dq": (_dq_cube, _dq_vector), "dkdv": (_dkdv_cube, _dkdv_vector), "prep": (_prep_cube, _prep_vector),
             "post": (None, _post_vector)}


def entry_name(kernel: str) -> str:
    """The entry function of backward kernel `kernel`, as `argspec` names it for its launcher."""
    return BWD_ENTRY_NAMES[kernel]


def build_bwd(config: BwdConfig, kernel: str) -> builtin.ModuleOp:
    """Kernel `kernel` of `config.kernels`: entry (set_ffts + calls), cube function (mixed kernels), vector function."""
    if kernel not in config.kernels:
        raise ValueError(f"kernel={kernel!r} must be one of {config.kernels} (atomic_dq={config.atomic_dq})")
    cube, vector = _BUILDERS[kernel]
    km = KernelModule(config.target)
    types = [(name, parse_ir_type(t)) for name, t in entry_args(config, kernel)]
    inner = types[1:]
    name = entry_name(kernel)
    with km.function(name, types, entry=True) as args:
        pto.set_ffts(args["ffts"])
        if cube is not None:
            pto.call(f"{name}_cube", [args[n] for n, _ in inner])
        pto.call(f"{name}_vec", [args[n] for n, _ in inner])
    if cube is not None:
        with km.function(f"{name}_cube", inner, kind="cube") as args:
            cube(config, args)
    with km.function(f"{name}_vec", inner, kind="vector") as args:
        vector(config, args)
    return km.module


def emit_bwd(config: BwdConfig, kernel: str) -> str:
    """The `.pto` text of backward kernel `kernel` for `config`."""
    return print_pto(build_bwd(config, kernel))
