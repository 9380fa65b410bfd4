"""The FlashAttention-2 forward kernel as a four-stage cube/vector pipeline.

    compute_qk  (cube)    S = Q K^T, one CUBE_S1-wide sub-tile at a time -> QK slot
    compute_p   (vectors) online softmax over row slices, P in fp16   -> P slot
    compute_pv  (cube)    PV = P V, accumulated over the sub-tiles    -> PV slot
    compute_gu  (vectors) O = alpha_t * O + PV; at the end O = O / l

Schedule (fa-pipeline.md section 7), with P = QK_PRELOAD and N = S1 / TILE_S1:

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
from ptofa import dialect as d
from ptofa.api import F32, KernelModule, parse_ir_type, pto, scalar, tile, tile_type, view_type
from ptofa.pipeline import FAConfig, PipeSpec, TileSpec, tile_plan
from ptofa.textio import print_pto

NEG_INIT = -3.0e38  # running-max start: finite, so exp(m_old - m_new) never sees inf - inf
DEFAULT_SLOT_NUM = 8  # ptoas's default for one-way pipes: written only when the config differs
SPLIT = 1  # TILE_UP_DOWN: vector core 0 gets the upper rows, core 1 the lower rows


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


def _entry_types(pipe: PipeSpec, core: str) -> d.TensorViewType:
    rows = pipe.rows if core == "cube" else pipe.half_rows
    return view_type([rows, pipe.cols], pipe.dtype)


def _init_pipes(c: _Common, core: str) -> None:
    """One pipe init per pipe: cube declares the full slot, vectors the half slot."""
    for pipe in c.config.pipes:
        rows = pipe.rows if core == "cube" else pipe.half_rows
        slot = pto.as_tensor(c.slot_bases[pipe.name], [rows, pipe.cols], [pipe.cols, 1], name=f"{pipe.name}_slot")
        slot_num = None if c.config.slot_num == DEFAULT_SLOT_NUM else c.config.slot_num
        pto.init_pipe(core, _pipe_id(c.config, pipe, core), pipe.dir_mask, pipe.slot_bytes, slot, slot_num)


def _pipe_id(config: FAConfig, pipe: PipeSpec, core: str) -> int:
    """The pipe id; fault 'swap_pipe_ids' swaps QK and PV on the vector side."""
    if config.fault == "swap_pipe_ids" and core == "vector" and pipe.name in ("qk", "pv"):
        return 2 if pipe.name == "qk" else 0
    return pipe.pipe_id


@dataclass
class _Unit:
    """Decoded work unit: batch, head, Q block."""

    batch: SSAValue
    head: SSAValue
    q_block: SSAValue


def _decode_unit(c: _Common, unit: SSAValue) -> _Unit:
    q_block = scalar.rem(unit, c.q_blocks, name="q_block")
    bh = scalar.div(unit, c.q_blocks, name="bh")
    return _Unit(scalar.div(bh, c.heads, name="b"), scalar.rem(bh, c.heads, name="h"), q_block)


def _bsnd_offset(c: _Common, b: SSAValue, seq_len: SSAValue, row: SSAValue | None, h: SSAValue) -> SSAValue:
    """Element offset of (b, row, h, 0) in a [B, S, N, D] tensor (row None = 0)."""
    seq = scalar.mul(b, seq_len)
    if row is not None:
        seq = scalar.add(seq, row)
    return scalar.mul(scalar.add(scalar.mul(seq, c.heads), h), c.config.head)


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
    entry = pto.talloc("cube", qk.pipe_id, _entry_types(qk, "cube"), SPLIT, name="qk_entry")
    for sub in range(s.c.config.tile_factor):
        compute_qk(s, t, sub, entry)
    pto.tpush("cube", qk.pipe_id, entry, SPLIT)


def _pv_tile(s: _CubeState, t: SSAValue, interleave_qk_tile: SSAValue | None) -> None:
    """PV(t), with QK(interleave_qk_tile) issued between its sub-tiles (steady state)."""
    cfg = s.c.config
    qk, p, pv = cfg.pipes
    p_entry = pto.tpop("cube", p.pipe_id, _entry_types(p, "cube"), SPLIT, name="p_entry")
    qk_entry = None
    if interleave_qk_tile is not None:
        qk_entry = pto.talloc("cube", qk.pipe_id, _entry_types(qk, "cube"), SPLIT, name="qk_entry")
    for sub in range(cfg.tile_factor):
        compute_pv(s, t, sub, p_entry)
        if qk_entry is not None:
            compute_qk(s, interleave_qk_tile, sub, qk_entry)
    pto.tfree("cube", p.pipe_id, p_entry, SPLIT)
    if qk_entry is not None:
        pto.tpush("cube", qk.pipe_id, qk_entry, SPLIT)
    pv_entry = pto.talloc("cube", pv.pipe_id, _entry_types(pv, "cube"), SPLIT, name="pv_entry")
    pv_slot = pto.slice_view(pv_entry, [0, 0], [cfg.cube_s0, cfg.head], name="pv_dst")
    pto.store(s.tiles["o_acc"], pv_slot)
    pto.tpush("cube", pv.pipe_id, pv_entry, SPLIT)


def _cube_kernel(config: FAConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, args)
    _init_pipes(c, "cube")
    tiles = {spec.name: _alloc(spec) for spec in tile_plan(config) if spec.core == "cube"}
    preload = config.qk_preload
    steady_end = scalar.sub(c.num_tiles, preload, name="steady_end")
    with pto.range(c.block_idx, c.units, c.block_num, name="unit") as unit:
        u = _decode_unit(c, unit)
        q_row = scalar.mul(u.q_block, config.cube_s0)
        q_view = pto.as_tensor(pto.add_ptr(args["q"], _bsnd_offset(c, u.batch, c.s0, q_row, u.head)),
                               [config.cube_s0, config.head], [c.row_stride, 1], name="q_view")
        kv_off = _bsnd_offset(c, u.batch, c.s1, None, u.head)
        k_view = pto.as_tensor(pto.add_ptr(args["k"], kv_off), [config.head, c.s1], [1, c.row_stride],
                               layout="dn", name="kT_view")
        v_view = pto.as_tensor(pto.add_ptr(args["v"], kv_off), [c.s1, config.head], [c.row_stride, 1], name="v_view")
        pto.load(pto.slice_view(q_view, [0, 0], [config.cube_s0, config.head], name="q_part"), tiles["q_mat"])
        tile.mov(tiles["q_mat"], tiles["q_left"])
        state = _CubeState(c, tiles, k_view, v_view)
        with pto.range(0, preload, name="t") as t:  # prologue
            _qk_tile(state, t)
        with pto.range(0, steady_end, name="t") as t:  # steady state
            _pv_tile(state, t, scalar.add(t, preload, name="t_ahead"))
        with pto.range(steady_end, c.num_tiles, name="t") as t:  # epilogue
            _pv_tile(state, t, None)


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


def _ring_select(s: _VecState, t: SSAValue, copy) -> None:
    """Run `copy(ring_slot)` for ring slot t % EXP_RING (an scf.if chain: tiles cannot be indexed)."""
    if len(s.ring) == 1:
        copy(s.ring[0])
        return
    slot = scalar.rem(t, len(s.ring), name="ring_slot")
    for r, ring_tile in enumerate(s.ring):
        with pto.if_(scalar.eq(slot, r)):
            copy(ring_tile)


def compute_p(s: _VecState, t: SSAValue) -> None:
    """Online softmax of tile t over row slices: P = exp(scale*S - m_new) in fp16, update m, l, alpha_t."""
    cfg, tl, rows = s.c.config, s.tiles, s.rows
    qk, p, _ = cfg.pipes
    vs0 = cfg.vec_s0
    qk_entry = pto.tpop("vector", _pipe_id(cfg, qk, "vector"), _entry_types(qk, "vector"), SPLIT, name="qk_entry")
    p_entry = pto.talloc("vector", p.pipe_id, _entry_types(p, "vector"), SPLIT, name="p_entry")
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
    if cfg.fault != "drop_tfree":
        pto.tfree("vector", _pipe_id(cfg, qk, "vector"), qk_entry, SPLIT)
    pto.tpush("vector", p.pipe_id, p_entry, SPLIT)
    _ring_select(s, t, lambda ring_tile: tile.mov(rows["alpha_new"], ring_tile))


def compute_gu(s: _VecState, t: SSAValue) -> None:
    """O = alpha_t * O + PV(t) on this core's rows."""
    cfg, tl = s.c.config, s.tiles
    pv = cfg.pipes[2]
    pv_id = _pipe_id(cfg, pv, "vector")
    pv_entry = pto.tpop("vector", pv_id, _entry_types(pv, "vector"), SPLIT, name="pv_entry")
    pto.load(pto.slice_view(pv_entry, [0, 0], [cfg.vec_rows, cfg.head], name="pv_rows"), tl["pv_tile"])
    pto.tfree("vector", pv_id, pv_entry, SPLIT)
    _ring_select(s, t, lambda ring_tile: tile.mov(ring_tile, s.rows["alpha_cur"]))
    tile.row_expand_mul(tl["o_tile"], tl["alpha_cur"], out=tl["o_tile"])
    tile.add(tl["o_tile"], tl["pv_tile"], out=tl["o_tile"])


def _vector_kernel(config: FAConfig, args: dict[str, SSAValue]) -> None:
    c = _common(config, args)
    _init_pipes(c, "vector")
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
    state = _VecState(c, tiles, rows, args["scale"], zero, ring)
    sub_block = pto.get_subblock_idx()
    preload = config.qk_preload
    steady_end = scalar.sub(c.num_tiles, preload, name="steady_end")
    with pto.range(c.block_idx, c.units, c.block_num, name="unit") as unit:
        u = _decode_unit(c, unit)
        tile.fill(neg, out=rows["m_all"])
        tile.fill(zero, out=rows["l_all"])
        tile.fill(zero, out=tiles["o_tile"])
        with pto.range(0, preload, name="t") as t:  # prologue
            compute_p(state, t)
        with pto.range(0, steady_end, name="t") as t:  # steady state: GU(t) before softmax(t+P)
            compute_gu(state, t)
            compute_p(state, scalar.add(t, preload, name="t_ahead"))
        with pto.range(steady_end, c.num_tiles, name="t") as t:  # epilogue
            compute_gu(state, t)
        if config.fault == "extra_tpop":
            pv = config.pipes[2]
            pto.tpop("vector", pv.pipe_id, _entry_types(pv, "vector"), SPLIT, name="extra_entry")
        tile.row_expand_div(tiles["o_tile"], l_col, out=tiles["o_tile"])
        o_row = scalar.add(scalar.mul(u.q_block, config.cube_s0), scalar.mul(sub_block, config.vec_rows))
        o_view = pto.as_tensor(pto.add_ptr(args["o"], _bsnd_offset(c, u.batch, c.s0, o_row, u.head)),
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
