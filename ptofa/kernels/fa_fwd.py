"""The FlashAttention-2 forward kernel as a four-stage cube/vector pipeline.

    compute_qk  (cube)    S = Q K^T, one CUBE_S1-wide sub-tile at a time -> QK slot
    compute_p   (vectors) online softmax over row slices, P in fp16   -> P slot
    compute_pv  (cube)    PV = P V, accumulated over the sub-tiles    -> PV slot
    compute_gu  (vectors) O = alpha_t * O + PV; at the end O = O / l

Schedule (fa-pipeline.md section 7, `common.pipelined`), with P = QK_PRELOAD and
N = S1 / TILE_S1:

    cube:    QK(0..P-1) | for t < N-P: PV(t) interleaved with QK(t+P) | PV(N-P..N-1)
    vectors: P (0..P-1) | for t < N-P: GU(t) then softmax(t+P)          | GU(N-P..N-1)

The rescale factor alpha_t of softmax(t) is kept in an exp_max ring of P tiles
(slot t % P, chosen with an `scf.if` chain); GU(t) runs before softmax(t+P)
because both touch slot t % P.

Work units (batch, head, 128-row Q block) are shared by the launched blocks in a
persistent loop; the three pipes are initialised once per block and every unit
streams through them. Each vector core owns 64 of the 128 rows (split = 1).

`build_fa(config)` returns the module; `emit_fa(config)` its text.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import builtin
from xdsl.ir import SSAValue

from ptofa import argspec
from ptofa.api import F32, KernelModule, parse_ir_type, pto, scalar, tile, tile_type
from ptofa.kernels.common import (
    SPLIT,
    TileRange,
    Unit,
    bsnd_offset,
    decode_unit,
    entry_type,
    init_pipes,
    pipelined,
    ring_select,
)
from ptofa.pipeline import FAConfig, TileSpec, tile_plan
from ptofa.textio import print_pto

NEG_INIT = -3.0e38  # running-max start: finite, so exp(m_old - m_new) never sees inf - inf


def _alloc(spec: TileSpec) -> SSAValue:
    t = tile_type(spec.loc, spec.rows, spec.cols, spec.dtype, blayout=spec.blayout, slayout=spec.slayout, fractal=spec.fractal)
    return pto.alloc_tile(t, spec.name)


@dataclass
class _Common:
    """Per-function values both kernels derive the same way."""

    config: FAConfig
    block_idx: SSAValue
    block_num: SSAValue
    units: SSAValue  # B * N * (S0 / 128)
    num_tiles: SSAValue  # S1 / TILE_S1
    q_blocks: SSAValue
    heads: SSAValue
    s0: SSAValue
    s1: SSAValue
    row_stride: SSAValue  # N * D: elements between two sequence positions in BSND
    slot_bases: dict[str, SSAValue]  # per-pipe slot ring base pointer of this block

    def decode(self, unit: SSAValue) -> Unit:
        return decode_unit(unit, self.q_blocks, self.heads)

    def offset(self, b: SSAValue, seq_len: SSAValue, row: SSAValue | None, h: SSAValue) -> SSAValue:
        return bsnd_offset(b, seq_len, row, h, self.heads, self.config.head)

    def tiles(self) -> TileRange:
        """Every S1 tile of a unit (the steady state ends P tiles before the last)."""
        return TileRange(0, scalar.sub(self.num_tiles, self.config.qk_preload, name="steady_end"), self.num_tiles)


def _common(config: FAConfig, args: dict[str, SSAValue]) -> _Common:
    """Runtime sizes, unit count and this block's slot-ring bases (same on both kernels)."""
    batch = scalar.index_cast(args["batch"], name="batch")
    heads = scalar.index_cast(args["heads"], name="heads")
    s0 = scalar.index_cast(args["s0"], name="s0")
    s1 = scalar.index_cast(args["s1"], name="s1")
    q_blocks = scalar.div(s0, config.cube_s0, name="q_blocks")
    units = scalar.mul(scalar.mul(batch, heads), q_blocks, name="units")
    num_tiles = scalar.div(s1, config.tile_s1, name="num_tiles")
    row_stride = scalar.mul(heads, config.head, name="row_stride")
    block_idx = pto.get_block_idx()
    block_num = pto.get_block_num()
    # Slot workspace per block: [QK ring | PV ring] in f32 elements, then the P ring (f16).
    qk, p, pv = config.pipes
    f32_off = scalar.mul(block_idx, config.gm_slot_f32_per_block, name="slot_f32_off")
    qk_base = pto.add_ptr(args["slots"], f32_off, name="qk_ring")
    pv_base = pto.add_ptr(qk_base, qk.slot_bytes * config.slot_num // 4, name="pv_ring")
    f16_off = scalar.mul(block_idx, 2 * config.gm_slot_f32_per_block, name="slot_f16_off")
    p_block = pto.add_ptr(args["slots_h"], f16_off, name="slot_f16_block")
    p_base = pto.add_ptr(p_block, (qk.slot_bytes + pv.slot_bytes) * config.slot_num // 2, name="p_ring")
    return _Common(config, block_idx, block_num, units, num_tiles, q_blocks, heads, s0, s1, row_stride,
                   {"qk": qk_base, "p": p_base, "pv": pv_base})


# ======================================================================================
# Cube kernel: compute_qk and compute_pv
# ======================================================================================


@dataclass
class _CubeState:
    c: _Common
    tiles: dict[str, SSAValue]
    k_view: SSAValue  # K^T of this (batch, head): [D, S1] DN view
    v_view: SSAValue  # V of this (batch, head): [S1, D]


def compute_qk(s: _CubeState, t: SSAValue, sub: int, entry: SSAValue) -> None:
    """S[:, sub] = Q K_sub^T for tile t, stored into column band `sub` of the QK slot."""
    cfg, tl = s.c.config, s.tiles
    col0 = scalar.add(scalar.mul(t, cfg.tile_s1), sub * cfg.cube_s1, name="k_col")
    k_part = pto.slice_view(s.k_view, [0, col0], [cfg.head, cfg.cube_s1], name="k_part")
    pto.load(k_part, tl["k_mat"])
    tile.mov(tl["k_mat"], tl["k_right"])
    tile.matmul(tl["q_left"], tl["k_right"], out=tl["s_acc"])
    band = pto.slice_view(entry, [0, sub * cfg.cube_s1], [cfg.cube_s0, cfg.cube_s1], name="qk_band")
    pto.store(tl["s_acc"], band)


def compute_pv(s: _CubeState, t: SSAValue, sub: int, p_entry: SSAValue) -> None:
    """O_acc (+)= P[:, sub] V_sub for tile t: the sub-tiles are the K dimension of P V."""
    cfg, tl = s.c.config, s.tiles
    p_band = pto.slice_view(p_entry, [0, sub * cfg.cube_s1], [cfg.cube_s0, cfg.cube_s1], name="p_band")
    pto.load(p_band, tl["p_mat"])
    tile.mov(tl["p_mat"], tl["p_left"])
    row0 = scalar.add(scalar.mul(t, cfg.tile_s1), sub * cfg.cube_s1, name="v_row")
    v_part = pto.slice_view(s.v_view, [row0, 0], [cfg.cube_s1, cfg.head], name="v_part")
    pto.load(v_part, tl["v_mat"])
    tile.mov(tl["v_mat"], tl["v_right"])
    if sub == 0:
        tile.matmul(tl["p_left"], tl["v_right"], out=tl["o_acc"])
    else:
        tile.matmul_acc(tl["o_acc"], tl["p_left"], tl["v_right"], out=tl["o_acc"])


def _qk_tile(s: _CubeState, t: SSAValue) -> None:
    """QK for a whole logical tile (prologue)."""
    qk = s.c.config.pipes[0]
    entry = pto.talloc("cube", qk.pipe_id, entry_type(qk, "cube"), SPLIT, name="qk_entry")
    for sub in range(s.c.config.tile_factor):
        compute_qk(s, t, sub, entry)
    pto.tpush("cube", qk.pipe_id, entry, SPLIT)


def _pv_tile(s: _CubeState, t: SSAValue, interleave_qk_tile: SSAValue | None) -> None:
    """PV(t), with QK(interleave_qk_tile) issued between its sub-tiles (steady state)."""
    cfg = s.c.config
    qk, p, pv = cfg.pipes
    p_entry = pto.tpop("cube", p.pipe_id, entry_type(p, "cube"), SPLIT, name="p_entry")
    qk_entry = None
    if interleave_qk_tile is not None:
        qk_entry = pto.talloc("cube", qk.pipe_id, entry_type(qk, "cube"), SPLIT, name="qk_entry")
    for sub in range(cfg.tile_factor):
        compute_pv(s, t, sub, p_entry)
        if qk_entry is not None:
            compute_qk(s, interleave_qk_tile, sub, qk_entry)
    pto.tfree("cube", p.pipe_id, p_entry, SPLIT)
    if qk_entry is not None:
        pto.tpush("cube", qk.pipe_id, qk_entry, SPLIT)
    pv_entry = pto.talloc("cube", pv.pipe_id, entry_type(pv, "cube"), SPLIT, name="pv_entry")
    pv_slot = pto.slice_view(pv_entry, [0, 0], [cfg.cube_s0, cfg.head], name="pv_dst")
    pto.store(s.tiles["o_acc"], pv_slot)
    pto.tpush("cube", pv.pipe_id, pv_entry, SPLIT)


def _cube_kernel(config: FAConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, args)
    init_pipes(config.pipes, c.slot_bases, "cube", config.slot_num)
    tiles = {spec.name: _alloc(spec) for spec in tile_plan(config) if spec.core == "cube"}
    preload = config.qk_preload
    tile_range = c.tiles()
    with pto.range(c.block_idx, c.units, c.block_num, name="unit") as unit:
        u = c.decode(unit)
        q_row = scalar.mul(u.q_block, config.cube_s0)
        q_view = pto.as_tensor(pto.add_ptr(args["q"], c.offset(u.batch, c.s0, q_row, u.head)),
                               [config.cube_s0, config.head], [c.row_stride, 1], name="q_view")
        kv_off = c.offset(u.batch, c.s1, None, u.head)
        k_view = pto.as_tensor(pto.add_ptr(args["k"], kv_off), [config.head, c.s1], [1, c.row_stride],
                               layout="dn", name="kT_view")
        v_view = pto.as_tensor(pto.add_ptr(args["v"], kv_off), [c.s1, config.head], [c.row_stride, 1], name="v_view")
        pto.load(pto.slice_view(q_view, [0, 0], [config.cube_s0, config.head], name="q_part"), tiles["q_mat"])
        tile.mov(tiles["q_mat"], tiles["q_left"])
        s = _CubeState(c, tiles, k_view, v_view)
        pipelined(
            tile_range, preload,
            prologue=lambda t: _qk_tile(s, t),
            steady=lambda t: _pv_tile(s, t, scalar.add(t, preload, name="t_ahead")),
            epilogue=lambda t: _pv_tile(s, t, None),
        )


# ======================================================================================
# Vector kernel: compute_p and compute_gu
# ======================================================================================


@dataclass
class _VecState:
    c: _Common
    tiles: dict[str, SSAValue]
    rows: dict[str, SSAValue]  # every per-row statistic as a [1, R] row (tile or treshape view)
    scale: SSAValue
    zero: SSAValue  # f32 0.0: `tadds x, 0` copies into a subview (tmov needs equal shapes)
    ring: list[SSAValue]  # exp_max ring, as [1, R] row views


def compute_p(s: _VecState, t: SSAValue) -> None:
    """Online softmax of tile t over row slices: P = exp(scale*S - m_new) in fp16, update m, l, alpha_t."""
    cfg, tl, rows = s.c.config, s.tiles, s.rows
    qk, p, _ = cfg.pipes
    vs0 = cfg.vec_s0
    qk_entry = pto.tpop("vector", qk.pipe_id, entry_type(qk, "vector"), SPLIT, name="qk_entry")
    p_entry = pto.talloc("vector", p.pipe_id, entry_type(p, "vector"), SPLIT, name="p_entry")
    with pto.range(0, cfg.tile_factor, name="slice") as sl:
        r0 = scalar.mul(sl, vs0, name="slice_row")
        m_old = tile.subview(rows["m_all"], 0, r0, 1, vs0, name="m_old")
        l_run = tile.subview(rows["l_all"], 0, r0, 1, vs0, name="l_run")
        alpha = tile.subview(rows["alpha_new"], 0, r0, 1, vs0, name="alpha")
        pto.load(pto.slice_view(qk_entry, [r0, 0], [vs0, cfg.tile_s1], name="qk_rows"), tl["s_tile"])
        tile.muls(tl["s_tile"], s.scale, out=tl["s_tile"])
        tile.row_max(tl["s_tile"], tl["red_tmp"], out=tl["m_slice"])
        tile.max(rows["m_slice"], m_old, out=rows["m_slice"])  # m_new
        tile.sub(m_old, rows["m_slice"], out=alpha)
        tile.exp(alpha, out=alpha)  # alpha_t = exp(m_old - m_new)
        tile.adds(rows["m_slice"], s.zero, out=m_old)  # m_old := m_new (a tmov into a subview is rejected)
        tile.mul(l_run, alpha, out=l_run)
        tile.row_expand_sub(tl["s_tile"], tl["m_slice"], out=tl["s_tile"])
        tile.exp(tl["s_tile"], out=tl["s_tile"])
        tile.row_sum(tl["s_tile"], tl["red_tmp"], out=tl["l_slice"])
        tile.add(l_run, rows["l_slice"], out=l_run)
        tile.cvt(tl["s_tile"], out=tl["p_half"])
        pto.store(tl["p_half"], pto.slice_view(p_entry, [r0, 0], [vs0, cfg.tile_s1], name="p_rows"))
    pto.tfree("vector", qk.pipe_id, qk_entry, SPLIT)
    pto.tpush("vector", p.pipe_id, p_entry, SPLIT)
    ring_select(s.ring, t, lambda ring_tile: tile.mov(rows["alpha_new"], ring_tile))


def compute_gu(s: _VecState, t: SSAValue) -> None:
    """O = alpha_t * O + PV(t) on this core's rows."""
    cfg, tl = s.c.config, s.tiles
    pv = cfg.pipes[2]
    pv_entry = pto.tpop("vector", pv.pipe_id, entry_type(pv, "vector"), SPLIT, name="pv_entry")
    pto.load(pto.slice_view(pv_entry, [0, 0], [cfg.vec_rows, cfg.head], name="pv_rows"), tl["pv_tile"])
    pto.tfree("vector", pv.pipe_id, pv_entry, SPLIT)
    ring_select(s.ring, t, lambda ring_tile: tile.mov(ring_tile, s.rows["alpha_cur"]))
    tile.row_expand_mul(tl["o_tile"], tl["alpha_cur"], out=tl["o_tile"])
    tile.add(tl["o_tile"], tl["pv_tile"], out=tl["o_tile"])


def _vector_kernel(config: FAConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, args)
    init_pipes(config.pipes, c.slot_bases, "vector", config.slot_num)
    specs = [spec for spec in tile_plan(config) if spec.core == "vector"]
    tiles = {spec.name: _alloc(spec) for spec in specs}
    # [R, 1] column statistics get a [1, R] row view for the elementwise ops; the
    # [1, R] running statistics are rows already (compute_p slices them).
    rows = {
        spec.name: tile.reshape(tiles[spec.name], 1, spec.rows, name=f"{spec.name}_row")
        for spec in specs
        if spec.cols == 1
    }
    rows.update({spec.name: tiles[spec.name] for spec in specs if spec.rows == 1})
    l_col = tile.reshape(tiles["l_all"], config.vec_rows, 1, name="l_all_col", blayout="col_major")
    ring = [rows[f"exp_ring{r}"] for r in range(config.exp_ring)]
    neg = scalar.const(NEG_INIT, F32, name="neg_init")
    zero = scalar.const(0.0, F32, name="zero")
    s = _VecState(c, tiles, rows, args["scale"], zero, ring)
    sub_block = pto.get_subblock_idx()
    preload = config.qk_preload
    tile_range = c.tiles()
    with pto.range(c.block_idx, c.units, c.block_num, name="unit") as unit:
        u = c.decode(unit)
        tile.fill(neg, out=rows["m_all"])
        tile.fill(zero, out=rows["l_all"])
        tile.fill(zero, out=tiles["o_tile"])
        def steady(t: SSAValue) -> None:  # GU(t) before softmax(t+P): both touch ring slot t % P
            compute_gu(s, t)
            compute_p(s, scalar.add(t, preload, name="t_ahead"))

        pipelined(tile_range, preload, prologue=lambda t: compute_p(s, t), steady=steady,
                  epilogue=lambda t: compute_gu(s, t))
        tile.row_expand_div(tiles["o_tile"], l_col, out=tiles["o_tile"])
        o_row = scalar.add(scalar.mul(u.q_block, config.cube_s0), scalar.mul(sub_block, config.vec_rows))
        o_view = pto.as_tensor(pto.add_ptr(args["o"], c.offset(u.batch, c.s0, o_row, u.head)),
                               [config.vec_rows, config.head], [c.row_stride, 1], name="o_view")
        pto.store(tiles["o_tile"], pto.slice_view(o_view, [0, 0], [config.vec_rows, config.head], name="o_rows"))


# ======================================================================================
# Module
# ======================================================================================

_CUBE_ARGS = ("slots", "slots_h", "q", "k", "v", "batch", "heads", "s0", "s1")
_VECTOR_ARGS = ("slots", "slots_h", "o", "batch", "heads", "s0", "s1", "scale")


def build_fa(config: FAConfig) -> builtin.ModuleOp:
    """The mixed kernel: entry (set_ffts + calls), cube function, vector function."""
    km = KernelModule(config.target)
    entry_types = {a.name: parse_ir_type(a.ir_type) for a in argspec.ENTRY_ARGS}
    with km.function(argspec.ENTRY_NAME, list(entry_types.items()), entry=True) as args:
        pto.set_ffts(args["ffts"])
        pto.call(argspec.CUBE_FUNC_NAME, [args[n] for n in _CUBE_ARGS])
        pto.call(argspec.VECTOR_FUNC_NAME, [args[n] for n in _VECTOR_ARGS])
    with km.function(argspec.CUBE_FUNC_NAME, [(n, entry_types[n]) for n in _CUBE_ARGS], kind="cube") as args:
        _cube_kernel(config, args)
    with km.function(argspec.VECTOR_FUNC_NAME, [(n, entry_types[n]) for n in _VECTOR_ARGS], kind="vector") as args:
        _vector_kernel(config, args)
    return km.module


def emit_fa(config: FAConfig) -> str:
    """The `.pto` text of the kernel for `config`."""
    return print_pto(build_fa(config))
