"""The window's geometry on the host: a bottom-right aligned window (left, right) lets query i see
key j iff i + d - left <= j <= i + d + right, d = S1 - S0; -1 is unbounded, causal is (-1, 0).
`ptofa.pipeline` (flop counts) and `ptofa.kernels.units` (the unit schedule) re-export these."""

from __future__ import annotations

from collections.abc import Sequence

UNBOUNDED = -1


def kernel_bounds(window: Sequence[int], s0: int, s1: int) -> tuple[int, int]:
    """The kernel's (win_left, win_right) of a window: -1 (unbounded) becomes s0 + s1."""
    left, right = (s0 + s1 if w < 0 else w for w in window)
    return left, right


def visible_pairs(s0: int, s1: int, window: Sequence[int]) -> int:
    """(query, key) pairs of one (sequence, head) the window leaves visible, in closed form.

    Row i sees keys [max(0, i + d - L), min(S1, i + d + R + 1)) (d = S1 - S0), i.e.
    `units.row_keys`. Between the rows where a clip starts or the width reaches 0 the width is
    linear in i, so each such piece sums as an arithmetic series."""
    if tuple(window) == (UNBOUNDED, UNBOUNDED):
        return s0 * s1
    left, right = kernel_bounds(window, s0, s1)
    diag = s1 - s0
    # lo leaves 0 at i = L - d, hi reaches S1 at i = S1 - d - R - 1; the width is 0 up to
    # i = -d - R - 1 and from i = S0 + L on.
    cuts = sorted({0, s0, *(min(s0, max(0, x)) for x in (left - diag, s1 - diag - right - 1, -diag - right, s0 + left))})
    total = 0
    for a, b in zip(cuts, cuts[1:]):
        first, last = _raw_width(a, diag, s1, left, right), _raw_width(b - 1, diag, s1, left, right)
        if first >= 0 and last >= 0:
            total += (first + last) * (b - a) // 2
        elif first > 0 or last > 0:  # not reached: the width changes sign only at a cut
            total += sum(max(0, _raw_width(i, diag, s1, left, right)) for i in range(a, b))
    return total


def _raw_width(i: int, diag: int, s1: int, left: int, right: int) -> int:
    """min(S1, i + d + R + 1) - max(0, i + d - L): row i's visible keys, negative when none."""
    return min(s1, i + diag + right + 1) - max(0, i + diag - left)
