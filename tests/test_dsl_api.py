"""The kernel author's surface, `ptofa.api`, is consistent (issue 33 item 6).

* A scratch tile is always the keyword argument `tmp=` after `out`, on every `tile.*` op
  whose dialect op takes one (required where the A2/A3 lowering needs it), so a call in the
  old order can never bind a scratch tile to `out`.
* A tile whose valid shape is set at run time is declared dynamic in one place: its type, or
  the SSA values given to `alloc_tile(valid=...)`.
"""

from __future__ import annotations

import inspect
import re

import pytest
from xdsl.ir import SSAValue

from ptofa.api import F32, FAMILIES, I64, KernelModule, pto, ptr_type, scalar, tile, tile_type
from ptofa.ir import dialect as d
from ptofa.ir.target import EXPDIF_TMP_BYTES
from ptofa.ir.textio import check_text, print_pto

REQUIRED_TMP = {"row_max", "row_min", "row_sum", "row_prod", "row_expand_expdif", "trans"}


def _tile_ops() -> dict[str, tuple[object, type]]:
    """Each `tile.*` builder and the dialect op it builds (a row of the op table, or read from the
    source of a hand-written one)."""
    ops = {spec.name: (getattr(tile, spec.name), spec.op) for specs in FAMILIES.values() for spec in specs}
    for name, member in vars(tile).items():
        if isinstance(member, staticmethod) and name not in ops:
            m = re.search(r"d\.(T\w+Op)\b", inspect.getsource(member.__func__))
            if m:
                ops[name] = (member.__func__, getattr(d, m.group(1)))
    return ops


def test_the_tile_ops_are_found() -> None:
    ops = _tile_ops()
    assert {"row_max", "row_sum", "row_expand_div", "cvt", "trans", "sel", "ci", "add", "sqrt", "rsqrt"} <= set(ops)


@pytest.mark.parametrize("name", sorted(_tile_ops()))
def test_scratch_is_keyword_only_tmp_wherever_the_op_takes_one(name: str) -> None:
    fn, op = _tile_ops()[name]
    params = inspect.signature(fn).parameters
    if not getattr(op, "HAS_TMP", False):
        assert "tmp" not in params, f"tile.{name}: {op.__name__} takes no scratch tile"
        return
    assert "tmp" in params, f"tile.{name}: {op.__name__} takes a scratch tile, the builder has no tmp="
    tmp = params["tmp"]
    assert tmp.kind is inspect.Parameter.KEYWORD_ONLY, f"tile.{name}: tmp must be keyword-only"
    assert (tmp.default is inspect.Parameter.empty) == (name in REQUIRED_TMP), \
        f"tile.{name}: tmp is required exactly where the A2/A3 lowering needs one"


@pytest.mark.parametrize("name", sorted(_tile_ops()))
def test_sources_then_out_then_keyword_options(name: str) -> None:
    """One argument order: the positional parameters end with `out`; options and `tmp` are keywords."""
    fn, _ = _tile_ops()[name]
    params = inspect.signature(fn).parameters
    if "out" not in params:  # a view or a scalar: the op returns its result
        assert name in ("reshape", "subview", "get_val")
        return
    positional = [p.name for p in params.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional[-1] == "out", f"tile.{name}{inspect.signature(fn)}: `out` closes the positional operands"


def _vector_kernel(body) -> str:
    km = KernelModule("a3")
    with km.function("k", [("x", ptr_type("f32")), ("n", I64)], kind="vector") as a:
        body(a)
    return print_pto(km.module)


def test_old_argument_order_is_refused_not_misbound() -> None:
    """`row_max(src, tmp, out)` (the order before) cannot bind the scratch tile to `out`."""

    def body(_a) -> None:
        src = pto.alloc_tile(tile_type("vec", 16, 64, "f32"), "src")
        scratch = pto.alloc_tile(tile_type("vec", 16, 64, "f32"), "scratch")
        col = pto.alloc_tile(tile_type("vec", 16, 1, "f32", blayout="col_major"), "col")
        with pytest.raises(TypeError):
            tile.row_max(src, scratch, col)
        with pytest.raises(TypeError, match="out"):
            tile.row_sum(src, scratch, out=col)
        with pytest.raises(TypeError):
            tile.trans(src, col, scratch)

    _vector_kernel(body)


@pytest.mark.parametrize("op", ["row_expand_div", "row_expand_add", "row_expand_sub", "row_expand_mul"])
def test_a_given_tmp_reaches_the_op(op: str) -> None:
    def body(_a) -> None:
        src = pto.alloc_tile(tile_type("vec", 16, 64, "f32"), "src")
        col = pto.alloc_tile(tile_type("vec", 16, 1, "f32", blayout="col_major"), "col")
        scratch = pto.alloc_tile(tile_type("vec", 1, EXPDIF_TMP_BYTES // 4, "f32"), "scratch")
        getattr(tile, op)(src, col, out=src, tmp=scratch)
        getattr(tile, op)(src, col, out=src)

    text = _vector_kernel(body)
    check_text(text, "tmp.pto")
    lines = [line for line in text.splitlines() if f"pto.t{op.replace('_', '')}" in line]
    assert len(lines) == 2
    with_tmp, without = lines
    assert "%scratch" in with_tmp and "%scratch" not in without


def _alloc_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "pto.alloc_tile" in line]


def test_a_dynamic_tile_is_declared_once_either_way() -> None:
    """SSA dims at alloc_tile make the type dynamic there; a `?` type starts full without valid=."""

    def at_alloc(a) -> None:
        n = scalar.index_cast(a["n"], name="n")
        pto.alloc_tile(tile_type("vec", 16, 64, "f32"), "t", valid=(n, 64))

    text = _vector_kernel(at_alloc)
    check_text(text, "alloc.pto")
    (line,) = _alloc_lines(text)
    assert "valid=?x64>" in line, line
    assert "valid_row = %n" in line and "valid_col" not in line, line

    def in_type(_a) -> None:
        t = pto.alloc_tile(tile_type("vec", 16, 64, "f32", valid="dynamic"), "t")
        assert isinstance(t, SSAValue)
        tile.set_valid(t, 8, 64)

    text = _vector_kernel(in_type)
    check_text(text, "type.pto")
    (line,) = _alloc_lines(text)
    assert "valid=?x?>" in line and "valid_row" in line and "valid_col" in line, line


def test_a_static_dim_said_twice_must_agree() -> None:
    def body(_a) -> None:
        with pytest.raises(ValueError, match=r"valid cols 32 != the type's static 64"):
            pto.alloc_tile(tile_type("vec", 16, 64, "f32"), "t", valid=(16, 32))
        with pytest.raises(ValueError, match=r"valid rows 20 is outside the tile's 0..16"):
            pto.alloc_tile(tile_type("vec", 16, 64, "f32", valid="dynamic"), "t", valid=(20, 64))

    _vector_kernel(body)


def test_the_public_names_still_import() -> None:
    from ptofa.api import F32 as f32, KernelModule as km, pto as p, scalar as s, tile as t, tile_type as tt  # noqa: F401

    assert f32 is F32
