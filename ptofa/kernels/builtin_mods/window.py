"""The attention window (causal, flash-attn's `window_size`) as a built-in `mods.Mod`: a bottom-right
aligned window lets query i see key j iff

    i + diag - win_left <= j <= i + diag + win_right          (diag = S1 - S0)

the bounds two i64 kernel arguments (`Window.values`: an unbounded side is S0 + S1, causal is
(S0 + S1, 0)), so one kernel serves causal and every window. The object carries the window's kernel
arguments (`params`), the tiles a unit visits, from the query side (`forward_tiles` in the forward
kernel's op order, `visible_keys` for the dq kernel: the KV tiles a Q block sees) and from the key
side (`visible_queries`, the dkdv kernel: the Q blocks that see a KV block), the mask of a tile the
window's edge crosses (`mask_forward`; the backward kernels' `mask_tile`) and its torch reference.
The host's copy in plain integers is `ptofa.visibility` and `ptofa.kernels.units` (`keys_seen`,
`queries_seeing`); `tests/test_units.py` checks on the simulator that the kernels visit what it says.

A config with a window holds `WINDOW` in its `mods` (`FAConfig.narrowing` finds it); its arguments
follow the softmax scale in the kernel's entry, and its mask applies after the score mods'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from xdsl.ir import SSAValue

from ptofa.api import I32, pto, scalar, tile
from ptofa.kernels.hostparam import WINDOW_PARAMS
from ptofa.kernels.mods import Mod
from ptofa.visibility import kernel_bounds


@dataclass
class TileRange:
    """The KV tiles [lo, hi) one unit visits (both kernels derive it with the same arithmetic)."""

    lo: SSAValue
    hi: SSAValue


@dataclass
class WindowBounds:
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


def _band(w: WindowBounds | None, start: SSAValue, rows: SSAValue, limit: SSAValue, block: int, shift,
          before: str, after: str) -> TileRange:
    """Blocks of the other side's positions that rows [start, start + rows) see through the window `w`:
    [shift(start, diag) - w.before, shift(start + rows, diag) + w.after), within [0, limit)."""
    if w is None:
        return TileRange(scalar.const(0), scalar.ceildiv(limit, block, name="b_hi"))
    lo = scalar.sub(shift(start, w.diag), getattr(w, before))
    hi = scalar.add(shift(scalar.add(start, rows), w.diag), getattr(w, after))
    return _blocks(lo, hi, limit, block)


@dataclass(frozen=True)
class Window(Mod):
    """The window; its arguments keep the kernels' names, win_left and win_right."""

    name: str = "window"
    builtin = True
    mask = True
    hides = True  # a row whose window holds no key (a window left of key 0, or right of the last)
    narrows = True  # the kernels ask it for each unit's tiles and its edge tiles' masks (`mods.Mod.narrows`)

    def params(self, prefix: str = "") -> list:
        return list(WINDOW_PARAMS)

    @staticmethod
    def values(window, s0: int, s1: int) -> dict[str, int]:
        """The kernel arguments of a window (left, right), -1 unbounded, for sequences of s0 queries, s1 keys."""
        left, right = kernel_bounds(window, s0, s1)
        return {"win_left": left, "win_right": right}

    @staticmethod
    def bounds(args: dict[str, SSAValue], s0: SSAValue | None = None, s1: SSAValue | None = None) -> WindowBounds:
        """The kernel's bounds as indices, on the diagonal S1 - S0 (no lengths: packed sequences, each
        unit's own diagonal, `bwd_varlen.sequence_window`)."""
        left = scalar.index_cast(args["win_left"], name="win_left")
        right = scalar.index_cast(args["win_right"], name="win_right")
        return WindowBounds(left, right, None if s0 is None else scalar.sub(s1, s0, name="diag"))

    @staticmethod
    def forward_tiles(args: dict[str, SSAValue], q0: SSAValue, q_rows: SSAValue, s0: SSAValue, s1: SSAValue,
                      block: int) -> tuple[TileRange, tuple[SSAValue, SSAValue]]:
        """The forward kernel's unit: the KV tiles of `block` keys rows [q0, q0 + q_rows) see, and the
        bounds (left, right) its slices' mask reads (`mask_forward`)."""
        left = scalar.index_cast(args["win_left"], name="win_left")
        right = scalar.index_cast(args["win_right"], name="win_right")
        diag = scalar.sub(s1, s0, name="diag")  # query row i is aligned with key i + S1 - S0
        j_lo = scalar.max(scalar.sub(scalar.add(q0, diag), left), 0, name="j_lo")
        j_hi = scalar.min(scalar.add(scalar.add(scalar.add(q0, q_rows), diag), right), s1, name="j_hi")
        lo = scalar.floordiv(j_lo, block, name="t_lo")
        hi = scalar.select(scalar.gt(j_hi, j_lo), scalar.ceildiv(j_hi, block), lo, name="t_hi")
        return TileRange(lo, hi), (left, right)

    @staticmethod
    def mask_forward(bounds: tuple[SSAValue, SSAValue], i0: SSAValue, t: SSAValue, block: int, s0: SSAValue,
                     s1: SSAValue, keys: SSAValue, rows: int, scores: SSAValue, tmp: SSAValue, neg: SSAValue) -> None:
        """The forward kernel's slice: add `neg` where the window hides key t * block + c from query
        i0 + r (only if it hides any)."""
        j0 = scalar.mul(t, block, name="tile_k")
        diag = scalar.sub(s1, s0)
        left, right = bounds
        right_edge = scalar.add(scalar.add(i0, diag), right)  # last key row i0 sees
        left_edge = scalar.sub(scalar.add(i0, diag), left)  # first key row i0 sees
        last_key = scalar.sub(scalar.add(j0, keys), 1)
        crosses_right = scalar.gt(last_key, right_edge)
        crosses_left = scalar.lt(j0, scalar.add(left_edge, rows - 1))
        with pto.if_(scalar.or_(crosses_right, crosses_left)):
            # (r, col) is hidden iff col >= r + (right_edge - j0 + 1)  (upper triangle) ...
            tile.tri(scalar.index_cast(scalar.add(scalar.sub(right_edge, j0), 1), I32), out=tmp, upper=True)
            tile.muls(tmp, neg, out=tmp)
            tile.add(scores, tmp, out=scores)
            # ... or col <= r + (left_edge - j0 - 1)  (lower triangle); never both for one entry.
            tile.tri(scalar.index_cast(scalar.sub(scalar.sub(left_edge, j0), 1), I32), out=tmp, upper=False)
            tile.muls(tmp, neg, out=tmp)
            tile.add(scores, tmp, out=scores)

    @staticmethod
    def visible_keys(w: WindowBounds | None, q0: SSAValue, q_rows: SSAValue, s1: SSAValue, block: int) -> TileRange:
        """KV tiles of `block` keys seen by query rows [q0, q0 + q_rows) (all of them without a window):
        keys [q0 + diag - left, q0 + q_rows + diag + right)."""
        return _band(w, q0, q_rows, s1, block, scalar.add, "left", "right")

    @staticmethod
    def visible_queries(w: WindowBounds | None, k0: SSAValue, k_rows: SSAValue, s0: SSAValue, block: int) -> TileRange:
        """Q blocks of `block` rows with a row that sees a key of [k0, k0 + k_rows): the same band from the
        key side, queries [k0 - diag - right, k0 + k_rows - diag + left)."""
        return _band(w, k0, k_rows, s0, block, scalar.sub, "right", "left")

    @staticmethod
    def mask_tile(w: WindowBounds, scores: SSAValue, tmp: SSAValue, neg: SSAValue, rows0: SSAValue, cols0: SSAValue,
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

    def reference(self, scores, b, h, q_idx, kv_idx, values=None):
        """`values`: the kernel's bounds (`win_left`, `win_right`) and the sequence lengths `s0`, `s1`."""
        key = q_idx + values["s1"] - values["s0"]
        seen = (kv_idx >= key - values["win_left"]) & (kv_idx <= key + values["win_right"])
        return scores.masked_fill(~seen, -torch.inf)


WINDOW = Window()


def window_mods(on: bool = True) -> tuple:
    """The mods of a config with the window (`(WINDOW,)`) or without it: `mods=... + window_mods(causal)`."""
    return (WINDOW,) if on else ()
