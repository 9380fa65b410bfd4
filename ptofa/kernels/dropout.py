"""Dropout on the attention probabilities: a counter-based generator evaluated in the kernel.

flash-attn's semantics: each probability P[b, h, i, j] is kept with probability 1 - p and the
kept ones are scaled by 1 / (1 - p); the row sums (and LSE) are those of the undropped P. The
keep decision of an entry is a pure function of (seed, offset, b, h, i, j), so the backward
regenerates the forward's mask instead of reading one, and `torch.manual_seed(s)` (seed and
offset drawn from torch's default generator by the caller) reproduces a call bit for bit.

The generator, on 32-bit two's-complement integers (every operation wraps mod 2^32, `>>` is
the arithmetic shift of an int32):

    round_k(x) = x * (2 * (x >> S_k) + 1) * M_k                    (M, S below)
    mix3(x)    = round_2(round_1(round_0(x))),  mix2(x) = round_1(round_0(x))
    row(i)     = mix3(mix3(mix3(i + seed) + bh) + offset)            bh = b * heads + h
    bits       = mix2(row(i) + j * G) >> 8                            in [-2^23, 2^23)
    keep       = bits >= CUT,  CUT = round(p * 2^24) - 2^23

It is built only from the integer vector ops ptoas 0.60 compiles for A2/A3 on i32 tiles:
`tci`, `tmul`, `tmuls`, `tadds`, `tadd`, `tshrs`, `tcolexpand`, `trowexpandadd` and `tcvt`
i32 -> f32 (it refuses `tands` / `txors` on i32, and `txor` wants a third full-size scratch
the UB lacks). The multiplication by the odd, data-dependent 2 (x >> S) + 1 is what makes a
round nonlinear (an add-shift round, x + (x >> S), is nearly linear in x, and neighbouring keys
came out correlated); the shift brings the high bits down, the multiplications carry every bit
up. The row keys are computed once per row slice on a [1, rows] tile; an entry costs one column
broadcast, one row add, two rounds (10 ops) and the threshold (5). `keep_mask` is the same
function in torch on the host, for the tests: it must stay the kernel's definition
(`tests/test_dropout.py` holds the kernel to it and measures its statistics).

Packed sequences (`flash_attn_varlen_func` & co.) use the same function with b the sequence's index
in cu_seqlens and i, j the query and key positions within the sequence (`packed_keep_masks`): where
a sequence lies in the packed tensors does not change its mask, and sequence b gets the mask batch b
of a dense call would get.

The keep factor is applied in f32 to P after its row sums (`keep = clamp(bits - CUT + 1, 0, 1)`,
exact: integers in f32), and 1 / (1 - p) once to O at the end of the row. The backward kernels
regenerate it on their tiles (the dkdv kernel's are transposed: rows are keys) and multiply
dP (and, for dV, P) by keep / (1 - p).

Cost, predicted by the timing model (910B2, fp16, D = 128, p = 0.1; the vector unit bounds
every case): the forward's block over one 128-row unit of 4096 keys takes 187 us against 33 us
for the default kernel and 46 us for the vector-row-sum kernel dropout needs (its row sums must
be of the undropped P, and the generator's tiles halve the softmax slices to 16 rows); the
backward at B = N = 1, S = 512 takes dq 17.7 us + dkdv 14.4 us against 4.8 + 5.5 us.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from xdsl.ir import SSAValue

from ptofa.api import F32, I32, scalar, tile, tile_type
from ptofa.ir import dialect as d
from ptofa.ir.target import serves_as_rowexpand_tmp

# Odd multipliers and shifts of the mixing rounds (the multipliers of C. Wellons' "lowbias32"
# integer hash and the golden-ratio constant); entries use the first ELEMENT_ROUNDS of them.
MIX = ((0x7FEB352D, 15), (0x846CA68B, 13), (0x9E3779B1, 16))
ELEMENT_ROUNDS = 2
G = 0x27D4EB2F  # key index multiplier
BITS = 24  # random bits compared with the threshold


def _i32(v: int) -> int:
    """v as a signed 32-bit value."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def cut(p: float) -> int:
    """The threshold: an entry is kept iff its 24 random bits (signed, [-2^23, 2^23)) are >= it."""
    return round(p * (1 << BITS)) - (1 << (BITS - 1))


def keep_probability(p: float) -> float:
    """The generator's exact keep probability for dropout p (1 - p within 2^-25)."""
    return 1.0 - round(p * (1 << BITS)) / (1 << BITS)


# ---------------------------------------------------------------------------- host replica


def _mix_host(x: torch.Tensor, rounds: int = len(MIX)) -> torch.Tensor:
    for m, s in MIX[:rounds]:
        x = _wrap(x * (2 * (x >> s) + 1))
        x = _wrap(x * _i32(m))
    return x


def _wrap(x: torch.Tensor) -> torch.Tensor:
    """int64 values reduced to int32's range (two's complement), kept as int64."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def keep_mask(seed: int, offset: int, batch: int, heads: int, s0: int, s1: int, p: float,
              batches: range | None = None) -> torch.Tensor:
    """The kernel's keep mask [batch, heads, s0, s1] (bool) for (seed, offset): the generator of
    the module docstring evaluated in torch (int64 holding int32 values); `batches`: only those
    batch entries ([len(batches), heads, s0, s1], the same values), to bound the memory."""
    batches = range(batch) if batches is None else batches
    i = torch.arange(s0, dtype=torch.int64)
    j = torch.arange(s1, dtype=torch.int64)
    b = torch.arange(batches.start, batches.stop, batches.step, dtype=torch.int64).view(-1, 1, 1)
    bh = b * heads + torch.arange(heads, dtype=torch.int64).view(1, heads, 1)
    row = _mix_host(_wrap(i + _i32(seed)).view(1, 1, s0))
    row = _mix_host(_wrap(row + bh))
    row = _mix_host(_wrap(row + _i32(offset)))
    bits = _mix_host(_wrap(row.unsqueeze(-1) + _wrap(j * G).view(1, 1, 1, s1)), ELEMENT_ROUNDS) >> (32 - BITS)
    return bits >= cut(p)


def packed_keep_masks(seed: int, offset: int, q_lens: list[int], k_lens: list[int], heads: int,
                      p: float) -> list[torch.Tensor]:
    """The varlen kernels' keep masks, one [heads, q_len, k_len] per packed sequence: sequence b's
    entries are those of `keep_mask` at batch b and its own query and key positions (rows and
    columns from 0 at the sequence's first query and key), so sequence b of a packed batch gets the
    mask of batch b of a dense call of the same (seed, offset) and heads."""
    return [keep_mask(seed, offset, len(q_lens), heads, q_len, k_len, p, range(b, b + 1))[0]
            for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens))]


# ---------------------------------------------------------------------------- kernel side


@dataclass
class DropoutTiles:
    """The vector tiles the generator works in: `bits` [rows, cols] i32, `work` the i32 view of a
    [rows, cols] f32 scratch free at that point (it ends up holding the keep factor), a [1, cols]
    and a [1, rows] i32 line (the row keys of the queries and the keys' j * G, one on each side)
    and a line as long as the queries' for the mixing's shifts (ptoas wants them out of place)."""

    bits: SSAValue
    work: SSAValue  # i32 view of `keep`
    keep: SSAValue  # f32 [rows, cols]
    cols_i32: SSAValue
    rows_i32: SSAValue
    rows_tmp: SSAValue
    rows_col: SSAValue  # rows_i32 as a [rows, 1] column
    expand_tmp: SSAValue | None  # the trowexpandadd's scratch: `bits` when it holds ptoas's 8 KiB, else hidden

    @classmethod
    def make(cls, bits: SSAValue, keep: SSAValue, cols_i32: SSAValue, rows_i32: SSAValue, rows_tmp: SSAValue,
             rows: int, cols: int) -> DropoutTiles:
        work = d.TReshapeOp(keep, tile_type("vec", rows, cols, "i32", valid="dynamic")).result
        work.name_hint = "drop_work"
        rows_col = tile.reshape(rows_i32, rows, 1, name="drop_rows_col", blayout="col_major")
        return cls(bits, work, keep, cols_i32, rows_i32, rows_tmp, rows_col, None if needs_hidden_tmp(rows, cols) else bits)


def needs_hidden_tmp(rows: int, cols: int) -> bool:
    """Whether the generator's trowexpandadd takes ptoas's hidden scratch: `bits` ([rows, cols] i32) is
    smaller than the broadcast's 8 KiB."""
    return not serves_as_rowexpand_tmp(rows * cols * 4)


def _mix(x: SSAValue, tmp: SSAValue, rounds: int = len(MIX)) -> None:
    for m, s in MIX[:rounds]:
        tile.shrs(x, scalar.const(s, I32), out=tmp)  # (ptoas: shifts out of place)
        tile.add(tmp, tmp, out=tmp)
        tile.adds(tmp, scalar.const(1, I32), out=tmp)
        tile.mul(x, tmp, out=x)
        tile.muls(x, scalar.const(_i32(m), I32), out=x)


def keep_factor(t: DropoutTiles, seed: SSAValue, offset: SSAValue, bh: SSAValue, i0: SSAValue, j0: SSAValue,
                rows: int, cols: SSAValue, cut_plus: SSAValue, transposed: bool = False) -> SSAValue:
    """`t.keep` = 1.0 where entry (query i0 + r, key j0 + c) is kept, 0.0 where dropped, on
    [rows, cols] (`cols` valid); `transposed`: rows are keys j0 + r, columns queries i0 + c (the
    dkdv kernel's P^T). seed / offset / bh: i32 scalars; `cut_plus` = 1 - CUT (f32)."""
    queries, keys = (t.cols_i32, t.rows_i32) if transposed else (t.rows_i32, t.cols_i32)
    n_queries, n_keys = (cols, rows) if transposed else (rows, cols)
    tile.set_valid(queries, 1, n_queries)
    tile.set_valid(t.rows_tmp, 1, n_queries)
    tile.ci(scalar.index_cast(i0, I32), out=queries)
    for key in (seed, bh, offset):
        tile.adds(queries, key, out=queries)
        _mix(queries, t.rows_tmp)
    tile.set_valid(keys, 1, n_keys)
    tile.ci(scalar.index_cast(j0, I32), out=keys)
    tile.muls(keys, scalar.const(G, I32), out=keys)
    for x in (t.bits, t.work, t.keep):
        tile.set_valid(x, rows, cols)
    tile.col_expand(t.cols_i32, out=t.work)
    tile.row_expand_add(t.work, t.rows_col, out=t.work, tmp=t.expand_tmp)
    _mix(t.work, t.bits, ELEMENT_ROUNDS)
    tile.shrs(t.work, scalar.const(32 - BITS, I32), out=t.bits)
    tile.cvt(t.bits, out=t.keep)
    tile.adds(t.keep, cut_plus, out=t.keep)
    tile.maxs(t.keep, scalar.const(0.0, F32, name="zero"), out=t.keep)
    tile.mins(t.keep, scalar.const(1.0, F32, name="one"), out=t.keep)
    return t.keep


def apply(p: SSAValue, t: DropoutTiles, seed: SSAValue, offset: SSAValue, bh: SSAValue, i0: SSAValue,
          j0: SSAValue, rows: int, cols: SSAValue, cut_plus: SSAValue) -> None:
    """P *= keep factor (in place, f32) of the [rows, cols] entries at (i0, j0)."""
    tile.mul(p, keep_factor(t, seed, offset, bh, i0, j0, rows, cols, cut_plus), out=p)
