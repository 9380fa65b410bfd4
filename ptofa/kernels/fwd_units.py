"""The forward kernel's runtime sizes on both of its functions: those of a launch and the slot rings
of a block (`Common`), a unit's Q block and the KV tiles it visits (`Unit`, which `fa_fwd._unit`
decodes with the same arithmetic on both functions, so they agree on every unit without talking;
`ptofa.kernels.units` is the host's copy), the valid keys of a KV tile and where a split's partials lie.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.ir import SSAValue

from ptofa.api import pto, scalar
from ptofa.pipeline import DTYPE_BYTES, FAConfig

if TYPE_CHECKING:  # (a type only: importing the window module would lengthen the forward's import chain)
    from ptofa.kernels.builtin_mods.window import TileRange


@dataclass
class Common:
    """Per-function values both kernels derive the same way."""

    config: FAConfig
    args: dict[str, SSAValue]
    block_idx: SSAValue
    block_num: SSAValue
    batch: SSAValue
    heads: SSAValue
    group: SSAValue  # heads / kv_heads
    s0: SSAValue
    s1: SSAValue
    units: SSAValue  # B * N * ceil(S0 / 128), or B * N * ceil(S0 / 256) with q_pair
    q_blocks: SSAValue
    q_stride: SSAValue  # N * D: elements between two query positions in BSND
    kv_stride: SSAValue  # KVN * D
    kv_heads: SSAValue
    slot_bases: dict[str, SSAValue]  # per-pipe slot ring base pointer of this block


@dataclass
class Unit:
    """One work unit: a Q block of one (sequence, head) and the KV tiles it visits."""

    b: SSAValue  # batch (0 for varlen: the tensors are packed)
    h: SSAValue  # query head
    g: SSAValue  # kv head
    q0: SSAValue  # first query row of the block within its sequence
    q_rows: SSAValue  # valid query rows of the block (<= cube_s0)
    s0: SSAValue  # this sequence's query length
    s1: SSAValue  # this sequence's key length
    q_row: SSAValue  # the block's first row in the Q / O tensors ([B*S0] or packed rows)
    k_row: SSAValue  # the sequence's first row in the K / V tensors (unpaged)
    seq: SSAValue  # the sequence (its block-table row, paged caches)
    lse_row: SSAValue  # the block's first element in LSE ([B, N, S0], or [N, total_q] for varlen)
    tiles: TileRange
    window: tuple[SSAValue, SSAValue] | None = None  # (left, right) bounds of a masked kernel
    split: tuple[SSAValue, SSAValue] | None = None  # split-KV: (this split, splits of the unit)
    full: tuple[SSAValue, SSAValue] | None = None  # block ranges: the tiles no mask entry hides


def common_values(config: FAConfig, args: dict[str, SSAValue]) -> Common:
    """Runtime sizes, unit count and this block's slot-ring bases (same on both kernels)."""
    batch = scalar.index_cast(args["batch"], name="batch")
    heads = scalar.index_cast(args["heads"], name="heads")
    kv_heads = scalar.index_cast(args["kv_heads"], name="kv_heads")
    s0 = scalar.index_cast(args["s0"], name="s0")
    s1 = scalar.index_cast(args["s1"], name="s1")
    group = scalar.div(heads, kv_heads, name="group")
    q_blocks = scalar.ceildiv(s0, config.cube_s0, name="q_blocks")
    if config.varlen:  # the host's unit table has this many entries
        units = scalar.index_cast(args["num_units"], name="units")
    else:
        per_head = scalar.ceildiv(q_blocks, 2, name="q_pairs") if config.q_pair else q_blocks
        units = scalar.mul(scalar.mul(batch, heads), per_head, name="units")
    q_stride = scalar.mul(heads, config.head, name="q_stride")
    kv_stride = scalar.mul(kv_heads, config.head, name="kv_stride")
    block_idx = pto.get_block_idx()
    block_num = pto.get_block_num()
    # Slot workspace per block: the rings of the QK, PV, P and (prescale_q) scaled-Q pipes, one
    # after the other; `slots` addresses it in f32 elements, `slots_h` in the input dtype (the
    # dtype of the P and Q rings, and of an f16 softmax's QK ring).
    f32_off = scalar.mul(block_idx, config.gm_slot_f32_per_block, name="slot_f32_off")
    h_off = scalar.mul(block_idx, 2 * config.gm_slot_f32_per_block, name="slot_h_off")
    block_base = {"f32": pto.add_ptr(args["slots"], f32_off, name="slot_f32_block"),
                  config.in_dtype: pto.add_ptr(args["slots_h"], h_off, name="slot_h_block")}
    bases, offset = {}, 0
    for pipe in (config.pipes[0], config.pipes[2], config.pipes[1], *config.pipes[3:]):
        elem = DTYPE_BYTES[pipe.dtype]
        bases[pipe.name] = pto.add_ptr(block_base[pipe.dtype], offset // elem, name=f"{pipe.name}_ring")
        offset += pipe.slot_bytes * config.slot_num
    return Common(config, args, block_idx, block_num, batch, heads, group, s0, s1, units, q_blocks,
                   q_stride, kv_stride, kv_heads, bases)


def split_range(lo: SSAValue, hi: SSAValue, split: SSAValue, splits: SSAValue) -> tuple[SSAValue, SSAValue]:
    """Split i of S covers visible tiles [lo + n*i // S, lo + n*(i+1) // S), n = hi - lo: contiguous,
    disjoint, sizes within one of each other; a split gets none when S > n (`varlen.split_tiles`)."""
    n = scalar.sub(hi, lo, name="visible")
    first = scalar.add(lo, scalar.div(scalar.mul(n, split), splits), name="split_lo")
    last = scalar.add(lo, scalar.div(scalar.mul(n, scalar.add(split, 1)), splits), name="split_hi")
    return first, last


def q_row_stride(c: Common) -> SSAValue | int:
    """Elements between two rows of a Q / O block: the next query row, or (GQA packing) the next head."""
    return c.config.head if c.config.gqa_pack else c.q_stride


def tile_keys(c: Common, u: Unit, t: SSAValue) -> SSAValue:
    """Valid keys of KV tile t: TILE_S1, or fewer in the last tile."""
    return scalar.min(scalar.sub(u.s1, scalar.mul(t, c.config.tile_s1)), c.config.tile_s1, name="tile_keys")


def out_bases(c: Common, u: Unit) -> tuple[SSAValue, SSAValue]:
    """This split's slice of the partials: split i's block O_i [total_q, N, D] then LSE_i [N, total_q]
    lies at i * total_q * N * (D + 1) (`pipeline.partial_elems`), whatever the unit's split count."""
    o_per_split = scalar.mul(c.s0, c.q_stride, name="o_per_split")
    per_split = scalar.add(o_per_split, scalar.mul(c.s0, c.heads), name="per_split")
    o_base = pto.add_ptr(c.args["partials"], scalar.mul(u.split[0], per_split), name="part_o")
    return o_base, pto.add_ptr(o_base, o_per_split, name="part_lse")


def within(condition: SSAValue | None):
    """The context under which a block of `fa_fwd._unit_blocks` runs: its `scf.if`, or none."""
    return nullcontext() if condition is None else pto.if_(condition)
