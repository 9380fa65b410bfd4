"""Grids of test parameters whose default run is a pairwise cover.

A grid of configurations (head x tile x preload x ...) costs a kernel build or a simulator
run per point. The default run takes a cover: a few points that together hold every pair of
values of any two parameters that the grid holds, so every value of each parameter and every
combination of two is still run; the other points run with `-m slow`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence

import pytest

Point = tuple[Hashable, ...]


def _pairs(point: Point) -> set[tuple]:
    return {(i, point[i], j, point[j]) for i, j in itertools.combinations(range(len(point)), 2)}


def pairwise_cover(points: Sequence[Point], cost: Callable[[Point], float] = lambda point: 0) -> list[Point]:
    """Points of `points` holding every pair of values that `points` hold, picked greedily: the
    point with the most pairs not yet held, the cheapest of those, the first of equals."""
    wanted = set().union(*map(_pairs, points))
    cover = []
    while wanted:
        best = max(points, key=lambda point: (len(_pairs(point) & wanted), -cost(point)))
        cover.append(best)
        wanted -= _pairs(best)
    return cover


def grid_params(points: Sequence[Point], default: set[Point], ids: Callable[[Point], str]) -> list:
    """pytest params of `points`; those not in `default` are marked slow."""
    return [pytest.param(*point, id=ids(point), marks=() if point in default else pytest.mark.slow)
            for point in points]
