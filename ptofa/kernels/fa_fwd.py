"""The FlashAttention-2 forward kernel as a four-stage cube/vector pipeline.

    compute_qk  (cube)    S = Q K^T, one CUBE_S1-wide sub-tile at a time -> QK slot
    compute_p   (vectors) mask, online softmax over row slices, P in the input dtype -> P slot
    compute_pv  (cube)    PV = P V, accumulated over the sub-tiles    -> PV slot
    compute_gu  (vectors) O = alpha_t * O + PV; at the end O = O / l (and LSE)

Schedule (docs/sources.md §4.2; `common.pipelined` on the cube, `common.fused`
on the vectors), with P = QK_PRELOAD over the unit's visible tiles [lo, hi):

    cube:    QK(lo..lo+P-1) | QK(t+P) interleaved with PV(t), QK first | PV(hi-P..hi-1)
    vectors: for k: GU(k-P) if k >= lo+P, then softmax(k) if k < hi

The rescale factor alpha_t of softmax(t) is kept in an exp_max ring of P tiles
(slot t % P, chosen with an `scf.if` chain); GU(t) runs before softmax(t+P)
because both touch slot t % P.

The cube works in CUBE_S1-key sub-tiles; with 64-key sub-tiles (the default) each L1 staging
tile, L0A/L0B operand and QK accumulator has two buffers that consecutive sub-tiles
alternate, so one sub-tile's loads overlap the other's matmul.

Work units (batch, head, 128-row Q block) are shared by the launched blocks in a
persistent loop; the pipes are initialised once per block and every unit
streams through them. Each vector core owns 64 of the 128 rows (split = 1).

The kernel family (switches of `FAConfig`, one builder):
* any S0, S1: the last Q block and the last KV tile may be ragged; tiles carry
  runtime valid shapes, so padded keys never enter a matmul or a softmax and padded
  query rows are never stored; nothing outside Q, K, V, O, LSE is read or written;
* GQA/MQA: q head h reads kv head h // (heads / kv_heads) in place;
* the window mod in `mods` (`config.narrowing`, `builtin_mods/window.py`): bottom-right aligned
  window (left, right) from runtime arguments (causal is (-1, 0)); both kernels compute the unit's
  visible tile range with the same arithmetic and skip the rest; tiles crossing a bound are masked
  on the vectors with `ttri` (additive -3e38, finite, so exp gives exactly 0);
* `key_padding`: an i8 key mask row per tile becomes an additive bias (`tcolexpandadd`);
* rows that see no key get O = 0 and LSE = +inf;
* `lse`: LSE = m + ln(l) per query row; dtypes fp16/bf16 in, fp16/bf16/fp32 out;
* `split_kv` (varlen): a unit-table entry covers one split of the unit's visible tiles and
  writes fp32 O and LSE (-inf for rows with no key) to the partials; `fa_reduce` combines;
  each unit has its own split count, and a unit of one split writes O (and LSE) itself;
* `gqa_pack` (varlen, unmasked): a unit's rows are the q heads of one KV head at one query
  row, so Q / O rows are D apart and LSE is [total_q, N];
* head dims above 128 (192, 256): 64-row Q blocks, and the cube splits D in two
  chunks (QK accumulates over them, PV computes O chunk by chunk) to fit L0A/L0B/L0C;
* `prescale_q` (default): the vectors scale each unit's Q rows once and push them to the
  cube through a fourth (V2C) pipe, one unit ahead of the cube's pop, so S arrives scaled
  and compute_p makes no scaling pass per tile.
* `mods` (`kernels/mods.py`): modification objects at one hook of the softmax (on each row slice's
  scores) and one of `_finish` (on the row statistics); `block_ranges`: each unit's KV tile range
  (and the range no mask entry hides) from a host table, so FlexAttention's block sparsity skips tiles.
* `q_pair` (dense): a unit is two Q blocks of one (batch, head); the cube computes both blocks' QK and
  PV of each KV tile loaded once (`_pair_tile`), the vectors alternate between the blocks' entries,
  each block with its own statistics and O; K and V cross GM once per two blocks.

`build_fa(config)` returns the module; `emit_fa(config)` its text.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import builtin
from xdsl.ir import SSAValue

from ptofa.kernels import argspec
from ptofa.api import F16, F32, I32, KernelModule, parse_ir_type, pto, scalar, tile
from ptofa.kernels import dropout
from ptofa.kernels.scoremods import apply_finish, apply_forward, apply_setup, apply_unit
from ptofa.kernels.common import (HALF_NEG, NEG_INIT, SPLIT, alloc, clamp, entry_type, fused, init_pipes, pipelined,
                                  push_scaled_q, ring_select, row_offset, snake_rank)
from ptofa.kernels.fwd_units import Common as _Common, Unit as _Unit, common_values as _common, out_bases as _out_bases
from ptofa.kernels.fwd_units import q_row_stride as _q_row_stride, split_range as _split_range, tile_keys as _tile_keys
from ptofa.kernels.fwd_units import within as _within
from ptofa.kernels.hostparam import mod_params
from ptofa.kernels.mods import RANGE_FIELDS, FinishSite, Site, UnitSite
from ptofa.kernels.builtin_mods.window import TileRange
from ptofa.pipeline import (KEY_MASK_TILES, PAIR_STATE, PAIR_SUFFIX, ROWSUM_COLS, UNIT_FIELDS, UNIT_TABLE, FAConfig,
                            buffer_names, chunk_names, cube_buffer_name, cube_buffer_names, tile_plan)
from ptofa.ir.dialect import DYN
from ptofa.ir.textio import print_pto

# The f16 softmax's mask value: finite in f16 even when added to a score (or twice, window and key
# padding: scores above -5000 stay above -65504), and its row-fix threshold; a row whose real
# scores are all below -15000 would count as empty (f16 scores have a 16-wide spacing there).
NEG_MASK_F16 = -30000.0
HALF_NEG_F16 = 15000.0
# The f16 softmax's running-max start: the lowest finite f16. Finite, because a slice row whose
# scores are all -inf (a score below -5504 masked twice rounds to -inf in f16) keeps the start
# as its max and needs exp(-inf - start) = 0, where an f16 copy of -3e38 would be -inf and give
# exp(-inf + inf) = NaN; the lowest, so that no finite f16 score lies below it (its row would
# get P = 0 and l = 0).
NEG_INIT_F16 = -65504.0


def mask_constants(config: FAConfig) -> tuple[float, float, float]:
    """(running-max start, additive mask value, row-fix threshold) of the config's softmax dtype."""
    if config.softmax_dtype == "f32":
        return NEG_INIT, NEG_INIT, HALF_NEG
    return NEG_INIT_F16, NEG_MASK_F16, HALF_NEG_F16


# ======================================================================================
# Work units and the visible tile range (the same arithmetic on both kernels)
# ======================================================================================


def _unit(c: _Common, unit: SSAValue) -> _Unit:
    """Decode a unit and the KV tiles it visits (the same arithmetic on both kernels).

    Uniform batches decode (batch, head, Q block) from the unit index; masked kernels
    rank Q blocks last-first (bottom-right causal: later blocks see more keys). Varlen
    kernels read the unit from a host-built table (`ptofa.launch.varlen.unit_table`, ordered
    longest first). Ranks are handed out in a snake over the persistent loop's waves.
    """
    cfg = c.config
    if cfg.narrowing or cfg.varlen:  # units of unequal work: snake the longest-first ranks over the waves
        unit = _snake(c, unit)
    if cfg.varlen:
        rec = scalar.mul(unit, UNIT_FIELDS, name="unit_rec")
        field = {name: scalar.index_cast(pto.load_scalar(c.args["units"], scalar.add(rec, i)), name=name)
                 for i, name in enumerate(UNIT_TABLE)}
        b, h, q_block, seq = scalar.const(0), field["head"], field["q_block"], field["seq"]
        s0, s1 = field["q_len"], field["k_len"]
        q_start, k_row = field["q_start"], field["k_start"]
    else:
        bh_count = scalar.mul(c.batch, c.heads, name="bh_count")
        if cfg.narrowing:
            q_block = scalar.sub(scalar.sub(c.q_blocks, 1), scalar.div(unit, bh_count), name="q_block")
            bh = scalar.rem(unit, bh_count, name="bh")
        else:
            q_block = scalar.rem(unit, c.q_blocks, name="q_block")
            bh = scalar.div(unit, c.q_blocks, name="bh")
        b = scalar.div(bh, c.heads, name="b")
        h = scalar.rem(bh, c.heads, name="h")
        s0, s1 = c.s0, c.s1
        q_start, k_row, seq = scalar.mul(b, c.s0, name="q_start"), scalar.mul(b, c.s1, name="k_row"), b
    g = scalar.div(h, c.group, name="g")
    q0 = scalar.mul(q_block, cfg.cube_s0, name="q0")
    q_rows = scalar.min(scalar.sub(s0, q0), cfg.cube_s0, name="q_rows")
    q_row = scalar.add(q_start, q0, name="q_row")
    if cfg.gqa_pack:  # rows are heads h .. h + group - 1 of query row q_row; LSE is [total_q, N]
        q_rows = c.group
        lse_row = scalar.add(scalar.mul(q_row, c.heads), h, name="lse_row")
    else:  # LSE is [B, N, S0] (uniform: row q0 of (b, h)) or [N, total_q] (varlen: packed row q_row of head h)
        lse_in_head = q_row if cfg.varlen else q0
        lse_row = scalar.add(scalar.mul(scalar.add(scalar.mul(b, c.heads), h), c.s0), lse_in_head, name="lse_row")
    window = None
    if cfg.narrowing:
        tiles, window = cfg.narrowing.forward_tiles(c.args, q0, q_rows, s0, s1, cfg.tile_s1)
        lo, hi = tiles.lo, tiles.hi
    else:
        lo = scalar.const(0)
        hi = scalar.ceildiv(s1, cfg.tile_s1, name="t_hi")
    full = None
    if cfg.block_ranges:  # the host's per-unit tile ranges (unit order: (b, h, Q block), kernels/mods.py)
        rec = scalar.mul(unit, len(RANGE_FIELDS), name="range_rec")
        lo, hi, *full = (scalar.index_cast(pto.load_scalar(c.args["tile_ranges"], scalar.add(rec, i)), name=f"t_{name}")
                         for i, name in enumerate(RANGE_FIELDS))
    split = None
    if cfg.split_kv:
        split = (field["split"], field["splits"])
        lo, hi = _split_range(lo, hi, *split)
    return _Unit(b, h, g, q0, q_rows, s0, s1, q_row, k_row, seq, lse_row, TileRange(lo, hi), window, split,
                 tuple(full) if full else None)


def _snake(c: _Common, unit: SSAValue) -> SSAValue:
    """The rank (0 = longest) a block works on (`common.snake_rank`: the snake over the waves, so the
    blocks finish together)."""
    return snake_rank(unit, c.block_num, c.units)


def _q_view(c: _Common, u: _Unit) -> SSAValue:
    """The unit's Q block in GM: [q_rows, D]."""
    return pto.as_tensor(pto.add_ptr(c.args["q"], row_offset(u.q_row, u.h, c.heads, c.config.head)),
                         [u.q_rows, c.config.head], [_q_row_stride(c), 1], name="q_view")


def _for_sub(c: _Common, tile_keys: SSAValue, sub: int, body) -> None:
    """Run body(keys) for sub-tile `sub` of a tile with `tile_keys` valid keys, if it has keys
    (none past the end of a ragged last tile); sub-tile 0 of a visited tile always has."""
    if sub == 0:  # a visited tile has at least one key
        body(scalar.min(tile_keys, c.config.cube_s1, name="sub_keys"))
        return
    keys = clamp(scalar.sub(tile_keys, sub * c.config.cube_s1), 0, c.config.cube_s1)
    with pto.if_(scalar.gt(keys, 0)):
        body(keys)


def _unit_blocks(c: _Common, unit: SSAValue) -> list[tuple[_Unit, SSAValue | None]]:
    """The Q blocks work unit `unit` runs, each with the condition it exists under (None: always).
    With `q_pair` unit (b, h, i) is Q blocks 2i and 2i + 1 of (b, h), decoded as the unpaired units
    they would be; the second lies past S0 when S0 has an odd number of Q blocks and i is the last."""
    if not c.config.q_pair:
        return [(_unit(c, unit), None)]
    pairs = scalar.ceildiv(c.q_blocks, 2, name="pairs")
    second_block = scalar.add(scalar.mul(scalar.rem(unit, pairs), 2), 1, name="second_q_block")
    first = scalar.add(scalar.mul(scalar.div(unit, pairs), c.q_blocks), scalar.sub(second_block, 1), name="first_unit")
    has_second = scalar.lt(second_block, c.q_blocks, name="has_second")
    return [(_unit(c, first), None), (_unit(c, scalar.add(first, 1, name="second_unit")), has_second)]


# ======================================================================================
# Cube kernel: compute_qk and compute_pv
# ======================================================================================


@dataclass
class _CubeState:
    c: _Common
    u: _Unit
    tiles: dict[str, SSAValue]
    k_view: SSAValue | None  # K^T of this (sequence, kv head): [D, S1] DN view (None: paged, per tile)
    v_view: SSAValue | None  # V of this (sequence, kv head): [S1, D]

    def kv_views(self, t: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue | int]:
        """(K^T view, V view, column of tile t in them). A paged cache gives per-tile views of
        the page holding tile t (`page_size` is a multiple of TILE_S1)."""
        cfg, c = self.c.config, self.c
        if not cfg.page_size:
            return self.k_view, self.v_view, scalar.mul(t, cfg.tile_s1, name="tile_col")
        key0 = scalar.mul(t, cfg.tile_s1, name="tile_key")
        slot = scalar.add(scalar.mul(self.u.seq, scalar.index_cast(c.args["max_pages"])), scalar.div(key0, cfg.page_size))
        page = scalar.index_cast(pto.load_scalar(c.args["block_table"], slot), name="page")
        row = scalar.add(scalar.mul(page, cfg.page_size), scalar.rem(key0, cfg.page_size), name="page_row")
        off = row_offset(row, self.u.g, c.kv_heads, cfg.head)
        keys = _tile_keys(c, self.u, t)
        k_view = pto.as_tensor(pto.add_ptr(c.args["k"], off), [cfg.head, keys], [1, c.kv_stride], layout="dn", name="kT_page")
        v_view = pto.as_tensor(pto.add_ptr(c.args["v"], off), [keys, cfg.head], [c.kv_stride, 1], name="v_page")
        return k_view, v_view, 0


@dataclass
class _KVTile:
    """KV tile t as the cube reads it, derived once per tile for all of its sub-tiles."""

    keys: SSAValue  # valid keys of the tile
    k_view: SSAValue  # K^T [D, S1] (or of the page holding the tile)
    v_view: SSAValue  # V [S1, D]
    col: SSAValue | int  # first key of the tile in those views


def _kv_tile(s: _CubeState, t: SSAValue) -> _KVTile:
    k_view, v_view, col = s.kv_views(t)
    return _KVTile(_tile_keys(s.c, s.u, t), k_view, v_view, col)


def _sub_tiles(s: _CubeState, sub: int, *names: str) -> list[SSAValue]:
    """The buffers sub-tile `sub` uses of these cube tiles (`pipeline.cube_buffer_names`: with 64-key
    sub-tiles consecutive sub-tiles alternate between two, so one's loads overlap the other's matmul)."""
    return [s.tiles[cube_buffer_name(s.c.config, name, sub)] for name in names]


def compute_qk(s: _CubeState, kt: _KVTile, sub: int, entry: SSAValue, load: bool = True) -> None:
    """S[:, sub] = Q K_sub^T for tile t (summed over the D chunks), stored into column band `sub` of the QK slot
    (`load` False: K_sub is in L0B already, moved there for the unit's other Q block, `_pair_tile`)."""
    cfg, tl = s.c.config, s.tiles
    dc = cfg.d_chunk
    k_mat, k_right, s_acc = _sub_tiles(s, sub, "k_mat", "k_right", "s_acc")

    def body(keys: SSAValue) -> None:
        col0 = scalar.add(kt.col, sub * cfg.cube_s1, name="k_col") if sub else kt.col
        tile.set_valid(s_acc, s.u.q_rows, keys)
        for chunk, q_left in enumerate(chunk_names(cfg, "q_left")):
            if load:
                tile.set_valid(k_mat, dc, keys)
                pto.load(pto.slice_view(kt.k_view, [chunk * dc, col0], [dc, keys], name="k_part"), k_mat)
                tile.set_valid(k_right, dc, keys)
                tile.mov(k_mat, k_right)
            tile.matmul(tl[q_left], k_right, out=s_acc, accumulate=chunk > 0)
        band = pto.slice_view(entry, [0, sub * cfg.cube_s1], [s.u.q_rows, keys], name="qk_band")
        pto.store(s_acc, band)

    _for_sub(s.c, kt.keys, sub, body)


def compute_pv(s: _CubeState, kt: _KVTile, sub: int, p_entry: SSAValue, load: bool = True) -> None:
    """O_acc (+)= P[:, sub] V_sub for tile t: the sub-tiles are the K dimension of P V (`load` False: V_sub is in
    L1, loaded for the unit's other Q block, `_pair_tile`)."""
    cfg, tl = s.c.config, s.tiles
    p_mat, p_left, v_mat, v_right = _sub_tiles(s, sub, "p_mat", "p_left", "v_mat", "v_right")

    width = cfg.pv_cols if cfg.cube_rowsum else cfg.d_chunk  # V's columns in L1/L0B (ones after D)

    def body(keys: SSAValue) -> None:
        tile.set_valid(p_mat, cfg.cube_s0, keys)
        pto.load(pto.slice_view(p_entry, [0, sub * cfg.cube_s1], [cfg.cube_s0, keys], name="p_band"), p_mat)
        tile.set_valid(p_left, cfg.cube_s0, keys)
        tile.mov(p_mat, p_left)
        row0 = scalar.add(kt.col, sub * cfg.cube_s1, name="v_row") if sub else kt.col
        dc = cfg.d_chunk
        for chunk, o_acc in enumerate(chunk_names(cfg, "o_acc")):  # O[:, chunk] (+)= P V[:, chunk]
            tile.set_valid(v_mat, keys, dc)  # the load writes D columns; the ones after them stay
            if load:
                pto.load(pto.slice_view(kt.v_view, [row0, chunk * dc], [keys, dc], name="v_part"), v_mat)
            if width != dc:
                tile.set_valid(v_mat, keys, width)
            tile.set_valid(v_right, keys, width)
            tile.mov(v_mat, v_right)
            tile.matmul(p_left, v_right, out=tl[o_acc], accumulate=sub > 0)

    _for_sub(s.c, kt.keys, sub, body)


def _qk_tile(s: _CubeState, t: SSAValue) -> None:
    """QK for a whole logical tile (prologue)."""
    qk = s.c.config.pipes[0]
    entry = pto.talloc("cube", qk.pipe_id, entry_type(qk, "cube"), SPLIT, name="qk_entry")
    kt = _kv_tile(s, t)
    for sub in range(s.c.config.tile_factor):
        compute_qk(s, kt, sub, entry)
    pto.tpush("cube", qk.pipe_id, entry, SPLIT)


def _pv_tile(s: _CubeState, t: SSAValue, interleave_qk_tile: SSAValue | None) -> None:
    """PV(t), with QK(interleave_qk_tile) interleaved sub-tile by sub-tile (steady state).

    QK's first sub-tile comes before the pop of P(t): the cube works while the vectors finish
    P(t), and the FIX store of the previous PV(t - 1) overlaps a QK matmul, not a wait."""
    cfg = s.c.config
    qk, p, pv = cfg.pipes[:3]
    qk_entry = qk_kt = None
    if interleave_qk_tile is not None:
        qk_entry = pto.talloc("cube", qk.pipe_id, entry_type(qk, "cube"), SPLIT, name="qk_entry")
        qk_kt = _kv_tile(s, interleave_qk_tile)
        compute_qk(s, qk_kt, 0, qk_entry)
    p_entry = pto.tpop("cube", p.pipe_id, entry_type(p, "cube"), SPLIT, name="p_entry")
    pv_kt = _kv_tile(s, t)
    for sub in range(cfg.tile_factor):
        compute_pv(s, pv_kt, sub, p_entry)
        if qk_kt is not None and sub + 1 < cfg.tile_factor:
            compute_qk(s, qk_kt, sub + 1, qk_entry)
    pto.tfree("cube", p.pipe_id, p_entry, SPLIT)
    if qk_entry is not None:
        pto.tpush("cube", qk.pipe_id, qk_entry, SPLIT)
    pv_entry = pto.talloc("cube", pv.pipe_id, entry_type(pv, "cube"), SPLIT, name="pv_entry")
    width = cfg.pv_cols if cfg.cube_rowsum else cfg.d_chunk  # O's columns (and the row sums)
    for chunk, o_acc in enumerate(chunk_names(cfg, "o_acc")):
        pv_slot = pto.slice_view(pv_entry, [0, chunk * cfg.d_chunk], [cfg.cube_s0, width], name="pv_dst")
        pto.store(s.tiles[o_acc], pv_slot)
    pto.tpush("cube", pv.pipe_id, pv_entry, SPLIT)


def _scaled_q_entry(config: FAConfig) -> SSAValue:
    """The unit's scaled Q block from the vectors (prescale_q): the next entry of the Q pipe."""
    qp = config.pipes[3]
    return pto.tpop("cube", qp.pipe_id, entry_type(qp, "cube"), SPLIT, name="q_entry")


def _cube_kernel(config: FAConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, args)
    init_pipes(config.pipes, c.slot_bases, "cube", config.slot_num)
    tiles = {spec.name: alloc(spec) for spec in tile_plan(config) if spec.core == "cube"}
    if config.cube_rowsum:  # ones in every V staging buffer: the loads overwrite only its D columns
        one = scalar.const(1.0, parse_ir_type(config.in_dtype), name="one_h")
        for name in cube_buffer_names(config, "v_mat"):
            tile.set_valid(tiles[name], config.cube_s1, config.pv_cols)
            tile.fill(one, out=tiles[name])
    preload = config.qk_preload
    with pto.range(c.block_idx, c.units, c.block_num, name="unit") as unit:
        blocks = _unit_blocks(c, unit)
        u = blocks[0][0]
        q_src = _scaled_q_entry(config) if config.prescale_q else _q_view(c, u)
        k_view = v_view = None
        if not config.page_size:
            kv_off = row_offset(u.k_row, u.g, c.kv_heads, config.head)
            k_view = pto.as_tensor(pto.add_ptr(args["k"], kv_off), [config.head, u.s1], [1, c.kv_stride],
                                   layout="dn", name="kT_view")
            v_view = pto.as_tensor(pto.add_ptr(args["v"], kv_off), [u.s1, config.head], [c.kv_stride, 1], name="v_view")
        dc = config.d_chunk
        for chunk, (q_mat, q_left) in enumerate(zip(chunk_names(config, "q_mat"), chunk_names(config, "q_left"))):
            tile.set_valid(tiles[q_mat], u.q_rows, dc)
            pto.load(pto.slice_view(q_src, [0, chunk * dc], [u.q_rows, dc], name="q_part"), tiles[q_mat])
            if not config.q_pair:  # (paired blocks take turns in L0A: `_pair_tile`)
                tile.set_valid(tiles[q_left], u.q_rows, dc)
                tile.mov(tiles[q_mat], tiles[q_left])
        if config.prescale_q:
            pto.tfree("cube", config.pipes[3].pipe_id, q_src, SPLIT)
        for u_b, has in blocks[1:]:  # q_pair: the second block's Q into L1 (one D chunk)
            with _within(has):
                q_src = _scaled_q_entry(config) if config.prescale_q else _q_view(c, u_b)
                tile.set_valid(tiles["q_mat" + PAIR_SUFFIX], u_b.q_rows, dc)
                pto.load(pto.slice_view(q_src, [0, 0], [u_b.q_rows, dc], name="q_part"), tiles["q_mat" + PAIR_SUFFIX])
                if config.prescale_q:
                    pto.tfree("cube", config.pipes[3].pipe_id, q_src, SPLIT)
        s = _CubeState(c, u, tiles, k_view, v_view)
        single = dict(prologue=lambda t: _qk_tile(s, t), epilogue=lambda t: _pv_tile(s, t, None),
                      steady=lambda t: _pv_tile(s, t, scalar.add(t, preload, name="t_ahead")))
        if not config.q_pair:
            pipelined(u.tiles, preload, **single)
        else:
            _pair_unit(s, _CubeState(c, blocks[1][0], tiles, k_view, v_view), blocks[1][1], single)


def _pair_unit(a: _CubeState, b: _CubeState, has_b: SSAValue, single: dict) -> None:
    """`q_pair`'s unit: both blocks (`_pair_tile`), or the first alone (an odd Q block count's last) as unpaired."""
    preload = a.c.config.qk_preload
    with pto.if_(has_b):
        pipelined(a.u.tiles, preload, prologue=lambda t: _pair_tile(a, b, None, t),
                  steady=lambda t: _pair_tile(a, b, t, scalar.add(t, preload, name="t_ahead")),
                  epilogue=lambda t: _pair_tile(a, b, t, None))
    with pto.if_(scalar.ge(scalar.add(a.u.q0, a.c.config.cube_s0), a.u.s0, name="lone_block")):  # (not has_b)
        tile.set_valid(a.tiles["q_left"], a.u.q_rows, a.c.config.head)
        tile.mov(a.tiles["q_mat"], a.tiles["q_left"])
        pipelined(a.u.tiles, preload, **single)


def _pair_tile(a: _CubeState, b: _CubeState, t: SSAValue | None, qk_tile: SSAValue | None) -> None:
    """`q_pair`'s cube step: PV(t) of blocks a then b, interleaved with QK(qk_tile) of a and b sub-tile by sub-tile
    (None: none). b uses each K sub-tile from L0B right after a, each V sub-tile from a buffer of its own in L1
    (`pipeline.PAIR_RESIDENT`); each QK moves its block's Q into L0A, while the PV between two QKs works."""
    cfg = a.c.config
    qk, p, pv = cfg.pipes[:3]
    qk_steps = [(s, sub) for sub in range(cfg.tile_factor) for s in (a, b)] if qk_tile is not None else []
    pv_steps = [(s, sub) for s in (a, b) for sub in range(cfg.tile_factor)] if t is not None else []
    entries = {id(s): pto.talloc("cube", qk.pipe_id, entry_type(qk, "cube"), SPLIT, name="qk_entry")
               for s, _ in qk_steps[:2]}
    qk_kt = _kv_tile(a, qk_tile) if qk_steps else None
    pv_kt = _kv_tile(a, t) if pv_steps else None
    for j in range(max(len(qk_steps), len(pv_steps))):
        if j < len(qk_steps):
            s, sub = qk_steps[j]
            tile.set_valid(s.tiles["q_left"], s.u.q_rows, cfg.head)
            tile.mov(s.tiles["q_mat" + ("" if s is a else PAIR_SUFFIX)], s.tiles["q_left"])
            compute_qk(s, qk_kt, sub, entries[id(s)], load=s is a)
            if sub + 1 == cfg.tile_factor:
                pto.tpush("cube", qk.pipe_id, entries[id(s)], SPLIT)
        if j < len(pv_steps):
            s, sub = pv_steps[j]
            if sub == 0:
                p_entry = pto.tpop("cube", p.pipe_id, entry_type(p, "cube"), SPLIT, name="p_entry")
            compute_pv(s, pv_kt, sub, p_entry, load=s is a)
            if sub + 1 == cfg.tile_factor:
                pto.tfree("cube", p.pipe_id, p_entry, SPLIT)
                pv_entry = pto.talloc("cube", pv.pipe_id, entry_type(pv, "cube"), SPLIT, name="pv_entry")
                pto.store(s.tiles["o_acc"], pto.slice_view(pv_entry, [0, 0], [cfg.cube_s0, cfg.pv_cols], name="pv_dst"))
                pto.tpush("cube", pv.pipe_id, pv_entry, SPLIT)


# ======================================================================================
# Vector kernel: compute_p and compute_gu
# ======================================================================================


@dataclass
class _VecState:
    c: _Common
    u: _Unit
    tiles: dict[str, SSAValue]
    rows: dict[str, SSAValue]  # every per-row statistic as a [1, R] row (tile or treshape view)
    scale: SSAValue
    consts: dict[str, SSAValue]  # f32 constants
    ring: list[SSAValue]  # exp_max ring, as [1, R] row views
    row_base: SSAValue  # first row of this vector core within the Q block
    mod_state: dict | None = None  # the mods' values from their setup and unit hooks (`mods.UnitSite.state`)
    drop: dropout.DropoutTiles | None = None  # `dropout`: the generator's tiles
    drop_keys: tuple[SSAValue, SSAValue] | None = None  # `dropout`: seed and offset as i32


def _key_bias(s: _VecState, t: SSAValue, keys: SSAValue) -> None:
    """The key mask row of tile t as an additive bias in the softmax dtype: 0 for a key that
    takes part, the mask value (-3e38, or -30000 for an f16 softmax) else."""
    cfg, tl, c = s.c.config, s.tiles, s.c
    names = KEY_MASK_TILES[cfg.softmax_dtype]
    for name in names:
        tile.set_valid(tl[name], 1, keys)
    row0 = scalar.add(scalar.mul(s.u.b, scalar.index_cast(c.args["key_mask_stride"])), scalar.mul(t, cfg.tile_s1))
    view = pto.as_tensor(pto.add_ptr(c.args["key_mask"], row0), [1, keys], [keys, 1], name="kpm_view")
    pto.load(pto.slice_view(view, [0, 0], [1, keys], name="kpm_part"), tl["kpm_i8"])
    for src, dst in zip(names, names[1:]):  # i8 -> f16 (-> f32)
        tile.cvt(tl[src], out=tl[dst])
    bias = tl[names[-1]]
    tile.muls(bias, s.consts["unmask"], out=bias)  # 1 -> -mask, 0 -> 0
    tile.adds(bias, s.consts["mask"], out=bias)  # -> 0 / mask


def compute_p(s: _VecState, t: SSAValue) -> None:
    """Online softmax of tile t over row slices: P = exp(scale*S - m_new) in the input dtype; update m, l, alpha_t.
    (With `prescale_q` the scores arrive scaled: Q was scaled once per unit.)

    With two slice buffers the loop body handles one slice per buffer, so the load of a
    slice's scores overlaps the vector work on the other buffer's slice. alpha_t and l are
    finished once per tile over all of the core's rows, not once per slice.
    """
    cfg, tl, rows = s.c.config, s.tiles, s.rows
    qk, p = cfg.pipes[:2]
    vs0, nbuf = cfg.vec_s0, cfg.vec_buffers
    keys = _tile_keys(s.c, s.u, t)
    qk_entry = pto.tpop("vector", qk.pipe_id, entry_type(qk, "vector"), SPLIT, name="qk_entry")
    p_entry = pto.talloc("vector", p.pipe_id, entry_type(p, "vector"), SPLIT, name="p_entry")
    p_names = "p_half" if cfg.softmax_dtype == "f32" else "s_tile"  # an f16 softmax computes P in place
    buffers = list(zip(buffer_names(cfg, "s_tile"), buffer_names(cfg, p_names), buffer_names(cfg, "exp_tmp")))
    for name in ("red_tmp", *dict.fromkeys(n for names in buffers for n in names[:2] if n in tl)):  # (sub_f16: no s_tile)
        tile.set_valid(tl[name], vs0, keys)
    if cfg.key_padding:
        _key_bias(s, t, keys)
    with pto.range(0, cfg.slice_factor, name="slice") as sl:
        for b, (s_name, p_name, tmp_name) in enumerate(buffers):
            r0 = scalar.mul(scalar.add(scalar.mul(sl, nbuf), b), vs0, name="slice_row")
            _softmax_slice(s, t, r0, keys, tl.get(s_name), tl[p_name], tl[tmp_name], qk_entry, p_entry)
    if cfg.softmax_dtype != "f32":  # the tile's f16 statistics, exactly as f32
        tile.cvt(rows["m_all_h"], out=rows["m_new"])
        tile.cvt(rows["l_tile_h"], out=rows["l_tile"])
    tile.sub(rows["m_all"], rows["m_new"], out=rows["alpha_new"])
    tile.mov(rows["m_new"], rows["m_all"])
    tile.exp(rows["alpha_new"], out=rows["alpha_new"])  # alpha_t = exp(m_old - m_new)
    if not cfg.cube_rowsum:  # (the cube's row sums are rescaled and summed in compute_gu)
        tile.mul(rows["l_all"], rows["alpha_new"], out=rows["l_all"])
        tile.add(rows["l_all"], rows["l_tile"], out=rows["l_all"])  # l = alpha_t * l + l_t
    pto.tfree("vector", qk.pipe_id, qk_entry, SPLIT)
    pto.tpush("vector", p.pipe_id, p_entry, SPLIT)
    ring_select(s.ring, t, lambda ring_tile: tile.mov(rows["alpha_new"], ring_tile))


def _softmax_slice(s: _VecState, t: SSAValue, r0: SSAValue, keys: SSAValue, s_tile: SSAValue, p_half: SSAValue,
                   exp_tmp: SSAValue, qk_entry: SSAValue, p_entry: SSAValue) -> None:
    """Rows r0 .. r0 + vec_s0 of tile t: scores in, P out; the rows' new max and row sums go to
    m_new and l_tile (compute_p finishes alpha, m and l once per tile, over all rows)."""
    cfg, tl, rows = s.c.config, s.tiles, s.rows
    vs0 = cfg.vec_s0
    if cfg.softmax_dtype == "f32":
        m_old = tile.subview(rows["m_all"], 0, r0, 1, vs0, name="m_old")
        m_new = tile.subview(rows["m_new"], 0, r0, 1, vs0, name="m_new")
        l_new = None if cfg.cube_rowsum else tile.subview(rows["l_tile"], 0, r0, 1, vs0, name="l_new")
    else:  # the f16 running max (m_all_h) and the tile's f16 row sums (l_tile_h), see below
        m_run = tile.subview(rows["m_all_h"], 0, r0, 1, vs0, name="m_run")
        l_new = tile.subview(rows["l_tile_h"], 0, r0, 1, vs0, name="l_new")
    qk_rows = pto.slice_view(qk_entry, [r0, 0], [vs0, keys], name="qk_rows")
    if cfg.qk_dtype == cfg.softmax_dtype:
        pto.load(qk_rows, s_tile)
    else:  # input-dtype S into the P tile (free until P), widened to the f32 softmax's tile (sub_f16: stays f16)
        pto.load(qk_rows, p_half)
        if not cfg.sub_f16:
            tile.cvt(p_half, out=s_tile)
    if not cfg.prescale_q:
        tile.muls(s_tile, s.scale, out=s_tile)
    if cfg.score_mods:  # (positions only for mods that read them)
        i0, k0 = ((scalar.add(scalar.add(s.u.q0, s.row_base), r0, name="mod_q0"), scalar.mul(t, cfg.tile_s1, name="mod_k0"))
                  if any(m.indexed for m in cfg.score_mods) else (None, None))
        apply_forward(cfg, Site(s_tile, tl["red_tmp"], exp_tmp, tl, s.c.args, s.u.seq, s.u.h, i0, k0, keys, vs0,
                                cfg.tile_s1, t, s.u.full, mask_constants(cfg)[1], seq_lens=(s.u.s0, s.u.s1),
                                state=s.mod_state))
    if cfg.narrowing:
        cfg.narrowing.mask_forward(s.u.window, scalar.add(scalar.add(s.u.q0, s.row_base), r0, name="slice_q"), t, cfg.tile_s1,
                            s.u.s0, s.u.s1, keys, cfg.vec_s0, s_tile, tl["red_tmp"], s.consts["mask"])
    if cfg.key_padding:
        tile.col_expand_add(s_tile, tl[KEY_MASK_TILES[cfg.softmax_dtype][-1]], out=s_tile)
    if cfg.softmax_dtype == "f32":
        src, m_out = (p_half, tl["m_half"]) if cfg.input_row_max else (s_tile, tl["m_slice"])
        tile.row_max(src, out=m_out, tmp=tl["red_tmp"])
        if cfg.input_row_max:  # (the f16 scores' max: the same max on half the vector repeats), widened
            tile.cvt(tl["m_half"], out=tl.get("m_wide", tl["m_slice"]))
            if "m_wide" in tl:  # (8-row slices: its one valid column into m_slice)
                tile.row_max(tl["m_wide"], out=tl["m_slice"], tmp=exp_tmp)
        tile.max(rows["m_slice"], m_old, out=rows["m_slice"])  # m_new (finite: m_old starts at -3e38)
        tile.adds(rows["m_slice"], s.consts["zero"], out=m_new)  # a tmov into a subview is rejected
        if cfg.sub_f16:  # x = S - m_new, both f16 values, in f16; P = exp(x) in place
            m_wide, m_h = tl["m_slice"], tl["m_half"]
            if "m_bch" in tl:  # (8 rows: m_new as a row-major 32-byte block per row, 0 + m, then f16)
                m_wide, m_h = tl["m_bc"], tl["m_bch"]
                tile.fill(0.0, out=m_wide)
                tile.row_expand_add(m_wide, tl["m_slice"], out=m_wide, tmp=exp_tmp)
            tile.cvt(m_wide, out=m_h)
            tile.row_expand_sub(p_half, m_h, out=p_half)
            tile.exp(p_half, out=p_half)
        elif cfg.exp_f16:  # x = S - m_new in f32, rounded to f16, P = exp(x) on the f16 tile
            tile.row_expand_sub(s_tile, tl["m_slice"], out=s_tile, tmp=exp_tmp)
            tile.cvt(s_tile, out=p_half)
            tile.exp(p_half, out=p_half)
        else:
            tile.row_expand_expdif(s_tile, tl["m_slice"], out=s_tile, tmp=exp_tmp)  # P = exp(S - m_new)
        if l_new is not None:  # (else the cube sums the rows of P in its PV matmul)
            tile.row_sum(s_tile, out=tl["l_slice"], tmp=tl["red_tmp"])
        if cfg.dropout:  # (P's row sums are taken: they are of the undropped P, as flash-attn's)
            _drop(s, t, r0, keys, s_tile)
        if not cfg.exp_f16:
            tile.cvt(s_tile, out=p_half)
        if l_new is not None:
            tile.adds(rows["l_slice"], s.consts["zero"], out=l_new)
    else:
        # A max of f16 scores is an f16 value: the running max has an exact f16 copy (m_all_h),
        # updated here in place; P = exp(S - m_new) is f16 already. compute_p converts the
        # running max and the row sums (l_tile_h) to the f32 statistics once per tile.
        tile.row_max(s_tile, out=tl["m_half"], tmp=tl["red_tmp"])
        tile.max(rows["m_half"], m_run, out=rows["m_half"])  # m_new (finite: m_run starts at -65504)
        tile.adds(rows["m_half"], s.consts["zero_h"], out=m_run)
        tile.row_expand_expdif(s_tile, tl["m_half"], out=s_tile, tmp=exp_tmp)
        tile.row_sum(s_tile, out=tl["l_half"], tmp=tl["red_tmp"])
        tile.adds(rows["l_half"], s.consts["zero_h"], out=l_new)
    pto.store(p_half, pto.slice_view(p_entry, [r0, 0], [vs0, keys], name="p_rows"))


def _drop(s: _VecState, t: SSAValue, r0: SSAValue, keys: SSAValue, p_tile: SSAValue) -> None:
    """P of rows r0 .. r0 + vec_s0 of tile t times the dropout keep factor (`kernels/dropout.py`)."""
    cfg, c = s.c.config, s.c
    i0 = scalar.add(scalar.add(s.u.q0, s.row_base), r0, name="drop_i0")
    j0 = scalar.mul(t, cfg.tile_s1, name="drop_j0")
    bh = scalar.index_cast(scalar.add(scalar.mul(s.u.seq, c.heads), s.u.h), I32, name="drop_bh")
    dropout.apply(p_tile, s.drop, s.drop_keys[0], s.drop_keys[1], bh, i0, j0, cfg.vec_s0, keys, c.args["drop_cut"])


def compute_gu(s: _VecState, t: SSAValue) -> None:
    """O = alpha_t * O + PV(t) on this core's rows."""
    cfg, tl = s.c.config, s.tiles
    pv = cfg.pipes[2]
    pv_entry = pto.tpop("vector", pv.pipe_id, entry_type(pv, "vector"), SPLIT, name="pv_entry")
    pto.load(pto.slice_view(pv_entry, [0, 0], [cfg.vec_rows, cfg.head], name="pv_rows"), tl["pv_tile"])
    if cfg.cube_rowsum:  # rowsum(P_t) in the slot's last columns
        pto.load(pto.slice_view(pv_entry, [0, cfg.head], [cfg.vec_rows, ROWSUM_COLS], name="l_rows"), tl["l_pv"])
    pto.tfree("vector", pv.pipe_id, pv_entry, SPLIT)
    ring_select(s.ring, t, lambda ring_tile: tile.mov(ring_tile, s.rows["alpha_cur"]))
    # (with the cube's row sums, no hidden scratch: the broadcast goes to compute_p's exp_tmp)
    tmp = tl.get("bcast_tmp", tl[buffer_names(cfg, "exp_tmp")[0]]) if cfg.cube_rowsum or cfg.dropout or cfg.q_pair else None
    tile.row_expand_mul(tl["o_tile"], tl["alpha_cur"], out=tl["o_tile"], tmp=tmp)
    tile.add(tl["o_tile"], tl["pv_tile"], out=tl["o_tile"])
    if cfg.cube_rowsum:  # l = alpha_t * l + rowsum(P_t), in each of the ROWSUM_COLS equal columns
        tile.row_expand_mul(tl["l_acc"], tl["alpha_cur"], out=tl["l_acc"], tmp=tmp)
        tile.add(tl["l_acc"], tl["l_pv"], out=tl["l_acc"])


def _finish(s: _VecState, l_col: SSAValue) -> None:
    """O = O / l, O = 0 and LSE = +inf for rows that saw no key; store this core's valid rows.

    Split-KV: an entry whose unit has more than one split writes fp32 O and LSE of its split to
    the partials instead, with LSE = -inf for rows that saw no key, so that `fa_reduce` weights
    them exp(-inf) = 0; a unit of one split stores its result as the unsplit kernel does."""
    cfg, tl, rows = s.c.config, s.tiles, s.rows
    k = s.consts
    if cfg.score_mods:  # (compute_p's first exp_tmp, free here, is the row-broadcast scratch: no hidden one)
        apply_finish(cfg, FinishSite(rows["m_all"], rows["l_all"], tl["o_tile"], tl, s.c.args, s.u.seq, s.u.h,
                                     cfg.vec_rows, tl[buffer_names(cfg, "exp_tmp")[0]],
                                     s.u.split[0] if cfg.split_kv else None))
    if cfg.needs_row_fix:
        # row_ok = 1 where m is a real score, 0 where it is still -3e38 (no visible key).
        tile.adds(rows["m_all"], k["half_pos"], out=tl["row_ok"])
        tile.maxs(tl["row_ok"], k["zero"], out=tl["row_ok"])
        tile.mins(tl["row_ok"], k["one"], out=tl["row_ok"])
        tile.maxs(rows["l_all"], k["one"], out=tl["l_fix"])  # l >= 1 wherever a key was seen
        tile.div(tl["l_fix"], tl["row_ok"], out=tl["l_fix"])  # +inf for empty rows: O / inf = 0
    if cfg.dropout:  # kept entries weigh 1 / (1 - p); the broadcast's scratch is exp_tmp (`rowexpand_ops`)
        tile.muls(tl["o_tile"], s.c.args["drop_scale"], out=tl["o_tile"])
    tmp = tl.get("bcast_tmp", tl[buffer_names(cfg, "exp_tmp")[0]]) if cfg.dropout or cfg.q_pair else None
    tile.row_expand_div(tl["o_tile"], l_col, out=tl["o_tile"], tmp=tmp)
    if cfg.lse or cfg.split_kv:
        lse = tl["lse_row"]
        tile.set_valid(lse, 1, cfg.vec_rows)
        tile.maxs(rows["l_all"], k["one"], out=lse)
        tile.log(lse, out=lse)
        tile.add(lse, rows["m_all"], out=lse)  # m + ln(l)
        if cfg.needs_row_fix:
            tile.rdivs(k["one"], tl["row_ok"], out=tl["row_ok"])  # 1 or +inf
            tile.adds(tl["row_ok"], k["minus_one"], out=tl["row_ok"])  # 0 or +inf
    valid_rows = clamp(scalar.sub(s.u.q_rows, s.row_base), 0, cfg.vec_rows)
    if not cfg.split_kv:
        _store(s, valid_rows, partial=False)
        return
    with pto.if_(scalar.gt(s.u.split[1], 1, name="split_unit")):
        _store(s, valid_rows, partial=True)
    with pto.if_(scalar.eq(s.u.split[1], 1)):
        _store(s, valid_rows, partial=False)


def _store(s: _VecState, valid_rows: SSAValue, partial: bool) -> None:
    """Store O (and LSE) of the valid rows: the result in the output dtype (LSE + inf for empty
    rows), or (`partial`) fp32 to this split's partials (LSE - inf for empty rows)."""
    cfg, tl, c, u = s.c.config, s.tiles, s.c, s.u
    o_base, lse_base = _out_bases(c, u) if partial else (c.args["o"], c.args.get("lse"))
    write_lse = cfg.lse or partial
    if write_lse and cfg.needs_row_fix:
        fix = tile.sub if partial else tile.add
        fix(tl["lse_row"], tl["row_ok"], out=tl["lse_row"])
    with pto.if_(scalar.gt(valid_rows, 0)):
        if cfg.gqa_pack:
            o_off = row_offset(u.q_row, scalar.add(u.h, s.row_base, name="o_head"), c.heads, cfg.head)
        else:
            o_off = row_offset(scalar.add(u.q_row, s.row_base, name="o_row"), u.h, c.heads, cfg.head)
        o_view = pto.as_tensor(pto.add_ptr(o_base, o_off), [valid_rows, cfg.head], [_q_row_stride(c), 1], name="o_view")
        o_part = pto.slice_view(o_view, [0, 0], [valid_rows, cfg.head], name="o_rows")
        tile.set_valid(tl["o_tile"], valid_rows, cfg.head)
        if cfg.out_dtype == "f32" or partial:
            pto.store(tl["o_tile"], o_part)
        else:
            tile.set_valid(tl["o_out"], valid_rows, cfg.head)
            tile.cvt(tl["o_tile"], out=tl["o_out"])
            pto.store(tl["o_out"], o_part)
        if write_lse:
            lse_view = pto.as_tensor(pto.add_ptr(lse_base, scalar.add(u.lse_row, s.row_base)), [1, valid_rows],
                                     [valid_rows, 1], name="lse_view")
            tile.set_valid(tl["lse_row"], 1, valid_rows)
            pto.store(tl["lse_row"], pto.slice_view(lse_view, [0, 0], [1, valid_rows], name="lse_rows"))


def _vector_kernel(config: FAConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, args)
    init_pipes(config.pipes, c.slot_bases, "vector", config.slot_num)
    specs = [spec for spec in tile_plan(config) if spec.core == "vector"]
    tiles = {spec.name: alloc(spec) for spec in specs}
    # [R, 1] column statistics get a [1, R] row view for the elementwise ops; the
    # [1, R] running statistics are rows already (compute_p slices them).
    rows = {
        spec.name: tile.reshape(tiles[spec.name], 1, spec.rows, name=f"{spec.name}_row")
        for spec in specs
        if spec.cols == 1
    }
    rows.update({spec.name: tiles[spec.name] for spec in specs if spec.rows == 1 and spec.loc == "vec"})
    divisor = "l_fix" if config.needs_row_fix else "l_all"
    l_col = tile.reshape(tiles[divisor], config.vec_rows, 1, name=f"{divisor}_col", blayout="col_major")
    l_all_col = l_col if divisor == "l_all" else tile.reshape(tiles["l_all"], config.vec_rows, 1, name="l_all_col",
                                                              blayout="col_major")
    ring = [rows[f"exp_ring{r}"] for r in range(config.exp_ring)]
    start, mask, half = mask_constants(config)
    # The mask value and its negation scale softmax-dtype tiles: scalars of the tiles' element
    # type (docs/sources.md §3.4); the running-max start and row-fix threshold meet the f32 statistics.
    # One constant per (value, type): the f32 mask is the running-max start.
    mask_type = F16 if config.softmax_dtype == "f16" else F32
    consts: dict[str, SSAValue] = {}
    made: dict[tuple[float, str], SSAValue] = {}
    for name, value, type_ in (("neg", start, F32), ("zero", 0.0, F32), ("one", 1.0, F32),
                               ("minus_one", -1.0, F32), ("half_pos", half, F32),
                               ("mask", mask, mask_type), ("unmask", -mask, mask_type),
                               *((("zero_h", 0.0, F16), ("neg_h", start, F16)) if mask_type is F16 else ())):
        key = (value, str(type_))
        if key not in made:
            made[key] = scalar.const(value, type_, name=name)
        consts[name] = made[key]
    row_base = scalar.mul(pto.get_subblock_idx(), config.vec_rows, name="row_base")
    mod_state: dict = {}
    apply_setup(config.score_mods, UnitSite(tiles, args, mod_state, config.vec_s0))
    drop = drop_keys = None
    if config.dropout:  # the generator works in red_tmp (free once a slice's row sums are taken)
        drop = dropout.DropoutTiles.make(tiles["drop_bits"], tiles["red_tmp"], tiles["alibi_i32" if "alibi_i32" in tiles else "drop_cols"],
                                         tiles["drop_rows"],
                                         tiles["drop_rows_tmp"], config.vec_s0, config.tile_s1)
        drop_keys = tuple(scalar.index_cast(scalar.index_cast(args[n]), I32, name=n) for n in ("drop_seed", "drop_offset"))
    if config.pair_o_view:
        tiles["o_out"] = tile.reshape(tiles["p_half"], config.vec_rows, config.head, name="o_out", v_row=DYN, v_col=DYN)
    views = [(tiles, rows, ring, l_col, l_all_col)]
    if config.q_pair:  # the second block's own state, under the names the stages use
        own = [n for n in (*PAIR_STATE, *(f"exp_ring{r}" for r in range(config.exp_ring))) if n in tiles]
        rows_b = {**rows, **{n: rows[n + PAIR_SUFFIX] for n in own if n in rows}}
        l_col_b = tile.reshape(tiles["l_all" + PAIR_SUFFIX], config.vec_rows, 1, name="l_all_b_col", blayout="col_major")
        views.append(({**tiles, **{n: tiles[n + PAIR_SUFFIX] for n in own}}, rows_b,
                      [rows_b[f"exp_ring{r}"] for r in range(config.exp_ring)], l_col_b, l_col_b))
    preload = config.qk_preload
    if config.prescale_q:
        with pto.if_(scalar.lt(c.block_idx, c.units)):
            for u_q, has in _unit_blocks(c, c.block_idx):
                with _within(has):
                    push_scaled_q(c.config, tiles, args["scale"], row_base, u_q.q_rows, _q_view(c, u_q))
    with pto.range(c.block_idx, c.units, c.block_num, name="unit") as unit:
        if config.prescale_q:
            following = scalar.add(unit, c.block_num, name="next_unit")
            with pto.if_(scalar.lt(following, c.units)):
                for u_q, has in _unit_blocks(c, following):
                    with _within(has):
                        push_scaled_q(c.config, tiles, args["scale"], row_base, u_q.q_rows, _q_view(c, u_q))
        states = []
        for (u, has), (tl, rw, rg, lc, lac) in zip(_unit_blocks(c, unit), views):
            s = _VecState(c, u, tl, rw, args["scale"], consts, rg, row_base, mod_state)
            s.drop, s.drop_keys = drop, drop_keys
            apply_unit(config.score_mods, UnitSite(tl, args, mod_state, config.vec_s0, u.seq, u.h))
            with _within(has):
                tile.fill(consts["neg"], out=rw["m_all"])
                if config.softmax_dtype != "f32":
                    tile.fill(consts["neg_h"], out=rw["m_all_h"])
                tile.fill(consts["zero"], out=rw["l_all"])
                tile.set_valid(tl["o_tile"], config.vec_rows, config.head)
                tile.fill(consts["zero"], out=tl["o_tile"])
                if config.cube_rowsum:
                    tile.fill(consts["zero"], out=tl["l_acc"])
            states.append((s, has, lc, lac))
        fused(states[0][0].u.tiles, preload, consume=lambda t: _each(states, lambda s: compute_gu(s, t)),
              produce=lambda t: _each(states, lambda s: compute_p(s, t)))
        for s, has, lc, lac in states:
            with _within(has):
                if config.cube_rowsum:  # l: the accumulated row sums, ROWSUM_COLS equal columns -> one
                    tile.row_max(s.tiles["l_acc"], out=lac, tmp=tiles["l_pv"])
                _finish(s, lc)


def _each(states: list, stage) -> None:
    """A vector stage for each Q block of the unit, in the order the cube handles them (`_pair_step`)."""
    for s, has, *_ in states:
        with _within(has):
            stage(s)


# ======================================================================================
# Module
# ======================================================================================

_CUBE_ARGS = ("slots", "slots_h", "q", "k", "v", "units", "block_table", "batch", "heads", "kv_heads", "s0", "s1",
              "num_units", "max_pages", "win_left", "win_right", "tile_ranges")
_VECTOR_ARGS = ("slots", "slots_h", "q", "o", "lse", "partials", "key_mask", "units", "batch", "heads", "kv_heads", "s0", "s1",
                "num_units", "scale", "win_left", "win_right", "key_mask_stride", "tile_ranges", "drop_seed", "drop_offset", "drop_cut", "drop_scale")


def build_fa(config: FAConfig) -> builtin.ModuleOp:
    """The mixed kernel: entry (set_ffts + calls), cube function, vector function."""
    km = KernelModule(config.target)
    entry_types = {a.name: parse_ir_type(a.ir_type) for a in argspec.entry_args(config)}
    vector_reads_q = config.prescale_q  # the vectors scale Q; the cube reads it from the Q pipe
    cube_args = [n for n in _CUBE_ARGS if n in entry_types and (n != "q" or not vector_reads_q)]
    vector_args = [n for n in _VECTOR_ARGS if n in entry_types and (n != "q" or vector_reads_q)]
    vector_args += [p.name for p in mod_params(config.score_mods)]
    with km.function(argspec.ENTRY_NAME, list(entry_types.items()), entry=True) as args:
        pto.set_ffts(args["ffts"])
        pto.call(argspec.CUBE_FUNC_NAME, [args[n] for n in cube_args])
        pto.call(argspec.VECTOR_FUNC_NAME, [args[n] for n in vector_args])
    with km.function(argspec.CUBE_FUNC_NAME, [(n, entry_types[n]) for n in cube_args], kind="cube") as args:
        _cube_kernel(config, args)
    with km.function(argspec.VECTOR_FUNC_NAME, [(n, entry_types[n]) for n in vector_args], kind="vector") as args:
        _vector_kernel(config, args)
    return km.module


def emit_fa(config: FAConfig) -> str:
    """The `.pto` text of the kernel for `config`."""
    return print_pto(build_fa(config))
