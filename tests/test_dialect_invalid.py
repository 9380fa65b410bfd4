"""Every verifier rule of the dialect (dialect.py) and of the function/module checks
(textio.py) fed bad IR: `check_text` raises PtoCheckError whose message names the op,
the rule and the numbers, on the line of the offending op.

Each case is (text, expected message substring, text of the line the error points at
or None when the rule is about a whole function or module).
"""

from __future__ import annotations

import pytest
from pto_snippets import CUBE_BODY, CUBE_PRE, ENTRY, FIXPIPE, LOCAL_PIPES, PP, PPH, QK, QKH, VEC_BODY, VEC_PRE, errors_of, line_of, pipes, wrap

from ptofa.ir.textio import PtoCheckError, check_text

V32 = "!pto.tile_buf<vec, 16x64xf32>"
V16 = "!pto.tile_buf<vec, 16x64xf16>"
COL = "!pto.tile_buf<vec, 16x1xf32, blayout=col_major>"
ROW = "!pto.tile_buf<vec, 1x16xf32>"
MAT = "!pto.tile_buf<mat, 128x128xf16, blayout=col_major, slayout=row_major>"
LEFT = "!pto.tile_buf<left, 128x128xf16, slayout=row_major>"
RIGHT = "!pto.tile_buf<right, 128x128xf16, slayout=col_major>"
ACC = "!pto.tile_buf<acc, 128x128xf32, blayout=col_major, slayout=row_major, fractal=1024>"


def vec(body: str, args: str = "") -> str:
    return wrap(body, "vector", args)


def cube(body: str, args: str = "") -> str:
    return wrap(body, "cube", args)


def alloc(name: str, t: str) -> str:
    return f"%{name} = pto.alloc_tile : {t}\n"


def tile_case(t: str) -> str:
    return vec(alloc("t", t))


GM = """%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c16 = arith.constant 16 : index
%c64 = arith.constant 64 : index
%c128 = arith.constant 128 : index
%tv = pto.make_tensor_view %p, shape = [%c128, %c128], strides = [%c128, %c1] : !pto.tensor_view<128x128xf32>
%pv = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c16, %c64] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<16x64xf32>
%pacc = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c128, %c128] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<128x128xf32>
"""
P = "%p: !pto.ptr<f32>"
PV16x64 = "!pto.partition_tensor_view<16x64xf32>"
PACC = "!pto.partition_tensor_view<128x128xf32>"
SCALAR = "%s = arith.constant 2.0 : f32\n"
VEC_TILES = alloc("a", V32) + alloc("b", V32) + alloc("h", V16) + alloc("col", COL)
CUBE_TILES = alloc("mat", MAT) + alloc("left", LEFT) + alloc("right", RIGHT) + alloc("acc", ACC)


def _ops(kind_wrap, tiles: str, line: str, args: str = "") -> tuple[str, str]:
    """A snippet whose last line is the offending op; returns (text, that line)."""
    return kind_wrap(tiles + line, args), line.strip()


CASES: dict[str, tuple[str, str, str | None]] = {}


def case(name: str, text: str, message: str, line: str | None = None) -> None:
    assert name not in CASES
    CASES[name] = (text, message, line)


def op_case(name: str, kind_wrap, tiles: str, line: str, message: str, args: str = "") -> None:
    text, at = _ops(kind_wrap, tiles, line, args)
    case(name, text, message, at)


# ---------------------------------------------------------------------------- types
for _name, _type, _msg in (
    ("tile_shape_positive", "!pto.tile_buf<loc=mat, dtype=f16, rows=0, cols=64, v_row=0, v_col=64, blayout=row_major, slayout=none_box, fractal=512, pad=0>",
     "shape 0x64 must be positive"),
    ("tile_blayout", "!pto.tile_buf<vec, 16x64xf32, blayout=diagonal>", "blayout 'diagonal' not in"),
    ("tile_slayout", "!pto.tile_buf<vec, 16x64xf32, slayout=diagonal>", "slayout 'diagonal' not in"),
    ("tile_fractal", "!pto.tile_buf<mat, 16x64xf16, fractal=256>", "fractal=256 must be one of (32, 512, 1024)"),
    ("tile_pad", "!pto.tile_buf<vec, 16x64xf32, pad=4>", "pad=4 must be 0..3"),
    ("tile_valid_rows_gt_shape", "!pto.tile_buf<vec, 16x64xf32, valid=17x64>", "valid shape v_row=17 must be within 0..16"),
    ("tile_valid_cols_gt_shape", "!pto.tile_buf<vec, 16x64xf32, valid=16x65>", "valid shape v_col=65 must be within 0..64"),
    ("tile_legacy_valid_gt_shape", "!pto.tile_buf<loc=vec, dtype=f32, rows=16, cols=64, v_row=16, v_col=128, blayout=row_major, slayout=none_box, fractal=512, pad=0>",
     "valid shape v_col=128 must be within 0..64"),
    ("vec_nd_alignment", "!pto.tile_buf<vec, 16x3xf32>",
     "'pto.alloc_tile' alignment: a row-major none_box tile's row (cols*sizeof(T)) must be a multiple of 32 bytes, got 3*4 = 12"),
    ("vec_nd_alignment_f16", "!pto.tile_buf<vec, 16x8xf16>", "row (cols*sizeof(T)) must be a multiple of 32 bytes, got 8*2 = 16"),
    ("vec_dn_alignment", "!pto.tile_buf<vec, 4x1xf32, blayout=col_major>", "column (rows*sizeof(T)) must be a multiple of 32 bytes, got 4*4 = 16"),
    ("mat_nd_alignment", "!pto.tile_buf<mat, 16x4xf16>", "'pto.alloc_tile' alignment: a row-major none_box tile's row"),
    ("boxed_cols", "!pto.tile_buf<mat, 16x24xf16, blayout=col_major, slayout=row_major>",
     "'pto.alloc_tile' boxed layout: cols 24 must be a multiple of the box's 16 cols"),
    ("boxed_rows", "!pto.tile_buf<mat, 8x32xf16, blayout=col_major, slayout=row_major>",
     "'pto.alloc_tile' boxed layout: rows 8 must be a multiple of the box's 16 rows"),
    ("element_type", "!pto.tile_buf<vec, 16x64xf64>", "unsupported element type f64"),
    ("tile_loc", "!pto.tile_buf<ub, 16x64xf32>", "unknown tile_buf loc 'ub'"),
    ("tile_field", "!pto.tile_buf<vec, 16x64xf32, layout=nd>", "unknown tile_buf field 'layout'"),
    ("legacy_field_order", "!pto.tile_buf<loc=vec, rows=16, dtype=f32, cols=64, v_row=16, v_col=64, blayout=row_major, slayout=none_box, fractal=512, pad=0>",
     "legacy tile_buf: expected field 'dtype', got 'rows'"),
    ("legacy_extra_field", "!pto.tile_buf<loc=vec, dtype=f32, rows=16, cols=64, v_row=16, v_col=64, blayout=row_major, slayout=none_box, fractal=512, pad=0, valid=1>",
     "legacy tile_buf: unexpected field 'valid'"),
):
    case(_name, tile_case(_type), _msg, "%t = pto.alloc_tile")

case("ptr_space", vec("", "%p: !pto.ptr<f32, hbm>"), "unknown pointer memory space 'hbm'")
case("view_rank0", vec("", "%v: !pto.tensor_view<f32>"), "a view type needs rank >= 1")
case("layout_value", vec("%c1 = arith.constant 1 : index\n%tv = pto.make_tensor_view %p, shape = [%c1], strides = [%c1] {layout = #pto.layout<zn>} : !pto.tensor_view<1xf32>", P),
     "#pto.layout: 'zn' is not one of nd, dn, nz", "pto.make_tensor_view")
case("kernel_kind_value", vec("").replace("#pto.kernel_kind<vector>", "#pto.kernel_kind<aiv>"), "#pto.kernel_kind: 'aiv' is not one of cube, vector")

# ---------------------------------------------------------------------------- scalar / pointer / view ops
case("set_ffts_type", "module {\n  func.func @e(%f: !pto.ptr<f32>) attributes {pto.entry} {\n    pto.set_ffts %f : !pto.ptr<f32>\n    return\n  }\n}\n",
     "'pto.set_ffts' operand type: set_ffts takes !pto.ptr<i64> or !pto.ptr<i8>, got !pto.ptr<f32>", "pto.set_ffts")
op_case("load_scalar_type", vec, "%c8 = arith.constant 8 : index\n", "%x = pto.load_scalar %p[%c8] : !pto.ptr<f32> -> i32",
        "'pto.load_scalar' type agreement: pointer !pto.ptr<f32> and scalar i32 differ in element type", P)
op_case("store_scalar_element", vec, "%c8 = arith.constant 8 : index\n%x = arith.constant 1 : i1\n",
        "pto.store_scalar %x, %b[%c8] : !pto.ptr<i1>, i1",
        "'pto.store_scalar' element type: i1 is not a scalar type ptoas loads", "%b: !pto.ptr<i1>")
op_case("addptr_type", vec, "%c8 = arith.constant 8 : index\n", "%q = pto.addptr %p, %c8 : !pto.ptr<f32> -> !pto.ptr<f16>",
        "'pto.addptr' type agreement: result !pto.ptr<f16> must equal the pointer type !pto.ptr<f32>", P)
op_case("make_tensor_view_rank", vec, "%c1 = arith.constant 1 : index\n",
        "%tv = pto.make_tensor_view %p, shape = [%c1], strides = [%c1] : !pto.tensor_view<1x1xf32>",
        "'pto.make_tensor_view' rank: view rank 2 needs 2 shape and 2 stride operands, got 1 and 1", P)
op_case("make_tensor_view_static_shape", vec, "%c1 = arith.constant 1 : index\n%c8 = arith.constant 8 : index\n",
        "%tv = pto.make_tensor_view %p, shape = [%c8, %c8], strides = [%c8, %c1] : !pto.tensor_view<8x16xf32>",
        "'pto.make_tensor_view' static shape: dim 1 of the type is 16 but the shape operand is the constant 8", P)
op_case("make_tensor_view_ptr_element", vec, "%c1 = arith.constant 1 : index\n",
        "%tv = pto.make_tensor_view %p, shape = [%c1], strides = [%c1] : !pto.tensor_view<1xf16>",
        "'pto.make_tensor_view' element type: the pointer must be !pto.ptr<f16> for a view of f16", P)
op_case("partition_view_element_type", vec, GM,
        "%pw = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c16, %c64] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<16x64xf16>",
        "'pto.partition_view' element type: source f32 != result f16", P)
op_case("partition_view_rank", vec, GM,
        "%pw = pto.partition_view %tv, offsets = [%c0], sizes = [%c16] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<16xf32>",
        "'pto.partition_view' rank: source rank 2 needs 2 offsets and sizes, got 1 and 1", P)
op_case("partition_view_static_shape", vec, GM,
        "%pw = pto.partition_view %tv, offsets = [%c0, %c0], sizes = [%c16, %c64] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<16x32xf32>",
        "'pto.partition_view' static shape: result dim 1 is 32 but the size operand is the constant 64", P)
op_case("partition_view_bounds", vec, GM,
        "%pw = pto.partition_view %tv, offsets = [%c0, %c64], sizes = [%c16, %c128] : !pto.tensor_view<128x128xf32> -> !pto.partition_tensor_view<16x128xf32>",
        "'pto.partition_view' bounds: offset+size at dim 1 (192) exceeds static source dim (128)", P)

# ---------------------------------------------------------------------------- alloc_tile
op_case("alloc_tile_addr_level3_mixed", vec, f"%a = arith.constant 0 : i64\n%t = pto.alloc_tile addr = %a : {V32}\n", f"%u = pto.alloc_tile : {V32}",
        "'pto.alloc_tile' level3: requires 'addr' operand when --pto-level=level3")
op_case("alloc_tile_dynamic_without_operands", vec, "", "%t = pto.alloc_tile : !pto.tile_buf<vec, 16x64xf32, valid=?x64>",
        "'pto.alloc_tile' valid shape: valid_row operand is required because the type's valid shape is ?x64")
op_case("alloc_tile_operands_with_static_valid", vec, "%r = arith.constant 8 : index\n", f"%t = pto.alloc_tile valid_row = %r valid_col = %r : {V32}",
        "'pto.alloc_tile' valid shape: valid_row operand must be absent because the type's valid shape is 16x64")

# ---------------------------------------------------------------------------- tload / tstore / tmov / treshape / subview
op_case("tload_dst_space", cube, GM + alloc("t", ACC), f"pto.tload ins(%pacc : {PACC}) outs(%t : {ACC})",
        "'pto.tload' memory space: dst must be loc=vec or loc=mat on A2/A3, got loc=acc", P)
op_case("tload_dtype", vec, GM.replace("f32", "f64").replace("%pacc", "%unused") + alloc("t", "!pto.tile_buf<vec, 16x64xi64>"),
        "pto.tload ins(%pv : !pto.partition_tensor_view<16x64xf64>) outs(%t : !pto.tile_buf<vec, 16x64xi64>)",
        "unsupported element type f64", "%p: !pto.ptr<f64>")
op_case("tload_dtype_size", vec, GM + alloc("t", V16), f"pto.tload ins(%pv : {PV16x64}) outs(%t : {V16})",
        "'pto.tload' dtype: view element f32 and tile element f16 differ in size", P)
op_case("tstore_src_space", cube, GM + alloc("t", "!pto.tile_buf<left, 128x128xf32, slayout=row_major>"),
        f"pto.tstore ins(%t : !pto.tile_buf<left, 128x128xf32, slayout=row_major>) outs(%pacc : {PACC})",
        "'pto.tstore' memory space: src must be loc=vec, mat or acc on A2/A3, got loc=left", P)
op_case("tstore_shape", vec, GM + alloc("t", "!pto.tile_buf<vec, 8x64xf32>"), f"pto.tstore ins(%t : !pto.tile_buf<vec, 8x64xf32>) outs(%pv : {PV16x64})",
        "'pto.tstore' shape agreement: view 16x64 holds 1024 elements, the tile's valid 8x64 512; a store needs equal counts", P)
_ACC_I8 = "!pto.tile_buf<acc, 128x128xi8, blayout=col_major, slayout=row_major, fractal=1024>"
op_case("tstore_acc_dtype_pair", cube, GM + alloc("t", _ACC_I8), f"pto.tstore ins(%t : {_ACC_I8}) outs(%pacc : {PACC})",
        "'pto.tstore' dtype pair: acc store i8 -> f32 is not allowed", P)
_ACC_WIDE = "!pto.tile_buf<acc, 16x4096xf32, blayout=col_major, slayout=row_major, fractal=1024>"
op_case("tstore_acc_cols", cube, GM.replace("128x128", "16x4096").replace("[%c128, %c128]", "[%c16, %c4096]").replace("%c128 = ", "%c4096 = arith.constant 4096 : index\n%c128 = ")
        + alloc("t", _ACC_WIDE), f"pto.tstore ins(%t : {_ACC_WIDE}) outs(%pacc : !pto.partition_tensor_view<16x4096xf32>)",
        "'pto.tstore' acc cols: ACC tile cols 4096 must be <= 4095", P)
op_case("tmov_acc_to_vec", cube, alloc("acc", ACC) + alloc("v", "!pto.tile_buf<vec, 128x128xf32>"),
        f"pto.tmov ins(%acc : {ACC}) outs(%v : !pto.tile_buf<vec, 128x128xf32>)",
        "'pto.tmov' memory space: acc -> vec: ptoas verifies it, but pto-isa's A2/A3 TMOV has no acc -> vec path")
op_case("tmov_acc_to_vec_mode_pair", cube, CUBE_TILES,
        f"pto.tmov ins(%mat : {MAT}) outs(%left : {LEFT}) {{accToVecMode = #pto.acc_to_vec_mode<dual_mode_split_m>}}",
        "'pto.tmov' attribute: accToVecMode goes only with an acc -> vec tmov, got mat -> left")
op_case("tpow_high_precision", vec, VEC_TILES, f"pto.tpow ins(%a, %b : {V32}, {V32}) outs(%a : {V32}) {{precisionType = #pto<pow_precision high_precision>}}",
        "'pto.tpow' precision: A2/A3 does not support precisionType=high_precision")
op_case("trsqrt_high_precision_tmp", vec, VEC_TILES, f"pto.trsqrt ins(%a : {V32}) outs(%b : {V32}) {{precisionType = #pto<rsqrt_precision high_precision>}}",
        "'pto.trsqrt' tmp: precisionType = high_precision needs a tmp tile")
op_case("tmov_fp_space", cube, CUBE_TILES + alloc("fpv", "!pto.tile_buf<vec, 1x32xf32>"),
        f"pto.tmov ins(%acc : {ACC}, %fpv : !pto.tile_buf<vec, 1x32xf32>) outs(%mat : {MAT})",
        "'pto.tmov' operands: fp must be a loc=scaling tile, got loc=vec")
op_case("tstore_prequant_dtype", cube, GM + alloc("t", ACC) + "%q = arith.constant 1 : i64\n",
        f"pto.tstore ins(%t : {ACC}, %q : i64) outs(%pacc : {PACC})",
        "'pto.tstore' dtype pair: a preQuantScalar acc store f32 -> f32 is not allowed (to i8/ui8)", P)
op_case("tmov_left_to_mat", cube, CUBE_TILES, f"pto.tmov ins(%left : {LEFT}) outs(%mat : {MAT})",
        "'pto.tmov' memory space: left -> mat is not a legal A2/A3 tmov")
op_case("tmov_shape", cube, alloc("mat", MAT) + alloc("l", "!pto.tile_buf<left, 128x64xf16, slayout=row_major>"),
        f"pto.tmov ins(%mat : {MAT}) outs(%l : !pto.tile_buf<left, 128x64xf16, slayout=row_major>)",
        "'pto.tmov' shape agreement: src 128x128 != dst 128x64")
op_case("tmov_vec_mixed_layout", vec, alloc("c", "!pto.tile_buf<vec, 16x8xf32, blayout=col_major>") + alloc("d", "!pto.tile_buf<vec, 16x8xf32>"),
        "pto.tmov ins(%c : !pto.tile_buf<vec, 16x8xf32, blayout=col_major>) outs(%d : !pto.tile_buf<vec, 16x8xf32>)",
        "'pto.tmov' layout: vec->vec tmov needs one blayout on both tiles, got src col_major, dst row_major")
op_case("treshape_bytes", vec, alloc("c", COL), f"%r = pto.treshape %c : {COL} -> !pto.tile_buf<vec, 1x32xf32>",
        "'pto.treshape' size: 64 bytes -> 128 bytes: treshape keeps the byte size")
op_case("treshape_space", cube, alloc("m", "!pto.tile_buf<mat, 16x16xf16>"),
        "%r = pto.treshape %m : !pto.tile_buf<mat, 16x16xf16> -> !pto.tile_buf<vec, 16x16xf16>",
        "'pto.treshape' memory space: loc mat -> vec")
op_case("treshape_boxed", cube, alloc("m", "!pto.tile_buf<mat, 16x16xf16>"),
        "%r = pto.treshape %m : !pto.tile_buf<mat, 16x16xf16> -> !pto.tile_buf<mat, 16x16xf16, slayout=row_major>",
        "'pto.treshape' layout: slayout none_box -> row_major")
op_case("subview_type", vec, "%c0 = arith.constant 0 : index\n" + alloc("a", V32),
        f"%s = pto.subview %a[%c0, %c0] sizes [8, 64] : {V32} -> !pto.tile_buf<vec, 8x64xf16>",
        "'pto.subview' type agreement: subview keeps loc, dtype and layout of its source")
op_case("subview_bounds", vec, "%c0 = arith.constant 0 : index\n%c12 = arith.constant 12 : index\n" + alloc("a", V32),
        f"%s = pto.subview %a[%c12, %c0] sizes [8, 64] : {V32} -> !pto.tile_buf<vec, 8x64xf32>",
        "'pto.subview' bounds: row window [12, +8) exceeds the source's 16")
op_case("subview_sizes_vs_type", vec, "%c0 = arith.constant 0 : index\n" + alloc("a", V32),
        f"%s = pto.subview %a[%c0, %c0] sizes [4, 64] : {V32} -> !pto.tile_buf<vec, 8x64xf32>",
        "'pto.subview' sizes: sizes [4, 64] must equal the result tile shape !pto.tile_buf<vec, 8x64xf32>")

_ROW64 = "!pto.tile_buf<vec, 1x64xf32>"
_ROW32 = "!pto.tile_buf<vec, 1x32xf32>"
_COL64 = "!pto.tile_buf<vec, 64x1xf32, blayout=col_major>"
# docs/sources.md §2.13: ptoas 0.60 fails to legalize a subview whose source is a treshape result.
op_case("subview_of_treshape", vec, "%c0 = arith.constant 0 : index\n%c32 = arith.constant 32 : index\n" + alloc("tc", _COL64)
        + f"%t = pto.treshape %tc : {_COL64} -> {_ROW64}\n",
        f"%s = pto.subview %t[%c0, %c32] sizes [1, 32] : {_ROW64} -> {_ROW32}",
        "'pto.subview' subview source: the source is a pto.treshape result; ptoas 0.60 fails to legalize")
# docs/sources.md §2.14: a subview is materialized as its parent's physical tile, so tmov shapes differ.
op_case("tmov_into_subview", vec, "%c0 = arith.constant 0 : index\n%c32 = arith.constant 32 : index\n" + alloc("a", _ROW32) + alloc("t", _ROW64)
        + f"%s = pto.subview %t[%c0, %c32] sizes [1, 32] : {_ROW64} -> {_ROW32}\n",
        f"pto.tmov ins(%a : {_ROW32}) outs(%s : {_ROW32})",
        "'pto.tmov' shape agreement: expects A2/A3 non-mat tmov to use matching src/dst shapes: ptoas materializes a subview as its parent's physical tile, so this is 1x32 -> 1x64")
op_case("tmov_mat_subview_source", cube, "%c0 = arith.constant 0 : index\n" + alloc("m", "!pto.tile_buf<mat, 256x128xf16, blayout=col_major, slayout=row_major>") + alloc("left", LEFT)
        + f"%s = pto.subview %m[%c0, %c0] sizes [128, 128] : !pto.tile_buf<mat, 256x128xf16, blayout=col_major, slayout=row_major> -> {MAT}\n",
        f"pto.tmov ins(%s : {MAT}) outs(%left : {LEFT})",
        "'pto.tmov' shape agreement: expects mat-source tmov to use matching src/dst shapes: ptoas materializes a subview as its parent's physical tile, so this is 256x128 -> 128x128")
# docs/sources.md §2.2: with a dynamic size the DN view silently becomes ND unless the layout is written.
op_case("dn_view_layout_inference", vec, "%c1 = arith.constant 1 : index\n%c128 = arith.constant 128 : index\n%n = arith.index_cast %s1 : i64 to index\n",
        "%kT = pto.make_tensor_view %p, shape = [%c128, %n], strides = [%c1, %c128] : !pto.tensor_view<128x?xf16>",
        "'pto.make_tensor_view' layout inference: strides [1, 128] describe a DN view, but ptoas infers the layout only when every size and stride is a constant",
        "%p: !pto.ptr<f16>, %s1: i64")
_DN_GM = """%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c128 = arith.constant 128 : index
%kT = pto.make_tensor_view %p, shape = [%c128, %c128], strides = [%c1, %c128] {layout = #pto.layout<dn>} : !pto.tensor_view<128x128xf16>
%pv = pto.partition_view %kT, offsets = [%c0, %c0], sizes = [%c128, %c128] : !pto.tensor_view<128x128xf16> -> !pto.partition_tensor_view<128x128xf16>
"""
# docs/sources.md §2.8 (not diagnosed by ptoas): the GM view layout must pair with the tile layout.
op_case("tload_layout_pairing_mat", cube, _DN_GM + alloc("m", MAT),
        f"pto.tload ins(%pv : !pto.partition_tensor_view<128x128xf16>) outs(%m : {MAT})",
        "'pto.tload' layout pairing: a DN GM view pairs with loc=mat tiles of layout DN or ZN, got NZ", "%p: !pto.ptr<f16>")
op_case("tstore_layout_pairing_vec", vec, _DN_GM + alloc("v", "!pto.tile_buf<vec, 128x128xf16>"),
        "pto.tstore ins(%v : !pto.tile_buf<vec, 128x128xf16>) outs(%pv : !pto.partition_tensor_view<128x128xf16>)",
        "'pto.tstore' layout pairing: a DN GM view pairs with loc=vec tiles of layout DN, got ND", "%p: !pto.ptr<f16>")

# ---------------------------------------------------------------------------- vector ops
op_case("tcvt_round_mode", vec, VEC_TILES, f"pto.tcvt ins(%a {{rmode = #pto<round_mode UP>}} : {V32}) outs(%h : {V16})",
        "'pto.tcvt' round mode: 'UP' is not one of")
op_case("tcvt_shape", vec, VEC_TILES + alloc("h8", "!pto.tile_buf<vec, 8x64xf16>"),
        f"pto.tcvt ins(%a : {V32}) outs(%h8 : !pto.tile_buf<vec, 8x64xf16>)",
        "'pto.tcvt' shape agreement: src and dst need the same shape, got 16x64 and 8x64")
# ALiBi's i32 positions (1x128) converted into a 1x32 f32 tile: ptoas 0.60 rejects it whatever the
# valid shapes ("expects src and dst to have compatible shapes").
op_case("tcvt_physical_shape", vec,
        alloc("ci", "!pto.tile_buf<vec, 1x128xi32, valid=1x32>") + alloc("cf", "!pto.tile_buf<vec, 1x32xf32>"),
        "pto.tcvt ins(%ci : !pto.tile_buf<vec, 1x128xi32, valid=1x32>) outs(%cf : !pto.tile_buf<vec, 1x32xf32>)",
        "'pto.tcvt' shape agreement: src and dst need the same shape, got 1x128 and 1x32")
op_case("tcvt_valid_shape", vec,
        alloc("ci", "!pto.tile_buf<vec, 1x32xi32, valid=1x16>") + alloc("cf", "!pto.tile_buf<vec, 1x32xf32>"),
        "pto.tcvt ins(%ci : !pto.tile_buf<vec, 1x32xi32, valid=1x16>) outs(%cf : !pto.tile_buf<vec, 1x32xf32>)",
        "'pto.tcvt' shape agreement: src valid 1x16 != dst valid 1x32")
op_case("tcvt_space", cube, alloc("m", "!pto.tile_buf<mat, 16x64xf32>") + alloc("n", "!pto.tile_buf<mat, 16x64xf16>"),
        "pto.tcvt ins(%m : !pto.tile_buf<mat, 16x64xf32>) outs(%n : !pto.tile_buf<mat, 16x64xf16>)",
        "'pto.tcvt' memory space: vector ops take loc=vec tiles, got mat 16x64xf32")
op_case("elementwise_col_major", vec, VEC_TILES, f"pto.tadd ins(%col, %col : {COL}, {COL}) outs(%col : {COL})",
        "'pto.tadd' layout: elementwise ops need blayout=row_major tiles, got vec 16x1xf32 col_major")
op_case("elementwise_space", cube, alloc("m", "!pto.tile_buf<mat, 16x64xf32>"),
        "pto.tmul ins(%m, %m : !pto.tile_buf<mat, 16x64xf32>, !pto.tile_buf<mat, 16x64xf32>) outs(%m : !pto.tile_buf<mat, 16x64xf32>)",
        "'pto.tmul' memory space: vector ops take loc=vec tiles, got mat 16x64xf32")
op_case("elementwise_dtype_mix", vec, VEC_TILES, f"pto.tsub ins(%a, %h : {V32}, {V16}) outs(%a : {V32})",
        "'pto.tsub' dtype: operands must share one dtype, got f32 and f16")
op_case("elementwise_dtype_i8", vec, alloc("q", "!pto.tile_buf<vec, 16x32xi8>"),
        "pto.tmax ins(%q, %q : !pto.tile_buf<vec, 16x32xi8>, !pto.tile_buf<vec, 16x32xi8>) outs(%q : !pto.tile_buf<vec, 16x32xi8>)",
        "'pto.tmax' dtype: i8 is not a vector arithmetic type")
op_case("elementwise_valid_shape", vec, VEC_TILES + alloc("s8", "!pto.tile_buf<vec, 16x64xf32, valid=8x64>"),
        f"pto.tdiv ins(%a, %s8 : {V32}, !pto.tile_buf<vec, 16x64xf32, valid=8x64>) outs(%a : {V32})",
        "'pto.tdiv' shape agreement: valid shapes 16x64 and 8x64 differ")
op_case("unary_float_only", vec, alloc("i", "!pto.tile_buf<vec, 8x8xi32>"),
        "pto.texp ins(%i : !pto.tile_buf<vec, 8x8xi32>) outs(%i : !pto.tile_buf<vec, 8x8xi32>)",
        "'pto.texp' dtype: pto.texp takes f16/f32 tiles, got i32")
op_case("trecip_in_place", vec, VEC_TILES, f"pto.trecip ins(%a : {V32}) outs(%a : {V32})",
        "'pto.trecip' in place: trecip cannot run in place on a3 (src == dst)")
op_case("scalar_operand_type", vec, VEC_TILES + "%i = arith.constant 2 : index\n", f"pto.tadds ins(%a, %i : {V32}, index) outs(%a : {V32})",
        "'pto.tadds' operand type: scalar must be an int or float, got index")
op_case("scalar_first_only_tdivs", vec, SCALAR + VEC_TILES, f"pto.tmuls ins(%s, %a : f32, {V32}) outs(%a : {V32})",
        "'pto.tmuls' operand order: the tile comes first")
op_case("texpands_col_major", vec, SCALAR + VEC_TILES, f"pto.texpands ins(%s : f32) outs(%col : {COL})",
        "'pto.texpands' layout: a loc=vec destination must be blayout=row_major, got vec 16x1xf32 col_major")
op_case("texpands_space", cube, SCALAR + alloc("acc", ACC), f"pto.texpands ins(%s : f32) outs(%acc : {ACC})",
        "'pto.texpands' memory space: texpands writes loc=vec or loc=mat, got acc")
op_case("rowreduce_src_layout", vec, VEC_TILES + alloc("c2", COL), f"pto.trowmax ins(%col : {COL}) outs(%c2 : {COL})",
        "'pto.trowmax' layout: src must be ND (row_major, none_box), got col_major, none_box")
op_case("rowreduce_dtype", vec, VEC_TILES + alloc("c16", "!pto.tile_buf<vec, 16x1xf16, blayout=col_major>"),
        f"pto.trowsum ins(%a : {V32}) outs(%c16 : !pto.tile_buf<vec, 16x1xf16, blayout=col_major>)",
        "'pto.trowsum' dtype: src f32 != dst f16")
op_case("rowreduce_zero_valid", vec, VEC_TILES + alloc("z", "!pto.tile_buf<vec, 16x64xf32, valid=16x0>"),
        f"pto.trowmin ins(%z : !pto.tile_buf<vec, 16x64xf32, valid=16x0>) outs(%col : {COL})",
        "'pto.trowmin' shape agreement: src valid dims must be non-zero, got 16x0")
op_case("rowreduce_dst_rows", vec, VEC_TILES + alloc("c8", "!pto.tile_buf<vec, 8x1xf32, blayout=col_major>"),
        f"pto.trowmax ins(%a : {V32}) outs(%c8 : !pto.tile_buf<vec, 8x1xf32, blayout=col_major>)",
        "'pto.trowmax' shape agreement: dst valid rows 8 != 16 rows of the tile")
op_case("rowreduce_dn_dst_cols", vec, VEC_TILES + alloc("d2", "!pto.tile_buf<vec, 16x2xf32, blayout=col_major>"),
        f"pto.trowmax ins(%a : {V32}) outs(%d2 : !pto.tile_buf<vec, 16x2xf32, blayout=col_major>)",
        "'pto.trowmax' shape agreement: dst DN column vector needs 1 valid column, got 2")
op_case("rowreduce_nd_dst_cols", vec, VEC_TILES + alloc("n8", "!pto.tile_buf<vec, 16x8xf32>"),
        f"pto.trowsum ins(%a : {V32}) outs(%n8 : !pto.tile_buf<vec, 16x8xf32>)",
        "'pto.trowsum' shape agreement: dst row_major per-row vector needs 1 valid columns, got 8")
op_case("rowreduce_tmp_type", vec, VEC_TILES, f"pto.trowmax ins(%a, %h : {V32}, {V16}) outs(%col : {COL})",
        "'pto.trowmax' operand type: tmp must be a loc=vec f32 tile, got vec 16x64xf16")
op_case("rowreduce_tmp_size", vec, VEC_TILES + alloc("t8", "!pto.tile_buf<vec, 8x64xf32>"),
        f"pto.trowsum ins(%a, %t8 : {V32}, !pto.tile_buf<vec, 8x64xf32>) outs(%col : {COL})",
        "'pto.trowsum' tmp size: tmp of 2048 bytes is smaller than the src (4096 bytes)")
op_case("rowexpand_layout", vec, VEC_TILES + alloc("w", "!pto.tile_buf<vec, 16x64xf32, blayout=col_major>"),
        f"pto.trowexpandadd ins(%w, %col : !pto.tile_buf<vec, 16x64xf32, blayout=col_major>, {COL}) outs(%a : {V32})",
        "'pto.trowexpandadd' layout: src0 must be blayout=row_major, got col_major")
op_case("rowexpand_dst_layout", vec, VEC_TILES + alloc("w", "!pto.tile_buf<vec, 16x64xf32, blayout=col_major>"),
        f"pto.trowexpandsub ins(%a, %col : {V32}, {COL}) outs(%w : !pto.tile_buf<vec, 16x64xf32, blayout=col_major>)",
        "'pto.trowexpandsub' layout: dst must be blayout=row_major, got col_major")
op_case("rowexpand_shape", vec, VEC_TILES + alloc("a8", "!pto.tile_buf<vec, 16x64xf32, valid=16x32>"),
        f"pto.trowexpandadd ins(%a, %col : {V32}, {COL}) outs(%a8 : !pto.tile_buf<vec, 16x64xf32, valid=16x32>)",
        "'pto.trowexpandadd' shape agreement: src0 valid 16x64 != dst valid 16x32")
op_case("rowexpand_reduce_shape", vec, VEC_TILES + alloc("a8", "!pto.tile_buf<vec, 16x64xf32, valid=16x32>"),
        f"pto.trowexpandmin ins(%a, %a : {V32}, {V32}) outs(%a8 : !pto.tile_buf<vec, 16x64xf32, valid=16x32>)",
        "'pto.trowexpandmin' shape agreement: one of src0 / src1 must match dst valid 16x32")
op_case("rowexpand_tmp_mode", vec, VEC_TILES + alloc("n8", "!pto.tile_buf<vec, 16x8xf32>"),
        f"pto.trowexpandmul ins(%a, %n8, %b : {V32}, !pto.tile_buf<vec, 16x8xf32>, {V32}) outs(%a : {V32})",
        "'pto.trowexpandmul' layout: with a tmp, the per-row operand must be a DN [R,1] column (mode 1)")
op_case("rowexpanddiv_high_precision_tmp", vec, VEC_TILES,
        f"pto.trowexpanddiv ins(%a, %col : {V32}, {COL}) outs(%a : {V32}) {{precisionType = #pto<div_precision high_precision>}}",
        "'pto.trowexpanddiv' tmp: precisionType = high_precision needs a tmp tile")
op_case("rowexpand_dtype", vec, alloc("i", "!pto.tile_buf<vec, 16x8xi32>") + alloc("ic", "!pto.tile_buf<vec, 16x1xi32, blayout=col_major>"),
        "pto.trowexpanddiv ins(%i, %ic : !pto.tile_buf<vec, 16x8xi32>, !pto.tile_buf<vec, 16x1xi32, blayout=col_major>) outs(%i : !pto.tile_buf<vec, 16x8xi32>)",
        "'pto.trowexpanddiv' dtype: src0/src1/dst must share one of f16/f32, got i32, i32, i32")
op_case("rowexpand_nd_src1_cols", vec, VEC_TILES + alloc("n16", "!pto.tile_buf<vec, 16x16xf32>"),
        f"pto.trowexpandadd ins(%a, %n16 : {V32}, !pto.tile_buf<vec, 16x16xf32>) outs(%a : {V32})",
        "'pto.trowexpandadd' shape agreement: src1 row_major per-row vector needs 8 valid columns, got 16")
op_case("rowexpand_src1_rows", vec, VEC_TILES + alloc("c8", "!pto.tile_buf<vec, 8x1xf32, blayout=col_major>"),
        f"pto.trowexpandmax ins(%a, %c8 : {V32}, !pto.tile_buf<vec, 8x1xf32, blayout=col_major>) outs(%a : {V32})",
        "'pto.trowexpandmax' shape agreement: src1 valid rows 8 != 16 rows of the tile")
op_case("rowexpand_space", vec, VEC_TILES + alloc("mc", "!pto.tile_buf<mat, 16x1xf32, blayout=col_major>"),
        f"pto.trowexpandexpdif ins(%a, %mc, %b : {V32}, !pto.tile_buf<mat, 16x1xf32, blayout=col_major>, {V32}) outs(%a : {V32})",
        "'pto.trowexpandexpdif' memory space: vector ops take loc=vec tiles, got mat 16x1xf32")
op_case("expdif_without_tmp", vec, VEC_TILES, f"pto.trowexpandexpdif ins(%a, %col : {V32}, {COL}) outs(%a : {V32})",
        "'pto.trowexpandexpdif' scratch: trowexpandexpdif needs a tmp tile: without one, pto-isa's A2/A3 "
        "TROWEXPANDEXPDIF broadcasts the column through a fixed 8 KiB of UB at 184 KiB")
op_case("rowexpand_tmp_too_small", vec, VEC_TILES + alloc("t8", "!pto.tile_buf<vec, 1x8xf32>"),
        f"pto.trowexpandexpdif ins(%a, %col, %t8 : {V32}, {COL}, !pto.tile_buf<vec, 1x8xf32>) outs(%a : {V32})",
        "'pto.trowexpandexpdif' scratch: tmp holds 32 bytes; the column broadcast of 16 valid rows writes 512")
op_case("rowexpand_tmp_dtype", vec, VEC_TILES + alloc("th", "!pto.tile_buf<vec, 1x2048xf16>"),
        f"pto.trowexpandmul ins(%a, %col, %th : {V32}, {COL}, !pto.tile_buf<vec, 1x2048xf16>) outs(%a : {V32})",
        "'pto.trowexpandmul' dtype: tmp and dst must have the same element type, got tmp f16, dst f32")
op_case("ins_outs_arity", vec, VEC_TILES, f"pto.tadd ins(%a : {V32}) outs(%a : {V32})",
        "pto.tadd takes 2 ins and 1 outs operand, got 1 ins and 1 outs")

# ---------------------------------------------------------------------------- matmul
_L32 = "!pto.tile_buf<left, 128x128xf32, slayout=row_major>"
_R32 = "!pto.tile_buf<right, 128x128xf32, slayout=col_major>"
op_case("matmul_lhs_space", cube, CUBE_TILES, f"pto.tmatmul ins(%mat, %right : {MAT}, {RIGHT}) outs(%acc : {ACC})",
        "'pto.tmatmul' memory space: lhs must be loc=left, got loc=mat")
op_case("matmul_rhs_space", cube, CUBE_TILES, f"pto.tmatmul ins(%left, %left : {LEFT}, {LEFT}) outs(%acc : {ACC})",
        "'pto.tmatmul' memory space: rhs must be loc=right, got loc=left")
op_case("matmul_dst_space", cube, CUBE_TILES, f"pto.tmatmul ins(%left, %right : {LEFT}, {RIGHT}) outs(%mat : {MAT})",
        "'pto.tmatmul' memory space: dst must be loc=acc, got loc=mat")
op_case("matmul_dtype_triple", cube, CUBE_TILES + alloc("r32", _R32), f"pto.tmatmul ins(%left, %r32 : {LEFT}, {_R32}) outs(%acc : {ACC})",
        "'pto.tmatmul' dtype triple: (dst f32; lhs f16, rhs f32) is not one of")
_L64 = "!pto.tile_buf<left, 128x64xf16, slayout=row_major>"
op_case("matmul_k_mismatch", cube, CUBE_TILES + alloc("l64", _L64), f"pto.tmatmul ins(%l64, %right : {_L64}, {RIGHT}) outs(%acc : {ACC})",
        "'pto.tmatmul' shape agreement: lhs 128x64 @ rhs 128x128 -> dst 128x128")
_ACC64 = "!pto.tile_buf<acc, 64x128xf32, blayout=col_major, slayout=row_major, fractal=1024>"
op_case("matmul_m_mismatch", cube, CUBE_TILES + alloc("a64", _ACC64), f"pto.tmatmul ins(%left, %right : {LEFT}, {RIGHT}) outs(%a64 : {_ACC64})",
        "'pto.tmatmul' shape agreement: lhs 128x128 @ rhs 128x128 -> dst 64x128")
_LB = "!pto.tile_buf<left, 16x4096xf16, slayout=row_major>"
_RB = "!pto.tile_buf<right, 4096x16xf16, slayout=col_major>"
_AB = "!pto.tile_buf<acc, 16x16xf32, blayout=col_major, slayout=row_major, fractal=1024>"
op_case("matmul_dims", cube, alloc("l", _LB) + alloc("r", _RB) + alloc("c", _AB), f"pto.tmatmul ins(%l, %r : {_LB}, {_RB}) outs(%c : {_AB})",
        "'pto.tmatmul' matmul dims: k=4096 must be <= 4095")
op_case("matmul_acc_type", cube, CUBE_TILES + alloc("a64", _ACC64),
        f"pto.tmatmul.acc ins(%a64, %left, %right : {_ACC64}, {LEFT}, {RIGHT}) outs(%acc : {ACC})",
        "'pto.tmatmul.acc' type agreement: acc_in !pto.tile_buf<acc, 64x128xf32")
op_case("matmul_acc_shapes", cube, CUBE_TILES + alloc("l64", _L64),
        f"pto.tmatmul.acc ins(%acc, %l64, %right : {ACC}, {_L64}, {RIGHT}) outs(%acc : {ACC})",
        "'pto.tmatmul.acc' shape agreement: lhs 128x64 @ rhs 128x128")
op_case("tmatmul_in_vector_function", vec, "", f"pto.tmatmul ins(%l, %r : {LEFT}, {RIGHT}) outs(%c : {ACC})",
        "'pto.tmatmul' kernel kind: cube op in vector function @k", args=f"%l: {LEFT}, %r: {RIGHT}, %c: {ACC}")


# ---------------------------------------------------------------------------- pipe init ops
def cube_init(old: str, new: str) -> str:
    assert old in CUBE_PRE
    return pipes(cube=CUBE_PRE.replace(old, new, 1) + CUBE_BODY)


def vec_init(old: str, new: str) -> str:
    assert old in VEC_PRE
    return pipes(vec=VEC_PRE.replace(old, new, 1) + VEC_BODY)


QK_INIT = "{id = 0, dir_mask = 1, slot_size = 65536}"
case("init_dir_mask_range", cube_init(QK_INIT, "{id = 0, dir_mask = 4, slot_size = 65536}"),
     "'pto.aic_initialize_pipe' dir_mask: dir_mask=4 must be 1 (C2V), 2 (V2C) or 3", "pto.aic_initialize_pipe {id = 0")
case("init_dir_mask_3", cube_init(QK_INIT, "{id = 0, dir_mask = 3, slot_size = 65536}"),
     "'pto.aic_initialize_pipe' dir_mask: dir_mask=3: global entries on a bidirectional pipe", "pto.aic_initialize_pipe {id = 0")
case("init_local_slot_num", vec_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65536, local_slot_num = 2}"),
     "'pto.aiv_initialize_pipe' local_slot_num: globaltensor pipe init does not use 'local_slot_num' (got local_slot_num=2", "pto.aiv_initialize_pipe {id = 0")
case("init_slot_size", cube_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65537}"),
     "'pto.aic_initialize_pipe' slot_size: slot_size=65537 must equal the descriptor's 65536 bytes or twice them (131072)", "pto.aic_initialize_pipe {id = 0")
case("init_slot_size_4x", vec_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 131072}"),
     "'pto.aiv_initialize_pipe' slot_size: slot_size=131072 must equal the descriptor's 32768 bytes or twice them (65536)", "pto.aiv_initialize_pipe {id = 0")
case("init_slot_num_odd", cube_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65536, slot_num = 5}"),
     "'pto.aic_initialize_pipe' slot ring reuse: slot_num=5 is not a multiple of its sync period 2", "pto.aic_initialize_pipe {id = 0")
case("init_slot_num_zero", cube_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65536, slot_num = 0}"),
     "'pto.aic_initialize_pipe' slot_num: slot_num=0 must be in 1..64", "pto.aic_initialize_pipe {id = 0")
case("init_dynamic_descriptor",
     pipes(cube=CUBE_PRE.replace("%qk_slot = pto.make_tensor_view %f, shape = [%c128, %c128], strides = [%c128, %c1] : " + QK,
                                 "%qk_slot = pto.make_tensor_view %f, shape = [%c128, %c128], strides = [%c128, %c1] : !pto.tensor_view<?x128xf32>")
           .replace(f"(gm_slot_tensor = %qk_slot : {QK})", "(gm_slot_tensor = %qk_slot : !pto.tensor_view<?x128xf32>)")),
     "'pto.aic_initialize_pipe' slot descriptor: gm_slot_tensor !pto.tensor_view<?x128xf32> must have a static shape", "pto.aic_initialize_pipe {id = 0")
case("init_missing_dir_mask", cube_init(QK_INIT, "{id = 0, slot_size = 65536}"), "pto.aic_initialize_pipe needs 'dir_mask'", "pto.aic_initialize_pipe {id = 0")
case("init_unknown_keyword", cube_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65536, depth = 2}"),
     "unexpected keyword 'depth'", "pto.aic_initialize_pipe {id = 0")
case("init_duplicate_keyword", cube_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65536, id = 1}"),
     "duplicate keyword 'id'", "pto.aic_initialize_pipe {id = 0")
_LOCAL_INIT = "pto.aic_initialize_pipe {id = 0, dir_mask = 3"
# Fixpipe pipes (acc_push_epilogue) and their quant payloads (PTOAS SetQuant*Op::verify, AicInitializePipeOp::verify).
case("set_quant_scalar_mode", FIXPIPE.replace("pto.set_quant_scalar(%scale : f32) {id = 0}", "pto.set_quant_scalar(%scale : f32) {id = 1}"),
     "'pto.set_quant_scalar' pipe: 'id' = 1 must name a pipe with scalar quantization, its quant is deqf16_vec", "pto.set_quant_scalar")
case("set_quant_no_pipe", FIXPIPE.replace("pto.set_quant_scalar(%scale : f32) {id = 0}", "pto.set_quant_scalar(%scale : f32) {id = 5}"),
     "'pto.set_quant_scalar' pipe: 'id' = 5 names no aic_initialize_pipe in this function", "pto.set_quant_scalar")
case("set_quant_scalar_type", FIXPIPE.replace("%scale = arith.constant 1.0 : f32", "%scale = arith.constant 1.0 : f16")
     .replace("pto.set_quant_scalar(%scale : f32)", "pto.set_quant_scalar(%scale : f16)"),
     "'pto.set_quant_scalar' operand type: 'scale' must be f32, got f16", "pto.set_quant_scalar")
case("set_quant_vector_space", FIXPIPE.replace("!pto.tile_buf<scaling, 1x32xui64>", "!pto.tile_buf<vec, 1x32xui64>"),
     "'pto.set_quant_vector' memory space: 'scaling_tile' must be loc=scaling, got loc=vec", "pto.set_quant_vector")
case("set_quant_vector_dtype", FIXPIPE.replace("!pto.tile_buf<scaling, 1x32xui64>", "!pto.tile_buf<scaling, 1x32xf32>"),
     "'pto.set_quant_vector' dtype: 'scaling_tile' holds packed i64 / ui64 on A3, got f32", "pto.set_quant_vector")
case("fixpipe_epilogue_mismatch", FIXPIPE.replace("pto.aiv_initialize_pipe {id = 0, dir_mask = 1, slot_size = 512, nosplit = true, acc_push_epilogue = #pto.acc_push_epilogue<layout = nz2nd",
              "pto.aiv_initialize_pipe {id = 0, dir_mask = 1, slot_size = 512, nosplit = true, acc_push_epilogue = #pto.acc_push_epilogue<layout = nz2dn"),
     "pipe id 0: acc_push_epilogue differs between cube (nz2nd, deqf16_scalar, no_relu) and vector (nz2dn, deqf16_scalar, no_relu)")
case("fixpipe_consumer_buffer", FIXPIPE.replace("pto.aiv_initialize_pipe {id = 1, dir_mask = 1, slot_size = 512, nosplit = true, acc_push_epilogue = #pto.acc_push_epilogue<layout = nz2nd, quant = deqf16_vec, relu = no_relu>} (gm_slot_buffer = %g : !pto.ptr<f16>, c2v_consumer_buf = %b1 : i32, v2c_consumer_buf = %z : i32)",
              "pto.aiv_initialize_pipe {id = 1, dir_mask = 2, slot_size = 512, nosplit = true, acc_push_epilogue = #pto.acc_push_epilogue<layout = nz2nd, quant = deqf16_vec, relu = no_relu>} (gm_slot_buffer = %g : !pto.ptr<f16>, v2c_consumer_buf = %z : i32)"),
     "'pto.aiv_initialize_pipe' operands: a fixpipe consumer pipe (acc_push_epilogue) needs 'c2v_consumer_buf'", "pto.aiv_initialize_pipe {id = 1")
case("init_local_missing_consumer", LOCAL_PIPES.replace(", v2c_consumer_buf = %v2c : i32)", ")", 1),
     "'pto.aic_initialize_pipe' operands: dir_mask=3 needs 'v2c_consumer_buf'", _LOCAL_INIT)
case("init_local_no_consumer", LOCAL_PIPES.replace(", c2v_consumer_buf = %c2v : i32, v2c_consumer_buf = %v2c : i32)", ")", 1),
     "'pto.aic_initialize_pipe' operands: a local pipe init needs at least one consumer buffer operand", _LOCAL_INIT)
case("init_tensor_with_buffer", cube_init(f"(gm_slot_tensor = %qk_slot : {QK})", f"(gm_slot_tensor = %qk_slot : {QK}, gm_slot_buffer = %f : !pto.ptr<f32>)"),
     "'pto.aic_initialize_pipe' operands: 'gm_slot_tensor' cannot be combined with 'gm_slot_buffer'", "pto.aic_initialize_pipe {id = 0")
case("init_local_slot_num_range", LOCAL_PIPES.replace("dir_mask = 3, slot_size = 1024}", "dir_mask = 3, slot_size = 1024, local_slot_num = 5}", 1),
     "'pto.aic_initialize_pipe' local_slot_num: local_slot_num=5 must be in 1..slot_num (4)", _LOCAL_INIT)
case("init_duplicate_operand", LOCAL_PIPES.replace("c2v_consumer_buf = %c2v : i32, v2c", "c2v_consumer_buf = %c2v : i32, c2v_consumer_buf = %c2v : i32, v2c", 1),
     "duplicate 'c2v_consumer_buf' operand", _LOCAL_INIT)
case("local_pipe_tensor_entry", LOCAL_PIPES.replace("%m = pto.tpop_from_aiv {id = 0, split = 0} -> !pto.tile_buf<mat, 16x16xf32, blayout=col_major, slayout=row_major>",
                                                    f"%m = pto.tpop_from_aiv {{id = 0, split = 0}} -> {QK}"),
     f"'pto.tpop_from_aiv' entry type: a local (consumer-buffer) pipe's entries are !pto.tile_buf, got {QK}", "pto.tpop_from_aiv")
case("local_pipe_tfree_entry", LOCAL_PIPES.replace("pto.tfree_from_aiv {id = 0, split = 0}", "pto.tfree_from_aiv(%m : !pto.tile_buf<mat, 16x16xf32, blayout=col_major, slayout=row_major>) {id = 0, split = 0}"),
     "'pto.tfree_from_aiv' entry: a local pipe's tfree takes no entry", "pto.tfree_from_aiv")
case("local_pipe_tpush_needs_entry", LOCAL_PIPES.replace("pto.tpush_to_aic(%v : !pto.tile_buf<vec, 16x16xf32>) {id = 0, split = 0}", "pto.tpush_to_aic {id = 0, split = 0}"),
     "'pto.tpush_to_aic' entry: tpush needs the entry it publishes", "pto.tpush_to_aic")
case("local_pipe_peer_global", LOCAL_PIPES.replace(
        "pto.aiv_initialize_pipe {id = 0, dir_mask = 3, slot_size = 1024} (gm_slot_buffer = %f : !pto.ptr<f32>, c2v_consumer_buf = %c2v : i32, v2c_consumer_buf = %v2c : i32)",
        "%c1 = arith.constant 1 : index\n%c16 = arith.constant 16 : index\n"
        "%tv = pto.make_tensor_view %f, shape = [%c16, %c16], strides = [%c16, %c1] : !pto.tensor_view<16x16xf32>\n"
        "pto.aiv_initialize_pipe {id = 0, dir_mask = 1, slot_size = 1024} (gm_slot_tensor = %tv : !pto.tensor_view<16x16xf32>)"),
     "pipe id 0: the cube side is a local (consumer-buffer) pipe, the peer a global one")
case("tpop_valid_operands_static_entry", LOCAL_PIPES.replace("%m = pto.tpop_from_aiv {id = 0, split = 0}", "%c8 = arith.constant 8 : index\n    %m = pto.tpop_from_aiv (%c8, %c8) {id = 0, split = 0}"),
     "'pto.tpop_from_aiv' valid shape: (valid_row, valid_col) operands need a tpop of a tile entry with a dynamic valid shape", "pto.tpop_from_aiv (%c8")
case("subblockid_on_cube", LOCAL_PIPES.replace("%m = pto.tpop_from_aiv {id = 0, split = 0}", "%sb = arith.constant 0 : i64\n    %m = pto.tpop_from_aiv {id = 0, split = 0} aiv_subblockid(%sb)"),
     "'pto.tpop_from_aiv' aiv_subblockid: only tpop_from_aic takes aiv_subblockid", "pto.tpop_from_aiv {id")
case("subblockid_on_tfree", LOCAL_PIPES.replace("pto.tfree_from_aic {id = 0, split = 0}", "%sb = arith.constant 0 : i64\n    pto.tfree_from_aic {id = 0, split = 0} aiv_subblockid(%sb)"),
     "'pto.tfree_from_aic' aiv_subblockid: only tpush_to_aic and tpop_from_aic take aiv_subblockid", "pto.tfree_from_aic {id")
case("global_pipe_tfree_without_entry", pipes(vec=VEC_PRE + VEC_BODY.replace(f"pto.tfree_from_aic(%e : {QKH}) {{id = 0, split = 1}}", "pto.tfree_from_aic {id = 0, split = 1}")),
     "'pto.tfree_from_aic' entry type: a global (gm_slot_tensor) pipe's entries are !pto.tensor_view, got none", "pto.tfree_from_aic")
case("init_unknown_operand", cube_init("(gm_slot_tensor = %qk_slot", "(slot_tensor = %qk_slot"),
     "unknown pipe init operand 'slot_tensor'", "pto.aic_initialize_pipe {id = 0")

# ---------------------------------------------------------------------------- pipe data ops
TALLOC = f"%e = pto.talloc_to_aiv {{id = 0, split = 1}} -> {QK}"


def cube_op(old: str, new: str, pre: str = CUBE_PRE) -> str:
    assert old in CUBE_BODY
    return pipes(cube=pre + CUBE_BODY.replace(old, new, 1))


def vec_op(old: str, new: str, pre: str = VEC_PRE) -> str:
    assert old in VEC_BODY
    return pipes(vec=pre + VEC_BODY.replace(old, new, 1))


case("data_op_attr_order", cube_op(TALLOC, f"%e = pto.talloc_to_aiv {{split = 1, id = 0}} -> {QK}"),
     "expected '}' (attribute order is fixed: {id = N, split = S}", "pto.talloc_to_aiv")
case("data_op_attr_unknown", cube_op(TALLOC, f"%e = pto.talloc_to_aiv {{id = 0, mode = 1}} -> {QK}"),
     "expected 'split' (attribute order is fixed: {id = N, split = S}), got 'mode'", "pto.talloc_to_aiv")
case("data_op_split_range", cube_op(TALLOC, f"%e = pto.talloc_to_aiv {{id = 0, split = 3}} -> {QK}"),
     "'pto.talloc_to_aiv' split: split=3 must be 0 (no split), 1 (up/down) or 2 (left/right)", "pto.talloc_to_aiv")
case("generic_split_type", cube_op(TALLOC, f'%e = "pto.talloc_to_aiv"() <{{id = 0 : i32, split = 1 : i32}}> : () -> {QK}'),
     "'pto.talloc_to_aiv' attribute type: 'split' must be i8, got i32", "pto.talloc_to_aiv")
case("generic_id_type", cube_op(TALLOC, f'%e = "pto.talloc_to_aiv"() <{{id = 0 : i8, split = 1 : i8}}> : () -> {QK}'),
     "'pto.talloc_to_aiv' attribute type: 'id' must be i32, got i8", "pto.talloc_to_aiv")
case("pipe_op_without_init", cube_op(TALLOC, f"%e = pto.talloc_to_aiv {{id = 5, split = 1}} -> {QK}"),
     "'pto.talloc_to_aiv' pipe: id 5 is not initialised earlier in @cube", "pto.talloc_to_aiv")
case("pipe_op_before_init", pipes(cube=CUBE_BODY.split("\n")[0] + "\n" + CUBE_PRE + "\n".join(CUBE_BODY.split("\n")[1:])),
     "'pto.talloc_to_aiv' pipe: id 0 is not initialised earlier in @cube", "pto.talloc_to_aiv")
case("wrong_direction_cube", pipes(cube=CUBE_PRE + CUBE_BODY.replace(f"{{id = 0, split = 1}} -> {QK}", f"{{id = 1, split = 1}} -> {PP}")
                                   .replace(f"pto.tpush_to_aiv(%e : {QK}) {{id = 0", f"pto.tpush_to_aiv(%e : {PP}) {{id = 1")),
     "'pto.talloc_to_aiv' direction: pipe id 1 has dir_mask=2, this op needs dir_mask=1", "pto.talloc_to_aiv")
case("wrong_direction_vector", pipes(vec=VEC_PRE + VEC_BODY.replace(f"{{id = 1, split = 1}} -> {PPH}", f"{{id = 0, split = 1}} -> {QKH}")
                                     .replace(f"pto.tpush_to_aic(%g : {PPH}) {{id = 1", f"pto.tpush_to_aic(%g : {QKH}) {{id = 0")),
     "'pto.talloc_to_aic' direction: pipe id 0 has dir_mask=1, this op needs dir_mask=2", "pto.talloc_to_aic")
case("entry_type", pipes(cube=CUBE_PRE + CUBE_BODY.replace(f"-> {PP}", f"-> {QK}").replace(f"(%g : {PP})", f"(%g : {QK})")),
     f"'pto.tpop_from_aiv' entry type: {QK} must equal the init's gm_slot_tensor type {PP}", "pto.tpop_from_aiv")
case("pipe_op_wrong_kernel_kind",
     pipes(vec=VEC_PRE + VEC_BODY + TALLOC.replace("%e =", "%e2 =")),
     "'pto.talloc_to_aiv' kernel kind: runs in cube code, @vec is vector", "%e2 = pto.talloc_to_aiv")
case("init_wrong_kernel_kind", pipes(vec=VEC_PRE + VEC_BODY + CUBE_PRE.splitlines()[-1].replace("id = 1", "id = 7").replace(PP, PPH)),
     "'pto.aic_initialize_pipe' kernel kind: needs a cube kernel function, @vec is vector", "pto.aic_initialize_pipe {id = 7")
case("init_in_loop",
     pipes(cube=CUBE_PRE.replace("pto.aic_initialize_pipe {id = 1", "%c0 = arith.constant 0 : index\nscf.for %i = %c0 to %c1 step %c1 {\npto.aic_initialize_pipe {id = 1")
           .replace(f"(gm_slot_tensor = %p_slot : {PP})", f"(gm_slot_tensor = %p_slot : {PP})\n}}") + CUBE_BODY),
     "'pto.aic_initialize_pipe' placement: pipe init must be at the top level of the function", "pto.aic_initialize_pipe {id = 1")
case("same_id_twice", cube_init("pto.aic_initialize_pipe {id = 1, dir_mask = 2", "pto.aic_initialize_pipe {id = 0, dir_mask = 2"),
     "'pto.aic_initialize_pipe' id: pipe id 0 is initialised twice in @cube (requires 'id' to be unique)", "pto.aic_initialize_pipe {id = 0, dir_mask = 2")
case("vector_split_full_descriptor",
     pipes(vec=VEC_PRE.replace(f"%qk_slot = pto.make_tensor_view %f, shape = [%c64, %c128], strides = [%c128, %c1] : {QKH}",
                               f"%qk_slot = pto.make_tensor_view %f, shape = [%c128, %c128], strides = [%c128, %c1] : {QK}")
           .replace(f"(gm_slot_tensor = %qk_slot : {QKH})", f"(gm_slot_tensor = %qk_slot : {QK})") + VEC_BODY.replace(QKH, QK)),
     "'pto.tpop_from_aic' split: split=1 on the vector side needs the half-slot descriptor (32768 bytes), the init declares 65536 bytes of slot_size=65536",
     "pto.tpop_from_aic")
case("vector_split0_half_descriptor", pipes(CUBE_PRE + CUBE_BODY.replace("split = 1", "split = 0"), VEC_PRE + VEC_BODY.replace("split = 1", "split = 0")),
     "'pto.tpop_from_aic' split: split=0 needs the full-slot descriptor (65536 bytes), got 32768", "pto.tpop_from_aic")
case("cube_half_descriptor",
     pipes(cube=CUBE_PRE.replace(f"shape = [%c128, %c128], strides = [%c128, %c1] : {QK}", f"shape = [%c64, %c128], strides = [%c128, %c1] : {QKH}")
           .replace(f"(gm_slot_tensor = %qk_slot : {QK})", f"(gm_slot_tensor = %qk_slot : {QKH})").replace("%c1 = ", "%c64 = arith.constant 64 : index\n%c1 = ")
           + CUBE_BODY.replace(QK, QKH)),
     "'pto.talloc_to_aiv' split: the cube side declares the full slot (65536 bytes), got 32768", "pto.talloc_to_aiv")
_ODD = "!pto.tensor_view<3x128xf32>"
_ODDH = "!pto.tensor_view<3x64xf32>"
case("cube_split_odd_rows",
     pipes(cube=CUBE_PRE.replace(f"shape = [%c128, %c128], strides = [%c128, %c1] : {QK}", f"shape = [%c3, %c128], strides = [%c128, %c1] : {_ODD}")
           .replace(f"{QK_INIT} (gm_slot_tensor = %qk_slot : {QK})", f"{{id = 0, dir_mask = 1, slot_size = 1536}} (gm_slot_tensor = %qk_slot : {_ODD})")
           .replace("%c1 = ", "%c3 = arith.constant 3 : index\n%c1 = ") + CUBE_BODY.replace(QK, _ODD),
           vec=VEC_PRE.replace(f"shape = [%c64, %c128], strides = [%c128, %c1] : {QKH}", f"shape = [%c3, %c64], strides = [%c128, %c1] : {_ODDH}")
           .replace(f"{QK_INIT} (gm_slot_tensor = %qk_slot : {QKH})", f"{{id = 0, dir_mask = 1, slot_size = 1536}} (gm_slot_tensor = %qk_slot : {_ODDH})")
           .replace("%c1 = ", "%c3 = arith.constant 3 : index\n%c1 = ") + VEC_BODY.replace(QKH, _ODDH)),
     "'pto.talloc_to_aiv' split: split=1 halves the slot's rows, 3 rows is odd", "pto.talloc_to_aiv")
case("mix_aic_aiv_in_one_function", pipes(cube=CUBE_PRE + CUBE_BODY + VEC_PRE.splitlines()[-1].replace("id = 1", "id = 5").replace(PPH, PP).replace("%p_slot :", "%p_slot :")),
     "@cube: cannot mix pto.aic_initialize_pipe and pto.aiv_initialize_pipe in one function", "func.func @cube")
_NINE = "\n".join(f"pto.aic_initialize_pipe {{id = {i}, dir_mask = 1, slot_size = 65536}} (gm_slot_tensor = %qk_slot : {QK})" for i in range(2, 9))
case("more_than_8_pipes", pipes(cube=CUBE_PRE + _NINE + "\n" + CUBE_BODY),
     "@cube: 9 one-way pipes need 18 flag ids; at most 16 fit (8 pipes)", "func.func @cube")

# docs/sources.md §2.7: ptoas compiles a tpush of an entry that no talloc made, or a tfree of one no tpop made.
case("tpush_entry_not_from_talloc", cube_op("pto.tpush_to_aiv(%e : ", "pto.tpush_to_aiv(%qk_slot : "),
     "'pto.tpush_to_aiv' entry: tpush needs the entry of a talloc on pipe id 0, got a value that no talloc or tpop made", "pto.tpush_to_aiv")
case("tfree_entry_from_talloc",
     pipes(vec=VEC_PRE + VEC_BODY.replace("pto.tfree_from_aic(%e", "%a = pto.talloc_to_aic {id = 1, split = 1} -> " + PPH + "\npto.tfree_from_aic(%a").replace(f"%a : {QKH}", f"%a : {PPH}")),
     "'pto.tfree_from_aic' entry: tfree needs the entry of a tpop on pipe id 0, got a pto.talloc_to_aic result of pipe id 1", "pto.tfree_from_aic")
# docs/sources.md §2.11: PlanMemory's overflow ("vec overflow, requires N bits while M bits avaliable").
_BIG = "!pto.tile_buf<vec, 128x128xf32>"
case("vec_overflow", vec("".join(alloc(f"a{i}", _BIG) for i in range(4))
                         + "".join(f"pto.tadd ins(%a0, %a0 : {_BIG}, {_BIG}) outs(%a{i} : {_BIG})\n" for i in range(1, 4))
                         + f"pto.tadd ins(%a1, %a2 : {_BIG}, {_BIG}) outs(%a3 : {_BIG})\n"),
     "memory capacity: vec overflow, requires 2097152 bits while 1572864 bits avaliable")
case("left_overflow", cube(alloc("l0", "!pto.tile_buf<left, 128x256xf16, slayout=row_major>") + alloc("r0", "!pto.tile_buf<right, 256x128xf16, slayout=col_major>")
                           + alloc("l1", "!pto.tile_buf<left, 128x128xf16, slayout=row_major>") + alloc("acc", ACC)
                           + "pto.tmatmul ins(%l0, %r0 : !pto.tile_buf<left, 128x256xf16, slayout=row_major>, !pto.tile_buf<right, 256x128xf16, slayout=col_major>) outs(%acc : " + ACC + ")\n"
                           + alloc("r1", RIGHT) + f"pto.tmatmul ins(%l1, %r1 : {LEFT}, {RIGHT}) outs(%acc : {ACC})\n"
                           + "pto.tmatmul ins(%l0, %r0 : !pto.tile_buf<left, 128x256xf16, slayout=row_major>, !pto.tile_buf<right, 256x128xf16, slayout=col_major>) outs(%acc : " + ACC + ")"),
     "memory capacity: left overflow")

# ---------------------------------------------------------------------------- module rules: peers, split, entry
case("peer_missing", pipes(vec=VEC_PRE.replace("pto.aiv_initialize_pipe {id = 1", "pto.aiv_initialize_pipe {id = 3") + VEC_BODY.replace("id = 1", "id = 3")),
     "pipe id 1: initialised on the cube side only; the peer init is missing", "pto.aic_initialize_pipe {id = 1")
case("peer_slot_size", pipes(
         cube=CUBE_PRE + CUBE_BODY,
         vec=VEC_PRE.replace(f"shape = [%c64, %c128], strides = [%c128, %c1] : {QKH}", "shape = [%c64, %c64], strides = [%c128, %c1] : !pto.tensor_view<64x64xf32>")
         .replace(f"{QK_INIT} (gm_slot_tensor = %qk_slot : {QKH})", "{id = 0, dir_mask = 1, slot_size = 32768} (gm_slot_tensor = %qk_slot : !pto.tensor_view<64x64xf32>)")
         + VEC_BODY.replace(QKH, "!pto.tensor_view<64x64xf32>")),
     "pipe id 0: slot_size differs between cube (65536) and vector (32768)", "pto.aiv_initialize_pipe {id = 0")
case("peer_dir_mask", vec_init("{id = 1, dir_mask = 2, slot_size = 32768}", "{id = 1, dir_mask = 1, slot_size = 32768}"),
     "pipe id 1: dir_mask differs between cube (2) and vector (1)", "pto.aiv_initialize_pipe {id = 1")
case("peer_slot_num", vec_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65536, slot_num = 4}"),
     "pipe id 0: slot_num differs between cube (8) and vector (4)", "pto.aiv_initialize_pipe {id = 0")
case("peer_slot_element",
     pipes(vec=VEC_PRE.replace("%qk_slot = pto.make_tensor_view %f, shape = [%c64, %c128], strides = [%c128, %c1] : " + QKH,
                               "%qk_slot = pto.make_tensor_view %g16, shape = [%c128, %c128], strides = [%c128, %c1] : !pto.tensor_view<128x128xf16>")
           .replace(f"(gm_slot_tensor = %qk_slot : {QKH})", "(gm_slot_tensor = %qk_slot : !pto.tensor_view<128x128xf16>)")
           .replace("%c1 = ", "%g16 = pto.addptr %h, %c0 : !pto.ptr<f16> -> !pto.ptr<f16>\n%c1 = ").replace("%g16 = ", "%c0 = arith.constant 0 : index\n%g16 = ", 1)
           + VEC_BODY.replace(QKH, "!pto.tensor_view<128x128xf16>")),
     "pipe id 0: slot element type differs between cube (f32) and vector (f16)", "pto.aiv_initialize_pipe {id = 0")
_QKL = "!pto.tensor_view<128x64xf32>"
case("peer_slot_shape_vs_split",
     pipes(vec=VEC_PRE.replace(f"shape = [%c64, %c128], strides = [%c128, %c1] : {QKH}", f"shape = [%c128, %c64], strides = [%c128, %c1] : {_QKL}")
           .replace(f"(gm_slot_tensor = %qk_slot : {QKH})", f"(gm_slot_tensor = %qk_slot : {_QKL})") + VEC_BODY.replace(QKH, _QKL)),
     "pipe id 0: vector slot shape 128x64 does not match cube slot 128x128 with split=1 (expected 64x128)", "pto.aiv_initialize_pipe {id = 0")
case("split_mix_zero_nonzero", pipes(CUBE_PRE + CUBE_BODY.replace("{id = 0, split = 1}", "{id = 0, split = 0}", 1)),
     "pipe id 0: split values [0, 1] mix 0 with non-zero", "pto.aiv_initialize_pipe {id = 0")
case("split_1_and_2", pipes(CUBE_PRE + CUBE_BODY.replace("{id = 0, split = 1}", "{id = 0, split = 2}", 1)),
     "pipe id 0: split values [1, 2] differ between ops of one pipe", "pto.aiv_initialize_pipe {id = 0")
case("nosplit_with_split", cube_init(QK_INIT, "{id = 0, dir_mask = 1, slot_size = 65536, nosplit = true}"),
     "pipe id 0: nosplit = true on the cube init requires split = 0 everywhere, ops use split [1]", "pto.aiv_initialize_pipe {id = 0")
case("entry_declaration", "module {\n  func.func private @e(%x: i32) attributes {pto.entry}\n}\n",
     "'func.func' entry: @e is a declaration; the entry attribute is only valid on function definitions", "func.func private @e")
case("entry_returns_value", "module {\n  func.func @e(%x: i32) -> i32 attributes {pto.kernel} {\n    return %x : i32\n  }\n}\n",
     "'func.func' entry: @e returns values; PTO entry functions must return void", "func.func @e")
case("entry_without_set_ffts", pipes().replace("    pto.set_ffts %ffts : !pto.ptr<i64>\n", ""),
     "'func.func' set_ffts: the module uses cube-vector pipes, so the entry @entry must call pto.set_ffts first (ptofa rule", "func.func @entry")
case("entry_set_ffts_not_first", pipes().replace("    pto.set_ffts", "    %i = pto.get_block_idx\n    pto.set_ffts"),
     "'func.func' set_ffts: the module uses cube-vector pipes, so the entry @entry must call pto.set_ffts first", "func.func @entry")
case("entry_tile_argument", wrap("").replace("@entry(%ffts: !pto.ptr<i64>)", f"@entry(%ffts: !pto.ptr<i64>, %t: {V32})"),
     "'func.func' entry arguments: @entry takes a !pto.tile_buf argument; tiles are only legal in callee functions", "func.func @entry")


# ---------------------------------------------------------------------------- masks, ragged tails, bf16, atomics (docs/sources.md §3.3)
T = "!pto.tile_buf<vec, 32x256xf32>"
TM = "!pto.tile_buf<vec, 32x256xi8>"
TD = "!pto.tile_buf<vec, 32x256xf32, valid=?x?>"
TROW = "!pto.tile_buf<vec, 1x256xf32>"
CI32 = "!pto.tile_buf<vec, 1x256xi32>"
MASK = ("%c0 = arith.constant 0 : index\n%c32 = arith.constant 32 : index\n%d0 = arith.constant 0 : i32\n"
        "%lim = arith.constant 1.0 : f32\n%ix = arith.constant 3 : index\n"
        + alloc("s0", T) + alloc("s1", T) + alloc("mk", TM) + alloc("row", TROW) + alloc("ci", CI32))
TDC = "!pto.tile_buf<vec, 32x1xf32, blayout=col_major>"
TI8 = "!pto.tile_buf<vec, 32x256xi8>"

# set_validshape
op_case("set_validshape_static_valid", vec, MASK, f"pto.set_validshape %s0, %c32, %c32 : {T}",
        "'pto.set_validshape' dynamic valid: expects source tile_buf to have dynamic validShape (?, ?), got valid=32x256")
op_case("set_validshape_half_dynamic", vec, MASK + alloc("h", "!pto.tile_buf<vec, 32x256xf32, valid=32x?>").replace("alloc_tile :", "alloc_tile valid_col = %c32 :"),
        "pto.set_validshape %h, %c32, %c32 : !pto.tile_buf<vec, 32x256xf32, valid=32x?>",
        "'pto.set_validshape' dynamic valid: expects source tile_buf to have dynamic validShape (?, ?), got valid=32x?")
op_case("set_validshape_argument", vec, "%c1 = arith.constant 1 : index\n", f"pto.set_validshape %t, %c1, %c1 : {TD}",
        "'pto.set_validshape' tile source: requires a locally bound tile source (an alloc_tile result or a treshape of one), got a function or block argument",
        args=f"%t: {TD}")
op_case("set_validshape_subview", vec, MASK + f"%d = pto.alloc_tile valid_row = %c32 valid_col = %c32 : {TD}\n"
        f"%w = pto.subview %d[%c0, %c0] sizes [16, 256] : {TD} -> !pto.tile_buf<vec, 16x256xf32, valid=?x?>\n",
        "pto.set_validshape %w, %c32, %c32 : !pto.tile_buf<vec, 16x256xf32, valid=?x?>",
        "'pto.set_validshape' tile source: requires a locally bound tile source (an alloc_tile result or a treshape of one), got a pto.subview result")
op_case("set_validshape_bounds", vec, MASK + "%c300 = arith.constant 300 : index\n" + f"%d = pto.alloc_tile valid_row = %c32 valid_col = %c32 : {TD}\n",
        f"pto.set_validshape %d, %c32, %c300 : {TD}",
        "'pto.set_validshape' bounds: col operand 300 must be within 0..256 (the static shape)")
op_case("set_validshape_not_tile", vec, "%c1 = arith.constant 1 : index\n", "pto.set_validshape %c1, %c1, %c1 : index",
        "index should be of base attribute pto.tile_buf")
# ttri
op_case("ttri_space", cube, "%d0 = arith.constant 0 : i32\n" + alloc("m", "!pto.tile_buf<mat, 32x256xf32>"),
        "pto.ttri ins(%d0 : i32) outs(%m : !pto.tile_buf<mat, 32x256xf32>)",
        "'pto.ttri' memory space: dst must be loc=vec, got mat 32x256xf32")
op_case("ttri_layout", vec, MASK + alloc("dc", TDC), f"pto.ttri ins(%d0 : i32) outs(%dc : {TDC})",
        "'pto.ttri' layout: dst must be blayout=row_major, got vec 32x1xf32 col_major")
op_case("ttri_diag_type", vec, MASK, f"pto.ttri ins(%ix : index) outs(%s0 : {T})",
        "'pto.ttri' operand type: expects diagonal to be an integer operand, got index")
op_case("ttri_upper_or_lower", vec, MASK, f"pto.ttri ins(%d0 {{upperOrLower = 2 : i32}} : i32) outs(%s0 : {T})",
        "'pto.ttri' upperOrLower: expects upperOrLower to be 0 (lower) or 1 (upper), got 2")
op_case("ttri_dtype", vec, MASK, f"pto.ttri ins(%d0 : i32) outs(%mk : {TM})",
        "'pto.ttri' dtype: expects A2/A3 dst element type to be f16/f32/i16/i32, got i8")
# tcmps / tcmp
op_case("tcmps_src_space", cube, "%lim = arith.constant 1.0 : f32\n" + alloc("m", "!pto.tile_buf<mat, 32x256xf32>") + alloc("k", "!pto.tile_buf<mat, 32x256xi8>"),
        "pto.tcmps ins(%m, %lim {cmpMode = #pto<cmp lt>} : !pto.tile_buf<mat, 32x256xf32>, f32) outs(%k : !pto.tile_buf<mat, 32x256xi8>)",
        "'pto.tcmps' memory space: src must be loc=vec, got mat 32x256xf32")
op_case("tcmps_src_dtype", vec, MASK + alloc("b", "!pto.tile_buf<vec, 32x256xbf16>"),
        f"pto.tcmps ins(%b, %lim {{cmpMode = #pto<cmp lt>}} : !pto.tile_buf<vec, 32x256xbf16>, f32) outs(%mk : {TM})",
        "'pto.tcmps' dtype: expects A2/A3 tcmps input element type to be i16/i32/f16/f32, got bf16")
op_case("tcmps_scalar_type", vec, MASK, f"pto.tcmps ins(%s0, %s1 {{cmpMode = #pto<cmp lt>}} : {T}, {T}) outs(%mk : {TM})",
        "'pto.tcmps' operand type: expects scalar to be integer, index, or float")
op_case("tcmps_dst_dtype", vec, MASK, f"pto.tcmps ins(%s0, %lim {{cmpMode = #pto<cmp lt>}} : {T}, f32) outs(%s1 : {T})",
        "'pto.tcmps' dtype: expects dst element type to be i8 (a packed predicate, one bit per element), got f32")
op_case("tcmps_dst_space", cube, "%lim = arith.constant 1.0 : f32\n%v = pto.alloc_tile : !pto.tile_buf<vec, 32x256xf32>\n" + alloc("k", "!pto.tile_buf<mat, 32x256xi8>"),
        "pto.tcmps ins(%v, %lim : !pto.tile_buf<vec, 32x256xf32>, f32) outs(%k : !pto.tile_buf<mat, 32x256xi8>)",
        "'pto.tcmps' memory space: dst must be loc=vec, got mat 32x256xi8")
op_case("tcmps_rows", vec, MASK + alloc("k16", "!pto.tile_buf<vec, 16x256xi8>"),
        f"pto.tcmps ins(%s0, %lim {{cmpMode = #pto<cmp lt>}} : {T}, f32) outs(%k16 : !pto.tile_buf<vec, 16x256xi8>)",
        "'pto.tcmps' shape agreement: expects src and dst to have the same valid rows, got 32 and 16")
op_case("tcmps_dst_layout", vec, MASK + alloc("kc", "!pto.tile_buf<vec, 32x256xi8, blayout=col_major>"),
        f"pto.tcmps ins(%s0, %lim : {T}, f32) outs(%kc : !pto.tile_buf<vec, 32x256xi8, blayout=col_major>)",
        "'pto.tcmps' layout: dst must be blayout=row_major")
op_case("tcmps_mode_value", vec, MASK, f"pto.tcmps ins(%s0, %lim {{cmpMode = #pto<cmp lessthan>}} : {T}, f32) outs(%mk : {TM})",
        "#pto<cmp>: 'lessthan' is not one of eq, ne, lt, le, gt, ge")
op_case("tcmp_space", vec, MASK + alloc("m", "!pto.tile_buf<mat, 32x256xf32>"),
        f"pto.tcmp ins(%m, %s0 {{cmpMode = #pto<cmp gt>}} : !pto.tile_buf<mat, 32x256xf32>, {T}) outs(%mk : {TM})",
        "'pto.tcmp' memory space: src0 must be loc=vec")
op_case("tcmp_dtype_mix", vec, MASK + alloc("h", "!pto.tile_buf<vec, 32x256xf16>"),
        f"pto.tcmp ins(%s0, %h {{cmpMode = #pto<cmp gt>}} : {T}, !pto.tile_buf<vec, 32x256xf16>) outs(%mk : {TM})",
        "'pto.tcmp' dtype: expects src0 and src1 to have the same element type, got f32 and f16")
op_case("tcmp_dtype_i16", vec, MASK + alloc("i", "!pto.tile_buf<vec, 32x256xi16>"),
        "pto.tcmp ins(%i, %i : !pto.tile_buf<vec, 32x256xi16>, !pto.tile_buf<vec, 32x256xi16>) outs(%mk : " + TM + ")",
        "'pto.tcmp' dtype: expects A2/A3 tcmp input element type to be i32/f16/f32, got i16")
op_case("tcmp_valid", vec, MASK + alloc("h8", "!pto.tile_buf<vec, 32x256xf32, valid=32x128>"),
        f"pto.tcmp ins(%s0, %h8 : {T}, !pto.tile_buf<vec, 32x256xf32, valid=32x128>) outs(%mk : {TM})",
        "'pto.tcmp' shape agreement: expects src0 and src1 to have the same valid shape, got 32x256 and 32x128")
# tsel
op_case("tsel_space", vec, MASK + alloc("m", "!pto.tile_buf<mat, 32x256xf32>"),
        f"pto.tsel ins(%mk, %m, %s1 : {TM}, !pto.tile_buf<mat, 32x256xf32>, {T}) outs(%s0 : {T})",
        "'pto.tsel' memory space: src0 must be loc=vec, got mat 32x256xf32")
op_case("tsel_dtype_mix", vec, MASK + alloc("h", "!pto.tile_buf<vec, 32x256xf16>"),
        f"pto.tsel ins(%mk, %h, %s1 : {TM}, !pto.tile_buf<vec, 32x256xf16>, {T}) outs(%s0 : {T})",
        "'pto.tsel' dtype: expects src0, src1, and dst to have the same element type, got f16, f32, f32")
op_case("tsel_dtype_i8", vec, MASK, f"pto.tsel ins(%mk, %mk, %mk : {TM}, {TM}, {TM}) outs(%mk : {TM})",
        "'pto.tsel' dtype: expects A2/A3 tsel src0, src1, and dst element type to be i16/i32/f16/bf16/f32, got i8")
op_case("tsel_mask_type", vec, MASK, f"pto.tsel ins(%s1, %s0, %s1 : {T}, {T}, {T}) outs(%s0 : {T})",
        "'pto.tsel' mask: mask must be a loc=vec i8 tile (the packed predicate of tcmp/tcmps), got vec 32x256xf32")
op_case("tsel_valid", vec, MASK + alloc("h8", "!pto.tile_buf<vec, 32x256xf32, valid=16x256>"),
        f"pto.tsel ins(%mk, %s0, %s1 : {TM}, {T}, {T}) outs(%h8 : !pto.tile_buf<vec, 32x256xf32, valid=16x256>)",
        "'pto.tsel' shape agreement: src0 32x256, src1 32x256 and dst 16x256 valid shapes differ")
op_case("tsel_tmp", vec, MASK + alloc("t16", "!pto.tile_buf<vec, 1x16xf16>"),
        f"pto.tsel ins(%mk, %s0, %s1, %t16 : {TM}, {T}, {T}, !pto.tile_buf<vec, 1x16xf16>) outs(%s0 : {T})",
        "'pto.tsel' tmp: expects A2/A3 tsel tmp to be a loc=vec tile of a 4-byte element type, got vec 1x16xf16")
# tci
op_case("tci_space", cube, "%d0 = arith.constant 0 : i32\n" + alloc("m", "!pto.tile_buf<mat, 1x256xi32>"),
        "pto.tci ins(%d0 : i32) outs(%m : !pto.tile_buf<mat, 1x256xi32>)",
        "'pto.tci' memory space: dst must be loc=vec, got mat 1x256xi32")
op_case("tci_dtype", vec, MASK + "%f = arith.constant 0 : i32\n", f"pto.tci ins(%f : i32) outs(%row : {TROW})",
        "'pto.tci' dtype: expects dst element type to be i16/i32, got f32")
op_case("tci_start_type", vec, MASK + "%s16 = arith.constant 0 : i16\n", f"pto.tci ins(%s16 : i16) outs(%ci : {CI32})",
        "'pto.tci' dtype: expects S and dst element type to be exactly the same type, got i16 and i32")
op_case("tci_rows", vec, MASK + alloc("c2", "!pto.tile_buf<vec, 2x256xi32>"), "pto.tci ins(%d0 : i32) outs(%c2 : !pto.tile_buf<vec, 2x256xi32>)",
        "'pto.tci' shape: tci fills one row (dst[0][j] = start + j): dst must be 1xN, got 2x256")
op_case("tci_cols", vec, MASK + alloc("c1", "!pto.tile_buf<vec, 8x1xi32, blayout=col_major>"),
        "pto.tci ins(%d0 : i32) outs(%c1 : !pto.tile_buf<vec, 8x1xi32, blayout=col_major>)",
        "'pto.tci' shape: expects dst cols to be different from 1")
op_case("tci_tmp_type", vec, MASK + alloc("th", "!pto.tile_buf<vec, 1x512xf16>"),
        f"pto.tci ins(%d0, %th : i32, !pto.tile_buf<vec, 1x512xf16>) outs(%ci : {CI32})",
        "'pto.tci' tmp: expects A2/A3 tmp to be a loc=vec ND tile of a 4-byte element type, got vec 1x512xf16")
op_case("tci_tmp_size", vec, MASK + alloc("t8", "!pto.tile_buf<vec, 1x64xf32>"),
        f"pto.tci ins(%d0, %t8 : i32, !pto.tile_buf<vec, 1x64xf32>) outs(%ci : {CI32})",
        "'pto.tci' tmp: expects A2/A3 tmp capacity to be at least 768 bytes for a i32 dst, got 256")
# tcolexpand*
op_case("tcolexpand_layout", vec, MASK + alloc("w", "!pto.tile_buf<vec, 32x256xf32, blayout=col_major>"),
        f"pto.tcolexpandadd ins(%w, %row : !pto.tile_buf<vec, 32x256xf32, blayout=col_major>, {TROW}) outs(%s0 : {T})",
        "'pto.tcolexpandadd' layout: src0 must be blayout=row_major")
op_case("tcolexpand_dtype", vec, MASK + alloc("rh", "!pto.tile_buf<vec, 1x256xf16>"),
        f"pto.tcolexpandmul ins(%s0, %rh : {T}, !pto.tile_buf<vec, 1x256xf16>) outs(%s0 : {T})",
        "'pto.tcolexpandmul' dtype: expects A2/A3 tcolexpandmul element type to be i16/i32/f16/f32 (one dtype), got f32, f16, f32")
op_case("tcolexpanddiv_int", vec, MASK + alloc("i", "!pto.tile_buf<vec, 1x256xi32>") + alloc("j", "!pto.tile_buf<vec, 32x256xi32>"),
        "pto.tcolexpanddiv ins(%j, %i : !pto.tile_buf<vec, 32x256xi32>, !pto.tile_buf<vec, 1x256xi32>) outs(%j : !pto.tile_buf<vec, 32x256xi32>)",
        "'pto.tcolexpanddiv' dtype: expects A2/A3 tcolexpanddiv element type to be f16/f32 (one dtype)")
op_case("tcolexpand_shape", vec, MASK + alloc("o", "!pto.tile_buf<vec, 16x256xf32>"),
        f"pto.tcolexpandsub ins(%s0, %row : {T}, {TROW}) outs(%o : !pto.tile_buf<vec, 16x256xf32>)",
        "'pto.tcolexpandsub' shape agreement: expects src0/dst to have same shape, got 32x256 and 16x256")
op_case("tcolexpand_valid", vec, MASK + alloc("o", "!pto.tile_buf<vec, 32x256xf32, valid=32x128>"),
        f"pto.tcolexpandmax ins(%s0, %row : {T}, {TROW}) outs(%o : !pto.tile_buf<vec, 32x256xf32, valid=32x128>)",
        "'pto.tcolexpandmax' shape agreement: src0 valid 32x256 != dst valid 32x128")
op_case("tcolexpand_row_cols", vec, MASK + alloc("r8", "!pto.tile_buf<vec, 1x256xf32, valid=1x128>"),
        f"pto.tcolexpandmin ins(%s0, %r8 : {T}, !pto.tile_buf<vec, 1x256xf32, valid=1x128>) outs(%s0 : {T})",
        "'pto.tcolexpandmin' shape agreement: expects src1 valid_shape[1] to equal dst valid_shape[1], got 128 and 256")
op_case("precision_attr_kind", vec, MASK, f"pto.texp ins(%s0 : {T}) outs(%s0 : {T}) {{precisionType = #pto<div_precision high_precision>}}",
        "pto.texp: precisionType must be a #pto<exp_precision ...>")
# tfillpad
_P3 = "!pto.tile_buf<vec, 32x256xf32, pad=3>"
op_case("tfillpad_pad_null", vec, MASK, f"pto.tfillpad ins(%s0 : {T}) outs(%s1 : {T})",
        "'pto.tfillpad' pad value: expects dst PadVal != Null for tfillpad")
op_case("tfillpad_elem_size", vec, MASK + alloc("h", "!pto.tile_buf<vec, 32x256xf16, pad=3>"),
        f"pto.tfillpad ins(%s0 : {T}) outs(%h : !pto.tile_buf<vec, 32x256xf16, pad=3>)",
        "'pto.tfillpad' dtype: expects sizeof(src element) == sizeof(dst element), got f32 and f16")
op_case("tfillpad_shrink", vec, MASK + alloc("sm", "!pto.tile_buf<vec, 16x256xf32, pad=3>"),
        f"pto.tfillpad ins(%s0 : {T}) outs(%sm : !pto.tile_buf<vec, 16x256xf32, pad=3>)",
        "'pto.tfillpad' shape agreement: expects each dst physical shape dimension to be >= src")
op_case("tfillpad_expanded_mat", cube, alloc("a", "!pto.tile_buf<mat, 16x256xf32>") + alloc("b", "!pto.tile_buf<mat, 32x256xf32, pad=1>"),
        "pto.tfillpad ins(%a : !pto.tile_buf<mat, 16x256xf32>) outs(%b : !pto.tile_buf<mat, 32x256xf32, pad=1>)",
        "'pto.tfillpad' memory space: expects expanded TFILLPAD only for loc=vec")
op_case("tfillpad_mat_types", cube, alloc("a", "!pto.tile_buf<mat, 32x256xf32>") + alloc("b", "!pto.tile_buf<mat, 32x256xf32, pad=1>"),
        "pto.tfillpad ins(%a : !pto.tile_buf<mat, 32x256xf32>) outs(%b : !pto.tile_buf<mat, 32x256xf32, pad=1>)",
        "'pto.tfillpad' type agreement: expects src/dst tile types to be lowerable to TFILLPAD for loc=mat")
# tstore atomic
op_case("tstore_atomic_value", vec, GM + alloc("t", V32),
        f"pto.tstore ins(%t : {V32}) outs(%pv : {PV16x64}) {{atomicType = #pto<atomic_type atomic_max>}}",
        "#pto<atomic_type>: 'atomic_max' is not one of atomic_none, atomic_add", P)

# column / arg reductions, tlrelu, taxpy, taddc, multi-buffer tiles (ptofa/ir/dialect/reductions.py, multitile.py)
_R64 = "!pto.tile_buf<vec, 1x64xf32>"
_I64 = "!pto.tile_buf<vec, 1x64xi32>"
op_case("tcolmax_dtype_i8", vec, alloc("x", "!pto.tile_buf<vec, 16x64xi8>") + alloc("r", "!pto.tile_buf<vec, 1x64xi8>"),
        "pto.tcolmax ins(%x : !pto.tile_buf<vec, 16x64xi8>) outs(%r : !pto.tile_buf<vec, 1x64xi8>)",
        "'pto.tcolmax' dtype: A2/A3 pto.tcolmax element type must be one of ('f16', 'f32', 'i16', 'i32'), got i8")
op_case("tcolsum_dst_rows", vec, VEC_TILES, f"pto.tcolsum ins(%a : {V32}) outs(%b : {V32})",
        "'pto.tcolsum' shape agreement: dst must have 1 valid row, got 16x64")
op_case("tcolsum_dst_cols", vec, VEC_TILES + alloc("r", ROW), f"pto.tcolsum ins(%a : {V32}) outs(%r : {ROW})",
        "'pto.tcolsum' shape agreement: dst valid cols 16 != src valid cols 64")
op_case("tcolsum_tmp_needs_isbinary", vec, VEC_TILES + alloc("r", _R64), f"pto.tcolsum ins(%a, %b : {V32}, {V32}) outs(%r : {_R64})",
        "'pto.tcolsum' tmp: the tmp operand requires the isBinary attribute")
op_case("tcolsum_binary_tmp_size", vec, VEC_TILES + alloc("r", _R64) + alloc("sm", "!pto.tile_buf<vec, 4x64xf32>"),
        f"pto.tcolsum ins(%a, %sm {{isBinary = true}} : {V32}, !pto.tile_buf<vec, 4x64xf32>) outs(%r : {_R64})",
        "'pto.tcolsum' tmp size: isBinary tmp of 1024 bytes is smaller than ceil(rows/2)*cols*elem = 2048 bytes")
op_case("tcolmin_layout_dn", vec, VEC_TILES + alloc("r", _R64), f"pto.tcolmin ins(%col : {COL}) outs(%r : {_R64})",
        "'pto.tcolmin' layout: src must be blayout=row_major")
op_case("tcolargmax_dst_i32", vec, VEC_TILES + alloc("r", _R64), f"pto.tcolargmax ins(%a : {V32}) outs(%r : {_R64})",
        "'pto.tcolargmax' dtype: dst element type must be i32 or ui32, got f32")
op_case("trowargmax_dst_vector", vec, VEC_TILES + alloc("r", _I64), f"pto.trowargmax ins(%a : {V32}) outs(%r : {_I64})",
        "'pto.trowargmax' shape agreement: dst row_major per-row vector needs 1 valid columns, got 64")
op_case("tlrelu_slope_type", vec, VEC_TILES + "%k = arith.constant 1.0 : f16\n", f"pto.tlrelu ins(%a, %k : {V32}, f16) outs(%b : {V32})",
        "'pto.tlrelu' operand type: the slope must be f32, got f16")
op_case("taxpy_f32_to_f16", vec, VEC_TILES + SCALAR, f"pto.taxpy ins(%a, %s : {V32}, f32) outs(%h : {V16})",
        "'pto.taxpy' dtype: dst must be src's type or f32 over an f16 src, got src f32, dst f16")
op_case("taddc_shape", vec, VEC_TILES + alloc("r", _R64), f"pto.taddc ins(%a, %b, %r : {V32}, {V32}, {_R64}) outs(%b : {V32})",
        "'pto.taddc' shape agreement: src0/src1/src2/dst must have the same shape")
_MT = "!pto.multi_tile_buf<vec, 16x64xf32, count=2>"
case("multi_tile_count", vec("%m = pto.alloc_multi_tile : !pto.multi_tile_buf<vec, 16x64xf32, count=17>"),
     "multi_tile_buf count must be in [2, 16] (got 17)", "pto.alloc_multi_tile")
op_case("multi_tile_row_plus_one", vec, "", "%m = pto.alloc_multi_tile : !pto.multi_tile_buf<vec, 16x64xf32, compact=2, count=2>",
        "'pto.alloc_multi_tile' compaction: a multi_tile_buf slot with row_plus_one compaction")
op_case("multi_tile_valid_operands", vec, "%c8 = arith.constant 8 : index\n",
        f"%m = pto.alloc_multi_tile valid_row = %c8 valid_col = %c8 : {_MT}",
        "'pto.alloc_multi_tile' valid shape: valid_row operand must be absent because the slot's valid shape is 16x64")
op_case("multi_tile_get_type", vec, f"%c1 = arith.constant 1 : index\n%m = pto.alloc_multi_tile : {_MT}\n",
        f"%g = pto.multi_tile_get %m[%c1] : {_MT} -> {V16}",
        "'pto.multi_tile_get' slot type: the result !pto.tile_buf<vec, 16x64xf16> must be the multi_tile_buf slot type")
op_case("multi_tile_get_index", vec, f"%c2 = arith.constant 2 : index\n%m = pto.alloc_multi_tile : {_MT}\n",
        f"%g = pto.multi_tile_get %m[%c2] : {_MT} -> {V32}",
        "'pto.multi_tile_get' slot index: constant slot 2 is out of range for multi_tile_buf count=2")

# mgather / mscatter (ptofa/ir/dialect/gathers.py)
_IDX = "!pto.tile_buf<vec, 16x64xi32>"
_IROW = "!pto.tile_buf<vec, 1x16xi32>"
_G = GM + VEC_TILES + alloc("ix", _IDX) + alloc("ir", _IROW)
op_case("mgather_needs_coalesce", vec, _G, f"pto.mgather ins(%pv, %ix : {PV16x64}, {_IDX}) outs(%a : {V32})",
        "'pto.mgather' coalesce: mgather needs an explicit coalesce", P)
op_case("mgather_idx_dtype", vec, _G, f"pto.mgather ins(%pv, %a : {PV16x64}, {V32}) outs(%b : {V32}) {{coalesce = #pto<coalesce elem>}}",
        "'pto.mgather' index: idx element type must be i32, got f32", P)
op_case("mgather_row_idx_shape", vec, _G, f"pto.mgather ins(%pv, %ix : {PV16x64}, {_IDX}) outs(%a : {V32}) {{coalesce = #pto<coalesce row>}}",
        "'pto.mgather' shape agreement: idx valid shape 16x64 must be [1, dst.valid_row] row_major or [dst.valid_row, 1] col_major", P)
op_case("mgather_table_dtype", vec, _G, f"pto.mgather ins(%pv, %ix : {PV16x64}, {_IDX}) outs(%h : {V16}) {{coalesce = #pto<coalesce elem>}}",
        "'pto.mgather' dtype: the GM table's element type f32 must be the tile's f16", P)
op_case("mgather_vec_scratch", vec, _G, f"pto.mgather ins(%pv, %ix, %pv : {PV16x64}, {_IDX}, {PV16x64}) outs(%a : {V32}) {{coalesce = #pto<coalesce elem>}}",
        "'pto.mgather' operands: a scratch operand belongs only to the GM -> L1 (loc=mat) mgather", P)
op_case("mscatter_conflict_a5", vec, _G, f"pto.mscatter ins(%a, %ix : {V32}, {_IDX}) outs(%pv : {PV16x64}) {{scatterConflict = #pto<scatter_conflict last>}}",
        "'pto.mscatter' A5 only: scatterConflict is an A5 attribute", P)
_PVH = ("%tvh = pto.make_tensor_view %ph, shape = [%c128, %c128], strides = [%c128, %c1] : !pto.tensor_view<128x128xf16>\n"
        "%pvh = pto.partition_view %tvh, offsets = [%c0, %c0], sizes = [%c128, %c128] : !pto.tensor_view<128x128xf16> -> !pto.partition_tensor_view<128x128xf16>\n")
op_case("mscatter_atomic_dtype", vec, GM + _PVH + alloc("hh", "!pto.tile_buf<vec, 128x128xf16>") + alloc("ixh", "!pto.tile_buf<vec, 128x128xi32>"),
        "pto.mscatter ins(%hh, %ixh : !pto.tile_buf<vec, 128x128xf16>, !pto.tile_buf<vec, 128x128xi32>) outs(%pvh : !pto.partition_tensor_view<128x128xf16>) "
        "{scatterAtomicOp = #pto<scatter_atomic_op max>}",
        "'pto.mscatter' dtype: scatterAtomicOp=max takes i32/f32 data, got f16", "%p: !pto.ptr<f32>, %ph: !pto.ptr<f16>")
op_case("mscatter_layout", vec, _G, f"pto.mscatter ins(%col, %ix : {COL}, {_IDX}) outs(%pv : {PV16x64})",
        "'pto.mscatter' layout: src must be a loc=vec ND tile", P)

# tprelu, trowexpand, taddsc, tmatmul.bias, inttoptr (ptofa/ir/dialect/fused.py)
op_case("tprelu_dtype_i16", vec, alloc("x", "!pto.tile_buf<vec, 16x64xi16>"),
        "pto.tprelu ins(%x, %x : !pto.tile_buf<vec, 16x64xi16>, !pto.tile_buf<vec, 16x64xi16>) outs(%x : !pto.tile_buf<vec, 16x64xi16>)",
        "'pto.tprelu' dtype: tprelu takes f16 or f32 tiles, got i16")
op_case("tprelu_tmp_type", vec, VEC_TILES, f"pto.tprelu ins(%a, %b, %a : {V32}, {V32}, {V32}) outs(%b : {V32})",
        "'pto.tprelu' tmp: tmp must be an 8-bit integer tile, got f32")
op_case("tprelu_tmp_rows", vec, VEC_TILES + alloc("t8", "!pto.tile_buf<vec, 16x32xi8>"),
        f"pto.tprelu ins(%a, %b, %t8 : {V32}, {V32}, !pto.tile_buf<vec, 16x32xi8>) outs(%b : {V32})",
        "'pto.tprelu' tmp size: tmp needs 17 rows (valid rows + 1 scratch row), has 16")
op_case("trowexpand_rows", vec, VEC_TILES + alloc("c8", "!pto.tile_buf<vec, 8x1xf32, blayout=col_major>"),
        f"pto.trowexpand ins(%c8 : !pto.tile_buf<vec, 8x1xf32, blayout=col_major>) outs(%a : {V32})",
        "'pto.trowexpand' shape agreement: src valid rows 8 != dst valid rows 16")
op_case("trowexpand_dst_layout", vec, VEC_TILES, f"pto.trowexpand ins(%a : {V32}) outs(%col : {COL})",
        "'pto.trowexpand' layout: dst must be a loc=vec ND tile")
op_case("taddsc_scalar_type", vec, VEC_TILES + "%k = arith.constant 1 : i32\n", f"pto.taddsc ins(%a, %k, %b : {V32}, i32, {V32}) outs(%b : {V32})",
        "'pto.taddsc' operand type: the scalar must be the tiles' element type f32, got i32")
op_case("tmatmul_bias_rows", cube, CUBE_TILES + alloc("bz", "!pto.tile_buf<bias, 2x128xf32>"),
        f"pto.tmatmul.bias ins(%left, %right, %bz : {LEFT}, {RIGHT}, !pto.tile_buf<bias, 2x128xf32>) outs(%acc : {ACC})",
        "'pto.tmatmul.bias' bias: bias must be a loc=bias tile with one row")
op_case("inttoptr_i32_address", vec, "%ad = arith.constant 64 : i32\n", "%q = pto.inttoptr %ad : i32 -> !pto.ptr<f32>",
        "'pto.inttoptr' operand type: the address must be i64, got i32")
case("inttoptr_general_use", vec("%ad = arith.constant 64 : i64\n%c4 = arith.constant 4 : index\n%q = pto.inttoptr %ad : i64 -> !pto.ptr<f32>\n"
                                  "%q2 = pto.addptr %q, %c4 : !pto.ptr<f32> -> !pto.ptr<f32>"),
     "'pto.inttoptr' uses: an inttoptr pointer may only be the pointer of load_scalar / store_scalar, used by pto.addptr", "pto.inttoptr")
op_case("ptrtoint_result", vec, "", "%ad = pto.ptrtoint %p : !pto.ptr<f32> -> i32",
        "'pto.ptrtoint' operand type: ptrtoint yields an i64 byte address, got i32", P)

# pto.comm.*, cmo, fence (ptofa/ir/dialect/comm.py)
_STG = "!pto.tile_buf<vec, 1x64xf32>"
_C = GM + alloc("ping", _STG) + alloc("pong", "!pto.tile_buf<vec, 1x128xf32>") + alloc("ih", "!pto.tile_buf<vec, 1x64xi32>") + "%v7 = arith.constant 7 : i32\n"
op_case("comm_staging_dtype", vec, _C, f"pto.comm.tput(%pv, %pv, buf(%ih) : {PV16x64}, {PV16x64}, !pto.tile_buf<vec, 1x64xi32>)",
        "'pto.comm.tput' staging: buf tile element type i32 must be the transfer's f32", P)
op_case("comm_pong_type", vec, _C, f"pto.comm.tget(%pv, %pv, buf(%ping, %pong) : {PV16x64}, {PV16x64}, {_STG}, !pto.tile_buf<vec, 1x128xf32>)",
        "'pto.comm.tget' staging: the pong tile !pto.tile_buf<vec, 1x128xf32> must have the ping's type", P)
op_case("comm_buf_count", vec, _C, f"pto.comm.tput(%pv, %pv, buf(%ping, %ping, %ping) : {PV16x64}, {PV16x64}, {_STG}, {_STG}, {_STG})",
        "pto.comm.tput: buf(...) takes at most 2 operands, got 3", P)
op_case("comm_shape_mismatch", vec, _C, f"pto.comm.tput(%pv, %pacc, buf(%ping) : {PV16x64}, {PACC}, {_STG})",
        "'pto.comm.tput' operand type: dst !pto.partition_tensor_view<16x64xf32> and src !pto.partition_tensor_view<128x128xf32> need one element type", P)
op_case("comm_signal_i32", vec, _C, f"pto.comm.tnotify(%pv, %v7 : {PV16x64}, i32)",
        "'pto.comm.tnotify' operand type: the signal must hold i32, got f32", P)
op_case("comm_root_range", vec, _C, f"pto.comm.tbroadcast(%pv, recv(%ping), group(%pv, %pv) : {PV16x64}, {_STG}, {PV16x64}, {PV16x64}) {{root = 2 : i32}}",
        "'pto.comm.tbroadcast' root: root = 2 : i32 must be an i32 in [0, 2)", P)
op_case("comm_group_types", vec, _C, f"pto.comm.tgather(%pv, recv(%ping), group(%pv, %pacc) : {PV16x64}, {_STG}, {PV16x64}, {PACC}) {{root = 0 : i32}}",
        "'pto.comm.tgather' group: group members must share one type", P)
op_case("comm_session_attr_width", vec, _C + alloc("scr", "!pto.tile_buf<vec, 1x256xi8>"),
        "%ses = pto.comm.build_async_session(%scr, %p : !pto.tile_buf<vec, 1x256xi8>, !pto.ptr<f32>) {sync_id = 0 : i64} -> !pto.async_session",
        "'pto.comm.build_async_session' attribute type: 'sync_id' must be i32, got i64", P)
op_case("cmo_space", vec, "", "pto.cmo.cacheinvalid all #pto.address_space<vec>",
        "'pto.cmo.cacheinvalid' memory space: only GM cache maintenance is supported, got vec")

op_case("tcvt_satmode_attr", vec, VEC_TILES, f"pto.tcvt ins(%a {{satmode = #pto<round_mode ROUND>}} : {V32}) outs(%h : {V16})",
        "pto.tcvt: satmode must be #pto<saturation_mode ON|OFF>")

_S1 = "!pto.tile_buf<vec, 1x256xf32>"
_SORTS = alloc("s1", _S1) + alloc("s2", _S1) + alloc("si", "!pto.tile_buf<vec, 1x256xi32>") + "%ex = arith.constant dense<0> : vector<4xi16>\n"
op_case("tsort32_index_width", vec, _SORTS + alloc("s16", "!pto.tile_buf<vec, 1x256xi16>"), f"pto.tsort32 ins(%s1, %s16 : {_S1}, !pto.tile_buf<vec, 1x256xi16>) outs(%s2 : {_S1})",
        "'pto.tsort32' index: idx element type must be i32 / ui32, got i16")
op_case("tsort32_dtype", vec, _SORTS + alloc("h", V16), f"pto.tsort32 ins(%si, %si : !pto.tile_buf<vec, 1x256xi32>, !pto.tile_buf<vec, 1x256xi32>) outs(%s2 : {_S1})",
        "'pto.tsort32' dtype: src and dst must share f16 or f32, got i32 and f32")
op_case("tmrgsort_rows", vec, _SORTS + VEC_TILES, f"pto.tmrgsort ins(%s1, %s2 no_tmp {{exhausted = false}} : {_S1}, {_S1}) outs(%a, %ex : {V32}, vector<4xi16>)",
        "'pto.tmrgsort' shape agreement: dst must be a single-row tile")
op_case("tmrgsort_tmp_cols", vec, _SORTS + alloc("sm", "!pto.tile_buf<vec, 1x64xf32>"),
        f"pto.tmrgsort ins(%s1, %s2, %sm {{exhausted = false}} : {_S1}, {_S1}, !pto.tile_buf<vec, 1x64xf32>) outs(%s2, %ex : {_S1}, vector<4xi16>)",
        "'pto.tmrgsort' tmp size: tmp has 64 columns, dst 256")
op_case("tmrgsort_executed_type", vec, _SORTS + "%ex8 = arith.constant dense<0> : vector<8xi16>\n",
        f"pto.tmrgsort ins(%s1, %s2 no_tmp {{exhausted = false}} : {_S1}, {_S1}) outs(%s2, %ex8 : {_S1}, vector<8xi16>)",
        "'pto.tmrgsort' operands: executed must be vector<4xi16>, got vector<8xi16>")
op_case("tmrgsort_format1_extra", vec, _SORTS + "%bl = arith.constant 64 : i32\n",
        f"pto.tmrgsort ins(%s1, %bl no_tmp : {_S1}, i32) outs(%s2 : {_S1})",
        "pto.tmrgsort: format 1 is ins(%src, %blockLen : S, i32) outs(%dst : D)")

op_case("tconcat_too_wide", vec, VEC_TILES, f"pto.tconcat ins(%a, %b : {V32}, {V32}) outs(%a : {V32})",
        "'pto.tconcat' shape agreement: src0 valid cols 64 + src1 valid cols 64 exceed dst's 64 columns")
op_case("tconcat_dtype", vec, VEC_TILES + alloc("h2", "!pto.tile_buf<vec, 16x32xf16>"),
        f"pto.tconcat ins(%h2, %h2 : !pto.tile_buf<vec, 16x32xf16>, !pto.tile_buf<vec, 16x32xf16>) outs(%a : {V32})",
        "'pto.tconcat' dtype: src0, src1 and dst must share one of")
op_case("tconcatidx_index_type", vec, VEC_TILES + alloc("q", "!pto.tile_buf<vec, 16x32xf32>"),
        f"pto.tconcatidx ins(%q, %q, %q, %q : !pto.tile_buf<vec, 16x32xf32>, !pto.tile_buf<vec, 16x32xf32>, !pto.tile_buf<vec, 16x32xf32>, !pto.tile_buf<vec, 16x32xf32>) outs(%a : {V32})",
        "'pto.tconcatidx' index: src0Idx and src1Idx must be loc=vec tiles of one of i8/i16/i32")

_Q8 = "!pto.tile_buf<vec, 16x64xi8>"
op_case("tquant_offset_sym", vec, VEC_TILES + alloc("q8", _Q8),
        f"pto.tquant ins(%a, %col, %col : {V32}, {COL}, {COL}) outs(%q8 : {_Q8}) {{quant_type = #pto<quant_type INT8_SYM>}}",
        "'pto.tquant' operands: INT8_SYM takes no offset operand")
op_case("tquant_dst_i16", vec, VEC_TILES + alloc("q16", "!pto.tile_buf<vec, 16x64xi16>"),
        f"pto.tquant ins(%a, %col : {V32}, {COL}) outs(%q16 : !pto.tile_buf<vec, 16x64xi16>) {{quant_type = #pto<quant_type INT8_SYM>}}",
        "'pto.tquant' dtype: INT8_SYM writes an 8-bit integer dst")
op_case("tquant_fp_per_row", vec, VEC_TILES + alloc("q8", _Q8),
        f"pto.tquant ins(%a, %b : {V32}, {V32}) outs(%q8 : {_Q8}) {{quant_type = #pto<quant_type INT8_SYM>}}",
        "'pto.tquant' shape agreement: fp must be a per-row (col_major, 16x1 valid) tile")
op_case("tquant_tmp_type", vec, VEC_TILES + alloc("q8", _Q8),
        f"pto.tquant ins(%a, %col : {V32}, {COL}) outs(%q8, %h : {_Q8}, {V16}) {{quant_type = #pto<quant_type INT8_SYM>}}",
        "'pto.tquant' tmp: tmp must have src's type")
op_case("tquant_needs_type", vec, VEC_TILES + alloc("q8", _Q8), f"pto.tquant ins(%a, %col : {V32}, {COL}) outs(%q8 : {_Q8})",
        "pto.tquant takes {quant_type = #pto<quant_type INT8_SYM|INT8_ASYM>} only")
op_case("tdequant_src_f32", vec, VEC_TILES, f"pto.tdequant ins(%a, %col, %col : {V32}, {COL}, {COL}) outs(%b : {V32})",
        "'pto.tdequant' dtype: src must be i8 or i16, got f32")
op_case("tdequant_layout", vec, VEC_TILES + alloc("q8", "!pto.tile_buf<vec, 32x16xi8, blayout=col_major>"),
        f"pto.tdequant ins(%q8, %col, %col : !pto.tile_buf<vec, 32x16xi8, blayout=col_major>, {COL}, {COL}) outs(%b : {V32})",
        "'pto.tdequant' layout: A2/A3 src and dst must be row_major")

_LA = "%c1 = arith.constant 1 : index\n%la = pto.declare_local_array -> !pto.local_array<4x8xf32>\n"
op_case("local_array_rank", vec, _LA, "%g = pto.local_array_get %la[%c1] : !pto.local_array<4x8xf32> -> f32",
        "'pto.local_array_get' indices: a rank-2 local array takes 2 indices, got 1")
op_case("local_array_value_type", vec, _LA + "%v = arith.constant 1 : i32\n", "pto.local_array_set %la[%c1, %c1], %v : !pto.local_array<4x8xf32>, i32",
        "'pto.local_array_set' operand type: the value must be the element type f32, got i32")
op_case("local_array_result_type", vec, _LA, "%g = pto.local_array_get %la[%c1, %c1] : !pto.local_array<4x8xf32> -> f16",
        "'pto.local_array_get' operand type: the result must be the element type f32, got f16")
case("local_array_elem_index", vec("%la = pto.declare_local_array -> !pto.local_array<4xindex>"),
     "!pto.local_array: elements must be integer or float scalars, got index", "pto.declare_local_array")

op_case("tcolexpandexpdif_int", vec, alloc("x", "!pto.tile_buf<vec, 16x64xi32>") + alloc("r", "!pto.tile_buf<vec, 1x64xi32>"),
        "pto.tcolexpandexpdif ins(%x, %r : !pto.tile_buf<vec, 16x64xi32>, !pto.tile_buf<vec, 1x64xi32>) outs(%x : !pto.tile_buf<vec, 16x64xi32>)",
        "'pto.tcolexpandexpdif' dtype: expects A2/A3 tcolexpandexpdif element type to be f16/f32")
op_case("tcolprod_dst_rows", vec, VEC_TILES, f"pto.tcolprod ins(%a : {V32}) outs(%b : {V32})",
        "'pto.tcolprod' shape agreement: dst must have 1 valid row, got 16x64")


@pytest.mark.parametrize("text, message, at", CASES.values(), ids=CASES.keys())
def test_invalid(text: str, message: str, at: str | None) -> None:
    errors = errors_of(text)
    matching = [(line, msg) for line, msg in errors if message in msg]
    assert matching, f"no error contains {message!r}; got {errors}"
    if at is not None:
        assert matching[0][0] == line_of(text, at), f"{message!r} at line {matching[0][0]}, expected the line of {at!r}: {errors}"


# ---------------------------------------------------------------------------- hand-written sync
op_case("intra_block_event_range", vec, "", "pto.set_intra_block <PIPE_FIX>, 16",
        "'pto.set_intra_block' event id: a static event_id must be in [0, 15] on A2/A3, got 16")
op_case("intra_block_pipe", vec, "", "pto.wait_intra_block <PIPE_M>, 1",
        "'pto.wait_intra_block' pipe: expects one of PIPE_FIX, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_V, got PIPE_M")
op_case("record_event_op_type", vec, "",
        '"pto.record_event"() <{src_op = #pto.pipe<PIPE_V>, dst_op = #pto.pipe_event_type<TVEC>, event_id = #pto.event<EVENT_ID0>}> : () -> ()',
        "'pto.record_event' op type: expected #pto.pipe_event_type<...>, got #pto.pipe<PIPE_V>")
_SYNCALL_ARGS = "%ws: !pto.ptr<i32>, %wf: !pto.ptr<f32>, %wv: !pto.tensor_view<8xi32>"
_SOFT = "mode = #pto.sync_all_mode<soft>, core_type = #pto.sync_core_type<aiv_only>"
op_case("syncall_hard_operands", vec, "", "pto.syncall(%ws : !pto.ptr<i32>) mode = #pto.sync_all_mode<hard>, core_type = #pto.sync_core_type<mix>",
        "'pto.syncall' hard syncall: expects no gm_workspace or used_cores", args=_SYNCALL_ARGS)
op_case("syncall_soft_workspace", vec, "", f"pto.syncall() {_SOFT}",
        "'pto.syncall' soft syncall: expects a gm_workspace operand", args=_SYNCALL_ARGS)
op_case("syncall_workspace_i32", vec, "", f"pto.syncall(%wf : !pto.ptr<f32>) {_SOFT}",
        "'pto.syncall' gm_workspace: expects i32 elements, got f32", args=_SYNCALL_ARGS)
op_case("syncall_workspace_size", vec, "", f"pto.syncall(%wv : !pto.tensor_view<8xi32>) {_SOFT}",
        "'pto.syncall' gm_workspace: expects at least 16 i32 elements, got 8", args=_SYNCALL_ARGS)
case("set_flag_event_token", vec('pto.set_flag["PIPE_MTE2", "PIPE_V", "EVENT_ID8"]'),
     "invalid event token 'EVENT_ID8', expected one of EVENT_ID0", "pto.set_flag")


# ---------------------------------------------------------------------------- internal pipe handles
_L2L = "%buf = arith.constant 0 : i32\n"
op_case("internal_pipe_dir_mask", vec, _L2L, "%hp = pto.initialize_l2l_pipe {dir_mask = 4, slot_size = 512, slot_num = 8}(%buf : i32) -> !pto.pipe",
        "'pto.initialize_l2l_pipe' dir_mask: expects 'dir_mask' to be 1, 2, or 3, got 4")
op_case("internal_pipe_slot_size", vec, _L2L, "%hp = pto.initialize_l2l_pipe {dir_mask = 1, slot_size = 0, slot_num = 8}(%buf : i32) -> !pto.pipe",
        "'pto.initialize_l2l_pipe' slot_size: expects 'slot_size' to be greater than 0, got 0")
op_case("internal_pipe_slot_num", vec, _L2L, "%hp = pto.initialize_l2l_pipe {dir_mask = 1, slot_size = 512, slot_num = 0}(%buf : i32) -> !pto.pipe",
        "'pto.initialize_l2l_pipe' slot_num: expects 'slot_num' to be greater than 0, got 0")
op_case("internal_pipe_flag_base", vec, _L2L, "%hp = pto.initialize_l2l_pipe {dir_mask = 3, slot_size = 512, slot_num = 8, flag_base = 13}(%buf : i32, %buf : i32) -> !pto.pipe",
        "'pto.initialize_l2l_pipe' flag_base: flag_base=13 with dir_mask=3 needs flag ids [13, 17) within 0..15")
op_case("internal_pipe_peer", vec, _L2L, "%hp = pto.initialize_l2l_pipe {dir_mask = 3, slot_size = 512, slot_num = 8}(%buf : i32) -> !pto.pipe",
        "'pto.initialize_l2l_pipe' peer_local_addr: a peer local address goes with dir_mask 3 and only with it (dir_mask=3)")
_GS = "%gs = pto.declare_global -> !pto.tensor_view<16x16xf32>\n"
op_case("internal_pipe_local_slot_num", vec, _GS,
        "%hp = pto.initialize_l2g2l_pipe {dir_mask = 1, slot_size = 1024, slot_num = 8, local_slot_num = 4}(%gs : !pto.tensor_view<16x16xf32>) -> !pto.pipe",
        "'pto.initialize_l2g2l_pipe' local_slot_num: 'local_slot_num' is only allowed when 'local_addr' is present")
op_case("internal_pipe_split", vec, _L2L + "%hp = pto.initialize_l2l_pipe {dir_mask = 1, slot_size = 512, slot_num = 8}(%buf : i32) -> !pto.pipe\n",
        "pto.tfree(%hp : !pto.pipe) {split = 5}", "'pto.tfree' split: expects 'split' to be 0, 1, 2, 3, or 4, got 5")
op_case("internal_pipe_handle", vec, "",
        '"pto.tfree"(%hp) <{split = 0 : i8, operandSegmentSizes = array<i32: 0, 1, 0>}> : (!pto.pipe) -> ()',
        "'pto.tfree' pipe handle: pipe_handle must be produced by pto.initialize_l2l_pipe or pto.initialize_l2g2l_pipe", args="%hp: !pto.pipe")
op_case("internal_pipe_entry", vec, _L2L + "%hp = pto.initialize_l2l_pipe {dir_mask = 1, slot_size = 512, slot_num = 8}(%buf : i32) -> !pto.pipe\n",
        '"pto.tpush"(%hp) <{split = 0 : i8, operandSegmentSizes = array<i32: 0, 1, 0>}> : (!pto.pipe) -> ()',
        "'pto.tpush' entry: pto.tpush needs an entry operand")


# ---------------------------------------------------------------------------- partial ops, tsels
_VH8 = "!pto.tile_buf<vec, 16x64xf32, valid=8x64>"
_VC8 = "!pto.tile_buf<vec, 16x64xf32, valid=16x32>"
op_case("tpart_valid_exceeds", vec, VEC_TILES + alloc("hv", _VH8), f"pto.tpartadd ins(%a, %b : {V32}, {V32}) outs(%hv : {_VH8})",
        "'pto.tpartadd' partial valid: source valid shape 16x64 exceeds dst's 8x64")
op_case("tpart_valid_one_equal", vec, VEC_TILES + alloc("hv", _VH8) + alloc("cv", _VC8), f"pto.tpartmax ins(%hv, %cv : {_VH8}, {_VC8}) outs(%a : {V32})",
        "'pto.tpartmax' partial valid: one of src0 8x64 / src1 16x32 valid shapes must equal dst's 16x64")
op_case("tpart_dtype", vec, alloc("p", "!pto.tile_buf<vec, 16x64xi8>"),
        "pto.tpartmul ins(%p, %p : !pto.tile_buf<vec, 16x64xi8>, !pto.tile_buf<vec, 16x64xi8>) outs(%p : !pto.tile_buf<vec, 16x64xi8>)",
        "'pto.tpartmul' dtype: expects an A2/A3 element type in ('i16', 'i32', 'f16', 'f32'), got i8")
_IDX = "!pto.tile_buf<vec, 16x64xi16>"
op_case("tpart_arg_index", vec, VEC_TILES + alloc("ix", _IDX),
        f"pto.tpartargmin ins(%a, %b, %ix, %ix : {V32}, {V32}, {_IDX}, {_IDX}) outs(%a, %ix : {V32}, {_IDX})",
        "'pto.tpartargmin' index: expects src0Idx/src1Idx/dstIdx to share an i32 or ui32 element type, got i16")
op_case("tsels_scalar_type", vec, VEC_TILES + alloc("m8", "!pto.tile_buf<vec, 16x64xi8>") + "%sc = arith.constant 1.0 : f16\n",
        f"pto.tsels ins(%m8, %a, %sc : !pto.tile_buf<vec, 16x64xi8>, {V32}, f16) outs(%b : {V32})",
        "'pto.tsels' operand type: the scalar must be the element type f32, got f16")


op_case("tstore_relu_vec", vec, GM + alloc("t", V32),
        "pto.tstore ins(%t : " + V32 + ") outs(%pv : !pto.partition_tensor_view<16x64xf32>) {reluPreMode = #pto<relu_pre_mode normal_relu>}",
        "'pto.tstore' relu: reluPreMode needs a loc=acc src, got loc=vec", args=P)


op_case("tprefetch_dtype_size", vec, GM + alloc("h", V16), f"pto.tprefetch ins(%pv : {PV16x64}) outs(%h : {V16})",
        "'pto.tprefetch' dtype: expects src and dst element types of one size, got f32 and f16", args=P)


_STR = "!pto.struct<!pto.struct<f32, i8>, i16>"
_SD = f"%st = pto.declare_struct -> {_STR}\n"
op_case("struct_path_range", vec, _SD, f"%g = pto.struct_get %st[2] : {_STR} -> i16",
        "'pto.struct_get' path: field 2 at depth 0 is outside a struct of 2 fields")
op_case("struct_path_leaf", vec, _SD, f"%g = pto.struct_get %st[0] : {_STR} -> f32",
        "'pto.struct_get' path: the path [0] must end at a scalar field, but ends at !pto.struct<f32, i8>")
op_case("struct_value_type", vec, _SD + "%v = arith.constant 1 : i32\n", f"pto.struct_set %st[1], %v : {_STR}, i32",
        "'pto.struct_set' operand type: the value type i32 must be the field type i16")
case("struct_escape", f"module {{\n  func.func @f() -> {_STR} {{\n    %st = pto.declare_struct -> {_STR}\n    return %st : {_STR}\n  }}\n}}\n",
     "'pto.declare_struct' escape: a stack-local struct must not be passed to 'func.return'", "pto.declare_struct")


op_case("tscatter_index_width", vec, VEC_TILES + alloc("si", "!pto.tile_buf<vec, 16x64xi16>"),
        f"pto.tscatter ins(%a, %si : {V32}, !pto.tile_buf<vec, 16x64xi16>) outs(%b : {V32})",
        "'pto.tscatter' dtype: a 4-byte dst takes 4-byte indexes, got i16")
op_case("tscatter_mask_shape", vec, VEC_TILES, f'pto.tscatter ins(%a, {{maskPattern = #pto.mask_pattern<P0101>}} : {V32}, "row") outs(%b : {V32})',
        "'pto.tscatter' shape agreement: axis row with P0101 (x2) needs dst valid rows = src's and the other extent x2")
op_case("tscatter_axis", vec, VEC_TILES, f'pto.tscatter ins(%a, {{maskPattern = #pto.mask_pattern<P1111>}} : {V32}, "diag") outs(%b : {V32})',
        "'pto.tscatter' axis: axis must be \"row\" or \"col\", got \"diag\"")


@pytest.mark.parametrize("name", ["entry_without_set_ffts", "entry_set_ffts_not_first", "entry_tile_argument",
                                  "tmov_acc_to_vec", "tload_layout_pairing_mat", "tstore_layout_pairing_vec", "expdif_without_tmp",
                                  "rowexpand_tmp_too_small"])
def test_launch_rules_are_ptofa_only(name: str) -> None:
    """ptoas compiles these modules: without ptofa's own rules (launch, C++ build) they check clean."""
    text = CASES[name][0]
    with pytest.raises(PtoCheckError):
        check_text(text)
    check_text(text, launch_rules=False)


def test_every_verifier_rule_has_a_case() -> None:
    """Each `_fail(..., rule, ...)` rule name of dialect.py appears in some expected message."""
    import re
    from pathlib import Path

    import ptofa.ir.dialect

    source = "\n".join(f.read_text() for f in sorted(Path(ptofa.ir.dialect.__file__).parent.glob("*.py")))
    rules = set(re.findall(r'_fail(?:_build)?\((?:self|op), "([^"]+)"', source))
    assert len(rules) > 25
    messages = " ".join(message for _, message, _ in CASES.values())
    missing = sorted(rule for rule in rules if f"' {rule}:" not in messages and f" {rule}: " not in messages)
    assert missing == []


def test_all_errors_reported_with_lines_and_path() -> None:
    text = vec(VEC_TILES + f"pto.trecip ins(%a : {V32}) outs(%a : {V32})\n"
               + f"pto.tadd ins(%col, %col : {COL}, {COL}) outs(%col : {COL})")
    with pytest.raises(PtoCheckError) as info:
        check_text(text, "bad.pto")
    lines = [line for line, _ in info.value.errors]
    assert lines == [line_of(text, "pto.trecip"), line_of(text, "pto.tadd")]
    rendered = str(info.value).splitlines()
    assert rendered[0].startswith(f"bad.pto:{lines[0]}: error: 'pto.trecip' in place")
    assert rendered[1].startswith(f"bad.pto:{lines[1]}: error: 'pto.tadd' layout")


def test_parse_error_carries_line() -> None:
    text = vec(VEC_TILES + "pto.tbogus ins(%a : !pto.tile_buf<vec, 16x64xf32>) outs(%a : !pto.tile_buf<vec, 16x64xf32>)")
    (error,) = errors_of(text)
    assert error[0] == line_of(text, "pto.tbogus")
    assert "pto.tbogus" in error[1]


def test_unregistered_op_on_its_own_line() -> None:
    text = vec("%a = arith.constant 1 : index\npto.nonsense\n%b = arith.addi %a, %a : index")
    assert errors_of(text) == [(line_of(text, "pto.nonsense"), "Operation pto.nonsense is not registered")]


def test_entry_snippet_is_valid() -> None:
    """The base modules of these cases verify; each case breaks exactly one thing."""
    check_text(pipes())
    check_text(wrap(""))
    check_text("module {\n" + ENTRY + "}\n")


# Forms a real ptoas 0.60 compiled (docs/sources.md §2.10, §2.13): the checker
# must not reject them.
_VERIFIED_SLICE = f"""%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c2 = arith.constant 2 : index
%c32 = arith.constant 32 : index
%zero = arith.constant 0.0 : f32
%l_row = pto.alloc_tile : {_ROW64}
%part = pto.alloc_tile : {_ROW32}
%o = pto.alloc_tile : !pto.tile_buf<vec, 64x64xf32>
%l_col = pto.treshape %l_row : {_ROW64} -> {_COL64}
pto.trowexpanddiv ins(%o, %l_col : !pto.tile_buf<vec, 64x64xf32>, {_COL64}) outs(%o : !pto.tile_buf<vec, 64x64xf32>)
scf.for %i = %c0 to %c2 step %c1 {{
  %off = arith.muli %i, %c32 : index
  %s = pto.subview %l_row[%c0, %off] sizes [1, 32] : {_ROW64} -> {_ROW32}
  pto.tadd ins(%s, %part : {_ROW32}, {_ROW32}) outs(%s : {_ROW32})
  pto.tmax ins(%s, %part : {_ROW32}, {_ROW32}) outs(%s : {_ROW32})
  pto.tadds ins(%part, %zero : {_ROW32}, f32) outs(%s : {_ROW32})
}}
"""


@pytest.mark.parametrize("text", [
    vec(_VERIFIED_SLICE),
    "builtin.module {\n" + ENTRY + "}\n",
    'builtin.module attributes {"pto.target_arch" = "a3"} {\n' + ENTRY + "}\n",
    ENTRY,
    "!qk = !pto.tensor_view<128x128xf32>\n#cube = #pto.kernel_kind<cube>\nmodule {\n" + ENTRY + "}\n",
    ENTRY.replace("!pto.ptr<i64>", "!pto.ptr<i8>"),
    pipes(cube=CUBE_PRE + CUBE_BODY.replace(f"%e = pto.talloc_to_aiv {{id = 0, split = 1}} -> {QK}",
                                            f'%e = "pto.talloc_to_aiv"() <{{id = 0 : i32, split = 1 : i8}}> : () -> {QK}')),
], ids=["row_tile_subview_in_loop", "builtin_module", "builtin_module_attrs", "no_module", "top_level_aliases",
        "set_ffts_i8", "generic_pipe_op"])
def test_ptoas_verified_forms_are_accepted(text: str) -> None:
    check_text(text)


# ---------------------------------------------------------------------------- A3 ops beyond FA (issue 18)
V16x16 = "!pto.tile_buf<vec, 16x16xf32>"
V8x8 = "!pto.tile_buf<vec, 8x8xf32>"
IDX = "%c0 = arith.constant 0 : index\n%c8 = arith.constant 8 : index\n%c12 = arith.constant 12 : index\n%m1 = arith.constant -1 : index\n"
WIN = IDX + alloc("a", V16x16) + alloc("b", V8x8)
ACC32 = "!pto.tile_buf<acc, 32x32xf32, blayout=col_major, slayout=row_major, fractal=1024>"
MATNZ = "!pto.tile_buf<mat, 32x32xf16, blayout=col_major, slayout=row_major>"
MAT32 = "!pto.tile_buf<mat, 32x32xf16, slayout=row_major>"
CUBEWIN = IDX + alloc("acc", ACC32) + alloc("m", MATNZ) + alloc("m2", MAT32)

op_case("textract_bounds", vec, WIN, f"pto.textract ins(%a, %c12, %c0 : {V16x16}, index, index) outs(%b : {V8x8})",
        "'pto.textract' bounds: row window [12, +8) exceeds the 16 rows of the larger tile")
op_case("textract_negative_index", vec, WIN, f"pto.textract ins(%a, %m1, %c0 : {V16x16}, index, index) outs(%b : {V8x8})",
        "'pto.textract' index: indexRow must be non-negative, got -1")
op_case("textract_dtype", vec, WIN + alloc("h", "!pto.tile_buf<vec, 8x16xf16>"),
        f"pto.textract ins(%a, %c0, %c0 : {V16x16}, index, index) outs(%h : !pto.tile_buf<vec, 8x16xf16>)",
        "'pto.textract' dtype: src and dst must share the element type, got f32 and f16")
op_case("textract_pair", cube, CUBEWIN + alloc("l", "!pto.tile_buf<left, 32x32xf16, slayout=row_major>"),
        "pto.textract ins(%l, %c0, %c0 : !pto.tile_buf<left, 32x32xf16, slayout=row_major>, index, index) outs(%m2 : " + MAT32 + ")",
        "'pto.textract' memory space: A2/A3 textract takes vec -> vec, mat -> left/right or acc -> mat, got left -> mat")
op_case("textract_left_layout", cube, CUBEWIN + alloc("l", "!pto.tile_buf<left, 32x32xf16, slayout=col_major>"),
        "pto.textract ins(%m2, %c0, %c0 : " + MAT32 + ", index, index) outs(%l : !pto.tile_buf<left, 32x32xf16, slayout=col_major>)",
        "'pto.textract' layout: a left dst must be blayout=row_major, slayout=row_major, got row_major/col_major")
op_case("textract_acc_dtype_pair", cube, CUBEWIN + alloc("m32", "!pto.tile_buf<mat, 32x32xf32, blayout=col_major, slayout=row_major>"),
        f"pto.textract ins(%acc, %c0, %c0 : {ACC32}, index, index) outs(%m32 : !pto.tile_buf<mat, 32x32xf32, blayout=col_major, slayout=row_major>)",
        "'pto.textract' dtype pair: acc f32 -> f32; A2/A3 takes f32 -> f16/bf16")
op_case("textract_fp_space", cube, CUBEWIN + alloc("f", "!pto.tile_buf<mat, 1x32xi64>"),
        f"pto.textract ins(%acc, %c0, %c0 : {ACC32}, index, index fp %f : !pto.tile_buf<mat, 1x32xi64>) outs(%m : {MATNZ})",
        "'pto.textract' fp: expects fp to use loc=scaling, got loc=mat")
op_case("textract_relu_vec", vec, WIN, f"pto.textract ins(%a, %c0, %c0 : {V16x16}, index, index) outs(%b : {V8x8}) {{reluPreMode = #pto<relu_pre_mode normal_relu>}}",
        "'pto.textract' relu: reluPreMode needs a loc=acc src, got loc=vec")
op_case("tinsert_bounds", vec, WIN, f"pto.tinsert ins(%b, %c12, %c12 : {V8x8}, index, index) outs(%a : {V16x16})",
        "'pto.tinsert' bounds: row window [12, +8) exceeds the 16 rows of the larger tile")
op_case("tinsert_pair", cube, CUBEWIN, f"pto.tinsert ins(%m2, %c0, %c0 : {MAT32}, index, index) outs(%m : {MATNZ})",
        "'pto.tinsert' memory space: A2/A3 tinsert takes vec -> vec or acc -> mat, got mat -> mat")
op_case("tinsert_acc_layout", cube, CUBEWIN, f"pto.tinsert ins(%acc, %c0, %c0 : {ACC32}, index, index) outs(%m2 : {MAT32})",
        "'pto.tinsert' layout: the mat tile must be blayout=col_major, slayout=row_major, got row_major/row_major")
op_case("tsetval_type", vec, WIN + "%x = arith.constant 1 : i32\n", f"pto.tsetval ins(%c8, %x : index, i32) outs(%a : {V16x16})",
        "'pto.tsetval' type agreement: value i32 must be the tile's element type f32")
op_case("tsetval_bounds", vec, WIN + "%x = arith.constant 1.0 : f32\n%c256 = arith.constant 256 : index\n",
        f"pto.tsetval ins(%c256, %x : index, f32) outs(%a : {V16x16})",
        "'pto.tsetval' bounds: offset 256 is outside the 16x16 tile")
op_case("tgetval_space", cube, CUBEWIN, f"%y = pto.tgetval ins(%m, %c0 : {MATNZ}, index) outs : f16",
        "'pto.tgetval' memory space: src must be loc=vec, got loc=mat")
op_case("tgather_index_dtype", vec, WIN + alloc("i", "!pto.tile_buf<vec, 16x16xf32>"),
        f"pto.tgather ins(%a, %i, %i : {V16x16}, {V16x16}, {V16x16}) outs(%a : {V16x16})",
        "'pto.tgather' dtype: indices must be i32, got f32")
op_case("tgatherb_dst_layout", vec, WIN + alloc("bo", "!pto.tile_buf<vec, 16x16xi32>") + alloc("dn", "!pto.tile_buf<vec, 16x16xf32, blayout=col_major>"),
        f"pto.tgatherb ins(%a, %bo : {V16x16}, !pto.tile_buf<vec, 16x16xi32>) outs(%dn : !pto.tile_buf<vec, 16x16xf32, blayout=col_major>)",
        "'pto.tgatherb' layout: dst must be blayout=row_major, got col_major")
op_case("tgather_index_needs_tmp", vec, WIN + alloc("i", "!pto.tile_buf<vec, 16x16xi32>"),
        f"pto.tgather ins(%a, %i : {V16x16}, !pto.tile_buf<vec, 16x16xi32>) outs(%a : {V16x16})",
        "'pto.tgather' operand type: the A2/A3 index form takes both indices and a tmp tile")
op_case("tgather_form", vec, WIN, f'pto.tgather ins(%a, {{maskPattern = #pto.mask_pattern<P1111>}} : {V16x16}, "row") outs(%b : {V8x8})',
        "'pto.tgather' shape agreement", )
op_case("tgather_mask_axis", vec, WIN, f"pto.tgather ins(%a, {{maskPattern = #pto.mask_pattern<P0101>}} : {V16x16}) outs(%b : {V8x8})",
        "'pto.tgather' operand type: the mask form needs an axis")
op_case("tgather_mask_layout", vec, WIN + alloc("dn", "!pto.tile_buf<vec, 16x8xf32, blayout=col_major>"),
        f'pto.tgather ins(%a, {{maskPattern = #pto.mask_pattern<P0101>}} : {V16x16}, "row") outs(%dn : !pto.tile_buf<vec, 16x8xf32, blayout=col_major>)',
        "'pto.tgather' layout: the mask form takes blayout=row_major src and dst")
op_case("tgather_compare_cmp_mode", vec, WIN + alloc("gi", "!pto.tile_buf<vec, 16x16xi32>") + "%k = arith.constant 0.0 : f32\n",
        "pto.tgather ins(%a, %k, %gi : " + V16x16 + ", f32, !pto.tile_buf<vec, 16x16xi32>) outs(%gi, %gi : !pto.tile_buf<vec, 16x16xi32>, "
        "!pto.tile_buf<vec, 16x16xi32>) {cmpMode = #pto<cmp lt>}",
        "'pto.tgather' cmpMode: the compare form takes cmpMode eq or gt, got lt")
TR_SRC, TR_DST = "!pto.tile_buf<vec, 32x64xf16>", "!pto.tile_buf<vec, 64x32xf16>"
op_case("ttrans_tmp_size", vec, alloc("s", TR_SRC) + alloc("t", "!pto.tile_buf<vec, 16x64xf16>") + alloc("d", TR_DST),
        f"pto.ttrans ins(%s, %t : {TR_SRC}, !pto.tile_buf<vec, 16x64xf16>) outs(%d : {TR_DST})",
        "'pto.ttrans' tmp size: expects the A2/A3 transpose tmp to hold at least 4096 bytes (the src's 32x64xf16), got 2048")
op_case("ttrans_src_layout", vec, alloc("s", "!pto.tile_buf<vec, 32x64xf16, blayout=col_major>") + alloc("d", TR_DST),
        f"pto.ttrans ins(%s : !pto.tile_buf<vec, 32x64xf16, blayout=col_major>) outs(%d : {TR_DST})",
        "'pto.ttrans' layout: expects A2/A3 transpose src to use the row_major blayout")
op_case("ttrans_tmp_dtype", vec, alloc("s", TR_SRC) + alloc("t", "!pto.tile_buf<vec, 32x64xf32>") + alloc("d", TR_DST),
        f"pto.ttrans ins(%s, %t : {TR_SRC}, !pto.tile_buf<vec, 32x64xf32>) outs(%d : {TR_DST})",
        "'pto.ttrans' dtype: src and tmp must share the element type, got f16 and f32")
op_case("tcolexpand_cols", vec, WIN + alloc("r", "!pto.tile_buf<vec, 1x8xf32>"),
        f"pto.tcolexpand ins(%r : !pto.tile_buf<vec, 1x8xf32>) outs(%a : {V16x16})",
        "'pto.tcolexpand' shape agreement: src valid cols 8 != dst valid cols 16")
op_case("tprint_space", cube, CUBEWIN, f"pto.tprint ins(%m : {MATNZ})",
        "'pto.tprint' memory space: a tile printed without tmp must be loc=vec")
op_case("subview_valid_bounds", vec, WIN + "%c9 = arith.constant 9 : index\n",
        f"%s = pto.subview %a[%c0, %c8] sizes [8, 8] valid[%c9, %c8] : {V16x16} -> !pto.tile_buf<vec, 8x8xf32, valid=?x?>",
        "'pto.subview' valid: valid row 9 must be within 0..8 (the subview's shape)")

RB = '%a = pto.reserve_buffer {{name = "f", size = {size}, location = #pto.address_space<{loc}>, auto = {auto}{base}}} -> i32'


def plain(body: str) -> str:
    return "module {\n  func.func @k() {\n" + "\n".join("    " + ln for ln in body.splitlines()) + "\n    return\n  }\n}\n"


case("section_nested", plain("pto.section.cube {\npto.section.vector {\n}\n}"),
     "'pto.section.vector' placement: sections do not nest", "pto.section.vector")
case("reserve_size", plain(RB.format(size=0, loc="vec", auto="true", base="")), "'pto.reserve_buffer' size: size must be positive, got 0", "pto.reserve_buffer")
case("reserve_location", plain(RB.format(size=64, loc="acc", auto="true", base="")), "'pto.reserve_buffer' location: a reserved buffer lives in vec or mat, got acc", "pto.reserve_buffer")
case("reserve_result_type", plain(RB.format(size=64, loc="vec", auto="true", base="").replace("-> i32", "-> i64")),
     "'pto.reserve_buffer' result type: the address is i32, got i64", "pto.reserve_buffer")
case("reserve_base_alignment", plain(RB.format(size=64, loc="vec", auto="false", base=", base = 100")),
     "'pto.reserve_buffer' base: base 100 must be non-negative and aligned to 256 bytes for vec", "pto.reserve_buffer")
case("reserve_base_capacity", plain(RB.format(size=8192, loc="vec", auto="false", base=", base = 196352")),
     "'pto.reserve_buffer' base: reserved range exceeds vec capacity: base 196352 + size 8192 > 196608 bytes", "pto.reserve_buffer")
case("reserve_auto_base", plain(RB.format(size=64, loc="vec", auto="true", base=", base = 0")),
     "'pto.reserve_buffer' base: unexpected 'base' on auto reserve_buffer", "pto.reserve_buffer")
case("reserve_level3_auto", plain("%c0 = arith.constant 0 : i64\n%t = pto.alloc_tile addr = %c0 : !pto.tile_buf<vec, 16x16xf32>\n"
                                  + RB.format(size=64, loc="vec", auto="true", base="")),
     "'pto.reserve_buffer' level3: requires 'auto = false' and an explicit 'base' when --pto-level=level3", "pto.reserve_buffer")
case("import_peer_missing", plain('%b = pto.import_reserved_buffer {name = "f", peer_func = @nowhere} -> i32'),
     "'pto.import_reserved_buffer' peer: no function @nowhere in the module", "pto.import_reserved_buffer")
case("import_peer_name", plain(RB.format(size=64, loc="vec", auto="true", base="") + '\n%b = pto.import_reserved_buffer {name = "g", peer_func = @k} -> i32'),
     "'pto.import_reserved_buffer' peer: @k reserves no buffer named \"g\"", "pto.import_reserved_buffer")
case("import_result_type", plain(RB.format(size=64, loc="vec", auto="true", base="") + '\n%b = pto.import_reserved_buffer {name = "f", peer_func = @k} -> i16'),
     "'pto.import_reserved_buffer' result type: the address is i32, got i16", "pto.import_reserved_buffer")
case("memory_first_writer", vec(alloc("b0", "!pto.tile_buf<vec, 1x32768xf32>") + alloc("b1", "!pto.tile_buf<vec, 1x32768xf32>")
                                + "pto.tadd ins(%b0, %b0 : !pto.tile_buf<vec, 1x32768xf32>, !pto.tile_buf<vec, 1x32768xf32>) outs(%b0 : !pto.tile_buf<vec, 1x32768xf32>)\n"
                                + "pto.tadd ins(%b1, %b1 : !pto.tile_buf<vec, 1x32768xf32>, !pto.tile_buf<vec, 1x32768xf32>) outs(%b1 : !pto.tile_buf<vec, 1x32768xf32>)\n"
                                + "pto.tadd ins(%b0, %b1 : !pto.tile_buf<vec, 1x32768xf32>, !pto.tile_buf<vec, 1x32768xf32>) outs(%b1 : !pto.tile_buf<vec, 1x32768xf32>)"),
     "memory capacity: vec overflow, requires 2097152 bits while 1572864 bits avaliable")
case("castptr_width", plain("%x = arith.constant 0 : i16\n%p = pto.castptr %x : i16 -> !pto.ptr<f32, ub>"),
     "'pto.castptr' operand type: the address must be i32 or i64, got i16", "pto.castptr")
op_case("tand_float", vec, alloc("x", V16x16), f"pto.tand ins(%x, %x : {V16x16}, {V16x16}) outs(%x : {V16x16})",
        "'pto.tand' dtype: pto.tand takes i16/i32 tiles, got f32")
op_case("tnot_float", vec, alloc("x", V16x16), f"pto.tnot ins(%x : {V16x16}) outs(%x : {V16x16})",
        "'pto.tnot' dtype: pto.tnot takes i16/i32 tiles, got f32")


def test_cfg_dominance() -> None:
    """A value from one arm of a cf.cond_br is not visible in the join block; one from the entry block is."""
    body = ("%t = arith.constant true\n%z = arith.constant 0 : i32\ncf.cond_br %t, ^bb1, ^bb2\n^bb1:\n%one = arith.constant 1 : i32\ncf.br ^bb3\n"
            "^bb2:\ncf.br ^bb3\n^bb3:\n%s = arith.addi %z, {v} : i32")
    check_text(vec(body.format(v="%z")))
    with pytest.raises(PtoCheckError, match="%one is used in a block its definition's block does not dominate"):
        check_text(vec(body.format(v="%one")))
