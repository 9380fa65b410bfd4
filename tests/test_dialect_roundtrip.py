"""Every op and type of the PTO dialect parses, verifies, prints, and prints back identically.

Each case is a small snippet inside a valid module (docs/sources.md §3); the
check is `check_text` on the source, then print(parse(print)) == print.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pto_snippets import CUBE_BODY, CUBE_PRE, ENTRY, FIXPIPE, LOCAL_PIPES, PP, PPH, QK, QKH, VEC_BODY, VEC_PRE, pipes, roundtrip, wrap

from ptofa.ir import dialect as d
from ptofa.ir.textio import check_text, parse_pto, print_pto

SAMPLE = Path(__file__).parent / "data" / "fa_tiny.pto"  # hand-written, not printed by ptofa

V32 = "!pto.tile_buf<vec, 16x64xf32>"
V16 = "!pto.tile_buf<vec, 16x64xf16>"
COL = "!pto.tile_buf<vec, 16x1xf32, blayout=col_major>"
ROW = "!pto.tile_buf<vec, 1x16xf32>"
ND8 = "!pto.tile_buf<vec, 16x8xf32>"  # row_major per-row vector: 32 bytes of columns
ND1 = "!pto.tile_buf<vec, 16x8xf32, valid=16x1>"  # ND reduction result: 1 valid column
MAT = "!pto.tile_buf<mat, 128x128xf16, blayout=col_major, slayout=row_major>"
MATT = "!pto.tile_buf<mat, 128x128xf16, slayout=col_major>"
LEFT = "!pto.tile_buf<left, 128x128xf16, slayout=row_major>"
RIGHT = "!pto.tile_buf<right, 128x128xf16, slayout=col_major>"
ACC = "!pto.tile_buf<acc, 128x128xf32, blayout=col_major, slayout=row_major, fractal=1024>"


def _allocs(**tiles: str) -> str:
    return "\n".join(f"%{name} = pto.alloc_tile : {t}" for name, t in tiles.items())


VEC_TILES = _allocs(a=V32, b=V32, o=V32, t=V32, h=V16, col=COL, nd8=ND8, nd1=ND1)
CUBE_TILES = _allocs(mat=MAT, matt=MATT, left=LEFT, right=RIGHT, acc=ACC)
SCALAR = "%s = arith.constant 2.0 : f32"

# --------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------

TILE_TYPES = {
    "compact": "!pto.tile_buf<vec, 16x64xf32>",
    "compact_f16": "!pto.tile_buf<vec, 16x64xf16>",
    "valid_static": "!pto.tile_buf<vec, 16x64xf32, valid=8x32>",
    "blayout": "!pto.tile_buf<vec, 16x1xf32, blayout=col_major>",
    "slayout_row": "!pto.tile_buf<mat, 128x128xf16, blayout=col_major, slayout=row_major>",
    "slayout_col": "!pto.tile_buf<mat, 128x128xf16, slayout=col_major>",
    "fractal_1024": "!pto.tile_buf<acc, 128x128xf32, blayout=col_major, slayout=row_major, fractal=1024>",
    "fractal_32": "!pto.tile_buf<mat, 16x16xf16, slayout=row_major, fractal=32>",
    "pad_1": "!pto.tile_buf<vec, 16x64xf32, pad=1>",
    "pad_2": "!pto.tile_buf<vec, 16x64xf32, pad=2>",
    "pad_3": "!pto.tile_buf<vec, 16x64xf32, pad=3>",
    "compact_1": "!pto.tile_buf<vec, 16x64xf32, compact=1>",
    "overrides_any_order": "!pto.tile_buf<acc, 128x128xf32, fractal=1024, slayout=row_major, blayout=col_major>",
    "every_override": "!pto.tile_buf<mat, 32x32xf16, valid=16x32, blayout=col_major, slayout=row_major, fractal=512, pad=1, compact=1>",
    "left": "!pto.tile_buf<left, 128x128xf16, slayout=row_major>",
    "right": "!pto.tile_buf<right, 128x128xf16, slayout=col_major>",
    "bias": "!pto.tile_buf<bias, 1x128xf32>",
    "scaling": "!pto.tile_buf<scaling, 1x128xf16>",
    "i32_vec": "!pto.tile_buf<vec, 8x8xi32>",
    "bf16_vec": "!pto.tile_buf<vec, 8x16xbf16>",
    "bf16_mat": "!pto.tile_buf<mat, 128x128xbf16, blayout=col_major, slayout=row_major>",
    "bf16_left": "!pto.tile_buf<left, 128x128xbf16, slayout=row_major>",
    "bf16_right": "!pto.tile_buf<right, 128x128xbf16, slayout=col_major>",
    "i8_vec": "!pto.tile_buf<vec, 1x256xi8>",
    "i8_mask": "!pto.tile_buf<vec, 32x256xi8>",
    "i16_vec": "!pto.tile_buf<vec, 1x256xi16>",
    "legacy": "!pto.tile_buf<loc=vec, dtype=f32, rows=64, cols=256, v_row=64, v_col=256, blayout=row_major, slayout=none_box, fractal=512, pad=0>",
    "legacy_partial_valid": "!pto.tile_buf<loc=vec, dtype=f16, rows=64, cols=256, v_row=32, v_col=128, blayout=row_major, slayout=none_box, fractal=512, pad=1>",
    "legacy_boxed_compact": "!pto.tile_buf<loc=mat, dtype=f16, rows=128, cols=128, v_row=128, v_col=128, blayout=col_major, slayout=row_major, fractal=512, pad=0, compact=1>",
}


@pytest.mark.parametrize("tile_type", TILE_TYPES.values(), ids=TILE_TYPES.keys())
def test_tile_buf_type(tile_type: str) -> None:
    printed = roundtrip(wrap(f"%t = pto.alloc_tile : {tile_type}"))
    assert "loc=" not in printed  # legacy spelling prints compact


DYNAMIC_TILES = {
    "compact_dyn": "!pto.tile_buf<vec, 16x64xf32, valid=?x?>",
    "compact_dyn_row": "!pto.tile_buf<vec, 16x64xf32, valid=?x64>",
    "compact_dyn_col": "!pto.tile_buf<vec, 16x64xf32, valid=16x?>",
    "legacy_question": "!pto.tile_buf<loc=vec, dtype=f32, rows=16, cols=64, v_row=?, v_col=?, blayout=row_major, slayout=none_box, fractal=512, pad=0>",
    "legacy_minus_one": "!pto.tile_buf<loc=vec, dtype=f32, rows=16, cols=64, v_row=-1, v_col=-1, blayout=row_major, slayout=none_box, fractal=512, pad=0>",
    "dyn_pad_min": "!pto.tile_buf<vec, 16x64xf32, valid=?x?, pad=3>",
    "dyn_bf16": "!pto.tile_buf<vec, 16x64xbf16, valid=?x?>",
    "dyn_mat": "!pto.tile_buf<mat, 128x128xf16, valid=?x?, blayout=col_major, slayout=row_major>",
    "dyn_left": "!pto.tile_buf<left, 128x128xf16, valid=?x?, slayout=row_major>",
    "dyn_right": "!pto.tile_buf<right, 128x128xbf16, valid=?x?, slayout=col_major>",
    "dyn_acc": "!pto.tile_buf<acc, 128x128xf32, valid=?x?, blayout=col_major, slayout=row_major, fractal=1024>",
}


@pytest.mark.parametrize("tile_type", DYNAMIC_TILES.values(), ids=DYNAMIC_TILES.keys())
def test_dynamic_valid_tile_with_valid_operands(tile_type: str) -> None:
    """An operand for each dynamic valid dim, none for a static one (ptoas's AllocTileOp)."""
    dyn_row, dyn_col = ("valid=?x64" not in tile_type and "valid=16x?" not in tile_type,) * 2
    dyn_row = dyn_row or "valid=?x64" in tile_type
    dyn_col = dyn_col or "valid=16x?" in tile_type
    clause = ("valid_row = %r " if dyn_row else "") + ("valid_col = %r " if dyn_col else "")
    printed = roundtrip(wrap(f"%r = arith.constant 8 : index\n%t = pto.alloc_tile {clause}: {tile_type}"))
    assert clause.strip() in printed
    assert "?" in printed


def test_legacy_and_compact_spellings_are_one_type() -> None:
    legacy = parse_pto(wrap(f"%t = pto.alloc_tile : {TILE_TYPES['legacy']}")).module
    compact = parse_pto(wrap("%t = pto.alloc_tile : !pto.tile_buf<vec, 64x256xf32>")).module
    assert print_pto(legacy) == print_pto(compact)
    (t1,) = [op.result.type for op in legacy.walk() if isinstance(op, d.AllocTileOp)]
    (t2,) = [op.result.type for op in compact.walk() if isinstance(op, d.AllocTileOp)]
    assert t1 == t2 and t1.valid == (64, 256) and t1.shape == (64, 256)


def test_tile_buf_as_callee_argument() -> None:
    roundtrip(wrap(f"pto.tadd ins(%x, %x : {V32}, {V32}) outs(%x : {V32})", args=f"%x: {V32}"))


PTR_ARGS = {space: f"%p: !pto.ptr<f32, {space}>" for space in d.MEMORY_SPACES if space != "gm"}
PTR_ARGS["gm_default"] = "%p: !pto.ptr<f32>"
PTR_ARGS["i8"] = "%p: !pto.ptr<i8>"
PTR_ARGS["bf16"] = "%p: !pto.ptr<bf16>"
PTR_ARGS["i16"] = "%p: !pto.ptr<i16>"
PTR_ARGS["i32"] = "%p: !pto.ptr<i32>"


@pytest.mark.parametrize("args", PTR_ARGS.values(), ids=PTR_ARGS.keys())
def test_ptr_type(args: str) -> None:
    printed = roundtrip(wrap("", args=args))
    assert args.split(": ")[1] in printed


def test_ptr_gm_space_prints_as_default() -> None:
    assert "!pto.ptr<f32>" in roundtrip(wrap("", args="%p: !pto.ptr<f32, gm>"))


VIEWS = {
    "nd_static": ("[%c16, %c64]", "[%c64, %c1]", "", "16x64xf32"),
    "dyn_rows": ("[%n, %c64]", "[%c64, %c1]", "", "?x64xf32"),
    "dyn_both": ("[%n, %n]", "[%n, %c1]", "", "?x?xf32"),
    "dn_layout": ("[%c64, %n]", "[%c1, %c64]", " {layout = #pto.layout<dn>}", "64x?xf32"),
    "nd_layout": ("[%c16, %c64]", "[%c64, %c1]", " {layout = #pto.layout<nd>}", "16x64xf32"),
    "nz_layout": ("[%c16, %c64]", "[%c64, %c1]", " {layout = #pto.layout<nz>}", "16x64xf32"),
    "rank1": ("[%c64]", "[%c1]", "", "64xf32"),
    "rank3": ("[%c1, %c16, %c64]", "[%c1, %c64, %c1]", "", "1x16x64xf32"),
}
for _elem in ("bf16", "i8", "i16", "i32"):
    VIEWS[f"{_elem}_view"] = ("[%n, %c64]", "[%c64, %c1]", "", f"?x64x{_elem}")
VIEW_PRE = """%c1 = arith.constant 1 : index
%c16 = arith.constant 16 : index
%c64 = arith.constant 64 : index
%n = arith.index_cast %ni : i64 to index"""


@pytest.mark.parametrize("shape, strides, layout, dims", VIEWS.values(), ids=VIEWS.keys())
def test_make_tensor_view(shape: str, strides: str, layout: str, dims: str) -> None:
    body = f"{VIEW_PRE}\n%tv = pto.make_tensor_view %p, shape = {shape}, strides = {strides}{layout} : !pto.tensor_view<{dims}>"
    elem = dims.split("x")[-1]
    printed = roundtrip(wrap(body, args=f"%p: !pto.ptr<{elem}>, %ni: i64"))
    assert f"!pto.tensor_view<{dims}>" in printed
    assert layout in printed


PARTITIONS = {
    "static": ("[%c0, %c0]", "[%c16, %c64]", "16x64xf32"),
    "dynamic_offset": ("[%n, %c0]", "[%c16, %c64]", "16x64xf32"),
    "dynamic_size": ("[%c0, %c0]", "[%n, %c64]", "?x64xf32"),
}


@pytest.mark.parametrize("offsets, sizes, dims", PARTITIONS.values(), ids=PARTITIONS.keys())
def test_partition_view(offsets: str, sizes: str, dims: str) -> None:
    body = (f"{VIEW_PRE}\n%c0 = arith.constant 0 : index\n"
            "%tv = pto.make_tensor_view %p, shape = [%n, %c64], strides = [%c64, %c1] : !pto.tensor_view<?x64xf32>\n"
            f"%pv = pto.partition_view %tv, offsets = {offsets}, sizes = {sizes} : !pto.tensor_view<?x64xf32> -> !pto.partition_tensor_view<{dims}>")
    assert f"!pto.partition_tensor_view<{dims}>" in roundtrip(wrap(body, args="%p: !pto.ptr<f32>, %ni: i64"))


# --------------------------------------------------------------------------------------
# Ops: a snippet per op form. (kind, body)
# --------------------------------------------------------------------------------------

GM = """%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c16 = arith.constant 16 : index
%c64 = arith.constant 64 : index
%c128 = arith.constant 128 : index
%tv = pto.make_tensor_view %p, shape = [%c128, %c128], strides = [%c128, %c1] : !pto.tensor_view<128x128xf32>
%tvh = pto.make_tensor_view %ph, shape = [%c128, %c128], strides = [%c128, %c1] : !pto.tensor_view<128x128xf16>
%pv = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c16, %c64] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<16x64xf32>
%pvh = pto.partition_view %tvh, offsets = [%c0, %c0], sizes = [%c128, %c128] : !pto.tensor_view<128x128xf16> -> !pto.partition_tensor_view<128x128xf16>
%pacc = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c128, %c128] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<128x128xf32>"""
GM_ARGS = "%p: !pto.ptr<f32>, %ph: !pto.ptr<f16>"

OPS: dict[str, tuple[str, str]] = {
    "runtime_ids": ("vector", "%b = pto.get_block_idx\n%n = pto.get_block_num\n%s = pto.get_subblock_idx\n%m = pto.get_subblock_num"),
    "addptr": ("vector", "%c8 = arith.constant 8 : index\n%q = pto.addptr %p, %c8 : !pto.ptr<f32> -> !pto.ptr<f32>"),
    "load_store_scalar": ("vector", "%c8 = arith.constant 8 : index\n%x = pto.load_scalar %p[%c8] : !pto.ptr<f32> -> f32\n"
                                    "pto.store_scalar %x, %p[%c8] : !pto.ptr<f32>, f32"),
    "alloc_tile": ("vector", f"%t = pto.alloc_tile : {V32}"),
    "tload_vec": ("vector", f"{GM}\n%t = pto.alloc_tile : {V32}\npto.tload ins(%pv : !pto.partition_tensor_view<16x64xf32>) outs(%t : {V32})"),
    "tload_mat": ("cube", f"{GM}\n%t = pto.alloc_tile : {MAT}\npto.tload ins(%pvh : !pto.partition_tensor_view<128x128xf16>) outs(%t : {MAT})"),
    "tstore_vec": ("vector", f"{GM}\n%t = pto.alloc_tile : {V32}\npto.tstore ins(%t : {V32}) outs(%pv : !pto.partition_tensor_view<16x64xf32>)"),
    "tstore_acc_f32": ("cube", f"{GM}\n%t = pto.alloc_tile : {ACC}\npto.tstore ins(%t : {ACC}) outs(%pacc : !pto.partition_tensor_view<128x128xf32>)"),
    "tstore_acc_f16": ("cube", f"{GM}\n%t = pto.alloc_tile : {ACC}\npto.tstore ins(%t : {ACC}) outs(%pvh : !pto.partition_tensor_view<128x128xf16>)"),
    "tstore_mat": ("cube", f"{GM}\n%t = pto.alloc_tile : {MAT}\npto.tstore ins(%t : {MAT}) outs(%pvh : !pto.partition_tensor_view<128x128xf16>)"),
    "tmov_mat_left": ("cube", f"{CUBE_TILES}\npto.tmov ins(%mat : {MAT}) outs(%left : {LEFT})"),
    "tmov_mat_right": ("cube", f"{CUBE_TILES}\npto.tmov ins(%matt : {MATT}) outs(%right : {RIGHT})"),
    "tmov_acc_mat": ("cube", f"{CUBE_TILES}\n%m32 = pto.alloc_tile : !pto.tile_buf<mat, 128x128xf32, blayout=col_major, slayout=row_major>\npto.tmov ins(%acc : {ACC}) outs(%m32 : !pto.tile_buf<mat, 128x128xf32, blayout=col_major, slayout=row_major>)"),
    "tmov_mat_bias": ("cube", "%m = pto.alloc_tile : !pto.tile_buf<mat, 1x128xf32>\n%b = pto.alloc_tile : !pto.tile_buf<bias, 1x128xf32>\npto.tmov ins(%m : !pto.tile_buf<mat, 1x128xf32>) outs(%b : !pto.tile_buf<bias, 1x128xf32>)"),
    "tmov_mat_scaling": ("cube", "%m = pto.alloc_tile : !pto.tile_buf<mat, 1x128xf16>\n%b = pto.alloc_tile : !pto.tile_buf<scaling, 1x128xf16>\npto.tmov ins(%m : !pto.tile_buf<mat, 1x128xf16>) outs(%b : !pto.tile_buf<scaling, 1x128xf16>)"),
    "tmov_vec_vec": ("vector", f"{VEC_TILES}\npto.tmov ins(%a : {V32}) outs(%b : {V32})"),
    "treshape": ("vector", f"%c = pto.alloc_tile : {COL}\n%r = pto.treshape %c : {COL} -> {ROW}"),
    "subview": ("vector", f"%c0 = arith.constant 0 : index\n%c8 = arith.constant 8 : index\n%a = pto.alloc_tile : {V32}\n%s = pto.subview %a[%c8, %c0] sizes [8, 64] : {V32} -> !pto.tile_buf<vec, 8x64xf32>"),
    # A [1,R] row tile made by alloc_tile (a subview of a treshape is rejected by ptoas, docs/sources.md §2.13).
    "subview_row": ("vector", f"%c0 = arith.constant 0 : index\n%r = pto.alloc_tile : {ROW}\n%s = pto.subview %r[%c0, %c0] sizes [1, 8] : {ROW} -> !pto.tile_buf<vec, 1x8xf32>"),
    "tcvt_tmp": ("vector", f"{VEC_TILES}\npto.tcvt ins(%a, %t {{rmode = #pto<round_mode CAST_RINT>}} : {V32}, {V32}) outs(%h : {V16})"),
    "tcvt_default_rmode": ("vector", f"{VEC_TILES}\npto.tcvt ins(%a : {V32}) outs(%h : {V16})"),
    "tcvt_f16_to_f32": ("vector", f"{VEC_TILES}\npto.tcvt ins(%h {{rmode = #pto<round_mode NONE>}} : {V16}) outs(%a : {V32})"),
    "texpands_vec": ("vector", f"{SCALAR}\n%r = pto.alloc_tile : {ROW}\npto.texpands ins(%s : f32) outs(%r : {ROW})"),
    "texpands_mat": ("cube", f"{SCALAR}\n%m = pto.alloc_tile : {MAT}\npto.texpands ins(%s : f32) outs(%m : {MAT})"),
    "texpands_row_view": ("vector", f"{SCALAR}\n%c = pto.alloc_tile : {COL}\n%r = pto.treshape %c : {COL} -> {ROW}\npto.texpands ins(%s : f32) outs(%r : {ROW})"),
    "tmatmul": ("cube", f"{CUBE_TILES}\npto.tmatmul ins(%left, %right : {LEFT}, {RIGHT}) outs(%acc : {ACC})"),
    "tmatmul_acc": ("cube", f"{CUBE_TILES}\npto.tmatmul.acc ins(%acc, %left, %right : {ACC}, {LEFT}, {RIGHT}) outs(%acc : {ACC})"),
    "tmatmul_rect": ("cube", "%l = pto.alloc_tile : !pto.tile_buf<left, 128x64xf16, slayout=row_major>\n"
                     "%r = pto.alloc_tile : !pto.tile_buf<right, 64x256xf16, slayout=col_major>\n"
                     "%c = pto.alloc_tile : !pto.tile_buf<acc, 128x256xf32, blayout=col_major, slayout=row_major, fractal=1024>\n"
                     "pto.tmatmul ins(%l, %r : !pto.tile_buf<left, 128x64xf16, slayout=row_major>, !pto.tile_buf<right, 64x256xf16, slayout=col_major>) "
                     "outs(%c : !pto.tile_buf<acc, 128x256xf32, blayout=col_major, slayout=row_major, fractal=1024>)"),
}

for _dtype, _acc in (("bf16", "f32"), ("f32", "f32"), ("i8", "i32")):
    _l = f"!pto.tile_buf<left, 32x32x{_dtype}, slayout=row_major>"
    _r = f"!pto.tile_buf<right, 32x32x{_dtype}, slayout=col_major>"
    _c = f"!pto.tile_buf<acc, 32x32x{_acc}, blayout=col_major, slayout=row_major, fractal=1024>"
    OPS[f"tmatmul_{_dtype}"] = ("cube", f"%l = pto.alloc_tile : {_l}\n%r = pto.alloc_tile : {_r}\n%c = pto.alloc_tile : {_c}\n"
                                        f"pto.tmatmul ins(%l, %r : {_l}, {_r}) outs(%c : {_c})")

for _mode in d.ROUND_MODES:
    OPS[f"tcvt_{_mode}"] = ("vector", f"{VEC_TILES}\npto.tcvt ins(%a {{rmode = #pto<round_mode {_mode}>}} : {V32}) outs(%h : {V16})")

for _op in ("tadd", "tsub", "tmul", "tdiv", "tmax", "tmin"):
    OPS[_op] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %b : {V32}, {V32}) outs(%o : {V32})")
    OPS[f"{_op}_in_place"] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %b : {V32}, {V32}) outs(%a : {V32})")
OPS["tadd_f16_rows"] = ("vector", "%a = pto.alloc_tile : !pto.tile_buf<vec, 1x16xf16>\n"
                        "pto.tadd ins(%a, %a : !pto.tile_buf<vec, 1x16xf16>, !pto.tile_buf<vec, 1x16xf16>) outs(%a : !pto.tile_buf<vec, 1x16xf16>)")
OPS["tadd_i32"] = ("vector", "%a = pto.alloc_tile : !pto.tile_buf<vec, 8x8xi32>\n"
                   "pto.tadd ins(%a, %a : !pto.tile_buf<vec, 8x8xi32>, !pto.tile_buf<vec, 8x8xi32>) outs(%a : !pto.tile_buf<vec, 8x8xi32>)")

for _op in ("texp", "tlog", "tsqrt", "trsqrt", "trecip", "tabs", "tneg", "trelu"):
    OPS[_op] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a : {V32}) outs(%o : {V32})")
OPS["texp_in_place"] = ("vector", f"{VEC_TILES}\npto.texp ins(%a : {V32}) outs(%a : {V32})")

for _op in ("tadds", "tsubs", "tmuls", "tdivs", "tmaxs", "tmins"):
    OPS[_op] = ("vector", f"{VEC_TILES}\n{SCALAR}\npto.{_op} ins(%a, %s : {V32}, f32) outs(%o : {V32})")
OPS["tdivs_scalar_first"] = ("vector", f"{VEC_TILES}\n{SCALAR}\npto.tdivs ins(%s, %a : f32, {V32}) outs(%o : {V32})")
OPS["tmuls_in_place"] = ("vector", f"{VEC_TILES}\n{SCALAR}\npto.tmuls ins(%a, %s : {V32}, f32) outs(%a : {V32})")

for _op in ("trowmax", "trowsum", "trowmin"):
    OPS[f"{_op}_tmp"] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %t : {V32}, {V32}) outs(%col : {COL})")
    OPS[f"{_op}_no_tmp"] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a : {V32}) outs(%col : {COL})")
    OPS[f"{_op}_nd_dst"] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %t : {V32}, {V32}) outs(%nd1 : {ND1})")

for _op in ("trowexpandsub", "trowexpandmul", "trowexpanddiv", "trowexpandadd", "trowexpandmax", "trowexpandmin", "trowexpandexpdif"):
    OPS[f"{_op}_tmp"] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %col, %t : {V32}, {COL}, {V32}) outs(%o : {V32})")
    if _op != "trowexpandexpdif":  # its tmp is required (ptofa.ir.target.EXPDIF_TMP_BYTES)
        OPS[f"{_op}_dn"] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %col : {V32}, {COL}) outs(%o : {V32})")
        OPS[f"{_op}_nd_col"] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %nd8 : {V32}, {ND8}) outs(%a : {V32})")
OPS["trowexpandexpdif_nd_col_tmp"] = (
    "vector", f"{VEC_TILES}\npto.trowexpandexpdif ins(%a, %nd8, %t : {V32}, {ND8}, {V32}) outs(%a : {V32})")

OPS["scf_for_body"] = ("vector", f"""%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c4 = arith.constant 4 : index
{VEC_TILES}
scf.for %i = %c0 to %c4 step %c1 {{
  pto.texp ins(%a : {V32}) outs(%a : {V32})
}}""")


# --------------------------------------------------------------------------------------
# Masks, ragged tails, bf16 and atomic stores: the forms of docs/sources.md §3.3
# --------------------------------------------------------------------------------------

T = "!pto.tile_buf<vec, 32x256xf32>"
TH = "!pto.tile_buf<vec, 32x256xf16>"
TB = "!pto.tile_buf<vec, 32x256xbf16>"
TM = "!pto.tile_buf<vec, 32x256xi8>"
TD = "!pto.tile_buf<vec, 32x256xf32, valid=?x?>"
TROW = "!pto.tile_buf<vec, 1x256xf32>"
CI32 = "!pto.tile_buf<vec, 1x256xi32>"
CI16 = "!pto.tile_buf<vec, 1x256xi16>"
MASK_TILES = _allocs(s0=T, s1=T, sd=T, mk=TM, sh=TH, sb=TB, row=TROW, ci=CI32, ci16=CI16)
MASK_PRE = f"""%c0 = arith.constant 0 : index
%c32 = arith.constant 32 : index
%n = arith.constant 100 : index
%d0 = arith.constant 0 : i32
%dm = arith.constant -3 : i32
%lim = arith.constant 100.0 : f32
{MASK_TILES}"""

OPS["ttri_upper"] = ("vector", f"{MASK_PRE}\npto.ttri ins(%d0 {{upperOrLower = 1 : i32}} : i32) outs(%s0 : {T})")
OPS["ttri_lower_default"] = ("vector", f"{MASK_PRE}\npto.ttri ins(%dm : i32) outs(%s0 : {T})")
OPS["ttri_lower_explicit"] = ("vector", f"{MASK_PRE}\npto.ttri ins(%dm {{upperOrLower = 0 : i32}} : i32) outs(%s0 : {T})")
OPS["ttri_index_cast_diag"] = ("vector", f"{MASK_PRE}\n%di = arith.index_cast %n : index to i32\npto.ttri ins(%di : i32) outs(%s0 : {T})")
OPS["ttri_f16"] = ("vector", f"{MASK_PRE}\npto.ttri ins(%d0 : i32) outs(%sh : {TH})")
for _mode in ("eq", "ne", "lt", "le", "gt", "ge"):
    OPS[f"tcmps_{_mode}"] = ("vector", f"{MASK_PRE}\npto.tcmps ins(%s0, %lim {{cmpMode = #pto<cmp {_mode}>}} : {T}, f32) outs(%mk : {TM})")
OPS["tcmps_default_mode"] = ("vector", f"{MASK_PRE}\npto.tcmps ins(%s0, %lim : {T}, f32) outs(%mk : {TM})")
OPS["tcmps_i32"] = ("vector", f"{MASK_PRE}\n%m1 = pto.alloc_tile : !pto.tile_buf<vec, 1x256xi8>\n"
                    f"pto.tcmps ins(%ci, %d0 {{cmpMode = #pto<cmp ge>}} : {CI32}, i32) outs(%m1 : !pto.tile_buf<vec, 1x256xi8>)")
OPS["tcmp"] = ("vector", f"{MASK_PRE}\npto.tcmp ins(%s0, %s1 {{cmpMode = #pto<cmp gt>}} : {T}, {T}) outs(%mk : {TM})")
OPS["tcmp_no_mode"] = ("vector", f"{MASK_PRE}\npto.tcmp ins(%s0, %s1 : {T}, {T}) outs(%mk : {TM})")
OPS["tsel_tmp"] = ("vector", f"{MASK_PRE}\npto.tsel ins(%mk, %s0, %s1, %sd : {TM}, {T}, {T}, {T}) outs(%s0 : {T})")
OPS["tsel_no_tmp"] = ("vector", f"{MASK_PRE}\npto.tsel ins(%mk, %s0, %s1 : {TM}, {T}, {T}) outs(%sd : {T})")
OPS["tsel_bf16"] = ("vector", f"{MASK_PRE}\npto.tsel ins(%mk, %sb, %sb : {TM}, {TB}, {TB}) outs(%sb : {TB})")
OPS["tci_i32"] = ("vector", f"{MASK_PRE}\npto.tci ins(%d0 : i32) outs(%ci : {CI32})")
OPS["tci_i16_descending"] = ("vector", f"{MASK_PRE}\n%s16 = arith.constant 7 : i16\npto.tci ins(%s16 : i16) outs(%ci16 : {CI16}) {{descending = true}}")
OPS["tci_tmp"] = ("vector", f"{MASK_PRE}\n%ct = pto.alloc_tile : !pto.tile_buf<vec, 1x192xf32>\n"
                  f"pto.tci ins(%d0, %ct : i32, !pto.tile_buf<vec, 1x192xf32>) outs(%ci : {CI32})")
OPS["tcvt_i32_f32"] = ("vector", f"{MASK_PRE}\n%cf = pto.alloc_tile : {TROW}\npto.tcvt ins(%ci {{rmode = #pto<round_mode CAST_RINT>}} : {CI32}) outs(%cf : {TROW})")
for _op in ("tcolexpandadd", "tcolexpandsub", "tcolexpandmul", "tcolexpanddiv", "tcolexpandmax", "tcolexpandmin"):
    OPS[_op] = ("vector", f"{MASK_PRE}\npto.{_op} ins(%s0, %row : {T}, {TROW}) outs(%s0 : {T})")
OPS["tcolexpandadd_dynamic"] = ("vector", f"{MASK_PRE}\n%dv = pto.alloc_tile valid_row = %c32 valid_col = %n : {TD}\n"
                                f"%rv = pto.alloc_tile valid_row = %c32 valid_col = %n : !pto.tile_buf<vec, 1x256xf32, valid=?x?>\n"
                                f"pto.tcolexpandadd ins(%dv, %rv : {TD}, !pto.tile_buf<vec, 1x256xf32, valid=?x?>) outs(%dv : {TD})")
OPS["tcolexpanddiv_precision"] = ("vector", f"{MASK_PRE}\npto.tcolexpanddiv ins(%s0, %row : {T}, {TROW}) outs(%s0 : {T}) "
                                  "{precisionType = #pto<div_precision high_precision>}")
for _pad in (1, 2, 3):
    _dst = f"!pto.tile_buf<vec, 32x256xf32, valid=?x?, pad={_pad}>"
    OPS[f"tfillpad_pad{_pad}"] = ("vector", f"{MASK_PRE}\n%dv = pto.alloc_tile valid_row = %c32 valid_col = %n : {TD}\n"
                                  f"%pe = pto.alloc_tile valid_row = %c32 valid_col = %n : {_dst}\n"
                                  f"pto.tfillpad ins(%dv : {TD}) outs(%pe : {_dst})")
OPS["tfillpad_expanded"] = ("vector", f"{MASK_PRE}\n%sm = pto.alloc_tile : !pto.tile_buf<vec, 16x128xf32>\n"
                            "%bg = pto.alloc_tile : !pto.tile_buf<vec, 32x256xf32, pad=3>\n"
                            "pto.tfillpad ins(%sm : !pto.tile_buf<vec, 16x128xf32>) outs(%bg : !pto.tile_buf<vec, 32x256xf32, pad=3>)")
OPS["set_validshape"] = ("vector", f"{MASK_PRE}\n%dv = pto.alloc_tile valid_row = %c32 valid_col = %c32 : {TD}\n"
                         f"pto.set_validshape %dv, %c32, %n : {TD}\n"
                         f"%dcol = pto.alloc_tile : !pto.tile_buf<vec, 32x1xf32, blayout=col_major>\n"
                         f"pto.trowmax ins(%dv : {TD}) outs(%dcol : !pto.tile_buf<vec, 32x1xf32, blayout=col_major>)")
OPS["set_validshape_of_treshape"] = ("vector", "%c1 = arith.constant 1 : index\n%c8 = arith.constant 8 : index\n"
                                     "%r = pto.alloc_tile valid_row = %c1 valid_col = %c8 : !pto.tile_buf<vec, 1x64xf32, valid=?x?>\n"
                                     "%v = pto.treshape %r : !pto.tile_buf<vec, 1x64xf32, valid=?x?> -> !pto.tile_buf<vec, 2x32xf32, valid=?x?>\n"
                                     "pto.set_validshape %v, %c1, %c8 : !pto.tile_buf<vec, 2x32xf32, valid=?x?>")
_ACCD = "!pto.tile_buf<acc, 128x128xf32, valid=?x?, blayout=col_major, slayout=row_major, fractal=1024>"
_LEFTD = "!pto.tile_buf<left, 128x128xbf16, valid=?x?, slayout=row_major>"
_RIGHTD = "!pto.tile_buf<right, 128x128xbf16, valid=?x?, slayout=col_major>"
_MATD = "!pto.tile_buf<mat, 128x128xbf16, valid=?x?, blayout=col_major, slayout=row_major>"
OPS["cube_dynamic_valid_bf16"] = ("cube", "%c64 = arith.constant 64 : index\n%c96 = arith.constant 96 : index\n"
                                  f"%m = pto.alloc_tile valid_row = %c64 valid_col = %c96 : {_MATD}\n"
                                  f"%l = pto.alloc_tile valid_row = %c64 valid_col = %c96 : {_LEFTD}\n"
                                  f"%r = pto.alloc_tile valid_row = %c96 valid_col = %c64 : {_RIGHTD}\n"
                                  f"%acc = pto.alloc_tile valid_row = %c64 valid_col = %c64 : {_ACCD}\n"
                                  f"pto.set_validshape %acc, %c64, %c96 : {_ACCD}\n"
                                  f"pto.tmatmul ins(%l, %r : {_LEFTD}, {_RIGHTD}) outs(%acc : {_ACCD})\n"
                                  f"pto.tmatmul.acc ins(%acc, %l, %r : {_ACCD}, {_LEFTD}, {_RIGHTD}) outs(%acc : {_ACCD})")
OPS["texp_high_precision"] = ("vector", f"{VEC_TILES}\npto.texp ins(%a : {V32}) outs(%a : {V32}) {{precisionType = #pto<exp_precision high_precision>}}")
OPS["tdiv_high_precision"] = ("vector", f"{VEC_TILES}\npto.tdiv ins(%a, %b : {V32}, {V32}) outs(%o : {V32}) {{precisionType = #pto<div_precision high_precision>}}")
OPS["trowexpanddiv_high_precision"] = ("vector", f"{VEC_TILES}\npto.trowexpanddiv ins(%a, %col, %t : {V32}, {COL}, {V32}) outs(%o : {V32}) "
                                       "{precisionType = #pto<div_precision high_precision>}")
OPS["tstore_atomic_acc"] = ("cube", f"{GM}\n%t = pto.alloc_tile : {ACC}\npto.tstore ins(%t : {ACC}) outs(%pacc : !pto.partition_tensor_view<128x128xf32>) "
                            "{atomicType = #pto<atomic_type atomic_add>}")
OPS["tstore_atomic_vec"] = ("vector", f"{GM}\n%t = pto.alloc_tile : {V32}\npto.tstore ins(%t : {V32}) outs(%pv : !pto.partition_tensor_view<16x64xf32>) "
                            "{atomicType = #pto<atomic_type atomic_add>}")
_BF_GM = """%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c32 = arith.constant 32 : index
%c256 = arith.constant 256 : index
%n = arith.index_cast %ni : i64 to index
%tv = pto.make_tensor_view %p, shape = [%c32, %c256], strides = [%c256, %c1] : !pto.tensor_view<32x256xf32>
%tb = pto.make_tensor_view %pb, shape = [%c32, %c256], strides = [%c256, %c1] : !pto.tensor_view<32x256xbf16>
%tm = pto.make_tensor_view %pm, shape = [%c1, %n], strides = [%n, %c1] : !pto.tensor_view<1x?xi8>"""
_BF_ARGS = "%p: !pto.ptr<f32>, %pb: !pto.ptr<bf16>, %pm: !pto.ptr<i8>, %ni: i64"
OPS["tload_ragged_tail"] = ("vector", f"{_BF_GM}\n%d = pto.alloc_tile valid_row = %c32 valid_col = %n : {TD}\n"
                            "%pv = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c32, %n] : !pto.tensor_view<32x256xf32> -> !pto.partition_tensor_view<32x?xf32>\n"
                            f"pto.tload ins(%pv : !pto.partition_tensor_view<32x?xf32>) outs(%d : {TD})\n"
                            f"pto.tstore ins(%d : {TD}) outs(%pv : !pto.partition_tensor_view<32x?xf32>)")
OPS["bf16_out"] = ("vector", f"{_BF_GM}\n{MASK_TILES}\n"
                   f"pto.tcvt ins(%s0 {{rmode = #pto<round_mode CAST_RINT>}} : {T}) outs(%sb : {TB})\n"
                   "%pvb = pto.partition_view %tb, offsets = [%c0, %c0], sizes = [%c32, %c256] : !pto.tensor_view<32x256xbf16> -> !pto.partition_tensor_view<32x256xbf16>\n"
                   f"pto.tstore ins(%sb : {TB}) outs(%pvb : !pto.partition_tensor_view<32x256xbf16>)\n"
                   f"pto.tload ins(%pvb : !pto.partition_tensor_view<32x256xbf16>) outs(%sb : {TB})\n"
                   f"pto.tcvt ins(%sb {{rmode = #pto<round_mode CAST_RINT>}} : {TB}) outs(%s1 : {T})")
OPS["i8_mask_from_gm"] = ("vector", f"{_BF_GM}\n%c256m = arith.constant 256 : index\n"
                          "%m8 = pto.alloc_tile : !pto.tile_buf<vec, 1x256xi8>\n%m16 = pto.alloc_tile : !pto.tile_buf<vec, 1x256xf16>\n"
                          "%m32 = pto.alloc_tile : !pto.tile_buf<vec, 1x256xf32>\n"
                          "%pm8 = pto.partition_view %tm, offsets = [%c0, %c0], sizes = [%c1, %c256] : !pto.tensor_view<1x?xi8> -> !pto.partition_tensor_view<1x256xi8>\n"
                          "pto.tload ins(%pm8 : !pto.partition_tensor_view<1x256xi8>) outs(%m8 : !pto.tile_buf<vec, 1x256xi8>)\n"
                          "pto.tcvt ins(%m8 {rmode = #pto<round_mode CAST_RINT>} : !pto.tile_buf<vec, 1x256xi8>) outs(%m16 : !pto.tile_buf<vec, 1x256xf16>)\n"
                          "pto.tcvt ins(%m16 {rmode = #pto<round_mode CAST_RINT>} : !pto.tile_buf<vec, 1x256xf16>) outs(%m32 : !pto.tile_buf<vec, 1x256xf32>)")
# Generic forms ptoas accepts (docs/sources.md §2.1): enum attributes in a property dict.
OPS["tcvt_generic"] = ("vector", f'{VEC_TILES}\n"pto.tcvt"(%a, %h) <{{rmode = #pto<round_mode TRUNC>}}> : ({V32}, {V16}) -> ()')
OPS["trowmax_generic"] = ("vector", f'{VEC_TILES}\n"pto.trowmax"(%a, %t, %col) : ({V32}, {V32}, {COL}) -> ()')


# Column / row-product / arg reductions, tlrelu, taxpy, taddc / tsubc, multi-buffer tiles.
_R64 = "!pto.tile_buf<vec, 1x64xf32>"
_I64 = "!pto.tile_buf<vec, 1x64xi32>"
_ICOL = "!pto.tile_buf<vec, 16x1xi32, blayout=col_major>"
_RED = f"{VEC_TILES}\n%r = pto.alloc_tile : {_R64}\n%ir = pto.alloc_tile : {_I64}\n%ic = pto.alloc_tile : {_ICOL}\n"
for _op in ("tcolsum", "tcolmax", "tcolmin", "tcolprod"):
    OPS[_op] = ("vector", _RED + f"pto.{_op} ins(%a : {V32}) outs(%r : {_R64})")
OPS["tcolsum_binary_tmp"] = ("vector", _RED + f"pto.tcolsum ins(%a, %t {{isBinary = true}} : {V32}, {V32}) outs(%r : {_R64})")
OPS["trowprod"] = ("vector", _RED + f"pto.trowprod ins(%a : {V32}) outs(%col : {COL})")
OPS["trowprod_tmp"] = ("vector", _RED + f"pto.trowprod ins(%a, %t : {V32}, {V32}) outs(%col : {COL})")
for _op in ("tcolargmax", "tcolargmin"):
    OPS[_op] = ("vector", _RED + f"pto.{_op} ins(%a, %t : {V32}, {V32}) outs(%ir : {_I64})")
for _op in ("trowargmax", "trowargmin"):
    OPS[_op] = ("vector", _RED + f"pto.{_op} ins(%a : {V32}) outs(%ic : {_ICOL})")
OPS["tlrelu"] = ("vector", f"{VEC_TILES}\n{SCALAR}\npto.tlrelu ins(%a, %s : {V32}, f32) outs(%o : {V32})")
OPS["taxpy"] = ("vector", f"{VEC_TILES}\n{SCALAR}\npto.taxpy ins(%a, %s : {V32}, f32) outs(%o : {V32})")
OPS["taxpy_f16_to_f32"] = ("vector", f"{VEC_TILES}\n%s = arith.constant 2.0 : f16\npto.taxpy ins(%h, %s : {V16}, f16) outs(%o : {V32})")
for _op in ("taddc", "tsubc"):
    OPS[_op] = ("vector", f"{VEC_TILES}\npto.{_op} ins(%a, %b, %t : {V32}, {V32}, {V32}) outs(%o : {V32})")
_MT = "!pto.multi_tile_buf<!pto.tile_buf<vec, 16x64xf32>, count=2>"
OPS["multi_tile"] = ("vector", f"%c1 = arith.constant 1 : index\n%m = pto.alloc_multi_tile : !pto.multi_tile_buf<vec, 16x64xf32, count=2>\n"
                               f"%g = pto.multi_tile_get %m[%c1] : {_MT} -> {V32}")
OPS["multi_tile_dynamic_valid"] = ("vector", "%c1 = arith.constant 1 : index\n%c8 = arith.constant 8 : index\n"
                                             "%m = pto.alloc_multi_tile valid_row = %c8 valid_col = %c8 : !pto.multi_tile_buf<vec, 16x64xf32, valid=?x?, count=4>")

_PV = "!pto.partition_tensor_view<16x64xf32>"
_IDX = "!pto.tile_buf<vec, 16x64xi32>"
_IROW = "!pto.tile_buf<vec, 1x16xi32>"
_GATHER = f"{GM}\n{VEC_TILES}\n%ix = pto.alloc_tile : {_IDX}\n%ir = pto.alloc_tile : {_IROW}\n"
OPS["mgather_elem"] = ("vector", _GATHER + f"pto.mgather ins(%pv, %ix : {_PV}, {_IDX}) outs(%a : {V32}) {{coalesce = #pto<coalesce elem>}}")
OPS["mgather_row_oob"] = ("vector", _GATHER + f"pto.mgather ins(%pv, %ir : {_PV}, {_IROW}) outs(%a : {V32}) "
                                              "{coalesce = #pto<coalesce row>, gatherOob = #pto<gather_oob zero>}")
OPS["mscatter"] = ("vector", _GATHER + f"pto.mscatter ins(%a, %ix : {V32}, {_IDX}) outs(%pv : {_PV})")
OPS["mscatter_atomic"] = ("vector", _GATHER + f"pto.mscatter ins(%a, %ix : {V32}, {_IDX}) outs(%pv : {_PV}) "
                                              "{coalesce = #pto<coalesce elem>, scatterAtomicOp = #pto<scatter_atomic_op add>, scatterOob = #pto<scatter_oob skip>}")

_I8T = "!pto.tile_buf<vec, 17x32xi8, valid=16x8>"
OPS["tprelu"] = ("vector", f"{VEC_TILES}\n%i8 = pto.alloc_tile : {_I8T}\npto.tprelu ins(%a, %b, %i8 : {V32}, {V32}, {_I8T}) outs(%o : {V32})")
OPS["tprelu_no_tmp"] = ("vector", f"{VEC_TILES}\npto.tprelu ins(%a, %b : {V32}, {V32}) outs(%o : {V32})")
OPS["trowexpand"] = ("vector", f"{VEC_TILES}\npto.trowexpand ins(%col : {COL}) outs(%o : !pto.tile_buf<vec, 16x64xf32>)")
for _op in ("taddsc", "tsubsc"):
    OPS[_op] = ("vector", f"{VEC_TILES}\n{SCALAR}\npto.{_op} ins(%a, %s, %b : {V32}, f32, {V32}) outs(%o : {V32})")
_BIAS = "!pto.tile_buf<bias, 1x128xf32>"
OPS["tmatmul_bias"] = ("cube", f"{CUBE_TILES}\n%bz = pto.alloc_tile : {_BIAS}\n"
                               f"pto.tmatmul.bias ins(%left, %right, %bz : {LEFT}, {RIGHT}, {_BIAS}) outs(%acc : {ACC})")
OPS["ptrtoint_inttoptr"] = ("vector", "%c0 = arith.constant 0 : index\n%ad = pto.ptrtoint %p : !pto.ptr<f32> -> i64\n"
                                      "%q = pto.inttoptr %ad : i64 -> !pto.ptr<i32>\n%v = pto.load_scalar %q[%c0] : !pto.ptr<i32> -> i32")

# pto.comm.*, cmo.cacheinvalid, fence.barrier_all (ptofa/ir/dialect/comm.py); PTO_IR_manual 4.21 forms
_P128 = "!pto.partition_tensor_view<16x64xf32>"
_STG = "!pto.tile_buf<vec, 1x64xf32>"
_SIG = "!pto.partition_tensor_view<1x1xi32>"
_COMM = (f"{GM}\n%sv = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c1, %c1] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<1x1xf32>\n"
         f"%ping = pto.alloc_tile : {_STG}\n%pong = pto.alloc_tile : {_STG}\n%acc = pto.alloc_tile : {_STG}\n%v7 = arith.constant 7 : i32\n")
OPS["comm_tput"] = ("vector", _COMM + f"pto.comm.tput(%pv, %pv, buf(%ping) : {_P128}, {_P128}, {_STG}) {{atomicType = #pto<atomic_type atomic_add>}}")
OPS["comm_tget_pingpong"] = ("vector", _COMM + f"pto.comm.tget(%pv, %pv, buf(%ping, %pong) : {_P128}, {_P128}, {_STG}, {_STG})")
_SIGNAL = ("%ti = pto.make_tensor_view %pi, shape = [%c1, %c1], strides = [%c1, %c1] : !pto.tensor_view<1x1xi32>\n"
           f"%sig = pto.partition_view %ti, offsets = [%c0, %c0], sizes = [%c1, %c1] : !pto.tensor_view<1x1xi32> -> {_SIG}\n")
OPS["comm_tnotify"] = ("vector", _COMM + _SIGNAL + f"pto.comm.tnotify(%sig, %v7 : {_SIG}, i32) {{notifyOp = #pto<notify_op set>}}")
OPS["comm_twait"] = ("vector", _COMM + _SIGNAL + f"pto.comm.twait(%sig, %v7 : {_SIG}, i32) {{cmp = #pto<wait_cmp ge>}}")
OPS["comm_ttest"] = ("vector", _COMM + _SIGNAL + f"%ok = pto.comm.ttest(%sig, %v7 : {_SIG}, i32) {{cmp = #pto<wait_cmp eq>}} -> i1")
for _op in ("tbroadcast", "tgather", "tscatter"):
    OPS[f"comm_{_op}"] = ("vector", _COMM + f"pto.comm.{_op}(%pv, recv(%ping, %pong), group(%pv, %pv) : {_P128}, {_STG}, {_STG}, {_P128}, {_P128}) {{root = 1 : i32}}")
OPS["comm_treduce"] = ("vector", _COMM + f"pto.comm.treduce(%pv, %acc, recv(%ping), group(%pv, %pv, %pv) : {_P128}, {_STG}, {_STG}, {_P128}, {_P128}, {_P128}) "
                                         "{reduceOp = #pto<reduce_op max>, root = 2 : i32}")
_SESSION = "%scr = pto.alloc_tile : !pto.tile_buf<vec, 1x256xi8>\n%ses = pto.comm.build_async_session(%scr, %pb : !pto.tile_buf<vec, 1x256xi8>, !pto.ptr<i8>) {sync_id = 0 : i32} -> !pto.async_session\n"
OPS["comm_async"] = ("vector", _COMM + _SESSION + f"%ev = pto.comm.tput_async(%pv, %pv, %ses : {_P128}, {_P128}, !pto.async_session) -> !pto.async_event\n"
                                       f"%ev2 = pto.comm.tget_async(%pv, %pv, %ses : {_P128}, {_P128}, !pto.async_session) -> !pto.async_event\n"
                                       "%d1 = pto.comm.wait_async_event(%ev, %ses : !pto.async_event, !pto.async_session) -> i1\n"
                                       "%d2 = pto.comm.test_async_event(%ev2, %ses : !pto.async_event, !pto.async_session) -> i1")
OPS["cmo_fence"] = ("vector", _COMM + f"pto.cmo.cacheinvalid %pv single_cache_line : {_P128}\npto.cmo.cacheinvalid all #pto.address_space<gm>\n"
                                      "pto.fence.barrier_all #pto.fence_scope<gm>")

OPS["tcvt_satmode"] = ("vector", f"{VEC_TILES}\npto.tcvt ins(%a {{rmode = #pto<round_mode ROUND>, satmode = #pto<saturation_mode ON>}} : {V32}) outs(%h : {V16})")
OPS["addptr_elided_types"] = ("vector", "%c8 = arith.constant 8 : index\n%q = pto.addptr %p, %c8 : <f32> -> <f32>")

_S1 = "!pto.tile_buf<vec, 1x256xf32>"
_SI = "!pto.tile_buf<vec, 1x256xui32>"
_SORT = f"%s1 = pto.alloc_tile : {_S1}\n%s2 = pto.alloc_tile : {_S1}\n%s3 = pto.alloc_tile : {_S1}\n%si = pto.alloc_tile : {_SI}\n"
OPS["tsort32"] = ("vector", _SORT + f"pto.tsort32 ins(%s1, %si : {_S1}, {_SI}) outs(%s2 : {_S1})")
OPS["tmrgsort_format1"] = ("vector", _SORT + f"%bl = arith.constant 64 : i32\npto.tmrgsort ins(%s1, %bl : {_S1}, i32) outs(%s2 : {_S1})")
OPS["tmrgsort_format2"] = ("vector", _SORT + "%ex = arith.constant dense<0> : vector<4xi16>\n"
                                     f"pto.tmrgsort ins(%s1, %s2, %s3 {{exhausted = false}} : {_S1}, {_S1}, {_S1}) outs(%s3, %ex : {_S1}, vector<4xi16>)")
OPS["tmrgsort_no_tmp"] = ("vector", _SORT + "%ex = arith.constant dense<0> : vector<4xi16>\n"
                                    f"pto.tmrgsort ins(%s1, %s2 no_tmp {{exhausted = true}} : {_S1}, {_S1}) outs(%s3, %ex : {_S1}, vector<4xi16>)")

_H = "!pto.tile_buf<vec, 16x32xf32>"
_HI = "!pto.tile_buf<vec, 16x8xi32>"
OPS["tconcat"] = ("vector", f"{VEC_TILES}\n%h1 = pto.alloc_tile : {_H}\n%h2 = pto.alloc_tile : {_H}\npto.tconcat ins(%h1, %h2 : {_H}, {_H}) outs(%o : {V32})")
OPS["tconcatidx"] = ("vector", f"{VEC_TILES}\n%h1 = pto.alloc_tile : {_H}\n%n0 = pto.alloc_tile : {_HI}\n"
                               f"pto.tconcatidx ins(%h1, %h1, %n0, %n0 : {_H}, {_H}, {_HI}, {_HI}) outs(%o : {V32})")

_Q8 = "!pto.tile_buf<vec, 16x64xi8>"
_QR = "!pto.tile_buf<vec, 16x1xf32, blayout=col_major>"
OPS["tquant_sym"] = ("vector", f"{VEC_TILES}\n%q8 = pto.alloc_tile : {_Q8}\n"
                               f"pto.tquant ins(%a, %col : {V32}, {_QR}) outs(%q8 : {_Q8}) {{quant_type = #pto<quant_type INT8_SYM>}}")
OPS["tquant_asym_tmp"] = ("vector", f"{VEC_TILES}\n%q8 = pto.alloc_tile : !pto.tile_buf<vec, 16x64xui8>\n"
                                    f"pto.tquant ins(%a, %col, %col : {V32}, {_QR}, {_QR}) outs(%q8, %t : !pto.tile_buf<vec, 16x64xui8>, {V32}) "
                                    "{quant_type = #pto<quant_type INT8_ASYM>}")
OPS["tdequant"] = ("vector", f"{VEC_TILES}\n%q8 = pto.alloc_tile : {_Q8}\npto.tdequant ins(%q8, %nd8, %nd8 : {_Q8}, {ND8}, {ND8}) outs(%o : {V32})")

OPS["local_array"] = ("vector", "%c1 = arith.constant 1 : index\n%v = arith.constant 7 : i32\n%la = pto.declare_local_array -> !pto.local_array<16xi32>\n"
                                 "pto.local_array_set %la[%c1], %v : !pto.local_array<16xi32>, i32\n"
                                 "%g = pto.local_array_get %la[%c1] : !pto.local_array<16xi32> -> i32")
OPS["local_array_2d"] = ("vector", "%c1 = arith.constant 1 : index\n%m = pto.declare_local_array -> !pto.local_array<8x8xf32>\n"
                                    "%g = pto.local_array_get %m[%c1, %c1] : !pto.local_array<8x8xf32> -> f32")

OPS["pipe_flags"] = ("vector", 'pto.set_flag ["PIPE_MTE2", "PIPE_V", "EVENT_ID0"]\npto.wait_flag [<PIPE_MTE2>, <PIPE_V>, <EVENT_ID0>]\n'
                               "%c3 = arith.constant 3 : index\npto.set_flag_dyn [#pto.pipe<PIPE_V>, #pto.pipe<PIPE_MTE3>, %c3]\n"
                               "pto.wait_flag_dyn [#pto.pipe<PIPE_V>, #pto.pipe<PIPE_MTE3>, %c3]")
OPS["record_wait_event"] = ("vector", "pto.record_event [#pto.pipe_event_type<TLOAD>, #pto.pipe_event_type<TVEC>, #pto.event<EVENT_ID0>]\n"
                                      "pto.wait_event [#pto.sync_op_type<TLOAD>, #pto.sync_op_type<TVEC>, <EVENT_ID0>]")
OPS["intra_block"] = ("vector", "%c3 = arith.constant 3 : index\npto.set_intra_block <PIPE_FIX>, 15\npto.wait_intra_block <PIPE_V>, %c3")
OPS["syncall"] = ("vector", "%n = arith.constant 4 : i32\n"
                            "pto.syncall(%pi, %n : !pto.ptr<i32>, i32) mode = #pto.sync_all_mode<soft>, core_type = #pto.sync_core_type<aiv_only>\n"
                            "pto.syncall() mode = #pto.sync_all_mode<hard>, core_type = #pto.sync_core_type<mix>")
OPS["eventid_array"] = ("vector", "%c0 = arith.constant 0 : index\n%c1 = arith.constant 1 : index\n%ea = pto.declare_eventid_array -> !pto.eventid_array<4>\n"
                                  "pto.eventid_array_set %ea[%c0], %c1 : !pto.eventid_array<4>\n%e = pto.eventid_array_get %ea[%c0] : !pto.eventid_array<4>")

_FIFO = "!pto.tile_buf<vec, 8x16xf32>"
OPS["internal_pipe_l2g2l"] = ("vector", "%buf = arith.constant 0 : i32\n%gs = pto.declare_global -> !pto.tensor_view<16x16xf32>\n"
                                        "%hp = pto.initialize_l2g2l_pipe {dir_mask = 1, slot_size = 1024, slot_num = 8, local_slot_num = 4, flag_base = 0}"
                                        "(%gs : !pto.tensor_view<16x16xf32>, %buf : i32) -> !pto.pipe\n"
                                        f"%ft = pto.declare_tile -> {_FIFO}\npto.tpop(%ft, %hp : {_FIFO}, !pto.pipe) {{split = 1}}\n"
                                        "pto.tfree(%hp : !pto.pipe) {split = 1}")
OPS["internal_pipe_l2l"] = ("vector", f"{VEC_TILES}\n%buf = arith.constant 0 : i32\n"
                                      "%hp = pto.initialize_l2l_pipe {dir_mask = 2, slot_size = 512, slot_num = 8}(%buf : i32) -> !pto.pipe\n"
                                      f"pto.tpush(%a, %hp : {V32}, !pto.pipe) {{split = 0}}\n"
                                      "%ge = pto.declare_global -> !pto.tensor_view<16x16xf32>\n"
                                      "pto.talloc(%ge, %hp : !pto.tensor_view<16x16xf32>, !pto.pipe) {split = 0}\n"
                                      f"pto.tfree(%a, %hp : {V32}, !pto.pipe) {{split = 0}}")

_VH = "!pto.tile_buf<vec, 16x64xf32, valid=8x64>"
_I32T = "!pto.tile_buf<vec, 16x64xi32>"
OPS["tpart_binary"] = ("vector", f"{VEC_TILES}\n%hv = pto.alloc_tile : {_VH}\n"
                                 + "\n".join(f"pto.{n} ins(%a, %hv : {V32}, {_VH}) outs(%o : {V32})" for n in ("tpartadd", "tpartmul", "tpartmax", "tpartmin")))
OPS["tpart_arg"] = ("vector", f"{VEC_TILES}\n%ai = pto.alloc_tile : {_I32T}\n%bi = pto.alloc_tile : {_I32T}\n%di = pto.alloc_tile : {_I32T}\n"
                              + "\n".join(f"pto.{n} ins(%a, %b, %ai, %bi : {V32}, {V32}, {_I32T}, {_I32T}) outs(%o, %di : {V32}, {_I32T})"
                                           for n in ("tpartargmax", "tpartargmin")))
OPS["tsels"] = ("vector", f"{VEC_TILES}\n%m8 = pto.alloc_tile : !pto.tile_buf<vec, 16x64xi8>\n%sc = arith.constant 1.0 : f32\n"
                          f"pto.tsels ins(%m8, %a, %sc : !pto.tile_buf<vec, 16x64xi8>, {V32}, f32) outs(%o : {V32})\n"
                          f"pto.tsels ins(%m8, %a, %t, %sc : !pto.tile_buf<vec, 16x64xi8>, {V32}, {V32}, f32) outs(%o : {V32})")

OPS["tlog_high_precision"] = ("vector", f"{VEC_TILES}\npto.tlog ins(%a : {V32}) outs(%o : {V32}) {{precisionType = #pto<log_precision high_precision>}}")
OPS["tdivs_high_precision"] = ("vector", f"{VEC_TILES}\n%sc = arith.constant 2.0 : f32\n"
                                         f"pto.tdivs ins(%a, %sc : {V32}, f32) outs(%o : {V32}) {{precisionType = #pto<div_precision high_precision>}}")
OPS["tmatmul_acc_phase"] = ("cube", f"{CUBE_TILES}\npto.tmatmul ins(%left, %right : {LEFT}, {RIGHT}) outs(%acc : {ACC}) {{accPhase = #pto<acc_phase partial>}}\n"
                                    f"pto.tmatmul.acc ins(%acc, %left, %right : {ACC}, {LEFT}, {RIGHT}) outs(%acc : {ACC}) {{accPhase = #pto<acc_phase final>}}")
OPS["tstore_phase_relu"] = ("cube", f"{GM}\n%t = pto.alloc_tile : {ACC}\npto.tstore ins(%t : {ACC}) outs(%pacc : !pto.partition_tensor_view<128x128xf32>) "
                                    "{stPhase = #pto<st_phase final>, atomicType = #pto<atomic_type atomic_add>, reluPreMode = #pto<relu_pre_mode normal_relu>}")

OPS["view_queries"] = ("vector", f"{GM}\n%vd = pto.get_tensor_view_dim %tv, %c0 : !pto.tensor_view<128x128xf32> -> index\n"
                                 "%vs = pto.get_tensor_view_stride %pv, %c1 : !pto.partition_tensor_view<16x64xf32> -> index")
OPS["get_validshape"] = ("vector", f"{VEC_TILES}\n%gr, %gc = pto.get_validshape %a : {V32}")
OPS["tprefetch"] = ("vector", f"{GM}\n%t = pto.alloc_tile : {V32}\npto.tprefetch ins(%pv : !pto.partition_tensor_view<16x64xf32>) outs(%t : {V32})")

_ST = "!pto.struct<!pto.struct<f32, i8>, i16>"
OPS["structs"] = ("vector", f"%sv = arith.constant 1.0 : f32\n%st = pto.declare_struct -> {_ST}\npto.struct_set %st[0, 0], %sv : {_ST}, f32\n"
                            f"%sg = pto.struct_get %st[0, 0] : {_ST} -> f32")

OPS["tprint_format"] = ("vector", f"{VEC_TILES}\npto.tprint ins(%a : {V32}) {{printFormat = #pto<print_format width8_precision2>}}")
OPS["tcolsum_binary_no_tmp"] = ("vector", f"{VEC_TILES}\n%r64 = pto.alloc_tile : !pto.tile_buf<vec, 1x64xf32>\n"
                                          f"pto.tcolsum ins(%a : {V32}) outs(%r64 : !pto.tile_buf<vec, 1x64xf32>) {{isBinary = true}}")
OPS["reserve_location_elided"] = ("vector", '%rb = pto.reserve_buffer{name = "c2v_fifo", size = 8192, location = <vec>, auto = true} -> i32')

OPS["tscatter"] = ("vector", f"{VEC_TILES}\n%si = pto.alloc_tile : !pto.tile_buf<vec, 16x64xi32>\n"
                             f"pto.tscatter ins(%a, %si : {V32}, !pto.tile_buf<vec, 16x64xi32>) outs(%o : {V32})\n"
                             "%s32 = pto.alloc_tile : !pto.tile_buf<vec, 16x32xf32>\n"
                             f'pto.tscatter ins(%s32, {{maskPattern = #pto.mask_pattern<P0101>}} : !pto.tile_buf<vec, 16x32xf32>, "row") outs(%o : {V32})')

OPS["tcolexpandexpdif"] = ("vector", f"{VEC_TILES}\n%r64 = pto.alloc_tile : !pto.tile_buf<vec, 1x64xf32>\n"
                                     "pto.tcolexpandexpdif ins(%a, %r64 : !pto.tile_buf<vec, 16x64xf32>, !pto.tile_buf<vec, 1x64xf32>) outs(%o : !pto.tile_buf<vec, 16x64xf32>)")

# Forms ptoas accepts that issue 31 added (PTOAS lit tests tprefetch_async_emitc.pto, tsync_emitc.pto,
# tgather_three_forms_emitc.pto, print_tile_native.pto).
_FLAT = "!pto.partition_tensor_view<1x128xf32>"
OPS["prefetch_async"] = ("vector", f"""%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c128 = arith.constant 128 : index
%tv = pto.make_tensor_view %p, shape = [%c1, %c128], strides = [%c128, %c1] : !pto.tensor_view<1x128xf32>
%flat = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c1, %c128] : !pto.tensor_view<1x128xf32> -> {_FLAT}
%ctx = pto.make_prefetch_async_context(%pb : !pto.ptr<i8>) -> !pto.prefetch_async_context
%ev = pto.tprefetch_async(%flat, %ctx : {_FLAT}, !pto.prefetch_async_context) -> !pto.async_event
%ses = pto.get_prefetch_async_session %ctx : !pto.prefetch_async_context -> !pto.async_session
%done = pto.comm.wait_async_event(%ev, %ses : !pto.async_event, !pto.async_session) -> i1""")
OPS["tsync"] = ("vector", f"{GM}\n%t = pto.alloc_tile : {V32}\npto.tsync ins(%t, %pv : {V32}, !pto.partition_tensor_view<16x64xf32>)")
OPS["tgather_compare"] = ("vector", f"{VEC_TILES}\n%k = arith.constant 0.0 : f32\n%gi = pto.alloc_tile : !pto.tile_buf<vec, 16x64xi32>\n"
                                    f"pto.tgather ins(%a, %k, %gi : {V32}, f32, !pto.tile_buf<vec, 16x64xi32>) outs(%gi, %gi : "
                                    "!pto.tile_buf<vec, 16x64xi32>, !pto.tile_buf<vec, 16x64xi32>) {cmpMode = #pto<cmp gt>, offset = 3 : i32}")
OPS["tprint_view"] = ("vector", f"{GM}\npto.tprint ins(%pv : !pto.partition_tensor_view<16x64xf32>)")
OPS["tprint_tmp"] = ("cube", f"{GM}\n%m = pto.alloc_tile : !pto.tile_buf<mat, 16x64xf32>\n"
                             "pto.tprint ins(%m, %pv : !pto.tile_buf<mat, 16x64xf32>, !pto.partition_tensor_view<16x64xf32>) "
                             "{printFormat = #pto<print_format width10_precision6>}")
OPS["discardable_attrs"] = ("vector", f"{VEC_TILES}\npto.tadd ins(%a, %a : {V32}, {V32}) outs(%o : {V32}) {{pto.fusion.group_id = 0 : i64, pto.fusion.order = 1 : i64}}\n"
                                      f"pto.trowexpandmul ins(%a, %col : {V32}, {COL}) outs(%o : {V32}) {{src1Col = 1 : i64, src0eqdst = true, highPrecision = false}}")
OPS["precision_attrs"] = ("vector", f"{VEC_TILES}\npto.tsqrt ins(%a : {V32}) outs(%o : {V32}) {{precisionType = #pto<sqrt_precision high_precision>}}\n"
                                    f"pto.trsqrt ins(%a, %t : {V32}, {V32}) outs(%o : {V32}) {{precisionType = #pto<rsqrt_precision high_precision>}}\n"
                                    f"pto.trecip ins(%a : {V32}) outs(%o : {V32}) {{precisionType = #pto<recip_precision high_precision>}}")
_ACCI = "!pto.tile_buf<acc, 128x128xi32, blayout=col_major, slayout=row_major, fractal=1024>"
_MATI8 = "!pto.tile_buf<mat, 128x128xi8, blayout=col_major, slayout=row_major>"
_FP = "!pto.tile_buf<scaling, 1x32xui64>"
OPS["fix_quant_forms"] = ("cube", f"""{GM}
%acc = pto.alloc_tile : {_ACCI}
%m = pto.alloc_tile : {_MATI8}
%fp = pto.alloc_tile : {_FP}
%q = arith.constant 7 : i64
pto.tmov ins(%acc : {_ACCI}, %fp : {_FP}) outs(%m : {_MATI8})
pto.tmov ins(%acc : {_ACCI}, %q : i64) outs(%m : {_MATI8})
pto.tstore ins(%acc : {_ACCI} fp %fp : {_FP}) outs(%pvh : !pto.partition_tensor_view<128x128xf16>)
pto.tstore ins(%acc : {_ACCI}, %q : i64) outs(%pvh : !pto.partition_tensor_view<128x128xf16>) {{atomicType = #pto<atomic_type atomic_add>}}""")
OPS["tgatherb"] = ("vector", f"{VEC_TILES}\n%bo = pto.alloc_tile : !pto.tile_buf<vec, 16x64xi32>\n"
                             f"pto.tgatherb ins(%a, %bo : {V32}, !pto.tile_buf<vec, 16x64xi32>) outs(%o : {V32})")
OPS["alloc_tile_valid_col_only"] = ("vector", "%vc = arith.constant 8 : index\n"
                                              "%t = pto.alloc_tile valid_col = %vc : !pto.tile_buf<vec, 1x32xf32, valid=1x?>")


def _args_for(body: str) -> str:
    if "pto.make_tensor_view %pb" in body:
        return _BF_ARGS
    return GM_ARGS + ", %pi: !pto.ptr<i32>, %pb: !pto.ptr<i8>" if any(k in body for k in ("pto.comm.", "pto.cmo.", "pto.syncall", "prefetch_async")) else GM_ARGS


@pytest.mark.parametrize("kind, body", OPS.values(), ids=OPS.keys())
def test_op_roundtrip(kind: str, body: str) -> None:
    printed = roundtrip(wrap(body, kind=kind, args=_args_for(body)))
    for op_name in re.findall(r"\bpto\.[a-z0-9_.]+?(?=[\s(])", body):
        assert op_name in printed


# Ops only ptoas's vpto back end lowers (ptofa.ir.dialect.lowering), in a module that selects it.
VPTO_OPS = {
    "taddrelu": ("vector", f"{VEC_TILES}\npto.taddrelu ins(%a, %b : {V32}, {V32}) outs(%o : {V32})"),
}


@pytest.mark.parametrize("kind, body", VPTO_OPS.values(), ids=VPTO_OPS.keys())
def test_vpto_op_roundtrip(kind: str, body: str) -> None:
    text = wrap(body, kind=kind, args=_args_for(body)).replace("module {", 'module attributes {pto.backend = "vpto"} {', 1)
    printed = roundtrip(text)
    for op_name in re.findall(r"\bpto\.[a-z0-9_.]+?(?=[\s(])", body):
        assert op_name in printed


def test_every_dialect_op_has_a_roundtrip_case() -> None:
    sources = "\n".join(body for _, body in [*OPS.values(), *VPTO_OPS.values()]) + CUBE_BODY + VEC_BODY + CUBE_PRE + VEC_PRE + FIXPIPE
    sources += "pto.set_ffts pto.make_tensor_view pto.partition_view"
    used = set(re.findall(r"pto\.[a-z0-9_.]+?(?=[\s(])", sources + "\n"))
    missing = [op.name for op in d.PTO.operations if op.name not in used]
    assert missing == []


def test_tcvt_default_rmode_prints_cast_rint() -> None:
    printed = roundtrip(wrap(OPS["tcvt_default_rmode"][1]))
    assert "{rmode = #pto<round_mode CAST_RINT>}" in printed


@pytest.mark.parametrize("ptr", ["!pto.ptr<i64>", "!pto.ptr<i8>"])
def test_set_ffts_pointer_types(ptr: str) -> None:
    text = ("module {\n  func.func @entry(%ffts: " + ptr + ") attributes {pto.entry} {\n"
            f"    pto.set_ffts %ffts : {ptr}\n    return\n  }}\n}}\n")
    assert f"pto.set_ffts %ffts : {ptr}" in roundtrip(text)


# --------------------------------------------------------------------------------------
# Pipes
# --------------------------------------------------------------------------------------


def test_all_eight_pipe_data_ops() -> None:
    printed = roundtrip(pipes())
    for op in d.PIPE_DATA_OPS:
        assert f"{op.name}" in printed
    assert printed.count("{id = 0, split = 1}") == 4 and printed.count("{id = 1, split = 1}") == 4


def test_pipe_data_op_id_may_be_omitted_when_zero() -> None:
    vec = VEC_BODY.replace(f"pto.tpop_from_aic {{id = 0, split = 1}} -> {QKH}", f"pto.tpop_from_aic {{split = 1}} -> {QKH}")
    assert "{split = 1}" in vec
    assert f"pto.tpop_from_aic {{id = 0, split = 1}} -> {QKH}" in roundtrip(pipes(vec=VEC_PRE + vec))


@pytest.mark.parametrize("extra", ["slot_num = 4", "slot_num = 8", "slot_num = 2, nosplit = false"])
def test_pipe_init_optional_attrs(extra: str) -> None:
    cube = CUBE_PRE.replace("slot_size = 65536}", f"slot_size = 65536, {extra}}}")
    vec = VEC_PRE.replace("slot_size = 65536}", f"slot_size = 65536, {extra}}}")
    printed = roundtrip(pipes(cube + CUBE_BODY, vec + VEC_BODY))
    assert printed.count(f"slot_size = 65536, {extra}}}") == 2


def test_pipe_init_keywords_in_any_order() -> None:
    cube = CUBE_PRE.replace("{id = 0, dir_mask = 1, slot_size = 65536}", "{slot_size = 65536, slot_num = 4, dir_mask = 1, id = 0}")
    vec = VEC_PRE.replace("{id = 0, dir_mask = 1, slot_size = 65536}", "{slot_num = 4, id = 0, slot_size = 65536, dir_mask = 1}")
    printed = roundtrip(pipes(cube + CUBE_BODY, vec + VEC_BODY))
    assert printed.count("{id = 0, dir_mask = 1, slot_size = 65536, slot_num = 4}") == 2


def test_pipe_init_default_id_is_zero() -> None:
    cube = CUBE_PRE.replace("{id = 0, dir_mask = 1,", "{dir_mask = 1,")
    assert "{id = 0, dir_mask = 1, slot_size = 65536}" in roundtrip(pipes(cube + CUBE_BODY))


def test_pipe_split_zero_full_descriptor_on_both_sides() -> None:
    vec_pre = (VEC_PRE.replace(QKH, QK).replace(PPH, PP).replace("shape = [%c64, %c128]", "shape = [%c128, %c128]"))
    vec = VEC_BODY.replace(QKH, QK).replace(PPH, PP).replace("split = 1", "split = 0")
    cube = CUBE_BODY.replace("split = 1", "split = 0")
    roundtrip(pipes(CUBE_PRE + cube, vec_pre + vec))


def test_generic_form_pipe_data_ops() -> None:
    cube = CUBE_BODY.replace(f"%e = pto.talloc_to_aiv {{id = 0, split = 1}} -> {QK}",
                             f'%e = "pto.talloc_to_aiv"() <{{id = 0 : i32, split = 1 : i8}}> : () -> {QK}')
    cube = cube.replace(f"pto.tfree_from_aiv(%g : {PP}) {{id = 1, split = 1}}",
                        f'"pto.tfree_from_aiv"(%g) <{{id = 1 : i32, split = 1 : i8}}> : ({PP}) -> ()')
    assert '"pto.' in cube
    printed = roundtrip(pipes(CUBE_PRE + cube))
    assert f"%e = pto.talloc_to_aiv {{id = 0, split = 1}} -> {QK}" in printed
    assert f"pto.tfree_from_aiv(%g : {PP}) {{id = 1, split = 1}}" in printed


def test_pipe_ops_inside_loops() -> None:
    loop = "%c0 = arith.constant 0 : index\n%c4 = arith.constant 4 : index\nscf.for %i = %c0 to %c4 step %c1 {\n"
    cube = CUBE_PRE + loop + CUBE_BODY + "}"
    vec = VEC_PRE + loop + VEC_BODY + "}"
    assert "scf.for" in roundtrip(pipes(cube, vec))


# --------------------------------------------------------------------------------------
# Whole files
# --------------------------------------------------------------------------------------


def test_sample_parses_verifies_and_roundtrips() -> None:
    text = SAMPLE.read_text()
    parsed = check_text(text, str(SAMPLE))
    names = {op.name for op in parsed.module.walk()}
    assert {"pto.aic_initialize_pipe", "pto.tpop_from_aic", "pto.trowmax", "pto.trowexpandexpdif", "pto.treshape",
            "pto.tcvt", "pto.tmatmul"} <= names
    roundtrip(text)


def test_sample_keeps_line_numbers() -> None:
    text = SAMPLE.read_text()
    parsed = check_text(text)
    (init,) = [op for op in parsed.module.walk() if isinstance(op, d.AicInitializePipeOp) and op.id_value == 1]
    assert "pto.aic_initialize_pipe {id = 1" in text.splitlines()[parsed.line(init) - 1]


def test_top_level_type_and_attribute_aliases() -> None:
    text = (f"!qk = {QK}\n!v32 = {V32}\n#cube = #pto.kernel_kind<cube>\n#vec = #pto.kernel_kind<vector>\n"
            + "module {\n" + ENTRY
            + "  func.func @k(%x: !v32) attributes {pto.kernel_kind = #vec} {\n"
            + "    pto.texp ins(%x : !v32) outs(%x : !v32)\n    return\n  }\n"
            + "  func.func @c() attributes {pto.kernel_kind = #cube} {\n    return\n  }\n}\n")
    printed = roundtrip(text)
    assert f"pto.texp ins(%x : {V32}) outs(%x : {V32})" in printed
    assert "#pto.kernel_kind<cube>" in printed


def test_module_attributes_and_builtin_module_spelling() -> None:
    text = wrap("").replace("module {", 'builtin.module attributes {"pto.target_arch" = "a3"} {', 1)
    assert 'pto.target_arch = "a3"' in roundtrip(text)  # MLIR accepts the bare key too


def test_file_without_module_wrapper() -> None:
    text = ENTRY + "  func.func @k() attributes {pto.kernel_kind = #pto.kernel_kind<vector>} {\n    return\n  }\n"
    roundtrip(text)


# --------------------------------------------------------------------------------------
# ptoas A3 forms beyond the FA kernel (issue 18): windows, elements, transposes, gathers,
# layout hints, subview valid sizes, inferred partition results
# --------------------------------------------------------------------------------------

V16x16 = "!pto.tile_buf<vec, 16x16xf32>"
V8x8 = "!pto.tile_buf<vec, 8x8xf32>"
_IDX = "%c0 = arith.constant 0 : index\n%c8 = arith.constant 8 : index\n"
MAT32 = "!pto.tile_buf<mat, 32x32xf16, slayout=row_major>"
LEFT16 = "!pto.tile_buf<left, 16x32xf16, slayout=row_major>"
RIGHT16 = "!pto.tile_buf<right, 32x16xf16, slayout=col_major>"
ACC32 = "!pto.tile_buf<acc, 32x32xf32, blayout=col_major, slayout=row_major, fractal=1024>"
MATNZ = "!pto.tile_buf<mat, 32x32xf16, blayout=col_major, slayout=row_major>"
SCL = "!pto.tile_buf<scaling, 1x32xi64>"
MATI8 = "!pto.tile_buf<mat, 32x32xi8, blayout=col_major, slayout=row_major>"

NEW_OPS: dict[str, tuple[str, str]] = {
    "textract_vec": ("vector", f"{_IDX}%a = pto.alloc_tile : {V16x16}\n%b = pto.alloc_tile : {V8x8}\n"
                               f"pto.textract ins(%a, %c8, %c0 : {V16x16}, index, index) outs(%b : {V8x8})"),
    "textract_mat_left": ("cube", f"{_IDX}%m = pto.alloc_tile : {MAT32}\n%l = pto.alloc_tile : {LEFT16}\n"
                                  f"pto.textract ins(%m, %c0, %c0 : {MAT32}, index, index) outs(%l : {LEFT16})"),
    "textract_mat_right": ("cube", f"{_IDX}%m = pto.alloc_tile : {MAT32}\n%r = pto.alloc_tile : {RIGHT16}\n"
                                   f"pto.textract ins(%m, %c0, %c0 : {MAT32}, index, index) outs(%r : {RIGHT16})"),
    "textract_acc_mat": ("cube", f"{_IDX}%a = pto.alloc_tile : {ACC32}\n%m = pto.alloc_tile : {MATNZ}\n"
                                 f"pto.textract ins(%a, %c0, %c0 : {ACC32}, index, index) outs(%m : {MATNZ}) {{reluPreMode = #pto<relu_pre_mode normal_relu>}}"),
    "textract_acc_fp": ("cube", f"{_IDX}%a = pto.alloc_tile : {ACC32}\n%m = pto.alloc_tile : {MATI8}\n%f = pto.alloc_tile : {SCL}\n"
                                f"pto.textract ins(%a, %c0, %c0 : {ACC32}, index, index fp %f : {SCL}) outs(%m : {MATI8})"),
    "tinsert_vec": ("vector", f"{_IDX}%a = pto.alloc_tile : {V16x16}\n%b = pto.alloc_tile : {V8x8}\n"
                              f"pto.tinsert ins(%b, %c8, %c8 : {V8x8}, index, index) outs(%a : {V16x16})"),
    "tinsert_acc_mat": ("cube", f"{_IDX}%a = pto.alloc_tile : {ACC32}\n%m = pto.alloc_tile : {MATNZ}\n"
                                f"pto.tinsert ins(%a, %c0, %c0 : {ACC32}, index, index) outs(%m : {MATNZ})"),
    "tsetval_tgetval": ("vector", f"{_IDX}%a = pto.alloc_tile : {V16x16}\n%x = arith.constant 1.5 : f32\n"
                                  f"pto.tsetval ins(%c8, %x : index, f32) outs(%a : {V16x16})\n"
                                  f"%y = pto.tgetval ins(%a, %c8 : {V16x16}, index) outs : f32"),
    "ttrans": ("vector", f"%a = pto.alloc_tile : !pto.tile_buf<vec, 8x16xf32>\n%b = pto.alloc_tile : !pto.tile_buf<vec, 16x8xf32>\n"
                         "pto.ttrans ins(%a : !pto.tile_buf<vec, 8x16xf32>) outs(%b : !pto.tile_buf<vec, 16x8xf32>)"),
    "ttrans_tmp": ("vector", f"%a = pto.alloc_tile : {V16x16}\n%t = pto.alloc_tile : {V16x16}\n%b = pto.alloc_tile : {V16x16}\n"
                             f"pto.ttrans ins(%a, %t : {V16x16}, {V16x16}) outs(%b : {V16x16})"),
    "tgather_index": ("vector", "%s = pto.alloc_tile : !pto.tile_buf<vec, 1x32xf16>\n%i = pto.alloc_tile : !pto.tile_buf<vec, 1x32xi32>\n"
                                "%d = pto.alloc_tile : !pto.tile_buf<vec, 1x32xf16>\n"
                                "pto.tgather ins(%s, %i, %i : !pto.tile_buf<vec, 1x32xf16>, !pto.tile_buf<vec, 1x32xi32>, !pto.tile_buf<vec, 1x32xi32>) outs(%d : !pto.tile_buf<vec, 1x32xf16>)"),
    "tgather_mask": ("vector", f"%s = pto.alloc_tile : {V16x16}\n%d = pto.alloc_tile : !pto.tile_buf<vec, 16x8xf32>\n"
                               f'pto.tgather ins(%s, {{maskPattern = #pto.mask_pattern<P0101>}} : {V16x16}, "row") outs(%d : !pto.tile_buf<vec, 16x8xf32>)'),
    "tcolexpand": ("vector", f"%r = pto.alloc_tile : !pto.tile_buf<vec, 1x16xf32>\n%d = pto.alloc_tile : {V8x8.replace('8x8', '8x16')}\n"
                             f"pto.tcolexpand ins(%r : !pto.tile_buf<vec, 1x16xf32>) outs(%d : {V8x8.replace('8x8', '8x16')})"),
    "tprint": ("vector", f"%a = pto.alloc_tile : {V16x16}\npto.tprint ins(%a : {V16x16})"),
    "trsqrt_tmp": ("vector", f"%a = pto.alloc_tile : {V16x16}\n%t = pto.alloc_tile : {V16x16}\n"
                             f"pto.trsqrt ins(%a, %t : {V16x16}, {V16x16}) outs(%a : {V16x16})"),
    "subview_valid": ("vector", f"{_IDX}%a = pto.alloc_tile : {V16x16}\n"
                                f"%s = pto.subview %a[%c0, %c8] sizes [8, 8] valid[%c8, %c8] : {V16x16} -> !pto.tile_buf<vec, 8x8xf32, valid=?x?>"),
    "tload_layout_hint": ("vector", f"{GM}\n%t = pto.alloc_tile : {V32}\n"
                                    "pto.tload ins(%pv : !pto.partition_tensor_view<16x64xf32>) outs(%t : " + V32 + ") {layout = #pto.layout<nd>}"),
    "tstore_layout_hint": ("vector", f"{GM}\n%t = pto.alloc_tile : {V32}\n"
                                     "pto.tstore ins(%t : " + V32 + ") outs(%pv : !pto.partition_tensor_view<16x64xf32>) {layout = #pto.layout<nd>, pto.inferred_layout = true}"),
}
OPS.update(NEW_OPS)


@pytest.mark.parametrize("kind,body", NEW_OPS.values(), ids=list(NEW_OPS))
def test_new_op_roundtrip(kind: str, body: str) -> None:
    roundtrip(wrap(body, kind, "%p: !pto.ptr<f32>, %ph: !pto.ptr<f16>"))


def test_partition_view_result_inferred_from_sizes() -> None:
    body = ("%c0 = arith.constant 0 : index\n%c1 = arith.constant 1 : index\n%c16 = arith.constant 16 : index\n"
            "%tv = pto.make_tensor_view %p, shape = [%c16, %n], strides = [%n, %c1] : !pto.tensor_view<16x?xf32>\n"
            "%pv = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c16, %n] : !pto.tensor_view<16x?xf32>")
    printed = roundtrip(wrap(body, "vector", "%p: !pto.ptr<f32>, %n: index"))
    assert "-> !pto.partition_tensor_view<16x?xf32>" in printed


def test_entry_rules_follow_ptoas() -> None:
    """No entry, several entries and the entry aliases all verify (PTOAS PTO.cpp validatePTOEntryFunctions)."""
    kernel = "  func.func @{name}(%p: !pto.ptr<f32>) attributes {{{attrs}}} {{\n    return\n  }}\n"
    for attrs in (["pto.kernel_kind = #pto.kernel_kind<vector>"], ["pto.entry", "pto.kernel"], ["hacc.entry", "pto.aicore"]):
        text = "module {\n" + "".join(kernel.format(name=f"k{i}", attrs=a) for i, a in enumerate(attrs)) + "}\n"
        check_text(text)


BUFFER_OPS: dict[str, tuple[str, str]] = {
    "section_cube_vector": ("vector", "pto.section.cube {\n%c0 = arith.constant 0 : index\n}\npto.section.vector {\n%c1 = arith.constant 1 : index\n}"),
    "reserve_import": ("vector", '%a = pto.reserve_buffer {name = "fifo", size = 4096, location = #pto.address_space<vec>, auto = true} -> i32\n'
                               '%b = pto.import_reserved_buffer {name = "fifo", peer_func = @k} -> i32'),
    "reserve_base": ("vector", '%c0 = arith.constant 0 : i64\n%t = pto.alloc_tile addr = %c0 : !pto.tile_buf<vec, 16x16xf32>\n'
                             '%a = pto.reserve_buffer {name = "slots", size = 8192, location = #pto.address_space<vec>, auto = false, base = 1024} -> i32'),
    "castptr_barrier": ("vector", "%x = arith.constant 0 : i64\n%q = pto.castptr %x : i64 -> !pto.ptr<f32, ub>\npto.barrier <PIPE_ALL>\npto.barrier <PIPE_MTE2>"),
}
OPS.update(BUFFER_OPS)


@pytest.mark.parametrize("body", [b for _, b in BUFFER_OPS.values()], ids=list(BUFFER_OPS))
def test_buffer_and_section_ops_roundtrip(body: str) -> None:
    lines = "\n".join("    " + ln for ln in body.splitlines())
    roundtrip("module {\n  func.func @k() {\n" + lines + "\n    return\n  }\n}\n")


I32T = "!pto.tile_buf<vec, 16x16xi32>"
F32T = "!pto.tile_buf<vec, 16x16xf32>"
_ITILES = f"%a = pto.alloc_tile : {I32T}\n%b = pto.alloc_tile : {I32T}\n%t = pto.alloc_tile : {I32T}\n%k = arith.constant 3 : i32\n"
_FTILES = f"%x = pto.alloc_tile : {F32T}\n%y = pto.alloc_tile : {F32T}\n%u = pto.alloc_tile : {F32T}\n%f = arith.constant 2.0 : f32\n"
INT_OPS: dict[str, tuple[str, str]] = {}
for _op in ("tand", "tor", "tshl", "tshr"):
    INT_OPS[_op] = ("vector", f"{_ITILES}pto.{_op} ins(%a, %b : {I32T}, {I32T}) outs(%a : {I32T})")
for _op in ("tands", "tors", "tshls", "tshrs"):
    INT_OPS[_op] = ("vector", f"{_ITILES}pto.{_op} ins(%a, %k : {I32T}, i32) outs(%b : {I32T})")
INT_OPS["txor_tmp"] = ("vector", f"{_ITILES}pto.txor ins(%a, %b, %t : {I32T}, {I32T}, {I32T}) outs(%a : {I32T})")
INT_OPS["txors_tmp"] = ("vector", f"{_ITILES}pto.txors ins(%a, %k, %t : {I32T}, i32, {I32T}) outs(%b : {I32T})")
INT_OPS["tnot"] = ("vector", f"{_ITILES}pto.tnot ins(%a : {I32T}) outs(%b : {I32T})")
INT_OPS["tpow_tmp"] = ("vector", f"{_FTILES}pto.tpow ins(%x, %y, %u : {F32T}, {F32T}, {F32T}) outs(%x : {F32T})")
INT_OPS["tpows"] = ("vector", f"{_ITILES}pto.tpows ins(%a, %k : {I32T}, i32) outs(%b : {I32T})")
INT_OPS["trem_tmp"] = ("vector", f"{_FTILES}pto.trem ins(%x, %y, %u : {F32T}, {F32T}, {F32T}) outs(%x : {F32T})")
INT_OPS["trems_tmp"] = ("vector", f"{_FTILES}pto.trems ins(%x, %f, %u : {F32T}, f32, {F32T}) outs(%y : {F32T})")
INT_OPS["tfmod"] = ("vector", f"{_FTILES}pto.tfmod ins(%x, %y : {F32T}, {F32T}) outs(%x : {F32T})")
INT_OPS["tfmods"] = ("vector", f"{_FTILES}pto.tfmods ins(%x, %f : {F32T}, f32) outs(%y : {F32T})")
OPS.update(INT_OPS)


def test_buffers_live_from_their_first_writer() -> None:
    """Two 128 KiB tiles allocated together but used one after the other fit the 192 KiB UB
    (ptoas's PlanMemory starts a buffer's life at its first writer)."""
    t = "!pto.tile_buf<vec, 1x32768xf32>"
    body = (f"%b0 = pto.alloc_tile : {t}\n%b1 = pto.alloc_tile : {t}\n"
            f"pto.tadd ins(%b0, %b0 : {t}, {t}) outs(%b0 : {t})\npto.tadd ins(%b1, %b1 : {t}, {t}) outs(%b1 : {t})")
    check_text(wrap(body))


def test_local_pipe_form() -> None:
    """Reserved-buffer pipes with tile entries (tfree without an entry) print back unchanged."""
    printed = roundtrip(LOCAL_PIPES)
    assert "c2v_consumer_buf = %" in printed and "v2c_consumer_buf = %" in printed and "gm_slot_buffer = %" in printed
    assert "pto.tfree_from_aiv {id = 0, split = 0}" in printed


def test_fixpipe_pipes_and_set_quant() -> None:
    """acc_push_epilogue on both inits and set_quant_scalar / set_quant_vector print back unchanged."""
    printed = roundtrip(FIXPIPE)
    assert "acc_push_epilogue = #pto.acc_push_epilogue<layout = nz2nd, quant = deqf16_vec, relu = no_relu>" in printed
    assert "pto.set_quant_scalar(%scale : f32) {id = 0}" in printed


def test_local_pipe_dynamic_valid_and_subblock_operands() -> None:
    """tpop's (valid_row, valid_col) on a dynamic tile entry and tpush / tpop's aiv_subblockid print back."""
    dyn = "!pto.tile_buf<vec, 16x16xf32, valid=?x?>"
    text = LOCAL_PIPES.replace(
        "%r = pto.tpop_from_aic {id = 0, split = 0} -> !pto.tile_buf<vec, 16x16xf32>",
        f"%c8 = arith.constant 8 : index\n    %sb = arith.constant 0 : i64\n    %r = pto.tpop_from_aic (%c8, %c8) {{id = 0, split = 0}} aiv_subblockid(%sb) -> {dyn}",
    ).replace("pto.tpush_to_aic(%v : !pto.tile_buf<vec, 16x16xf32>) {id = 0, split = 0}",
              "pto.tpush_to_aic(%v : !pto.tile_buf<vec, 16x16xf32>) {id = 0, split = 0} aiv_subblockid(%sb)")
    printed = roundtrip(text)
    assert f"(%c8, %c8) {{id = 0, split = 0}} aiv_subblockid(%sb) -> {dyn}" in printed
    assert "{id = 0, split = 0} aiv_subblockid(%sb)\n" in printed


def test_addptr_elided_pointer_types_print_qualified() -> None:
    printed = roundtrip(wrap("%c8 = arith.constant 8 : index\n%q = pto.addptr %p, %c8 : <f32> -> <f32>", args=GM_ARGS))
    assert "pto.addptr %p, %c8 : !pto.ptr<f32> -> !pto.ptr<f32>" in printed
