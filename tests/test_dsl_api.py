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


def _cube_kernel(body) -> str:
    km = KernelModule("a3")
    with km.function("k", [("x", ptr_type("f16")), ("n", I64)], kind="cube") as a:
        body(a)
    return print_pto(km.module)


def test_matmul_accumulate_switch() -> None:
    """A bool picks the op when the kernel is built; an i1 picks it at run time (scf.if / else)."""

    def body(a) -> None:
        left = pto.alloc_tile(tile_type("left", 16, 16, "f16", slayout="row_major"), "l")
        right = pto.alloc_tile(tile_type("right", 16, 16, "f16", slayout="col_major"), "r")
        acc = pto.alloc_tile(tile_type("acc", 16, 16, "f32", blayout="col_major", slayout="row_major",
                                       fractal=1024), "c")
        tile.matmul(left, right, out=acc)
        tile.matmul(left, right, out=acc, accumulate=True)
        with pto.range(0, scalar.index_cast(a["n"]), name="k") as k:
            tile.matmul(left, right, out=acc, accumulate=scalar.gt(k, 0, name="later"))
        with pytest.raises(TypeError, match="accumulate must be a bool or an i1"):
            tile.matmul(left, right, out=acc, accumulate=scalar.index_cast(a["n"]))

    text = _cube_kernel(body)
    check_text(text)
    ops = re.findall(r"pto\.tmatmul(?:\.acc)? ins\([^:]*", text)
    assert ops == ["pto.tmatmul ins(%l, %r ", "pto.tmatmul.acc ins(%c, %l, %r ",
                   "pto.tmatmul.acc ins(%c, %l, %r ", "pto.tmatmul ins(%l, %r "]
    assert re.search(r"scf\.if %later \{\s*pto\.tmatmul\.acc[^\n]*\n\s*\} else \{\s*pto\.tmatmul ins", text)


def test_load_of_a_whole_view_says_slice_view() -> None:
    def body(a) -> None:
        data = pto.alloc_tile(tile_type("vec", 16, 64, "f32"), "data")
        view = pto.as_tensor(a["x"], [16, 64], [64, 1])
        with pytest.raises(TypeError, match=r"pto.load takes a window .*pto.slice_view\(view, offsets, sizes\)"):
            pto.load(view, data)
        with pytest.raises(TypeError, match=r"pto.store takes a window"):
            pto.store(data, view)

    _vector_kernel(body)


def test_math_ptoas_refuses_on_a_column_says_reshape() -> None:
    """exp / add / fill of a [16,1] col_major tile name the [1,16] row view; muls and neg (which
    ptoas compiles there) build."""

    def body(_a) -> None:
        col = pto.alloc_tile(tile_type("vec", 16, 1, "f32", blayout="col_major"), "col")
        for call in (lambda: tile.exp(col, out=col), lambda: tile.add(col, col, out=col), lambda: tile.fill(1.0, out=col)):
            with pytest.raises(ValueError, match=r"reshape\(col, 1, 16\)"):
                call()
        tile.muls(col, 0.5, out=col)
        tile.neg(col, out=col)
        tile.exp(tile.reshape(col, 1, 16, name="row"), out=tile.reshape(col, 1, 16))

    text = _vector_kernel(body)
    assert "arith.constant 5.000000e-01 : f32" in text and "pto.tmuls" in text and "pto.texp ins(%row" in text


_COLUMN = "!pto.tile_buf<vec, 16x1xf32, blayout=col_major>"
# The one-tile-type ops of the op table that take f32 tiles: ptoas is asked about each on a column.
_COLUMN_OPS = [spec for family in ("elementwise", "unary", "with a scalar") for spec in FAMILIES[family]]


def _column_kernel(spec) -> str:
    """A vector kernel applying `spec`'s op to [16,1] col_major f32 tiles."""
    sources = ", ".join("%s" if n in spec.scalars else "%a" for n in spec.sources)
    types = ", ".join("f32" if n in spec.scalars else _COLUMN for n in spec.sources)
    out = "%a" if spec.name == "axpy" else "%b"  # (taxpy reads its dst)
    return f"""module attributes {{"pto.target_arch" = "a3"}} {{
  func.func @k() attributes {{pto.kernel_kind = #pto.kernel_kind<vector>}} {{
    %s = arith.constant 2.0 : f32
    %a = pto.alloc_tile : {_COLUMN}
    %b = pto.alloc_tile : {_COLUMN}
    {spec.op.name} ins({sources} : {types}) outs({out} : {_COLUMN})
    return
  }}
  func.func @e() attributes {{pto.entry}} {{
    func.call @k() : () -> ()
    return
  }}
}}
"""


@pytest.mark.ptoas
@pytest.mark.parametrize("spec", _COLUMN_OPS, ids=lambda s: s.name)
def test_the_api_refuses_on_a_column_exactly_what_ptoas_refuses(spec, tmp_path) -> None:
    import subprocess

    from ptofa.launch.toolchain import locate_tools

    path = tmp_path / "k.pto"
    path.write_text(_column_kernel(spec))
    done = subprocess.run([locate_tools()[0].ptoas, "--pto-arch=a3", str(path), "-o", str(tmp_path / "k.cpp")],
                          capture_output=True, text=True, timeout=120)
    refused_for_layout = done.returncode != 0 and "row" in done.stderr and "major" in done.stderr
    assert refused_for_layout == spec.row_major_only, f"{spec.name}: ptoas says {done.stderr.strip()[:300]}"


@pytest.mark.parametrize("spec", _COLUMN_OPS, ids=lambda s: s.name)
def test_check_refuses_on_a_column_exactly_what_the_api_refuses(spec) -> None:
    """`run_fa check --ptoas-only`'s verifier and the api agree on which ops take a col_major tile
    (the api's rows are the ones ptoas was asked about, above)."""
    from ptofa.ir.textio import PtoCheckError, check_text

    try:
        check_text(_column_kernel(spec), launch_rules=False)
        refused = None
    except PtoCheckError as exc:
        refused = str(exc)
    assert (refused is not None and "row_major" in refused) == spec.row_major_only, refused


@pytest.mark.parametrize("spec", [s for specs in FAMILIES.values() for s in specs], ids=lambda s: s.name)
def test_each_table_row_fills_its_ops_operands(spec) -> None:
    """A row's sources are the op's required operands (in order, less the destination), and it
    offers `tmp=` exactly when the op has a scratch operand."""
    from xdsl.irdl import OptOperandDef

    operands = spec.op.get_irdl_definition().operands
    required = [name for name, od in operands if name not in ("dst_", "dst", "tmp", "scratch")
                and not isinstance(od, OptOperandDef)]
    assert len(required) == len(spec.sources), f"tile.{spec.name}{spec.sources} for {spec.op.name}{required}"
    assert (spec.tmp is not None) == any(name in ("tmp", "scratch") for name, _ in operands)


def _new_names_kernel() -> str:
    """One vector kernel through names the api lacked before (sqrt, rsqrt, recip, ...), simulated in
    `test_new_names_run_on_the_simulator`."""
    km = KernelModule("a3")
    args = [("x", ptr_type("f32")), ("y", ptr_type("f32"))]
    with km.function("k", args, entry=True) as a:
        pto.call("k_vec", [a["x"], a["y"]])
    with km.function("k_vec", args, kind="vector") as a:
        x, y, t = (pto.alloc_tile(tile_type("vec", 8, 64, "f32"), n) for n in ("xt", "yt", "tt"))
        col = pto.alloc_tile(tile_type("vec", 8, 1, "f32", blayout="col_major"), "col")
        row = pto.alloc_tile(tile_type("vec", 1, 64, "f32"), "row")
        x_all, y_all = (pto.as_tensor(a[n], [8, 64], [64, 1]) for n in ("x", "y"))
        pto.load(pto.slice_view(x_all, [0, 0], [8, 64]), x)
        tile.abs(x, out=t)
        tile.adds(t, 1.0, out=t)                      # t = |x| + 1 > 0
        tile.sqrt(t, out=y)                           # y = sqrt(t)
        tile.rsqrt(t, out=x)                          # x = 1 / sqrt(t)
        tile.mul(y, x, out=y)                         # y = 1
        tile.recip(t, out=x)                          # x = 1 / t
        tile.add(y, x, out=y)                         # y = 1 + 1/t
        tile.neg(y, out=y)
        tile.relu(y, out=x)                           # x = 0
        tile.row_min(y, out=col, tmp=t)               # col = min_j y
        tile.row_expand_sub(y, col, out=y)            # y - its row min
        tile.col_max(y, out=row)
        tile.col_expand_add(y, row, out=y)            # + the column max
        tile.add(y, x, out=y)
        pto.store(y, pto.slice_view(y_all, [0, 0], [8, 64]))
    return print_pto(km.module)


def test_new_names_run_on_the_simulator() -> None:
    import torch

    from ptofa.launch.kernel import run_kernel

    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    y = torch.full_like(x, float("nan"))
    run_kernel(_new_names_kernel(), {"x": x, "y": y}, 1, backend="sim", timing=False)
    t = x.abs() + 1
    z = -(1 + 1 / t)
    z = z - z.min(-1, keepdim=True).values
    assert torch.allclose(y, z + z.max(0, keepdim=True).values, atol=1e-5)


@pytest.mark.ptoas
def test_new_names_compile_with_ptoas(tmp_path) -> None:
    import subprocess

    from ptofa.launch.toolchain import compile_commands

    path = tmp_path / "k.pto"
    path.write_text(_new_names_kernel())
    done = subprocess.run(compile_commands(path, tmp_path)[0], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
