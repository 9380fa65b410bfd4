"""Simulator semantics of `ptofa.ir.dialect.fused` (tprelu, trowexpand, taddsc / tsubsc,
tmatmul.bias) against numpy, and the refusal to run integer-address pointers."""

from __future__ import annotations

import numpy as np
import pytest
from test_sim_access import T16, io
from test_sim_ops import PTV, consts, kernel, part, run, view2d

from ptofa.sim.errors import SimError


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(11).uniform(-2.0, 2.0, (16, 16)).astype(np.float32)


def test_tprelu(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%k = arith.constant 0.5 : f32\n%s = pto.alloc_tile : {T16}\npto.tmuls ins(%a, %k : {T16}, f32) outs(%s : {T16})\n"
            f"pto.tprelu ins(%a, %s : {T16}, {T16}) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.5 * x * x), rtol=1e-6)


def test_trowexpand(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    run(io(f"pto.trowexpand ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, np.repeat(x[:, :1], 16, axis=1))


@pytest.mark.parametrize("op, sign", [("taddsc", 1.0), ("tsubsc", -1.0)])
def test_scalar_sandwich(x: np.ndarray, op: str, sign: float) -> None:
    y = np.zeros((16, 16), np.float32)
    body = f"%k = arith.constant 3.0 : f32\npto.{op} ins(%a, %k, %a : {T16}, f32, {T16}) outs(%o : {T16})"
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, x + sign * 3.0 + x, rtol=1e-6)


def test_tmatmul_bias() -> None:
    mat = "!pto.tile_buf<mat, 16x16xf16, blayout=col_major, slayout=row_major>"
    left = "!pto.tile_buf<left, 16x16xf16, slayout=row_major>"
    right = "!pto.tile_buf<right, 16x16xf16, slayout=col_major>"
    acc = "!pto.tile_buf<acc, 16x16xf32, blayout=col_major, slayout=row_major, fractal=1024>"
    bmat = "!pto.tile_buf<mat, 1x16xf32>"
    bias = "!pto.tile_buf<bias, 1x16xf32>"
    text = kernel(f"""{consts(0, 1, 16)}
    {view2d('av', 'a', 16, 16, 'f16')}
    {view2d('bv', 'b', 16, 16, 'f16')}
    {view2d('zv', 'z', 1, 16, 'f32')}
    {view2d('cv', 'c', 16, 16, 'f32')}
    {part('ap', 'av', 16, 16, 16, 16, 'f16')}
    {part('bp', 'bv', 16, 16, 16, 16, 'f16')}
    {part('zp', 'zv', 1, 16, 1, 16, 'f32')}
    {part('cp', 'cv', 16, 16, 16, 16, 'f32')}
    %ma = pto.alloc_tile : {mat}
    %mb = pto.alloc_tile : {mat}
    %mz = pto.alloc_tile : {bmat}
    %l = pto.alloc_tile : {left}
    %r = pto.alloc_tile : {right}
    %bz = pto.alloc_tile : {bias}
    %acc = pto.alloc_tile : {acc}
    pto.tload ins(%ap : {PTV(16, 16, 'f16')}) outs(%ma : {mat})
    pto.tload ins(%bp : {PTV(16, 16, 'f16')}) outs(%mb : {mat})
    pto.tload ins(%zp : {PTV(1, 16, 'f32')}) outs(%mz : {bmat})
    pto.tmov ins(%ma : {mat}) outs(%l : {left})
    pto.tmov ins(%mb : {mat}) outs(%r : {right})
    pto.tmov ins(%mz : {bmat}) outs(%bz : {bias})
    pto.tmatmul.bias ins(%l, %r, %bz : {left}, {right}, {bias}) outs(%acc : {acc})
    pto.tstore ins(%acc : {acc}) outs(%cp : {PTV(16, 16, 'f32')})""",
                  [("a", "!pto.ptr<f16>"), ("b", "!pto.ptr<f16>"), ("z", "!pto.ptr<f32>"), ("c", "!pto.ptr<f32>")], kind="cube")
    rng = np.random.default_rng(12)
    a, b = rng.uniform(-1, 1, (16, 16)).astype(np.float16), rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    z = rng.uniform(-1, 1, (1, 16)).astype(np.float32)
    c = np.zeros((16, 16), np.float32)
    run(text, a=a, b=b, z=z, c=c)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32) + z, rtol=1e-5, atol=1e-5)


def test_inttoptr_is_not_simulated() -> None:
    text = kernel("%a = pto.ptrtoint %p : !pto.ptr<f32> -> i64\n%q = pto.inttoptr %a : i64 -> !pto.ptr<i32>\n"
                  "%c0 = arith.constant 0 : index\n%v = pto.load_scalar %q[%c0] : !pto.ptr<i32> -> i32", [("p", "!pto.ptr<f32>")])
    with pytest.raises(SimError, match="pto.ptrtoint: pointers and integer addresses do not convert in the simulator"):
        run(text, p=np.zeros(4, np.float32))


def test_fence_runs_and_communication_is_refused(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    fence = f"pto.fence.barrier_all #pto.fence_scope<gm>\npto.cmo.cacheinvalid %xp single_cache_line : {PTV(16, 16, 'f32')}\n"
    run(io(fence + f"pto.tmov ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, x)
    stage = "!pto.tile_buf<vec, 1x16xf32>"
    body = f"%st = pto.alloc_tile : {stage}\npto.comm.tput(%yp, %xp, buf(%st) : {PTV(16, 16, 'f32')}, {PTV(16, 16, 'f32')}, {stage})\n"
    with pytest.raises(SimError, match="pto.comm.tput: inter-device communication is not simulated"):
        run(io(body + f"pto.tmov ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16), x=x, y=y)


def test_tcvt_satmode_is_not_simulated(x: np.ndarray) -> None:
    t16 = "!pto.tile_buf<vec, 16x16xf16>"
    body = f"%h = pto.alloc_tile : {t16}\npto.tcvt ins(%a {{rmode = #pto<round_mode ROUND>, satmode = #pto<saturation_mode ON>}} : {T16}) outs(%h : {t16})"
    with pytest.raises(SimError, match="tcvt: round mode ROUND with satmode .* is not simulated"):
        run(io(body + f"\npto.tmov ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_tconcat(x: np.ndarray) -> None:
    t8 = "!pto.tile_buf<vec, 16x8xf32>"
    y = np.zeros((16, 16), np.float32)
    body = (f"%l = pto.alloc_tile : {t8}\n%r = pto.alloc_tile : {t8}\n"
            f"pto.textract ins(%a, %c0, %c8 : {T16}, index, index) outs(%l : {t8})\n"
            f"pto.textract ins(%a, %c0, %c0 : {T16}, index, index) outs(%r : {t8})\n"
            f"pto.tconcat ins(%l, %r : {t8}, {t8}) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, np.concatenate([x[:, 8:], x[:, :8]], axis=1))


def test_tconcatidx_copies_the_counted_columns(x: np.ndarray) -> None:
    t8 = "!pto.tile_buf<vec, 16x8xf32>"
    i8 = "!pto.tile_buf<vec, 16x8xi32>"
    y = np.zeros((16, 16), np.float32)
    body = (f"%l = pto.alloc_tile : {t8}\n%r = pto.alloc_tile : {t8}\n%n0 = pto.alloc_tile : {i8}\n%n1 = pto.alloc_tile : {i8}\n"
            "%k3 = arith.constant 3 : i32\n%k9 = arith.constant 9 : i32\n%z = arith.constant 0.0 : f32\n"
            f"pto.texpands ins(%k3 : i32) outs(%n0 : {i8})\npto.texpands ins(%k9 : i32) outs(%n1 : {i8})\n"
            f"pto.texpands ins(%z : f32) outs(%o : {T16})\n"
            f"pto.textract ins(%a, %c0, %c8 : {T16}, index, index) outs(%l : {t8})\n"
            f"pto.textract ins(%a, %c0, %c0 : {T16}, index, index) outs(%r : {t8})\n"
            f"pto.tconcatidx ins(%l, %r, %n0, %n1 : {t8}, {t8}, {i8}, {i8}) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    want = np.zeros((16, 16), np.float32)
    want[:, :3] = x[:, 8:11]
    want[:, 3:11] = x[:, :8]  # 9 requested, src1 has 8 valid columns
    np.testing.assert_array_equal(y, want)
