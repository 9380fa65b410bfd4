"""Building blocks shared by the kernels: pipes, slot descriptors, schedule.

Each function emits IR at the current insertion point through the kernel-author API
(`ptofa.api`), so a kernel reads as its stages and the order in which they run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from xdsl.ir import SSAValue

from ptofa.ir import dialect as d
from ptofa.api import pto, scalar, tile, tile_type, view_type
from ptofa.pipeline import FAConfig, PipeSpec, TileSpec

if TYPE_CHECKING:
    from ptofa.kernels.builtin_mods.window import TileRange

DEFAULT_SLOT_NUM = 8  # ptoas's default for one-way pipes: written only when a kernel differs
SPLIT = 1  # TILE_UP_DOWN: vector core 0 gets the upper rows, core 1 the lower rows
NEG_INIT = -3.0e38  # running-max start and mask value: finite, so no inf - inf ever appears
HALF_NEG = 1.5e38  # m + HALF_NEG > 0 exactly for rows that saw a key (row fix)


def alloc(spec: TileSpec) -> SSAValue:
    """The local tile of a tile-plan entry (a dynamic tile starts fully valid)."""
    valid = "dynamic" if spec.dynamic else None if spec.valid_cols is None else (spec.rows, spec.valid_cols)
    t = tile_type(spec.loc, spec.rows, spec.cols, spec.dtype, blayout=spec.blayout, slayout=spec.slayout,
                  fractal=spec.fractal, valid=valid)
    return pto.alloc_tile(t, spec.name)


def clamp(x: SSAValue, lo: int, hi: int | SSAValue) -> SSAValue:
    """min(max(x, lo), hi)."""
    return scalar.min(scalar.max(x, lo), hi)


def row_offset(row: SSAValue, head: SSAValue, heads: SSAValue, head_dim: int) -> SSAValue:
    """Element offset of (row, head, 0) in a [rows, N, D] tensor (BSND with B*S rows, or packed)."""
    return scalar.mul(scalar.add(scalar.mul(row, heads), head), head_dim)


def snake_rank(unit: SSAValue, blocks: SSAValue, units: SSAValue) -> SSAValue:
    """The rank (0 = longest) loop index `unit` of a persistent loop over `units` on `blocks` blocks
    works on: i*n + b in even waves and i*n + (n-1-b) in odd full waves (n = blocks), so a block with
    a long unit in one wave gets a short one in the next; `ptofa.kernels.units.snake_rank` on the host."""
    wave = scalar.div(unit, blocks, name="wave")
    pos = scalar.rem(unit, blocks, name="wave_pos")
    full = scalar.le(scalar.mul(scalar.add(wave, 1), blocks), units)
    odd = scalar.eq(scalar.rem(wave, 2), 1)
    mirrored = scalar.sub(scalar.sub(blocks, 1), pos)
    pos = scalar.select(scalar.and_(odd, full), mirrored, pos, name="snake_pos")
    return scalar.add(scalar.mul(wave, blocks), pos, name="rank")


def entry_type(pipe: PipeSpec, core: str) -> d.TensorViewType:
    """The slot descriptor of a pipe: the cube declares the full slot, the vectors half of it."""
    rows = pipe.rows if core == "cube" else pipe.half_rows
    return view_type([rows, pipe.cols], pipe.dtype)


def init_pipes(pipes: Sequence[PipeSpec], bases: dict[str, SSAValue], core: str, slot_num: int,
               pipe_id: Callable[[PipeSpec], int] = lambda pipe: pipe.pipe_id) -> None:
    """One global-entry pipe init per pipe, on the ring at `bases[pipe.name]`."""
    for pipe in pipes:
        rows = pipe.rows if core == "cube" else pipe.half_rows
        slot = pto.as_tensor(bases[pipe.name], [rows, pipe.cols], [pipe.cols, 1], name=f"{pipe.name}_slot")
        pto.init_pipe(core, pipe_id(pipe), pipe.dir_mask, pipe.slot_bytes, slot,
                      None if slot_num == DEFAULT_SLOT_NUM else slot_num)


def pipelined(tiles: TileRange, preload: int, prologue: Callable[[SSAValue], None],
              steady: Callable[[SSAValue], None], epilogue: Callable[[SSAValue], None]) -> None:
    """The producer's software-pipelined schedule, `preload` tiles ahead (three loops):

        prologue(t) for t in [lo, min(lo + preload, hi))
        steady(t)   for t in [lo, max(lo, hi - preload))   (consumes t, produces t + preload)
        epilogue(t) for t in [max(lo, hi - preload), hi)

    Units with fewer tiles than `preload` (down to none) shrink the prologue and skip the
    steady state. It issues the same pipe operations, in the same order, as `fused`.
    """
    head_end = scalar.min(scalar.add(tiles.lo, preload), tiles.hi, name="head_end")
    steady_end = scalar.max(tiles.lo, scalar.sub(tiles.hi, preload), name="steady_end")
    with pto.range(tiles.lo, head_end, name="t") as t:
        prologue(t)
    with pto.range(tiles.lo, steady_end, name="t") as t:
        steady(t)
    with pto.range(steady_end, tiles.hi, name="t") as t:
        epilogue(t)


def produce_ahead(steps: TileRange, preload: int, produce: Callable[[SSAValue], None],
                  consume: Callable[[SSAValue], None]) -> None:
    """`pipelined` with one producer and one consumer: produce(t) `preload` steps ahead of consume(t)
    (the backward cube's scores ahead of its gradient matmuls)."""
    def steady(t: SSAValue) -> None:
        produce(scalar.add(t, preload, name="ahead"))
        consume(t)

    pipelined(steps, preload, prologue=produce, steady=steady, epilogue=consume)


def fused(tiles: TileRange, preload: int, consume: Callable[[SSAValue], None], produce: Callable[[SSAValue], None]) -> None:
    """The consumer's side of the same schedule in one loop, each stage emitted once:

        for k in [lo, hi + preload):
            if k >= lo + preload: consume(k - preload)
            if k < hi:            produce(k)

    (One copy of each stage keeps ptoas's hidden per-op scratch buffers to one per op.)
    """
    with pto.range(tiles.lo, scalar.add(tiles.hi, preload, name="fused_end"), name="k") as k:
        with pto.if_(scalar.ge(k, scalar.add(tiles.lo, preload))):
            consume(scalar.sub(k, preload, name="t_done"))
        with pto.if_(scalar.lt(k, tiles.hi)):
            produce(k)


def ring_select(ring: Sequence[SSAValue], t: SSAValue, use: Callable[[SSAValue], None]) -> None:
    """Run `use(ring[t % len(ring)])` (an scf.if chain: tiles cannot be indexed at run time)."""
    if len(ring) == 1:
        use(ring[0])
        return
    slot = scalar.rem(t, len(ring), name="ring_slot")
    for r, ring_tile in enumerate(ring):
        with pto.if_(scalar.eq(slot, r)):
            use(ring_tile)


def push_scaled_q(config: FAConfig, tiles: dict[str, SSAValue], scale: SSAValue, row_base: SSAValue,
                  q_rows: SSAValue, q_view: SSAValue) -> None:
    """The prescale-Q stage of the forward kernel (`FAConfig.prescale_q`): Q' = scale * Q of a unit (`q_rows` rows in `q_view`), this core's rows from `row_base`, into
    the next entry of the Q pipe: the cube's left operand of QK.

    `prescale_rows` rows at a time through f32, so Q' is the exact product rounded once to the
    input dtype. The vectors push one unit ahead of the cube's pop, so the cube waits for Q' only
    at the block's first unit."""
    qp, step = config.pipes[3], config.prescale_rows
    entry = pto.talloc("vector", qp.pipe_id, entry_type(qp, "vector"), SPLIT, name="q_entry")
    valid = clamp(scalar.sub(q_rows, row_base), 0, config.vec_rows)
    q_in, q_f32, q_out = tiles["q_in"], tiles["q_f32"], tiles["q_out"]
    with pto.range(0, scalar.ceildiv(valid, step), name="q_step") as i:
        r0 = scalar.mul(i, step, name="q_step_row")
        n = scalar.min(scalar.sub(valid, r0), step, name="q_step_rows")
        for t in (q_in, q_f32, q_out):
            tile.set_valid(t, n, config.head)
        pto.load(pto.slice_view(q_view, [scalar.add(row_base, r0), 0], [n, config.head], name="q_rows"), q_in)
        tile.cvt(q_in, out=q_f32)
        tile.muls(q_f32, scale, out=q_f32)
        tile.cvt(q_f32, out=q_out)
        pto.store(q_out, pto.slice_view(entry, [r0, 0], [n, config.head], name="q_scaled_rows"))
    pto.tpush("vector", qp.pipe_id, entry, SPLIT)
