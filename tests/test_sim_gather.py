"""Simulator semantics of `pto.mgather` / `pto.mscatter` (docs/PTO_IR_manual.md: row mode
moves table row idx[r], elem mode element idx[i, j] of the flattened table), their
out-of-bounds and atomic modes, and the cases the hardware leaves undefined."""

from __future__ import annotations

import numpy as np
import pytest
from test_sim_ops import PTV, consts, kernel, part, run, view2d

from ptofa.sim.errors import SimError

T8 = "!pto.tile_buf<vec, 8x16xf32>"
I8 = "!pto.tile_buf<vec, 8x16xi32>"
IROW = "!pto.tile_buf<vec, 1x8xi32>"
P = [("t", "!pto.ptr<f32>"), ("i", "!pto.ptr<i32>"), ("y", "!pto.ptr<f32>")]


def gather_kernel(idx_rows: int, idx_cols: int, idx_tile: str, attrs: str) -> str:
    """Gather from the 32x16 f32 table t through the i32 indices i into an 8x16 tile, store to y."""
    return kernel(
        consts(0, 1, 8, 16, 32, idx_rows, idx_cols) + "\n"
        + view2d("tv", "t", 32, 16, "f32") + "\n" + part("tp", "tv", 32, 16, 32, 16, "f32") + "\n"
        + view2d("iv", "i", idx_rows, idx_cols, "i32") + "\n" + part("ip", "iv", idx_rows, idx_cols, idx_rows, idx_cols, "i32") + "\n"
        + view2d("yv", "y", 8, 16, "f32") + "\n" + part("yp", "yv", 8, 16, 8, 16, "f32") + "\n"
        + f"%ix = pto.alloc_tile : {idx_tile}\n%o = pto.alloc_tile : {T8}\n"
        + f"pto.tload ins(%ip : {PTV(idx_rows, idx_cols, 'i32')}) outs(%ix : {idx_tile})\n"
        + f"pto.mgather ins(%tp, %ix : {PTV(32, 16, 'f32')}, {idx_tile}) outs(%o : {T8}) {attrs}\n"
        + f"pto.tstore ins(%o : {T8}) outs(%yp : {PTV(8, 16, 'f32')})",
        P,
    )


@pytest.fixture
def table() -> np.ndarray:
    return np.arange(32 * 16, dtype=np.float32).reshape(32, 16)


def test_mgather_rows(table: np.ndarray) -> None:
    rows = np.array([[5, 0, 31, 7, 7, 2, 9, 30]], np.int32)
    y = np.zeros((8, 16), np.float32)
    run(gather_kernel(1, 8, IROW, "{coalesce = #pto<coalesce row>}"), t=table, i=rows, y=y)
    np.testing.assert_array_equal(y, table[rows[0]])


def test_mgather_elements(table: np.ndarray) -> None:
    idx = np.random.default_rng(3).integers(0, 32 * 16, (8, 16)).astype(np.int32)
    y = np.zeros((8, 16), np.float32)
    run(gather_kernel(8, 16, I8, "{coalesce = #pto<coalesce elem>}"), t=table, i=idx, y=y)
    np.testing.assert_array_equal(y, table.reshape(-1)[idx])


@pytest.mark.parametrize("mode, want", [("zero", lambda t, i: np.where((i >= 0) & (i < t.size), t.reshape(-1)[np.clip(i, 0, t.size - 1)], 0)),
                                        ("clamp", lambda t, i: t.reshape(-1)[np.clip(i, 0, t.size - 1)]),
                                        ("wrap", lambda t, i: t.reshape(-1)[np.mod(i, t.size)])])
def test_mgather_out_of_bounds_modes(table: np.ndarray, mode: str, want) -> None:
    idx = np.random.default_rng(4).integers(-600, 1100, (8, 16)).astype(np.int32)
    y = np.zeros((8, 16), np.float32)
    run(gather_kernel(8, 16, I8, f"{{coalesce = #pto<coalesce elem>, gatherOob = #pto<gather_oob {mode}>}}"), t=table, i=idx, y=y)
    np.testing.assert_array_equal(y, want(table, idx))


def test_mgather_undefined_out_of_range_is_a_sim_error(table: np.ndarray) -> None:
    idx = np.zeros((8, 16), np.int32)
    idx[3, 4] = 512
    with pytest.raises(SimError, match="index 512 is outside the table's"):
        run(gather_kernel(8, 16, I8, "{coalesce = #pto<coalesce elem>}"), t=table, i=idx, y=np.zeros((8, 16), np.float32))


def scatter_kernel(attrs: str) -> str:
    """Scatter the 8x16 f32 tile x into the 32x16 table t through the 8x16 i32 indices i."""
    return kernel(
        consts(0, 1, 8, 16, 32) + "\n"
        + view2d("xv", "x", 8, 16, "f32") + "\n" + part("xp", "xv", 8, 16, 8, 16, "f32") + "\n"
        + view2d("iv", "i", 8, 16, "i32") + "\n" + part("ip", "iv", 8, 16, 8, 16, "i32") + "\n"
        + view2d("tv", "t", 32, 16, "f32") + "\n" + part("tp", "tv", 32, 16, 32, 16, "f32") + "\n"
        + f"%s = pto.alloc_tile : {T8}\n%ix = pto.alloc_tile : {I8}\n"
        + f"pto.tload ins(%xp : {PTV(8, 16, 'f32')}) outs(%s : {T8})\n"
        + f"pto.tload ins(%ip : {PTV(8, 16, 'i32')}) outs(%ix : {I8})\n"
        + f"pto.mscatter ins(%s, %ix : {T8}, {I8}) outs(%tp : {PTV(32, 16, 'f32')}) {attrs}",
        [("x", "!pto.ptr<f32>"), ("i", "!pto.ptr<i32>"), ("t", "!pto.ptr<f32>")],
    )


def test_mscatter_elements() -> None:
    x = np.arange(128, dtype=np.float32).reshape(8, 16) + 1
    idx = np.random.default_rng(5).permutation(512)[:128].reshape(8, 16).astype(np.int32)
    t = np.zeros((32, 16), np.float32)
    run(scatter_kernel("{coalesce = #pto<coalesce elem>}"), x=x, i=idx, t=t)
    want = np.zeros(512, np.float32)
    want[idx.reshape(-1)] = x.reshape(-1)
    np.testing.assert_array_equal(t.reshape(-1), want)


def test_mscatter_atomic_add_accumulates_duplicates() -> None:
    x = np.ones((8, 16), np.float32)
    idx = np.full((8, 16), 7, np.int32)
    t = np.zeros((32, 16), np.float32)
    run(scatter_kernel("{coalesce = #pto<coalesce elem>, scatterAtomicOp = #pto<scatter_atomic_op add>}"), x=x, i=idx, t=t)
    assert t.reshape(-1)[7] == 2 * 128 and t.sum() == 2 * 128  # both vector cores of the block run @k


def test_mscatter_duplicates_without_atomic_are_a_sim_error() -> None:
    with pytest.raises(SimError, match="two elements scatter to one place without an atomic mode"):
        run(scatter_kernel("{coalesce = #pto<coalesce elem>}"), x=np.ones((8, 16), np.float32), i=np.zeros((8, 16), np.int32),
            t=np.zeros((32, 16), np.float32))


def test_mscatter_skip_drops_out_of_range() -> None:
    idx = np.arange(128, dtype=np.int32).reshape(8, 16)
    idx[0, 0] = 9999
    t = np.zeros((32, 16), np.float32)
    x = np.arange(128, dtype=np.float32).reshape(8, 16) + 1
    run(scatter_kernel("{coalesce = #pto<coalesce elem>, scatterOob = #pto<scatter_oob skip>}"), x=x, i=idx, t=t)
    assert t.reshape(-1)[0] == 0 and t.reshape(-1)[1] == x[0, 1] and t.sum() == x.sum() - x[0, 0]
