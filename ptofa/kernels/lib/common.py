"""What the library's kernels share: the entry that calls one core kind's function, and the
persistent loop that deals row chunks out to the vector cores."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from xdsl.dialects import builtin
from xdsl.ir import Attribute, SSAValue

from ptofa.api import KernelModule, pto, scalar


def one_kind_kernel(entry: str, args: Sequence[tuple[str, Attribute]], kind: str,
                    body: Callable[[dict[str, SSAValue]], None]) -> builtin.ModuleOp:
    """A module whose entry `entry(args)` only calls `{entry}_vec` (`kind="vector"`) or `{entry}_cube`,
    a function taking the same arguments; no pipes, so no `set_ffts`."""
    km = KernelModule("a3")
    callee = f"{entry}_{'vec' if kind == 'vector' else kind}"
    with km.function(entry, args, entry=True) as a:
        pto.call(callee, [a[name] for name, _ in args])
    with km.function(callee, args, kind=kind) as a:
        body(a)
    return km.module


@contextlib.contextmanager
def row_chunks(rows: SSAValue, chunk: int) -> Iterator[tuple[SSAValue, SSAValue]]:
    """The chunks of `chunk` rows this vector core owns, in a strided (persistent) loop over the
    `block_num * 2` vector cores: yields (first row, valid rows); the last chunk may be ragged."""
    cores = scalar.mul(pto.get_block_num(), 2, name="cores")
    core = scalar.add(scalar.mul(pto.get_block_idx(), 2), pto.get_subblock_idx(), name="core")
    with pto.range(core, scalar.ceildiv(rows, chunk, name="chunks"), cores, name="chunk") as c:
        first = scalar.mul(c, chunk, name="first_row")
        yield first, scalar.min(scalar.sub(rows, first), chunk, name="valid_rows")
