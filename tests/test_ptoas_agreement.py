"""`run_fa check` agrees with ptoas 0.60 (issue 31): forms ptoas accepts check clean, the ptoas
rules ptofa lacked are enforced, ops ptoas verifies but cannot lower with its default back end
are refused (and accepted for the vpto back end), and the new ops simulate or are refused by
the simulator with their reason. Each form is written after a PTOAS lit test named beside it."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from pto_snippets import FIXPIPE, errors_of, line_of, wrap
from test_sim_ops import consts, kernel, part, run, view2d

from ptofa.ir import dialect as d
from ptofa.cli.main import main
from ptofa.ir.dialect.lowering import LOWERED_BEFORE_EMITC, NOT_LOWERED_BY_EMITC
from ptofa.sim.errors import SimError
from ptofa.ir.textio import PtoCheckError, check_text

V32 = "!pto.tile_buf<vec, 32x32xf32>"
COL1 = "!pto.tile_buf<vec, 32x1xf32>"  # a row-major [32, 1] f32 tile: 4-byte rows
COL1_DN = "!pto.tile_buf<vec, 32x1xf32, blayout=col_major>"


def vec_fn(body: str, args: str = "") -> str:
    """A vector function (no entry) whose arguments are `args`."""
    return ("module {\n  func.func @k(" + args + ") attributes {pto.kernel_kind = #pto.kernel_kind<vector>} {\n"
            + "\n".join("    " + line for line in body.strip().splitlines()) + "\n    return\n  }\n}\n")


# ---------------------------------------------------------------------------------- accepted
ACCEPTED = {
    # lit/tile_fusion/fusion_region_basic.pto: a [32, 1] f32 tile as an argument (ptoas checks
    # tile layouts where it allocates them, not in the type)
    "col_tile_argument": vec_fn(f"pto.trowexpandmul ins(%a, %rd : {V32}, {COL1_DN}) outs(%a : {V32})",
                                f"%a: {V32}, %r: {COL1}, %rd: {COL1_DN}"),
    # lit/tile_fusion/op_scheduling_*.pto: A5 fusion marks on tadd are discardable attributes
    "fusion_attributes": vec_fn(f"pto.tadd ins(%a, %a : {V32}, {V32}) outs(%a : {V32}) {{pto.fusion.group_id = 0 : i64, pto.fusion.order = 1 : i64}}",
                                f"%a: {V32}"),
    # tilelang_st .../trowexpanddiv.pto: launcher flags ptoas keeps and ignores
    "rowexpand_attributes": vec_fn(f"pto.trowexpanddiv ins(%a, %r : {V32}, {COL1_DN}) outs(%a : {V32}) "
                                   "{src1Col = 1 : i64, src0eqdst = true, highPrecision = false}", f"%a: {V32}, %r: {COL1_DN}"),
    # lit/pto/issue226_remove_redundant_pipe_pair.pto: a tload whose tile valid shape is not the view's
    "tload_other_valid_shape": vec_fn(
        consts(0, 1, 64) + "\n" + view2d("v", "p", 64, 64, "f32") + "\n" + part("pv", "v", 64, 1, 64, 64, "f32") + "\n"
        + f"%t = pto.alloc_tile : {V32}\npto.tload ins(%pv : !pto.partition_tensor_view<64x1xf32>) outs(%t : {V32})",
        "%p: !pto.ptr<f32>"),
    # lit/pto/tsqrt_precision_emitc.pto / trsqrt_precision_emitc.pto
    "precision_attributes": vec_fn(f"pto.tsqrt ins(%a : {V32}) outs(%b : {V32}) {{precisionType = #pto<sqrt_precision high_precision>}}\n"
                                   f"pto.trsqrt ins(%a, %b : {V32}, {V32}) outs(%a : {V32}) {{precisionType = #pto<rsqrt_precision high_precision>}}",
                                   f"%a: {V32}, %b: {V32}"),
    # lit/pto/tsync_emitc.pto
    "tsync": vec_fn(f"pto.tsync ins(%a, %v : {V32}, !pto.partition_tensor_view<32x32xf32>)", f"%a: {V32}, %v: !pto.partition_tensor_view<32x32xf32>"),
    # lit/pto/tprefetch_async_emitc.pto
    "prefetch_async": vec_fn(
        "%ctx = pto.make_prefetch_async_context(%ws : !pto.ptr<i8>) -> !pto.prefetch_async_context\n"
        "%ev = pto.tprefetch_async(%src, %ctx : !pto.partition_tensor_view<128xf32>, !pto.prefetch_async_context) -> !pto.async_event\n"
        "%ses = pto.get_prefetch_async_session %ctx : !pto.prefetch_async_context -> !pto.async_session\n"
        "%done = pto.comm.wait_async_event(%ev, %ses : !pto.async_event, !pto.async_session) -> i1",
        "%src: !pto.partition_tensor_view<128xf32>, %ws: !pto.ptr<i8>"),
    # lit/pto/fixpipe_frontend_emitc_scalar_vector_quant_a3.pto
    "fixpipe_set_quant": FIXPIPE,
    # samples/Sync/test_dynamic_valid_shape.pto: only the dynamic valid dim takes an operand
    "alloc_valid_col_only": vec_fn("%c8 = arith.constant 8 : index\n%t = pto.alloc_tile valid_col = %c8 : !pto.tile_buf<vec, 1x32xf32, valid=1x?>"),
    # lit/pto/tgather_three_forms_emitc.pto: the compare form
    "tgather_compare": vec_fn("%k = arith.constant 0.0 : f16\n"
                              "pto.tgather ins(%s, %k, %tm : !pto.tile_buf<vec, 1x32xf16>, f16, !pto.tile_buf<vec, 1x32xui8>) "
                              "outs(%d, %cd : !pto.tile_buf<vec, 1x32xi32>, !pto.tile_buf<vec, 1x32xi32>) {offset = 7 : i32}",
                              "%s: !pto.tile_buf<vec, 1x32xf16>, %tm: !pto.tile_buf<vec, 1x32xui8>, %d: !pto.tile_buf<vec, 1x32xi32>, "
                              "%cd: !pto.tile_buf<vec, 1x32xi32>"),
    # lit/pto/tgather_maskpattern_matches_isa.pto: the mask form down the columns
    "tgather_mask_col": vec_fn('pto.tgather ins(%s, {maskPattern = #pto.mask_pattern<P0010>} : !pto.tile_buf<vec, 4x16xf32>, "col") '
                               "outs(%d : !pto.tile_buf<vec, 1x16xf32>)", "%s: !pto.tile_buf<vec, 4x16xf32>, %d: !pto.tile_buf<vec, 1x16xf32>"),
    # lit/pto/print_tile_native.pto / tprint_tmp_format_emitc.pto
    "tprint_forms": vec_fn("pto.tprint ins(%v : !pto.partition_tensor_view<16x16xf32>)\n"
                           "pto.tprint ins(%t, %v : !pto.tile_buf<vec, 16x16xf32>, !pto.partition_tensor_view<16x16xf32>) "
                           "{printFormat = #pto<print_format width10_precision6>}",
                           "%t: !pto.tile_buf<vec, 16x16xf32>, %v: !pto.partition_tensor_view<16x16xf32>"),
    # lit/pto/tinsert_a3_pipe_selection_gss.pto: a file whose RUN line compiles another file is an empty module
    "comments_only": "// RUN: ptoas --pto-arch a3 %S/other.pto | FileCheck %s\n// CHECK: TINSERT(\n",
}


@pytest.mark.parametrize("text", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_forms_ptoas_accepts_check_clean(text: str) -> None:
    check_text(text, launch_rules=False)


def test_acc_to_vec_tmov_is_a_build_rule_only() -> None:
    """lit/pto/tmov_acc_to_vec_mode_a5_emitc.pto compiles for a3 in ptoas; pto-isa's A2/A3 TMOV has no
    acc -> vec path, so the full check refuses it and --ptoas-only accepts it."""
    acc = "!pto.tile_buf<acc, 32x32xf32, blayout=col_major, slayout=row_major, fractal=1024>"
    text = wrap(f"%acc = pto.alloc_tile : {acc}\n%v = pto.alloc_tile : {V32}\n"
                f"pto.tmov ins(%acc : {acc}) outs(%v : {V32}) {{accToVecMode = #pto.acc_to_vec_mode<dual_mode_split_m>}}", kind="cube")
    check_text(text, launch_rules=False)
    ((line, msg),) = [e for e in errors_of(text) if "tmov" in e[1]]
    assert line == line_of(text, "pto.tmov") and "ptofa rule: ptoas compiles it, the C++ build does not" in msg


# ---------------------------------------------------------------------------------- ptoas's rules
GM = consts(0, 1, 16, 64, 128) + "\n" + view2d("v", "p", 128, 128, "f32") + "\n"
REJECTED = {
    # the mutation fuzz's finding: PTOAS PartitionViewOp::verify
    "partition_offset_plus_size": (
        "%w = pto.partition_view %v, offsets = [%c64, %c0], sizes = [%c128, %c16] : !pto.tensor_view<128x128xf32> -> "
        "!pto.partition_tensor_view<128x16xf32>",
        "'pto.partition_view' bounds: offset+size at dim 0 (192) exceeds static source dim (128)"),
    "partition_size": (
        "%c256 = arith.constant 256 : index\n%w = pto.partition_view %v, offsets = [%c0, %c0], sizes = [%c256, %c16] : "
        "!pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<256x16xf32>",
        "'pto.partition_view' bounds: size at dim 0 (256) exceeds static source dim (128)"),
    "partition_negative_offset": (
        "%m1 = arith.constant -1 : index\n%w = pto.partition_view %v, offsets = [%m1, %c0], sizes = [%c16, %c16] : "
        "!pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<16x16xf32>",
        "'pto.partition_view' bounds: offset at dim 0 must be non-negative, got -1"),
    # PTOAS verifyTileBufLayoutConstraints, at alloc_tile
    "alloc_row_alignment": ("%t = pto.alloc_tile : " + COL1, "'pto.alloc_tile' alignment: a row-major none_box tile's row"),
    # PTOAS TStoreOp::verify: equal static element counts
    "tstore_count": (part("pv", "v", 16, 16, 128, 128, "f32") + f"\n%t = pto.alloc_tile : {V32}\n"
                     f"pto.tstore ins(%t : {V32}) outs(%pv : !pto.partition_tensor_view<16x16xf32>)",
                     "'pto.tstore' shape agreement: view 16x16 holds 256 elements"),
}


@pytest.mark.parametrize("body, message", REJECTED.values(), ids=REJECTED.keys())
def test_ptoas_rules_are_enforced(body: str, message: str) -> None:
    text = vec_fn(GM + body, "%p: !pto.ptr<f32>")
    with pytest.raises(PtoCheckError) as info:
        check_text(text, launch_rules=False)
    last = body.strip().splitlines()[-1].strip()
    assert [(line, msg) for line, msg in info.value.errors if message in msg and line == line_of(text, last)], info.value.errors


# ---------------------------------------------------------------------------------- lowering
TADDRELU = vec_fn(f"pto.taddrelu ins(%a, %b : {V32}, {V32}) outs(%a : {V32})", f"%a: {V32}, %b: {V32}")


def test_every_op_has_a_lowering_entry_or_a_pattern() -> None:
    """The table names dialect ops only; an op marked unlowerable is one ptofa defines."""
    names = {op.name for op in d.PTO.operations}
    assert set(LOWERED_BEFORE_EMITC) <= names and set(NOT_LOWERED_BY_EMITC) <= names
    assert not set(LOWERED_BEFORE_EMITC) & set(NOT_LOWERED_BY_EMITC)


def test_unlowerable_op_is_refused_with_the_reason() -> None:
    for launch_rules in (True, False):
        with pytest.raises(PtoCheckError) as info:
            check_text(TADDRELU, launch_rules=launch_rules)
        ((line, msg),) = info.value.errors
        assert line == line_of(TADDRELU, "pto.taddrelu")
        assert "ptoas parses and verifies it, but its default (EmitC) back end cannot lower it" in msg and "--pto-backend=vpto" in msg


def test_vpto_back_end_accepts_it() -> None:
    check_text(TADDRELU, launch_rules=False, backend="vpto")
    check_text(TADDRELU.replace("module {", 'module attributes {pto.backend = "vpto"} {'), launch_rules=False)
    with pytest.raises(PtoCheckError, match="invalid pto.backend"):
        check_text(TADDRELU.replace("module {", 'module attributes {pto.backend = "llvm"} {'), launch_rules=False)


def test_cli_modes(tmp_path) -> None:
    path = tmp_path / "k.pto"
    path.write_text(TADDRELU)
    runner = CliRunner()
    refused = runner.invoke(main, ["check", "--ptoas-only", str(path)])
    assert refused.exit_code == 1 and "cannot lower it for A2/A3" in refused.output
    verified = runner.invoke(main, ["check", "--ptoas-only", "--pto-backend", "vpto", str(path)])
    assert verified.exit_code == 0, verified.output


# ---------------------------------------------------------------------------------- simulation
def _io(body: str, params: list[tuple[str, str]]) -> str:
    return kernel(consts(0, 1, 32) + "\n" + view2d("xv", "x", 32, 32, "f32") + "\n" + part("xp", "xv", 32, 32, 32, 32, "f32") + "\n"
                  + view2d("yv", "y", 32, 32, "f32") + "\n" + part("yp", "yv", 32, 32, 32, 32, "f32") + "\n"
                  + f"%a = pto.alloc_tile : {V32}\n%o = pto.alloc_tile : {V32}\n"
                  + f"pto.tload ins(%xp : !pto.partition_tensor_view<32x32xf32>) outs(%a : {V32})\n" + body + "\n"
                  + f"pto.tstore ins(%o : {V32}) outs(%yp : !pto.partition_tensor_view<32x32xf32>)", params)


XY = [("x", "!pto.ptr<f32>"), ("y", "!pto.ptr<f32>")]


def test_taddrelu_simulates() -> None:
    x = np.linspace(-3, 3, 1024, dtype=np.float32).reshape(32, 32)
    y = np.zeros((32, 32), np.float32)
    text = _io(f"pto.taddrelu ins(%a, %a : {V32}, {V32}) outs(%o : {V32})", XY).replace("module {", 'module attributes {pto.backend = "vpto"} {')
    run(text, x=x, y=y)
    np.testing.assert_array_equal(y, np.maximum(x + x, 0))


def test_tsync_and_prefetch_async_simulate() -> None:
    """A prefetch changes no data and its wait returns true; tsync orders nothing in the in-order simulator."""
    x = np.arange(1024, dtype=np.float32).reshape(32, 32)
    y = np.zeros((32, 32), np.float32)
    body = ("%ctx = pto.make_prefetch_async_context(%ws : !pto.ptr<i8>) -> !pto.prefetch_async_context\n"
            + consts(1024) + "\n%fv = pto.make_tensor_view %x, shape = [%c1, %c1024], strides = [%c1024, %c1] : !pto.tensor_view<1x1024xf32>\n"
            "%fp = pto.partition_view %fv, offsets = [%c0, %c0], sizes = [%c1, %c1024] : !pto.tensor_view<1x1024xf32> -> !pto.partition_tensor_view<1x1024xf32>\n"
            "%ev = pto.tprefetch_async(%fp, %ctx : !pto.partition_tensor_view<1x1024xf32>, !pto.prefetch_async_context) -> !pto.async_event\n"
            "%ses = pto.get_prefetch_async_session %ctx : !pto.prefetch_async_context -> !pto.async_session\n"
            "%done = pto.comm.wait_async_event(%ev, %ses : !pto.async_event, !pto.async_session) -> i1\n"
            f"pto.tsync ins(%a : {V32})\n"
            f"pto.tmov ins(%a : {V32}) outs(%o : {V32})")
    run(_io(body, XY + [("ws", "!pto.ptr<i8>")]), x=x, y=y, ws=np.zeros(64, np.int8))
    np.testing.assert_array_equal(y, x)


def test_tgatherb_reads_bytes_of_the_source() -> None:
    """lit/pto/gather_tile_native.pto: dst[i, j] = the f32 at byte offset offsets[i, j] of src."""
    x = np.arange(1024, dtype=np.float32).reshape(32, 32)
    y = np.zeros((32, 32), np.float32)
    offs = (np.arange(1024, dtype=np.int32)[::-1] * 4).reshape(32, 32)  # reverse the tile
    body = (f"%bo = pto.alloc_tile : !pto.tile_buf<vec, 32x32xi32>\n"
            + view2d("ov", "offs", 32, 32, "i32") + "\n" + part("op", "ov", 32, 32, 32, 32, "i32") + "\n"
            + "pto.tload ins(%op : !pto.partition_tensor_view<32x32xi32>) outs(%bo : !pto.tile_buf<vec, 32x32xi32>)\n"
            + f"pto.tgatherb ins(%a, %bo : {V32}, !pto.tile_buf<vec, 32x32xi32>) outs(%o : {V32})")
    run(_io(body, XY + [("offs", "!pto.ptr<i32>")]), x=x, y=y, offs=offs)
    np.testing.assert_array_equal(y, x.reshape(-1)[::-1].reshape(32, 32))


def test_tload_with_another_valid_shape_is_refused_at_run_time() -> None:
    """ptoas compiles it; pto-isa asserts at run time that the tile's valid shape is the view's."""
    body = f"%h = pto.alloc_tile : !pto.tile_buf<vec, 32x32xf32, valid=16x32>\npto.tload ins(%xp : !pto.partition_tensor_view<32x32xf32>) outs(%h : !pto.tile_buf<vec, 32x32xf32, valid=16x32>)\npto.tmov ins(%a : {V32}) outs(%o : {V32})"
    with pytest.raises(SimError, match="shape agreement: tload"):
        run(_io(body, XY), x=np.zeros((32, 32), np.float32), y=np.zeros((32, 32), np.float32))


def test_set_quant_is_refused_by_the_simulator() -> None:
    import ptofa.sim.executor  # noqa: F401 (loads the semantics registry)
    from ptofa.sim.registry import SEMANTICS

    for cls in (d.SetQuantScalarOp, d.SetQuantVectorOp):
        op = next(op for op in check_text(FIXPIPE, launch_rules=False).module.walk() if isinstance(op, cls))
        with pytest.raises(SimError, match="quantizing push"):
            SEMANTICS[cls].build(op, lambda v: 0)
