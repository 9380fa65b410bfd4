"""Simulator semantics of the ops of `ptofa.ir.dialect.reductions` and `ptofa.ir.dialect.multitile`:
tiny vector kernels that load a 16x16 f32 input, apply the op and store the result, checked
against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from test_sim_access import T16, io
from test_sim_ops import run

from ptofa.sim.errors import SimError

ROW = "!pto.tile_buf<vec, 1x16xf32>"
IROW = "!pto.tile_buf<vec, 1x16xi32>"
COL8 = "!pto.tile_buf<vec, 16x8xf32, valid=16x1>"
ICOL8 = "!pto.tile_buf<vec, 16x8xi32, valid=16x1>"
MULTI = "!pto.multi_tile_buf<vec, 16x16xf32, count=2>"


@pytest.fixture
def x() -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.uniform(-2.0, 2.0, (16, 16)).astype(np.float32)


@pytest.mark.parametrize("op, ref", [("tcolsum", np.sum), ("tcolmax", np.max), ("tcolmin", np.min), ("tcolprod", np.prod)])
def test_column_reductions(x: np.ndarray, op: str, ref) -> None:
    y = np.zeros((1, 16), np.float32)
    run(io(f"pto.{op} ins(%a : {T16}) outs(%o : {ROW})", 1, 16, ROW), x=x, y=y)
    np.testing.assert_allclose(y, ref(x.astype(np.float64), axis=0, keepdims=True), rtol=1e-6, atol=1e-6)


def test_trowprod(x: np.ndarray) -> None:
    y = np.zeros((16, 1), np.float32)
    run(io(f"pto.trowprod ins(%a : {T16}) outs(%o : {COL8})", 16, 1, COL8), x=x, y=y)
    np.testing.assert_allclose(y, np.prod(x, axis=1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("op, ref", [("tcolargmax", np.argmax), ("tcolargmin", np.argmin)])
def test_column_arg_reductions(x: np.ndarray, op: str, ref) -> None:
    y = np.zeros((1, 16), np.float32)
    body = f"%i = pto.alloc_tile : {IROW}\npto.{op} ins(%a : {T16}) outs(%i : {IROW})\npto.tcvt ins(%i : {IROW}) outs(%o : {ROW})"
    run(io(body, 1, 16, ROW), x=x, y=y)
    np.testing.assert_array_equal(y[0], ref(x, axis=0))


@pytest.mark.parametrize("op, ref", [("trowargmax", np.argmax), ("trowargmin", np.argmin)])
def test_row_arg_reductions(x: np.ndarray, op: str, ref) -> None:
    y = np.zeros((16, 1), np.float32)
    body = f"%i = pto.alloc_tile : {ICOL8}\npto.{op} ins(%a : {T16}) outs(%i : {ICOL8})\npto.tcvt ins(%i : {ICOL8}) outs(%o : {COL8})"
    run(io(body, 16, 1, COL8), x=x, y=y)
    np.testing.assert_array_equal(y[:, 0], ref(x, axis=1))


def test_tlrelu(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    run(io(f"%k = arith.constant 0.25 : f32\npto.tlrelu ins(%a, %k : {T16}, f32) outs(%o : {T16})", 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.25 * x))


def test_taxpy_accumulates_into_dst(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%k = arith.constant 3.0 : f32\npto.tmov ins(%a : {T16}) outs(%o : {T16})\n"
            f"pto.taxpy ins(%a, %k : {T16}, f32) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, x + 3.0 * x, rtol=1e-6)


@pytest.mark.parametrize("op, ref", [("taddc", lambda a, b, c: a + b + c), ("tsubc", lambda a, b, c: a - b + c)])
def test_ternary(x: np.ndarray, op: str, ref) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%b = pto.alloc_tile : {T16}\npto.tmuls ins(%a, %k : {T16}, f32) outs(%b : {T16})\n"
            f"pto.{op} ins(%a, %b, %b : {T16}, {T16}, {T16}) outs(%o : {T16})")
    run(io("%k = arith.constant 0.5 : f32\n" + body, 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, ref(x, 0.5 * x, 0.5 * x), rtol=1e-6)


def test_multi_tile_slots_are_distinct_buffers(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%m = pto.alloc_multi_tile : {MULTI}\n"
            f"%s0 = pto.multi_tile_get %m[%c0] : {MULTI} -> {T16}\n%s1 = pto.multi_tile_get %m[%c1] : {MULTI} -> {T16}\n"
            f"%k = arith.constant 2.0 : f32\npto.tmov ins(%a : {T16}) outs(%s0 : {T16})\n"
            f"pto.tmuls ins(%a, %k : {T16}, f32) outs(%s1 : {T16})\n"
            f"pto.tsub ins(%s1, %s0 : {T16}, {T16}) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, x, rtol=1e-6)


def test_multi_tile_runtime_slot_out_of_range_is_a_sim_error(x: np.ndarray) -> None:
    body = f"%m = pto.alloc_multi_tile : {MULTI}\n%s = pto.multi_tile_get %m[%c3] : {MULTI} -> {T16}\npto.tmov ins(%s : {T16}) outs(%o : {T16})"
    text = io(body, 16, 16, T16).replace("%c3 = arith.constant 3 : index", "%c3 = arith.index_cast %i : i64 to index")
    text = text.replace("%y: !pto.ptr<f32>)", "%y: !pto.ptr<f32>, %i: i64)").replace("%y) :", "%y, %i) :").replace("!pto.ptr<f32>) -> ()", "!pto.ptr<f32>, i64) -> ()")
    with pytest.raises(SimError, match="slot 3 is out of range for multi_tile_buf count=2"):
        run(text, x=x, y=np.zeros((16, 16), np.float32), i=3)


def test_multi_tile_slots_count_toward_capacity() -> None:
    from pto_snippets import errors_of, wrap

    big = "!pto.multi_tile_buf<vec, 256x128xf32, count=2>"  # 2 x 128 KiB > the 192 KiB UB
    text = wrap(f"%c0 = arith.constant 0 : index\n%m = pto.alloc_multi_tile : {big}\n"
                f"%g = pto.multi_tile_get %m[%c0] : {big} -> !pto.tile_buf<vec, 256x128xf32>\n"
                "%z = arith.constant 0.0 : f32\npto.texpands ins(%z : f32) outs(%g : !pto.tile_buf<vec, 256x128xf32>)")
    assert any("vec overflow" in msg and "262144 >" in msg for _, msg in errors_of(text))


def test_local_pipes_are_rejected_as_not_simulated() -> None:
    from pto_snippets import LOCAL_PIPES

    from ptofa.sim import GmPointer, simulate
    from ptofa.ir.textio import check_text

    text = LOCAL_PIPES.replace("@entry(%ffts: !pto.ptr<i64>)", "@entry(%ffts: !pto.ptr<i64>, %f: !pto.ptr<f32>)").replace(
        "    pto.set_ffts %ffts : !pto.ptr<i64>\n",
        "    pto.set_ffts %ffts : !pto.ptr<i64>\n    func.call @cube(%f) : (!pto.ptr<f32>) -> ()\n    func.call @vec(%f) : (!pto.ptr<f32>) -> ()\n")
    args = {"ffts": GmPointer.of(np.zeros(8, np.int64)), "f": GmPointer.of(np.zeros(4096, np.float32))}
    with pytest.raises(SimError, match=r"local \(.*\) pipes .*are not simulated"):
        simulate(check_text(text), args, 1)


def test_sorts_are_not_simulated(x: np.ndarray) -> None:
    s1, si = "!pto.tile_buf<vec, 1x256xf32>", "!pto.tile_buf<vec, 1x256xui32>"
    body = (f"%s1 = pto.alloc_tile : {s1}\n%s2 = pto.alloc_tile : {s1}\n%si = pto.alloc_tile : {si}\n"
            f"pto.tsort32 ins(%s1, %si : {s1}, {si}) outs(%s2 : {s1})\npto.tmov ins(%a : {T16}) outs(%o : {T16})")
    with pytest.raises(SimError, match="pto.tsort32: the hardware's packed value-index sort layout is not simulated"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_tdequant(x: np.ndarray) -> None:
    q = "!pto.tile_buf<vec, 16x16xi16>"
    col = "!pto.tile_buf<vec, 16x8xf32>"
    y = np.zeros((16, 16), np.float32)
    body = (f"%q = pto.alloc_tile : {q}\n%k = pto.alloc_tile : {col}\n%z = pto.alloc_tile : {col}\n"
            "%k2 = arith.constant 0.5 : f32\n%k3 = arith.constant 3.0 : f32\n"
            f"pto.tcvt ins(%a {{rmode = #pto<round_mode TRUNC>}} : {T16}) outs(%q : {q})\n"
            f"pto.texpands ins(%k2 : f32) outs(%k : {col})\npto.texpands ins(%k3 : f32) outs(%z : {col})\n"
            f"pto.tdequant ins(%q, %k, %z : {q}, {col}, {col}) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x * 50, y=y)
    np.testing.assert_allclose(y, (np.trunc(x * 50) - 3.0) * 0.5)


def test_tquant_is_not_simulated(x: np.ndarray) -> None:
    q, col = "!pto.tile_buf<vec, 16x32xi8>", "!pto.tile_buf<vec, 16x1xf32, blayout=col_major>"
    body = (f"%q = pto.alloc_tile : {q}\n%f = pto.alloc_tile : {col}\n%w = pto.alloc_tile : !pto.tile_buf<vec, 16x32xf32>\n"
            f"pto.tquant ins(%w, %f : !pto.tile_buf<vec, 16x32xf32>, {col}) outs(%q : {q}) {{quant_type = #pto<quant_type INT8_SYM>}}\n"
            f"pto.tmov ins(%a : {T16}) outs(%o : {T16})")
    with pytest.raises(SimError, match="pto.tquant: the hardware's quantization rounding and saturation are not simulated"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_local_array_counts_positive_elements(x: np.ndarray) -> None:
    """A local array carries a running count across loop iterations; the result is written as a scalar."""
    y = np.zeros((16, 16), np.float32)
    body = ("%la = pto.declare_local_array -> !pto.local_array<2xi32>\n%z = arith.constant 0 : i32\n%one = arith.constant 1 : i32\n"
            "pto.local_array_set %la[%c0], %z : !pto.local_array<2xi32>, i32\n"
            "scf.for %i = %c0 to %c16 step %c1 {\n"
            f"%e = pto.tgetval ins(%a, %i : {T16}, index) outs : f32\n%zf = arith.constant 0.0 : f32\n"
            "%pos = arith.cmpf ogt, %e, %zf : f32\n%inc = arith.select %pos, %one, %z : i32\n"
            "%cur = pto.local_array_get %la[%c0] : !pto.local_array<2xi32> -> i32\n%nxt = arith.addi %cur, %inc : i32\n"
            "pto.local_array_set %la[%c0], %nxt : !pto.local_array<2xi32>, i32\n}\n"
            "%n = pto.local_array_get %la[%c0] : !pto.local_array<2xi32> -> i32\n%nf = arith.sitofp %n : i32 to f32\n"
            f"pto.texpands ins(%nf : f32) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    assert (y == float((x[0] > 0).sum())).all()


def test_local_array_read_before_write_is_a_sim_error(x: np.ndarray) -> None:
    body = ("%la = pto.declare_local_array -> !pto.local_array<2xi32>\n%n = pto.local_array_get %la[%c1] : !pto.local_array<2xi32> -> i32\n"
            f"pto.tmov ins(%a : {T16}) outs(%o : {T16})")
    with pytest.raises(SimError, match="element \\[1\\] is read before any local_array_set wrote it"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_tcolexpandexpdif(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    body = f"%r = pto.alloc_tile : {ROW}\npto.tcolmax ins(%a : {T16}) outs(%r : {ROW})\npto.tcolexpandexpdif ins(%a, %r : {T16}, {ROW}) outs(%o : {T16})"
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, np.exp(x - x.max(axis=0, keepdims=True)), rtol=1e-6)


def test_pipe_flags_keep_program_order(x: np.ndarray) -> None:
    """Flags order pipes of one core; the simulator runs in program order, so the copy is exact."""
    y = np.zeros((16, 16), np.float32)
    body = ('pto.set_flag["PIPE_MTE2", "PIPE_V", "EVENT_ID0"]\npto.wait_flag[<PIPE_MTE2>, <PIPE_V>, <EVENT_ID0>]\n'
            "pto.record_event [#pto.pipe_event_type<TLOAD>, #pto.pipe_event_type<TVEC>, #pto.event<EVENT_ID1>]\n"
            "pto.wait_event [#pto.pipe_event_type<TLOAD>, #pto.pipe_event_type<TVEC>, #pto.event<EVENT_ID1>]\n"
            "%ea = pto.declare_eventid_array -> !pto.eventid_array<2>\npto.eventid_array_set %ea[%c1], %c1 : !pto.eventid_array<2>\n"
            "%e = pto.eventid_array_get %ea[%c1] : !pto.eventid_array<2>\n"
            "pto.set_flag_dyn [#pto.pipe<PIPE_V>, #pto.pipe<PIPE_MTE3>, %e]\npto.wait_flag_dyn [#pto.pipe<PIPE_V>, #pto.pipe<PIPE_MTE3>, %e]\n"
            f"pto.tmov ins(%a : {T16}) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, x)


def test_eventid_array_read_before_write_is_a_sim_error(x: np.ndarray) -> None:
    body = ("%ea = pto.declare_eventid_array -> !pto.eventid_array<2>\n%e = pto.eventid_array_get %ea[%c0] : !pto.eventid_array<2>\n"
            f"pto.tmov ins(%a : {T16}) outs(%o : {T16})")
    with pytest.raises(SimError, match="element 0 is read before any eventid_array_set wrote it"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


@pytest.mark.parametrize("line", ["pto.set_intra_block <PIPE_MTE3>, 1",
                                  "pto.syncall() mode = #pto.sync_all_mode<hard>, core_type = #pto.sync_core_type<aiv_only>"])
def test_cross_core_waits_are_not_simulated(x: np.ndarray, line: str) -> None:
    with pytest.raises(SimError, match="a wait for another core is not simulated"):
        run(io(f"{line}\npto.tmov ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_cfg_branches_check_but_are_not_simulated(x: np.ndarray) -> None:
    """cf.br / cf.cond_br parse and verify (dominance through the CFG); the simulator refuses them."""
    text = io(f"cf.br ^bb1\n^bb1:\npto.tmov ins(%a : {T16}) outs(%o : {T16})", 16, 16, T16)
    with pytest.raises(SimError, match="branches between blocks \\(cf.br / cf.cond_br\\) are not simulated"):
        run(text, x=x, y=np.zeros((16, 16), np.float32))


def test_internal_pipe_handles_are_not_simulated(x: np.ndarray) -> None:
    body = ("%buf = arith.constant 0 : i32\n%hp = pto.initialize_l2l_pipe {dir_mask = 1, slot_size = 1024, slot_num = 8}(%buf : i32) -> !pto.pipe\n"
            f"pto.tmov ins(%a : {T16}) outs(%o : {T16})")
    with pytest.raises(SimError, match="pto.initialize_l2l_pipe: ptoas's internal pipe-handle form is not simulated"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


@pytest.mark.parametrize("op, ref", [("tpartadd", np.add), ("tpartmul", np.multiply), ("tpartmax", np.maximum), ("tpartmin", np.minimum)])
def test_tpart_ops_on_equal_valid_regions(x: np.ndarray, op: str, ref) -> None:
    y = np.zeros((16, 16), np.float32)
    body = (f"%b = pto.alloc_tile : {T16}\npto.tmuls ins(%a, %c2f : {T16}, f32) outs(%b : {T16})\n"
            f"pto.{op} ins(%a, %b : {T16}, {T16}) outs(%o : {T16})")
    run(io("%c2f = arith.constant -0.5 : f32\n" + body, 16, 16, T16), x=x, y=y)
    np.testing.assert_allclose(y, ref(x, x * np.float32(-0.5)), rtol=1e-6)


def test_tpart_mismatched_valid_regions_are_not_simulated(x: np.ndarray) -> None:
    half = "!pto.tile_buf<vec, 16x16xf32, valid=8x16>"
    body = f"%h = pto.alloc_tile : {half}\npto.tpartadd ins(%a, %h : {T16}, {half}) outs(%o : {T16})"
    with pytest.raises(SimError, match="implementation-defined"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_tsels_selects_src_or_scalar(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    mask = "!pto.tile_buf<vec, 16x32xi8>"
    body = (f"%z = arith.constant 0.0 : f32\n%fill = arith.constant 7.0 : f32\n%mk = pto.alloc_tile : {mask}\n"
            f"pto.tcmps ins(%a, %z {{cmpMode = #pto<cmp gt>}} : {T16}, f32) outs(%mk : {mask})\n"
            f"pto.tsels ins(%mk, %a, %fill : {mask}, {T16}, f32) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, np.where(x > 0, x, np.float32(7.0)))


def test_tpartargmax_is_not_simulated(x: np.ndarray) -> None:
    it = "!pto.tile_buf<vec, 16x16xi32>"
    body = (f"%i = pto.alloc_tile : {it}\n%b = pto.alloc_tile : {T16}\n"
            f"pto.tpartargmax ins(%a, %b, %i, %i : {T16}, {T16}, {it}, {it}) outs(%o, %i : {T16}, {it})")
    with pytest.raises(SimError, match="tie-breaking"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_scheduling_hints_keep_results(x: np.ndarray) -> None:
    """tlog / tdivs precision and tstore's stPhase select pto-isa variants; the values are the same."""
    y = np.zeros((16, 16), np.float32)
    body = (f"%two = arith.constant 2.0 : f32\n%b = pto.alloc_tile : {T16}\npto.tabs ins(%a : {T16}) outs(%b : {T16})\n"
            f"pto.tadds ins(%b, %two : {T16}, f32) outs(%b : {T16})\n"
            f"pto.tlog ins(%b : {T16}) outs(%b : {T16}) {{precisionType = #pto<log_precision high_precision>}}\n"
            f"pto.tdivs ins(%b, %two : {T16}, f32) outs(%o : {T16}) {{precisionType = #pto<div_precision high_precision>}}")
    text = io(body, 16, 16, T16).replace("outs(%yp : !pto.partition_tensor_view<16x16xf32>)",
                                         "outs(%yp : !pto.partition_tensor_view<16x16xf32>) {stPhase = #pto<st_phase final>}")
    assert "stPhase" in text
    run(text, x=x, y=y)
    np.testing.assert_allclose(y, np.log(np.abs(x) + 2) / 2, rtol=1e-6)


def test_view_queries_read_runtime_shape_and_strides(x: np.ndarray) -> None:
    """The 16x16 input view: dim 1 is 16, dim 0's stride is 16 elements; their sum is written out."""
    y = np.zeros((16, 16), np.float32)
    body = ("%n = pto.get_tensor_view_dim %xv, %c1 : !pto.tensor_view<16x16xf32> -> index\n"
            "%s = pto.get_tensor_view_stride %xv, %c0 : !pto.tensor_view<16x16xf32> -> index\n"
            "%ns = arith.addi %n, %s : index\n%ni = arith.index_cast %ns : index to i32\n%nf = arith.sitofp %ni : i32 to f32\n"
            f"pto.texpands ins(%nf : f32) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    assert (y == 32.0).all()


def test_tprefetch_is_not_simulated(x: np.ndarray) -> None:
    body = f"%p = pto.alloc_tile : {T16}\npto.tprefetch ins(%xp : !pto.partition_tensor_view<16x16xf32>) outs(%p : {T16})"
    with pytest.raises(SimError, match="prefetch is a cache hint"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_struct_fields_hold_values(x: np.ndarray) -> None:
    y = np.zeros((16, 16), np.float32)
    st = "!pto.struct<!pto.struct<f32, i8>, f32>"
    body = (f"%st = pto.declare_struct -> {st}\n%u = arith.constant 1.5 : f32\n%w = arith.constant 2.0 : f32\n"
            f"pto.struct_set %st[0, 0], %u : {st}, f32\npto.struct_set %st[1], %w : {st}, f32\n"
            f"%g0 = pto.struct_get %st[0, 0] : {st} -> f32\n%g1 = pto.struct_get %st[1] : {st} -> f32\n%p = arith.mulf %g0, %g1 : f32\n"
            f"pto.texpands ins(%p : f32) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    assert (y == 3.0).all()


def test_struct_read_before_write_is_a_sim_error(x: np.ndarray) -> None:
    st = "!pto.struct<f32, i8>"
    body = f"%st = pto.declare_struct -> {st}\n%g = pto.struct_get %st[1] : {st} -> i8\npto.tmov ins(%a : {T16}) outs(%o : {T16})"
    with pytest.raises(SimError, match="field \\[1\\] is read before any struct_set wrote it"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))


def test_get_validshape_reads_the_runtime_valid_shape(x: np.ndarray) -> None:
    """After set_validshape to 5x16, get_validshape gives 5 and 16; their product is written out."""
    y = np.zeros((16, 16), np.float32)
    dyn = "!pto.tile_buf<vec, 16x16xf32, valid=?x?>"
    body = (f"%c5 = arith.constant 5 : index\n%dv = pto.alloc_tile valid_row = %c16 valid_col = %c16 : {dyn}\n"
            f"pto.set_validshape %dv, %c5, %c16 : {dyn}\n%r, %c = pto.get_validshape %dv : {dyn}\n"
            "%rc = arith.muli %r, %c : index\n%ri = arith.index_cast %rc : index to i32\n%rf = arith.sitofp %ri : i32 to f32\n"
            f"pto.texpands ins(%rf : f32) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    assert (y == 80.0).all()


def test_tscatter_index_mode_reverses_rows(x: np.ndarray) -> None:
    """idx[i, j] = 15 - j (a tci descending from 15 broadcast down the rows): dst = src with columns reversed."""
    y = np.zeros((16, 16), np.float32)
    it, row = "!pto.tile_buf<vec, 16x16xi32>", "!pto.tile_buf<vec, 1x16xi32>"
    body = (f"%c15 = arith.constant 15 : i32\n%ir = pto.alloc_tile : {row}\n%ix = pto.alloc_tile : {it}\n"
            f"pto.tci ins(%c15 : i32) outs(%ir : {row}) {{descending = true}}\n"
            f"pto.tcolexpand ins(%ir : {row}) outs(%ix : {it})\n"
            f"pto.tscatter ins(%a, %ix : {T16}, {it}) outs(%o : {T16})")
    run(io(body, 16, 16, T16), x=x, y=y)
    np.testing.assert_array_equal(y, x[:, ::-1])


def test_tscatter_mask_mode_is_not_simulated(x: np.ndarray) -> None:
    half = "!pto.tile_buf<vec, 16x8xf32>"
    body = (f"%h = pto.alloc_tile : {half}\n"
            f'pto.tscatter ins(%h, {{maskPattern = #pto.mask_pattern<P0101>}} : {half}, "row") outs(%o : {T16})')
    with pytest.raises(SimError, match="mask-pattern mode is not simulated"):
        run(io(body, 16, 16, T16), x=x, y=np.zeros((16, 16), np.float32))
