"""Simulator semantics of the issue-18 A3 ops (textract, tinsert, tsetval / tgetval, ttrans,
tgather, tcolexpand, tprint, subview with valid sizes), each a tiny vector kernel that loads
a 16x16 f32 input, applies the op and stores the result, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from test_sim_ops import consts, kernel, part, run, view2d

from ptofa.sim.errors import SimError

T16 = "!pto.tile_buf<vec, 16x16xf32>"
T8 = "!pto.tile_buf<vec, 8x8xf32>"
P = [("x", "!pto.ptr<f32>"), ("y", "!pto.ptr<f32>")]


def io(body: str, out_rows: int, out_cols: int, out_tile: str, out: str = "%o") -> str:
    """Load x (16x16) into %a, run `body`, store `out` (out_rows x out_cols) to y."""
    return kernel(
        consts(0, 1, 2, 3, 8, 16, out_rows, out_cols) + "\n"
        + view2d("xv", "x", 16, 16, "f32") + "\n" + part("xp", "xv", 16, 16, 16, 16, "f32") + "\n"
        + view2d("yv", "y", out_rows, out_cols, "f32") + "\n" + part("yp", "yv", out_rows, out_cols, out_rows, out_cols, "f32") + "\n"
        + f"%a = pto.alloc_tile : {T16}\n%o = pto.alloc_tile : {out_tile}\n"
        + f"pto.tload ins(%xp : !pto.partition_tensor_view<16x16xf32>) outs(%a : {T16})\n"
        + body + "\n"
        + f"pto.tstore ins({out} : {out_tile}) outs(%yp : !pto.partition_tensor_view<{out_rows}x{out_cols}xf32>)",
        P,
    )


@pytest.fixture
def x() -> np.ndarray:
    return np.arange(256, dtype=np.float32).reshape(16, 16)


def test_textract_vec_window(x: np.ndarray) -> None:
    y = np.zeros((8, 8), np.float32)
    run(io(f"pto.textract ins(%a, %8, %c3 : {T16}, index, index) outs(%o : {T8})".replace("%8", "%c8"), 8, 8, T8), x=x, y=y)
    np.testing.assert_array_equal(y, x[8:16, 3:11])


def test_textract_window_out_of_bounds_is_a_sim_error(x: np.ndarray) -> None:
    text = io(f"%n = arith.index_cast %i : i64 to index\npto.textract ins(%a, %n, %c0 : {T16}, index, index) outs(%o : {T8})", 8, 8, T8)
    text = text.replace("%y: !pto.ptr<f32>)", "%y: !pto.ptr<f32>, %i: i64)").replace("%y) :", "%y, %i) :").replace("!pto.ptr<f32>) -> ()", "!pto.ptr<f32>, i64) -> ()")
    with pytest.raises(SimError, match="textract: window rows"):
        run(text, x=x, y=np.zeros((8, 8), np.float32), i=9)


def test_tinsert_vec_window(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%b = pto.alloc_tile : {T8}\n%z = arith.constant 0.0 : f32\n"
            f"pto.texpands ins(%z : f32) outs(%o : {T16})\n"
            f"pto.textract ins(%a, %c0, %c0 : {T16}, index, index) outs(%b : {T8})\n"
            f"pto.tinsert ins(%b, %c8, %c1 : {T8}, index, index) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    want = np.zeros((16, 16), np.float32)
    want[8:16, 1:9] = x[:8, :8]
    np.testing.assert_array_equal(y, want)


def test_tsetval_tgetval(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%c37 = arith.constant 37 : index\n%v = pto.tgetval ins(%a, %c37 : {T16}, index) outs : f32\n"
            f"%w = arith.addf %v, %v : f32\n"
            f"pto.tmov ins(%a : {T16}) outs(%o : {T16})\n"
            f"pto.tsetval ins(%c2, %w : index, f32) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    want = x.copy()
    want[0, 2] = 2 * x.flat[37]
    np.testing.assert_array_equal(y, want)


def test_ttrans(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    run(io(f"pto.ttrans ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, x.T)


def test_ttrans_needs_the_transposed_valid_shape_at_run_time(x: np.ndarray) -> None:
    """ptoas's verifier leaves the valid shapes unrelated; the simulator refuses a non-transpose."""
    half = "!pto.tile_buf<vec, 16x16xf32, valid=8x16>"
    body = f"%h = pto.alloc_tile : {half}\npto.ttrans ins(%a : {T16}) outs(%h : {half})\npto.tmov ins(%a : {T16}) outs(%o : {T16})"
    with pytest.raises(SimError, match="is not the transpose of"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_tgather_mask_pattern(x: np.ndarray) -> None:
    y = np.zeros((16, 8), np.float32)
    t = "!pto.tile_buf<vec, 16x8xf32>"
    run(io(f'pto.tgather ins(%a, {{maskPattern = #pto.mask_pattern<P0101>}} : {T16}, "row") outs(%o : {t})', 16, 8, t), x=x, y=y)
    np.testing.assert_array_equal(y, x[:, [c for c in range(16) if c % 4 in (0, 2)]])


def test_tgather_mask_pattern_down_the_columns(x: np.ndarray) -> None:
    """axis "col": each column keeps the rows the pattern picks of every four (P0010: row 1 of 4)."""
    y = np.zeros((4, 16), np.float32)
    t = "!pto.tile_buf<vec, 4x16xf32>"
    run(io(f'pto.tgather ins(%a, {{maskPattern = #pto.mask_pattern<P0010>}} : {T16}, "col") outs(%o : {t})', 4, 16, t), x=x, y=y)
    np.testing.assert_array_equal(y, x[[1, 5, 9, 13], :])


def test_tgather_compare_form_is_refused(x: np.ndarray) -> None:
    i = "!pto.tile_buf<vec, 16x16xi32>"
    body = (f"%d = pto.alloc_tile : {i}\n%cd = pto.alloc_tile : {i}\n%tm = pto.alloc_tile : !pto.tile_buf<vec, 16x32xui8>\n"
            f"%k = arith.constant 0.0 : f32\n"
            f"pto.tgather ins(%a, %k, %tm : {T16}, f32, !pto.tile_buf<vec, 16x32xui8>) outs(%d, %cd : {i}, {i}) {{offset = 3 : i32}}\n"
            f"pto.tmov ins(%a : {T16}) outs(%o : {T16})")
    with pytest.raises(SimError, match="compare form"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_tgather_index(x: np.ndarray) -> None:
    y = np.zeros((1, 16), np.float32)
    r = "!pto.tile_buf<vec, 1x16xf32>"
    i = "!pto.tile_buf<vec, 1x16xi32>"
    body = (f"%i = pto.alloc_tile : {i}\n%tm = pto.alloc_tile : {i}\n%start = arith.constant 40 : i32\n"
            f"pto.tci ins(%start : i32) outs(%i : {i}) {{descending = true}}\n"
            f"pto.tgather ins(%a, %i, %tm : {T16}, {i}, {i}) outs(%o : {r})")
    run(io(body, 1, 16, r), x=x, y=y)
    np.testing.assert_array_equal(y[0], x.reshape(-1)[40:24:-1])


def test_tcolexpand(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%r = pto.alloc_tile : !pto.tile_buf<vec, 1x16xf32>\n"
            f"pto.textract ins(%a, %c3, %c0 : {T16}, index, index) outs(%r : !pto.tile_buf<vec, 1x16xf32>)\n"
            f"pto.tcolexpand ins(%r : !pto.tile_buf<vec, 1x16xf32>) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, np.broadcast_to(x[3], (16, 16)))


def test_tprint(x: np.ndarray, capsys) -> None:
    run(io(f"pto.tprint ins(%a : {T16})\npto.tmov ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))
    assert "tprint %a [16x16" in capsys.readouterr().out


def test_subview_valid_operands(x: np.ndarray) -> None:
    y = np.zeros((8, 8), np.float32)
    body = (f"%s = pto.subview %a[%c8, %c8] sizes [8, 8] valid[%c3, %c2] : {T16} -> !pto.tile_buf<vec, 8x8xf32, valid=?x?>\n"
            f"%z = arith.constant 0.0 : f32\npto.texpands ins(%z : f32) outs(%o : {T8})\n"
            f"%d = pto.subview %o[%c0, %c0] sizes [8, 8] valid[%c3, %c2] : {T8} -> !pto.tile_buf<vec, 8x8xf32, valid=?x?>\n"
            f"pto.tadds ins(%s, %z : !pto.tile_buf<vec, 8x8xf32, valid=?x?>, f32) outs(%d : !pto.tile_buf<vec, 8x8xf32, valid=?x?>)")
    run(io(body, 8, 8, T8), x=x, y=y)
    want = np.zeros((8, 8), np.float32)
    want[:3, :2] = x[8:11, 8:10]
    np.testing.assert_array_equal(y, want)


def test_single_function_module_simulates_without_entry_attribute(x: np.ndarray) -> None:
    """ptoas accepts a kernel without pto.entry; the simulator runs a module's only function."""
    text = io(f"pto.tmov ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16)
    start = text.index("  func.func @k(")
    single = "module {\n" + text[start:].replace("attributes {pto.kernel_kind = #pto.kernel_kind<vector>}", "")
    from ptofa.sim.executor import simulate
    from ptofa.sim.memory import GmPointer
    from ptofa.ir.textio import check_text

    y = np.zeros((16, 16), np.float32)
    simulate(check_text(single), {"x": GmPointer.of(x), "y": GmPointer.of(y)}, 1)
    np.testing.assert_array_equal(y, x)


def test_bitwise_and_remainder_ops() -> None:
    """tand / tshls / tnot on i32 and tfmod / trem on f32 against numpy."""
    i = "!pto.tile_buf<vec, 16x16xi32>"
    text = kernel(
        consts(0, 1, 16) + "\n" + view2d("av", "a", 16, 16, "i32") + "\n" + part("ap", "av", 16, 16, 16, 16, "i32") + "\n"
        + view2d("ov", "o", 16, 16, "i32") + "\n" + part("op", "ov", 16, 16, 16, 16, "i32") + "\n"
        + f"%x = pto.alloc_tile : {i}\n%y = pto.alloc_tile : {i}\n%k = arith.constant 2 : i32\n"
        + f"pto.tload ins(%ap : !pto.partition_tensor_view<16x16xi32>) outs(%x : {i})\n"
        + f"pto.tshls ins(%x, %k : {i}, i32) outs(%y : {i})\n"
        + f"pto.tand ins(%y, %x : {i}, {i}) outs(%y : {i})\n"
        + f"pto.tnot ins(%y : {i}) outs(%y : {i})\n"
        + f"pto.tstore ins(%y : {i}) outs(%op : !pto.partition_tensor_view<16x16xi32>)",
        [("a", "!pto.ptr<i32>"), ("o", "!pto.ptr<i32>")])
    a = np.arange(256, dtype=np.int32).reshape(16, 16)
    o = np.zeros_like(a)
    run(text, a=a, o=o)
    np.testing.assert_array_equal(o, ~((a << 2) & a))
    f = "!pto.tile_buf<vec, 16x16xf32>"
    x = np.linspace(-7.5, 7.5, 256, dtype=np.float32).reshape(16, 16)
    y = np.zeros_like(x)
    body = (f"%d = pto.alloc_tile : {f}\n%three = arith.constant 3.0 : f32\npto.texpands ins(%three : f32) outs(%d : {f})\n"
            f"pto.tfmod ins(%a, %d : {f}, {f}) outs(%o : {f})\npto.trem ins(%o, %d : {f}, {f}) outs(%o : {f})")
    run(io(body, 16, 16, f), x=x, y=y)
    np.testing.assert_allclose(y, np.remainder(np.fmod(x, 3.0), 3.0), rtol=1e-6)
