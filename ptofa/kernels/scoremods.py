"""Score modifications shared by the forward and backward kernels: softcapping and ALiBi.

Both act on a tile of scaled scores s (f32) before the masks, in flash-attn's order:

    s = softcap * tanh(s / softcap)           (softcap > 0)
    s = s - slope * |i + S1 - S0 - j|         (ALiBi; query i, key j, the slope of the row's head)

A2/A3 have no tanh instruction. `softcap_scores` composes it from ops the verified forms
list (`tmuls`, `tmins`, `texp`, `tadds`, `tdivs` with the scalar first):

    x = min(s * (2 / softcap), SOFTCAP_CLAMP)     t - 1 = -2 / (exp(x) + 1)
    s = softcap * (t - 1) + softcap

exp(x) stays finite (x <= 30: exp(30) = 1.07e13), and tanh(15) rounds to 1 in f32 anyway
(1 - tanh(15) = 1.9e-13), so the clamp changes nothing; for x -> -inf exp(x) -> 0 and
t -> -1 exactly. The absolute error of t in f32 is a few ulp of 1 (the test measures
max |t - torch.tanh| over a dense grid: `tests/test_scoremods.py`), so the capped score
is within softcap * 4e-7 of the exact one; relative to t it is large only where |t| is
small, where the absolute error is what reaches the softmax.

The backward needs d(capped)/ds = 1 - tanh^2 = (1 - t)(1 + t); `softcap_grad` multiplies
it into dP - D from the t - 1 that `softcap_scores` leaves in its tmp tile.

ALiBi's bias of a score tile at (first row i0, first column j0) is a function of
(j0 + c) - (i0 + r) - (S1 - S0): `alibi_bias` builds the column part with `tci` (one row,
start j0 - i0 - diag), converts it to f32, broadcasts it over the rows (`texpands` 0 then
`tcolexpandadd`), subtracts the row index column (`trowexpandsub`, made once per kernel by
`row_index`), and subtracts slope * |.| from the scores. The dkdv kernel's transposed tiles
(rows are keys) give the negated difference; |.| is the same.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from ptofa.api import F32, I32, scalar, tile

# Largest x = 2 s / softcap the tanh's exp sees (exp(30) = 1.07e13 is finite in f32; tanh(15) is 1 in f32).
SOFTCAP_CLAMP = 30.0


def softcap_scores(scores: SSAValue, tmp: SSAValue, softcap: SSAValue, rcp2: SSAValue) -> None:
    """scores = softcap * tanh(scores / softcap) in place; tmp (same valid shape) is left holding
    tanh - 1 (for `softcap_grad`). `rcp2` is 2 / softcap (a kernel argument, as is `softcap`)."""
    tile.muls(scores, rcp2, out=tmp)  # x = 2 s / c
    tile.mins(tmp, scalar.const(SOFTCAP_CLAMP, F32, name="softcap_clamp"), out=tmp)
    tile.exp(tmp, out=tmp)
    tile.adds(tmp, scalar.const(1.0, F32, name="one"), out=tmp)
    tile.rdivs(scalar.const(-2.0, F32, name="minus_two"), tmp, out=tmp)  # t - 1 = -2 / (exp(x) + 1)
    tile.muls(tmp, softcap, out=scores)
    tile.adds(scores, softcap, out=scores)  # c (t - 1) + c = c t


def softcap_grad(grad: SSAValue, tmp: SSAValue) -> None:
    """grad *= 1 - t^2 = (1 - t)(1 + t), with tmp = t - 1 from `softcap_scores` (tmp is changed)."""
    tile.mul(grad, tmp, out=grad)  # (t - 1) g
    tile.adds(tmp, scalar.const(2.0, F32, name="two"), out=tmp)  # t + 1
    tile.mul(grad, tmp, out=grad)  # (t^2 - 1) g
    tile.muls(grad, scalar.const(-1.0, F32, name="minus_one"), out=grad)


def row_index(index_i32: SSAValue, row_f32: SSAValue, rows: int, name: str) -> SSAValue:
    """[rows, 1] col-major f32 view of 0, 1, ..., rows - 1 (once per kernel): `tci` into a one-row
    i32 tile, converted into the one-row f32 tile `row_f32`."""
    tile.set_valid(index_i32, 1, rows)
    tile.ci(scalar.const(0, I32), out=index_i32)
    tile.cvt(index_i32, out=row_f32)
    return tile.reshape(row_f32, rows, 1, name=name, blayout="col_major")


def alibi_bias(scores: SSAValue, bias: SSAValue, index_i32: SSAValue, index_f32: SSAValue, rows_col: SSAValue,
               start: SSAValue, cols: SSAValue, slope: SSAValue, tmp: SSAValue | None) -> None:
    """scores -= slope * |start + c - r| for row r, column c (`bias` of the scores' valid shape is
    scratch; `start` an index: first column's position minus first row's, diagonal included;
    `cols` the valid columns; `tmp` the trowexpandsub's explicit scratch, or None: ptoas's hidden one)."""
    for t in (index_i32, index_f32):
        tile.set_valid(t, 1, cols)
    tile.ci(scalar.index_cast(start, I32), out=index_i32)
    tile.cvt(index_i32, out=index_f32)
    tile.fill(scalar.const(0.0, F32, name="zero"), out=bias)
    tile.col_expand_add(bias, index_f32, out=bias)
    tile.row_expand_sub(bias, rows_col, out=bias, tmp=tmp)
    tile.abs(bias, out=bias)
    tile.muls(bias, slope, out=bias)
    tile.sub(scores, bias, out=scores)
