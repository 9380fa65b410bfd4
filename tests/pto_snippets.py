"""Small `.pto` modules for the dialect tests: a snippet wrapped in a module that passes
the module rules (one `pto.entry` calling `set_ffts` first), and a cube/vector pair with
two global-entry pipes (id 0 QK C2V f32, id 1 P V2C f16, split 1, half descriptors).
"""

from __future__ import annotations

from ptofa.ir.textio import PtoCheckError, check_text, print_pto

ENTRY = """  func.func @entry(%ffts: !pto.ptr<i64>) attributes {pto.entry} {
    pto.set_ffts %ffts : !pto.ptr<i64>
    return
  }
"""
# Lines before a snippet's first line in `wrap`: `module {`, 4 entry lines, `func.func @k`.
WRAP_FIRST_BODY_LINE = 7


def wrap(body: str, kind: str = "vector", args: str = "") -> str:
    """`body` inside a kernel function of `kind`, next to a valid entry."""
    body = "\n".join("    " + line.strip() for line in body.strip().splitlines())
    return (
        "module {\n" + ENTRY
        + f"  func.func @k({args}) attributes {{pto.kernel_kind = #pto.kernel_kind<{kind}>}} {{\n"
        + f"{body}\n    return\n  }}\n}}\n"
    )


QK = "!pto.tensor_view<128x128xf32>"
QKH = "!pto.tensor_view<64x128xf32>"
PP = "!pto.tensor_view<128x128xf16>"
PPH = "!pto.tensor_view<64x128xf16>"

CUBE_PRE = f"""%c1 = arith.constant 1 : index
%c128 = arith.constant 128 : index
%qk_slot = pto.make_tensor_view %f, shape = [%c128, %c128], strides = [%c128, %c1] : {QK}
%p_slot = pto.make_tensor_view %h, shape = [%c128, %c128], strides = [%c128, %c1] : {PP}
pto.aic_initialize_pipe {{id = 0, dir_mask = 1, slot_size = 65536}} (gm_slot_tensor = %qk_slot : {QK})
pto.aic_initialize_pipe {{id = 1, dir_mask = 2, slot_size = 32768}} (gm_slot_tensor = %p_slot : {PP})
"""
VEC_PRE = f"""%c1 = arith.constant 1 : index
%c64 = arith.constant 64 : index
%c128 = arith.constant 128 : index
%qk_slot = pto.make_tensor_view %f, shape = [%c64, %c128], strides = [%c128, %c1] : {QKH}
%p_slot = pto.make_tensor_view %h, shape = [%c64, %c128], strides = [%c128, %c1] : {PPH}
pto.aiv_initialize_pipe {{id = 0, dir_mask = 1, slot_size = 65536}} (gm_slot_tensor = %qk_slot : {QKH})
pto.aiv_initialize_pipe {{id = 1, dir_mask = 2, slot_size = 32768}} (gm_slot_tensor = %p_slot : {PPH})
"""
CUBE_BODY = f"""%e = pto.talloc_to_aiv {{id = 0, split = 1}} -> {QK}
pto.tpush_to_aiv(%e : {QK}) {{id = 0, split = 1}}
%g = pto.tpop_from_aiv {{id = 1, split = 1}} -> {PP}
pto.tfree_from_aiv(%g : {PP}) {{id = 1, split = 1}}
"""
VEC_BODY = f"""%e = pto.tpop_from_aic {{id = 0, split = 1}} -> {QKH}
pto.tfree_from_aic(%e : {QKH}) {{id = 0, split = 1}}
%g = pto.talloc_to_aic {{id = 1, split = 1}} -> {PPH}
pto.tpush_to_aic(%g : {PPH}) {{id = 1, split = 1}}
"""


def _func(name: str, kind: str, body: str) -> str:
    body = "\n".join("    " + line.strip() for line in body.strip().splitlines())
    return (
        f"  func.func @{name}(%f: !pto.ptr<f32>, %h: !pto.ptr<f16>) "
        f"attributes {{pto.kernel_kind = #pto.kernel_kind<{kind}>}} {{\n{body}\n    return\n  }}\n"
    )


def pipes(cube: str = CUBE_PRE + CUBE_BODY, vec: str = VEC_PRE + VEC_BODY) -> str:
    """A module with the entry, a cube function and a vector function."""
    return "module {\n" + ENTRY + _func("cube", "cube", cube) + _func("vec", "vector", vec) + "}\n"


def roundtrip(text: str) -> str:
    """check_text, print, and print(parse(print)) == print; returns the printed text."""
    printed = print_pto(check_text(text).module)
    again = print_pto(check_text(printed).module)
    assert again == printed
    return printed


def errors_of(text: str) -> list[tuple[int, str]]:
    """The (line, message) errors of `check_text(text)`; fails the test when it passes."""
    try:
        check_text(text)
    except PtoCheckError as exc:
        return exc.errors
    raise AssertionError("expected a PtoCheckError, the text verified:\n" + text)


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing `needle`."""
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in text")



_ACC16 = "!pto.tile_buf<acc, 16x16xf32, blayout=col_major, slayout=row_major, fractal=1024>"
_MAT16 = "!pto.tile_buf<mat, 16x16xf32, blayout=col_major, slayout=row_major>"
_VEC16 = "!pto.tile_buf<vec, 16x16xf32>"
# A bidirectional local (reserved-buffer) pipe with tile entries, the form of PTOAS's
# test/lit/pto/tpush_tpop_frontend_lowering_a3.pto.
LOCAL_PIPES = ("module {\n" + ENTRY + f"""  func.func @cube(%f: !pto.ptr<f32>) attributes {{pto.kernel_kind = #pto.kernel_kind<cube>}} {{
    %v2c = pto.reserve_buffer {{name = "v2c_fifo", size = 4096, location = #pto.address_space<mat>, auto = true}} -> i32
    %c2v = pto.import_reserved_buffer {{name = "c2v_fifo", peer_func = @vec}} -> i32
    pto.aic_initialize_pipe {{id = 0, dir_mask = 3, slot_size = 1024}} (gm_slot_buffer = %f : !pto.ptr<f32>, c2v_consumer_buf = %c2v : i32, v2c_consumer_buf = %v2c : i32)
    %acc = pto.alloc_tile : {_ACC16}
    pto.tpush_to_aiv(%acc : {_ACC16}) {{id = 0, split = 0}}
    %m = pto.tpop_from_aiv {{id = 0, split = 0}} -> {_MAT16}
    pto.tfree_from_aiv {{id = 0, split = 0}}
    return
  }}
  func.func @vec(%f: !pto.ptr<f32>) attributes {{pto.kernel_kind = #pto.kernel_kind<vector>}} {{
    %c2v = pto.reserve_buffer {{name = "c2v_fifo", size = 4096, location = #pto.address_space<vec>, auto = true}} -> i32
    %v2c = pto.import_reserved_buffer {{name = "v2c_fifo", peer_func = @cube}} -> i32
    pto.aiv_initialize_pipe {{id = 0, dir_mask = 3, slot_size = 1024}} (gm_slot_buffer = %f : !pto.ptr<f32>, c2v_consumer_buf = %c2v : i32, v2c_consumer_buf = %v2c : i32)
    %r = pto.tpop_from_aic {{id = 0, split = 0}} -> {_VEC16}
    pto.tfree_from_aic {{id = 0, split = 0}}
    %v = pto.alloc_tile : {_VEC16}
    pto.tpush_to_aic(%v : {_VEC16}) {{id = 0, split = 0}}
    return
  }}
}}
""")

_ACC16I = "!pto.tile_buf<acc, 16x16xi32, blayout=col_major, slayout=row_major, fractal=1024>"
_SCALING = "!pto.tile_buf<scaling, 1x32xui64>"
_EPI = "#pto.acc_push_epilogue<layout = nz2nd, quant = {quant}, relu = no_relu>"
# Fixpipe pipes: an ACC tile pushed through the FIX pipe's dequantization (acc_push_epilogue),
# its payload set by set_quant_scalar / set_quant_vector, the form of PTOAS's
# test/lit/pto/fixpipe_frontend_emitc_scalar_vector_quant_a3.pto.
FIXPIPE = ("module {\n" + f"""  func.func @cube(%f: !pto.ptr<f16>, %g: !pto.ptr<f16>) attributes {{pto.kernel_kind = #pto.kernel_kind<cube>}} {{
    %z = arith.constant 0 : i32
    %scale = arith.constant 1.0 : f32
    %b0 = pto.import_reserved_buffer {{name = "q0", peer_func = @vec}} -> i32
    %b1 = pto.import_reserved_buffer {{name = "q1", peer_func = @vec}} -> i32
    pto.aic_initialize_pipe {{id = 0, dir_mask = 1, slot_size = 512, nosplit = true, acc_push_epilogue = {_EPI.format(quant="deqf16_scalar")}}} (gm_slot_buffer = %f : !pto.ptr<f16>, c2v_consumer_buf = %b0 : i32, v2c_consumer_buf = %z : i32)
    pto.aic_initialize_pipe {{id = 1, dir_mask = 1, slot_size = 512, nosplit = true, acc_push_epilogue = {_EPI.format(quant="deqf16_vec")}}} (gm_slot_buffer = %g : !pto.ptr<f16>, c2v_consumer_buf = %b1 : i32, v2c_consumer_buf = %z : i32)
    %acc = pto.alloc_tile : {_ACC16I}
    %fp = pto.alloc_tile : {_SCALING}
    pto.set_quant_scalar(%scale : f32) {{id = 0}}
    pto.tpush_to_aiv(%acc : {_ACC16I}) {{id = 0, split = 0}}
    pto.set_quant_vector(%fp : {_SCALING}) {{id = 1}}
    pto.tpush_to_aiv(%acc : {_ACC16I}) {{id = 1, split = 0}}
    return
  }}
  func.func @vec(%f: !pto.ptr<f16>, %g: !pto.ptr<f16>) attributes {{pto.kernel_kind = #pto.kernel_kind<vector>}} {{
    %z = arith.constant 0 : i32
    %b0 = pto.reserve_buffer {{name = "q0", size = 4096, location = #pto.address_space<vec>, auto = true}} -> i32
    %b1 = pto.reserve_buffer {{name = "q1", size = 4096, location = #pto.address_space<vec>, auto = true}} -> i32
    pto.aiv_initialize_pipe {{id = 0, dir_mask = 1, slot_size = 512, nosplit = true, acc_push_epilogue = {_EPI.format(quant="deqf16_scalar")}}} (gm_slot_buffer = %f : !pto.ptr<f16>, c2v_consumer_buf = %b0 : i32, v2c_consumer_buf = %z : i32)
    pto.aiv_initialize_pipe {{id = 1, dir_mask = 1, slot_size = 512, nosplit = true, acc_push_epilogue = {_EPI.format(quant="deqf16_vec")}}} (gm_slot_buffer = %g : !pto.ptr<f16>, c2v_consumer_buf = %b1 : i32, v2c_consumer_buf = %z : i32)
    %r0 = pto.tpop_from_aic {{id = 0, split = 0}} -> !pto.tile_buf<vec, 16x16xf16>
    %r1 = pto.tpop_from_aic {{id = 1, split = 0}} -> !pto.tile_buf<vec, 16x16xf16>
    pto.tfree_from_aic {{id = 0, split = 0}}
    pto.tfree_from_aic {{id = 1, split = 0}}
    return
  }}
}}
""")
