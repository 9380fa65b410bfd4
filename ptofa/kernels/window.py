"""The attention window seen from either side of a tile: which tiles are visible, which
entries of a crossing tile are hidden.

A bottom-right aligned window (left, right) lets query i see key j iff
i + diag - left <= j <= i + diag + right, with diag = S1 - S0 (a bound of S0 + S1 is
unbounded; causal is (S0 + S1, 0)). The backward kernels use these helpers from the
query side (the dq kernel: KV tiles a Q block sees) and from the key side (the dkdv
kernel: Q blocks that see a KV block); the forward kernel carries the query-side
arithmetic in its own op order (`fa_fwd._unit`, `fa_fwd._mask_bounds`). The host's copy
in plain integers is `ptofa.kernels.units` (`keys_seen`, `queries_seeing`);
`tests/test_units.py` checks on the simulator that the kernels visit what it says.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue

from ptofa.api import I32, pto, scalar, tile


@dataclass
class TileRange:
    """The KV tiles [lo, hi) one unit visits (both kernels derive it with the same arithmetic)."""

    lo: SSAValue
    hi: SSAValue


@dataclass
class Window:
    """Runtime window bounds and the diagonal offset of one sequence."""

    left: SSAValue
    right: SSAValue
    diag: SSAValue  # S1 - S0: query row i is aligned with key i + diag


def _blocks(lo_pos: SSAValue, hi_pos: SSAValue, limit: SSAValue, block: int) -> TileRange:
    """Blocks of `block` positions covering [max(lo_pos, 0), min(hi_pos, limit)), empty if that is."""
    lo_pos = scalar.max(lo_pos, 0, name="vis_lo")
    hi_pos = scalar.min(hi_pos, limit, name="vis_hi")
    lo = scalar.floordiv(lo_pos, block, name="b_lo")
    return TileRange(lo, scalar.select(scalar.gt(hi_pos, lo_pos), scalar.ceildiv(hi_pos, block), lo, name="b_hi"))


def keys_seen(w: Window | None, q0: SSAValue, q_rows: SSAValue, s1: SSAValue, block: int) -> TileRange:
    """KV tiles of `block` keys seen by query rows [q0, q0 + q_rows) (all of them without a window)."""
    if w is None:
        return TileRange(scalar.const(0), scalar.ceildiv(s1, block, name="b_hi"))
    j_lo = scalar.sub(scalar.add(q0, w.diag), w.left)
    j_hi = scalar.add(scalar.add(scalar.add(q0, q_rows), w.diag), w.right)
    return _blocks(j_lo, j_hi, s1, block)


def queries_seeing(w: Window | None, k0: SSAValue, k_rows: SSAValue, s0: SSAValue, block: int) -> TileRange:
    """Q blocks of `block` rows with a row that sees a key of [k0, k0 + k_rows)."""
    if w is None:
        return TileRange(scalar.const(0), scalar.ceildiv(s0, block, name="b_hi"))
    i_lo = scalar.sub(scalar.sub(k0, w.diag), w.right)
    i_hi = scalar.add(scalar.sub(scalar.add(k0, k_rows), w.diag), w.left)
    return _blocks(i_lo, i_hi, s0, block)


def mask_tile(w: Window, scores: SSAValue, tmp: SSAValue, neg: SSAValue, rows0: SSAValue, cols0: SSAValue,
              rows: int, cols: SSAValue, transposed: bool) -> None:
    """Add `neg` to the entries of `scores` the window hides (only if some entry may be hidden).

    Row r, column c of the tile are (query rows0 + r, key cols0 + c), or (key rows0 + r,
    query cols0 + c) when `transposed`. The hidden entries are one upper and one lower
    triangle (ttri: upper = col >= row + d, lower = col <= row + d), never overlapping."""
    if transposed:  # j = rows0 + r, i = cols0 + c
        lower = scalar.sub(scalar.sub(scalar.sub(scalar.sub(rows0, cols0), w.diag), w.right), 1, name="d_right")
        upper = scalar.add(scalar.add(scalar.sub(scalar.sub(rows0, cols0), w.diag), w.left), 1, name="d_left")
    else:  # i = rows0 + r, j = cols0 + c
        upper = scalar.add(scalar.sub(scalar.add(scalar.add(rows0, w.diag), w.right), cols0), 1, name="d_right")
        lower = scalar.sub(scalar.sub(scalar.sub(scalar.add(rows0, w.diag), w.left), cols0), 1, name="d_left")
    with pto.if_(scalar.or_(scalar.lt(upper, cols), scalar.gt(lower, -rows))):
        for diagonal, up in ((upper, True), (lower, False)):
            tile.tri(scalar.index_cast(diagonal, I32), out=tmp, upper=up)
            tile.muls(tmp, neg, out=tmp)
            tile.add(scores, tmp, out=scores)
