"""The `tile.*` op table of docs/writing-a-kernel.md, generated from `ptofa.api`, and the dialect's
tile ops left without a public name (`IR_ONLY`, each with why). `scripts/op_table.py` writes the
table into the page; `tests/test_docs.py` holds both to the api and the dialect."""

from __future__ import annotations

import inspect
import re

from ptofa.api import FAMILIES, tile

# The hand-written `tile.*` functions, by family (the table's rows are in `ptofa.api.FAMILIES`).
HAND_WRITTEN = {
    "cube": ["mov", "matmul", "matmul_bias"],
    "conversions, compares, index tiles, padding": ["cvt", "cmps", "cmp", "tri", "ci", "fillpad", "col_sum", "trans"],
    "views, valid shapes": ["get_val", "reshape", "subview", "set_valid"],
}


# The dialect's tile ops without a `tile.*` / `pto.*` name, each with why: a kernel that needs one
# builds it from `ptofa.ir.dialect` (`tests/test_docs.py` holds this list to the dialect).
IR_ONLY = {
    "pto.tgather": "three A2/A3 forms (mask pattern, index tile, top-k) with different operands",
    "pto.tscatter": "two forms (index tile, mask pattern) with different operands",
    "pto.mgather": "a GM gather through an index tile, with coalesce / out-of-bounds modes",
    "pto.mscatter": "a GM scatter through an index tile, with atomic / conflict modes",
    "pto.tmrgsort": "a variadic merge sort with an optional count result",
    "pto.tpartargmax": "two outputs (values and their indices)",
    "pto.tpartargmin": "two outputs (values and their indices)",
    "pto.tquant": "two outputs (the quantised tile and an optional scratch) and a quant-type mode",
    "pto.set_quant_vector": "the quantisation state of tquant",
    "pto.tprint": "a debug print on the device",
    "pto.tprefetch": "a GM prefetch hint",
    "pto.tsync": "hand-written synchronisation (ptoas inserts the kernel's synchronisation)",
    "pto.alloc_multi_tile": "multi-buffer tiles (a kernel allocates one tile per buffer instead)",
    "pto.multi_tile_get": "multi-buffer tiles",
    "pto.get_validshape": "a tile's runtime valid shape as values (kernels keep the values they set)",
    "pto.declare_tile": "ptoas's internal `!pto.pipe` handle form (kernels use the global-entry pipes, "
                        "`pto.talloc` / `tpush` / `tpop` / `tfree`)",
    "pto.talloc": "ptoas's internal `!pto.pipe` handle form",
    "pto.tpush": "ptoas's internal `!pto.pipe` handle form",
    "pto.tpop": "ptoas's internal `!pto.pipe` handle form",
    "pto.tfree": "ptoas's internal `!pto.pipe` handle form",
}


def op_table_markdown() -> str:
    """The `tile.*` op table of docs/writing-a-kernel.md: one row per public name (the call, what it
    computes and whether ptoas refuses it on a col_major tile, the PTO op it emits), by family."""
    lines = ["| call | computes | PTO op |", "|---|---|---|"]
    column_refused = {spec.name for specs in FAMILIES.values() for spec in specs if spec.row_major_only}
    rows = [(family, [getattr(tile, name) for name in names]) for family, names in HAND_WRITTEN.items()]
    rows += [(family, [getattr(tile, spec.name) for spec in specs]) for family, specs in FAMILIES.items()]
    for family, functions in rows:
        lines.append(f"| **{family}** | | |")
        for fn in functions:
            doc = " ".join(fn.__doc__.split())
            ops = " / ".join(f"`{op}`" for op in dict.fromkeys(re.findall(r"`(pto\.[a-z0-9_.]+)`", doc)))
            first = re.split(r"\.\s+(?=[A-Z`])", doc)[0].rstrip(".")
            computes = re.sub(r" \(`pto\.[^)]*\)", "", first).replace("|", "\\|")
            computes += "; row-major tiles only (ptoas)" if fn.__name__ in column_refused else ""
            lines.append(f"| `tile.{fn.__name__}{_plain_signature(fn)}` | {computes} | {ops} |")
    return "\n".join(lines) + "\n"


def _plain_signature(fn) -> str:
    """`(a, b, out, *, accumulate=False)`: the parameters without annotations."""
    parts, keyword_only = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY and not keyword_only:
            parts.append("*")
            keyword_only = True
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return f"({', '.join(parts)})"


