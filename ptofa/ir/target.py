"""Facts of the A2/A3 (910B, dav-c220) core that the verifier, the config and the
simulator share: local memory capacities, planner alignment, and the hidden
scratch ptoas allocates for ops written without a tmp operand.
"""

from __future__ import annotations

KIB = 1024

# Local memory capacities of one A2/A3 block (catlass include/acot/arch/arch.hpp AtlasA2 @ 0a8dac9d;
# the same A3 spec of PTOAS's PTOPlanMemory.cpp, in bits there; docs/sources.md §1.2).
CAPACITY = {
    "vec": 192 * KIB,  # UB, per vector core
    "mat": 512 * KIB,  # L1
    "left": 64 * KIB,  # L0A
    "right": 64 * KIB,  # L0B
    "acc": 128 * KIB,  # L0C
}
# Planner alignment per space: every tile's footprint is rounded up to it (ptoas 0.60's memory
# planner, PTOAS lib/PTO/Transforms/PTOPlanMemory.cpp at e32488c9, MemPlan::InitMemSpecsFromModule's
# A3 spec: UB and L1 256 B, L0A/L0B/L0C 4096 B; a 64x80 f16 L0B tile takes 12 KiB, not 10).
ALIGNMENT = {"vec": 256, "mat": 256, "left": 4096, "right": 4096, "acc": 4096}
# A vector tile's row is a whole number of 32-byte blocks (the vector unit's block; pto-isa's
# static checks on Tile row bytes, include/pto/common/pto_tile.hpp).
VEC_ROW_BYTES = 32
SPACE_NAMES = {"vec": "UB", "mat": "L1", "left": "L0A", "right": "L0B", "acc": "L0C"}
# ptoas's own names in its overflow message ("vec overflow, requires N bits while M bits avaliable!").
PTOAS_SPACE_NAMES = {"vec": "vec", "mat": "mat", "left": "left", "right": "right", "acc": "acc"}

# ptoas materialises a hidden UB scratch for every trowexpand* op written without a
# tmp operand: 1x2048 f32 = 8 KiB each (docs/sources.md §2.5). Row reductions
# without tmp get a scratch of their source's size.
HIDDEN_ROWEXPAND_TMP_BYTES = 8 * KIB
# trowexpandexpdif is the exception: ptoas makes no hidden scratch for it (its implicit-tmp
# pass lists the six other trowexpand ops, PTOAS lib/PTO/Transforms/PTOMaterializeImplicitTmp.cpp),
# and pto-isa's A2/A3 TROWEXPANDEXPDIF without a tmp broadcasts the column through a fixed
# 8 KiB at UB offset 184 KiB (TMP_UB_OFFSET, include/pto/npu/a2a3/TRowExpandBinOp.hpp) that
# ptoas's planner neither allocates nor reserves: planned tiles there would be overwritten.
# ptofa passes an explicit tmp of ptoas's implicit-tmp size, and its verifier requires one
# of at least `rowexpand_tmp_min_bytes`.
EXPDIF_TMP_BYTES = HIDDEN_ROWEXPAND_TMP_BYTES


def serves_as_rowexpand_tmp(nbytes: int) -> bool:
    """Whether a tile of `nbytes` can be a trowexpand op's explicit tmp in place of ptoas's hidden
    8 KiB scratch (else the op is written without one and ptoas makes its own)."""
    return nbytes >= HIDDEN_ROWEXPAND_TMP_BYTES


def rowexpand_tmp_min_bytes(rows: int) -> int:
    """Bytes a row-broadcast op's tmp receives: vbrcb writes one 32-byte block per row, 8 rows
    (256 bytes) per repeat (TRowExpandBinaryInstr, rows < 256)."""
    return -(-rows // 8) * 256


def align(nbytes: int, alignment: int) -> int:
    return (nbytes + alignment - 1) // alignment * alignment


# Hidden UB scratch ptoas materializes (PTOAS lib/PTO/Transforms/PTOMaterializeImplicitTmp.cpp,
# A2/A3): tci an f32 1x192 (i32 dst) or 1x448 (i16 dst) tile, tsel an i32 1x16 tile.
HIDDEN_TCI_TMP = {32: ("1x192xf32", 768), 16: ("1x448xf32", 1792)}
HIDDEN_TSEL_TMP = ("1x16xi32", 64)
