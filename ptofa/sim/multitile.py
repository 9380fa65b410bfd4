"""Semantics and cost of multi-buffer tiles (`ptofa.ir.dialect.multitile`): an
`alloc_multi_tile` owns `count` distinct tiles, `multi_tile_get` hands out one of them."""

from __future__ import annotations

from ptofa.ir import dialect as d
from ptofa.sim import registry
from ptofa.sim.errors import SimError
from ptofa.sim.memory import Tile, new_tile_storage
from ptofa.sim.tileops import Fn, Slot, np_dtype


@registry.compiled_by(d.AllocMultiTileOp)
def alloc_multi_tile(compiler, op: d.AllocMultiTileOp) -> tuple[Fn, bool]:
    """Allocate the `count` slots on the core's first execution (like alloc_tile), then reuse them.

    The value is the tuple of slot tiles; each slot is its own buffer (own root id), so
    the slot-hazard checks see two slots as two buffers, as ptoas's planner places them."""
    t = op.result.type
    slot_t = t.slot
    count = t.count.data
    first = compiler.mc.n_allocs
    compiler.mc.n_allocs += count
    r = compiler.slot(op.result)
    rows, cols = slot_t.shape
    dtype = np_dtype(slot_t.dtype)
    fortran = not slot_t.is_row_major and not slot_t.is_boxed
    vr, vc = slot_t.valid
    vr0, vc0 = (rows if vr == d.DYN else vr), (cols if vc == d.DYN else vc)
    dynamic = op.valid_row is not None or op.valid_col is not None
    vr_s = compiler.slot(op.valid_row) if op.valid_row is not None else None
    vc_s = compiler.slot(op.valid_col) if op.valid_col is not None else None
    name = op.result.name_hint or f"multi{first}"
    space, type_str, nbytes = slot_t.space, str(slot_t), slot_t.nbytes

    def alloc(vals):
        core = vals[0]
        tiles = []
        for i in range(count):
            tile = core.tiles[first + i]
            if tile is None:
                core.mem.allocate(space, f"%{name}[{i}]", type_str, nbytes)
                storage = new_tile_storage(rows, cols, dtype, fortran)
                tile = core.tiles[first + i] = Tile(storage, vr0, vc0, core.launch.new_buffer_id(), f"{name}[{i}]", space)
            if dynamic:
                tile.set_valid(vals[vr_s] if vr_s is not None else tile.vr, vals[vc_s] if vc_s is not None else tile.vc)
            tiles.append(tile)
        vals[r] = tuple(tiles)

    return alloc, False


@registry.semantics(d.MultiTileGetOp)
def multi_tile_get(op: d.MultiTileGetOp, slot: Slot) -> Fn:
    src, k, res = slot(op.source), slot(op.slot_index), slot(op.result)
    count = op.source.type.count.data
    name = op.name

    def fn(vals):
        i = vals[k]
        if not 0 <= i < count:
            raise SimError(f"{name}: slot {i} is out of range for multi_tile_buf count={count}")
        vals[res] = vals[src][i]

    return fn


# ptoas plans every slot's address at compile time; picking a slot is a view (no data moves).
registry.cost(d.AllocMultiTileOp, d.MultiTileGetOp, queue="S", cycles=lambda op, queue, soc: 0.0)
