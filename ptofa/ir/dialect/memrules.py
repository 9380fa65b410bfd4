"""Rules and parsing helpers the memory family's ops share (`memory.py`): tile layouts, the
view/tile rules of tload and tstore, scalar-pointer operands."""

from __future__ import annotations

from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.parser import Parser

from ptofa.ir.dialect.base import _fail
from ptofa.ir.dialect.types import DYN, PartitionTensorViewType, PtrType, TileBufType, _dims_str, elem_bytes, elem_name


def tile_layout(t: TileBufType) -> str:
    """ND, DN, NZ or ZN (pto-ir.md 6.4), or the raw `blayout/slayout` pair for other boxed layouts."""
    return {
        ("row_major", "none_box"): "ND", ("col_major", "none_box"): "DN",
        ("col_major", "row_major"): "NZ", ("row_major", "col_major"): "ZN",
    }.get((t.blayout.data, t.slayout.data), f"{t.blayout.data}/{t.slayout.data}")


# GM layout -> tile layouts a TLOAD/TSTORE can pair it with (pto-isa docs/isa/TLOAD: Vec tiles
# only ND->ND, DN->DN, NZ->NZ; Mat tiles also ND->NZ and DN->ZN).
_GM_TILE_LAYOUTS = {
    "vec": {"nd": ("ND",), "dn": ("DN",), "nz": ("NZ",)},
    "mat": {"nd": ("ND", "NZ"), "dn": ("DN", "ZN"), "nz": ("NZ",)},
}


_LOAD_STORE_ELEMS = ("i8", "ui8", "i16", "ui16", "i32", "ui32", "i64", "ui64", "f16", "bf16", "f32")


def _check_view_tile(op: Operation, view: PartitionTensorViewType, tile: TileBufType, allow_convert: bool = False) -> None:
    """ptoas's A2/A3 tload / tstore rules between the view and the tile (PTOAS TLoadOp::verify,
    TStoreOp::verify): positive static view dims, a loadable element type of the same size
    (an acc store converts), and for a store equal static element counts (a 1x1024 view
    may take a 32x32 tile). A load leaves the shapes unrelated: pto-isa asserts at run time
    that the tile's valid shape is the view's, which the simulator checks."""
    if any(dim != DYN and dim <= 0 for dim in view.dims):
        _fail(op, "shape agreement", f"view dims {_dims_str(view.dims)} must be positive")
    if DYN not in tile.valid and min(tile.valid) < 0:
        _fail(op, "shape agreement", f"tile valid shape {_dims_str(tile.valid)} must be non-negative")
    if not allow_convert:
        if tile.elem not in _LOAD_STORE_ELEMS:
            _fail(op, "dtype", f"A2/A3 {op.name[4:]} moves i8/i16/i32/i64/f16/bf16/f32 tiles, got {tile.elem}")
        if elem_bytes(view.elem) != elem_bytes(tile.dtype):
            _fail(op, "dtype", f"view element {elem_name(view.elem)} and tile element {tile.elem} differ in size")
    if op.name != "pto.tstore" or DYN in view.dims or DYN in tile.valid:
        return
    count = 1
    for dim in view.dims:
        count *= dim
    if count != tile.valid[0] * tile.valid[1]:
        _fail(op, "shape agreement", f"view {_dims_str(view.dims)} holds {count} elements, the tile's valid "
              f"{_dims_str(tile.valid)} {tile.valid[0] * tile.valid[1]}; a store needs equal counts")


def _parse_ptr_type(parser: Parser) -> Attribute:
    """`!pto.ptr<T>`, or ptoas's elided `<T>` (its addptr prints the pointer types unqualified)."""
    if parser._current_token.text == "<":
        return PtrType.new(PtrType.parse_parameters(parser))
    return parser.parse_type()


def _parse_ptr_index(parser: Parser) -> tuple:
    ptr = parser.parse_unresolved_operand()
    parser.parse_punctuation("[")
    index = parser.parse_unresolved_operand()
    parser.parse_punctuation("]")
    return ptr, index


_SCALAR_ELEMS = ("f16", "bf16", "f32", "i8", "i16", "i32", "i64", "index")


def _check_scalar_ptr(op: Operation, ptr: SSAValue, value_type: Attribute) -> None:
    pt = ptr.type
    assert isinstance(pt, PtrType)
    if elem_name(pt.elem) != elem_name(value_type):
        _fail(op, "type agreement", f"pointer {pt} and scalar {value_type} differ in element type")
    if elem_name(value_type) not in _SCALAR_ELEMS:
        _fail(op, "element type", f"{elem_name(value_type)} is not a scalar type ptoas loads ({', '.join(_SCALAR_ELEMS)})")
