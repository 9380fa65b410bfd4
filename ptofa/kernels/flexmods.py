"""FlexAttention's `score_mod` / `mask_mod` traced from Python and lowered to the softmax's vector ops.

    mod = trace_score_mod(lambda score, b, h, q_idx, kv_idx: score + bias[h])   # a `mods.Mod`

`make_fx` traces the callable over one-element index tensors (as torch's FlexAttention runs it
elementwise under vmap), giving an aten graph. Every value of the graph is one of five kinds, by
what it depends on:

    const   a Python number           scalar  b or h only: an index (or a GM f32 load)
    row     q_idx only: a [1, rows] f32 tile (a column view broadcasts it over the slice's columns)
    col     kv_idx only: a [1, cols] f32 tile (broadcast over the rows with `tcolexpand*`)
    full    the score, or a mix of row and col: a [rows, cols] f32 tile

so a document mask `doc[q_idx] == doc[kv_idx]` costs two one-row loads and one full-tile pass,
not a full tile per index. Integers (indices, booleans, integer tensors the mods capture) are held
exactly in f32 below 2^24 (the host checks captured integer tensors). Comparisons need integer
operands and become clamps of a difference (a >= b: clamp(a - b + 1, 0, 1)); `where` with one
-inf branch adds the softmax's mask value where the condition is 0. An aten op outside
`LOWERING`, or a form this scheme cannot express (a captured tensor indexed by a computed index,
a float comparison), raises NotImplementedError naming it.

Tensors a mod captures become f32 kernel arguments (`<prefix>c<j>`), read with `load_scalar`
(indexed by b / h) or as one row (the last index q_idx or kv_idx, the others b / h); the host pads
their last dim by `CAPTURE_PAD` (`captured_args`) so a slice's row load never leaves the tensor.

The backward kernels (`emit_backward`) run the same walk on their recomputed scores and carry beside
each value its tangent, d(value) / d(score) (forward-mode differentiation through the graph, one rule
per op: sum, product and quotient rules, exp' = exp, tanh' = 1 - tanh^2, sigmoid' = s (1 - s),
(1 / x)' = -1 / x^2, `where` picks its branch's tangent); the tangent of the result multiplies dP - D.
The tangents are values of the same kinds (most are the constant 1 or a scalar: no tile), so the
derivative of `score + bias[h]` costs nothing and a softcap's costs a few passes. An op whose derivative
needs a float comparison (maximum, minimum, clamp, relu, abs of a score) raises NotImplementedError
naming it when the backward kernel is built. In the dkdv kernel's transposed tiles (`Site.transposed`)
q_idx varies along the columns and kv_idx along the rows: the kinds of the index leaves swap.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch

from ptofa.kernels.hostparam import HostParam
from ptofa.kernels.mods import Mod, Site

# The padding of a captured tensor's last dim: the longest row load past a sequence's end, a forward
# KV tile (`pipeline.SUPPORTED_TILE_S1`) or a backward block.
CAPTURE_PAD = 512

_GRAPHS: dict[str, torch.fx.GraphModule] = {}  # a traced mod's key -> its graph (mods hold plain fields)


@dataclass(frozen=True)
class TracedMod(Mod):
    """A FlexAttention score_mod (`mask=False`) or mask_mod (`mask=True`) as a `mods.Mod`; the graph
    lives in `_GRAPHS` under `key` (its code and the shapes of the tensors it captures)."""

    key: str
    captured: tuple[tuple[int, ...], ...]  # shapes of the captured tensors, in argument order
    full_tiles: int  # full-tile scratch the lowering needs (red_tmp counts as the first)
    row_tiles: int
    col_tiles: int
    tci_ops: int  # index leaves (each tci has a hidden ptoas scratch)
    mask: bool = False
    name: str = "flex"
    grad_counts: tuple[int, int, int] = (1, 0, 0)  # full, row, col scratch of the backward walk (either layout)
    grad_tci_ops: int = 0
    grad_error: str = ""  # why the backward walk cannot be lowered (raised when a backward kernel is built)

    @property
    def graph(self) -> torch.fx.GraphModule:
        return _GRAPHS[self.key]

    def tiles(self, config, prefix: str) -> list:
        return _tile_specs(config.vec_s0, config.tile_s1, prefix, self.full_tiles, self.row_tiles, self.col_tiles)

    def grad_tiles(self, rows: int, cols: int, prefix: str) -> list:
        if self.grad_error:
            raise NotImplementedError(self.grad_error)
        return _tile_specs(rows, cols, prefix, *self.grad_counts)

    def params(self, prefix: str) -> list:
        import ctypes

        return [HostParam(f"{prefix}c{j}", "uint8_t*", ctypes.c_void_p, f"captured tensor {list(shape)} of a flex "
                                                                           f"mod, padded, f32")
                for j, shape in enumerate(self.captured)]

    def emit_forward(self, site: Site, prefix: str) -> None:
        _Lowering(self.graph, self.mask, prefix, site).run()

    def emit_backward(self, site: Site, prefix: str, grad) -> None:
        _Lowering(self.graph, self.mask, prefix, site, grad=None if self.mask else grad).run()

    def reference(self, scores, b, h, q_idx, kv_idx):
        args = (b, h, q_idx, kv_idx) if self.mask else (scores, b, h, q_idx, kv_idx)
        out = self.graph(*args)
        if self.mask:
            return scores.masked_fill(~out.bool(), -math.inf)
        return out


def _tile_specs(rows: int, cols: int, prefix: str, full: int, row: int, col: int) -> list:
    """A walk's scratch on [rows, cols] score tiles: full tiles past the site's `tmp`, [1, rows] row and
    [1, cols] column tiles, and one i32 line of each for the index leaves' `tci`."""
    from ptofa.pipeline import TileSpec

    dyn = dict(dynamic=True)
    specs = [TileSpec(f"{prefix}full{k}", "vector", "p", "vec", rows, cols, "f32", **dyn) for k in range(1, full)]
    specs += [TileSpec(f"{prefix}row{k}", "vector", "p", "vec", 1, rows, "f32", **dyn) for k in range(row)]
    specs += [TileSpec(f"{prefix}col{k}", "vector", "p", "vec", 1, cols, "f32", **dyn) for k in range(col)]
    return specs + [TileSpec(f"{prefix}rowi32", "vector", "p", "vec", 1, rows, "i32", **dyn),
                    TileSpec(f"{prefix}coli32", "vector", "p", "vec", 1, cols, "i32", **dyn)]


def _trace(fn, mask: bool) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    idx = [torch.zeros(1, dtype=torch.int32) for _ in range(4)]
    if mask:  # (a wrapper of the exact arity: make_fx reads the signature, defaults included)
        return make_fx(lambda b, h, q_idx, kv_idx: fn(b, h, q_idx, kv_idx))(*idx)
    return make_fx(lambda score, b, h, q_idx, kv_idx: fn(score, b, h, q_idx, kv_idx))(torch.zeros(1), *idx)


def _is_table(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """A captured tensor the kernel reads as a table: more than one element, or indexed (`bias[h]` with
    one head); any other one-element tensor is a constant of the mod."""
    value = getattr(gm, node.target)
    return isinstance(value, torch.Tensor) and (
        value.numel() > 1 or any(_op_name(user.target) == "index" and user.args[0] is node for user in node.users))


def _captured(gm: torch.fx.GraphModule) -> list[tuple[str, torch.Tensor]]:
    """(attribute, tensor) of each captured table (`_is_table`), in graph order."""
    out = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and _is_table(gm, node):
            out[node.target] = getattr(gm, node.target)
    return list(out.items())


def trace_mod(fn, mask: bool, *, rows: int = 64) -> tuple[TracedMod, list[torch.Tensor]]:
    """The `TracedMod` of a score_mod / mask_mod callable and the tensors it captures (in argument
    order); NotImplementedError naming an op the kernel cannot express."""
    gm = _trace(fn, mask)
    captured = _captured(gm)
    consts = [repr(getattr(gm, n.target).item()) for n in gm.graph.nodes
              if n.op == "get_attr" and not _is_table(gm, n)]
    key = ("mask:" if mask else "score:") + gm.code + "|" + ",".join(consts) + "|" + ";".join(
        f"{tuple(t.shape)}{t.dtype}" for _, t in captured)
    _GRAPHS[key] = gm
    counts = _Lowering(gm, mask, "", None).run()  # a dry run: checks every op, counts the scratch
    grad, error = (1, 0, 0, 0), ""
    try:  # the backward's walk in both layouts (dq and the transposed dkdv tiles), with tangents
        walks = [_Lowering(gm, mask, "", None, grad=not mask, transposed=t).run() for t in (False, True)]
        grad = tuple(max(w[k] for w in walks) for k in range(4))
    except NotImplementedError as exc:  # the forward still runs; the backward names the op
        error = f"flex score_mod backward: {exc}"
    mod = TracedMod(key, tuple(tuple(t.shape) for _, t in captured), *counts, mask=mask,
                    name="mask_mod" if mask else "score_mod", grad_counts=grad[:3], grad_tci_ops=grad[3],
                    grad_error=error)
    return mod, [t for _, t in captured]


def captured_args(mod: TracedMod, tensors: list[torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The kernel arguments of a mod's captured tensors: f32, the last dim padded by `CAPTURE_PAD` zeros
    (a slice's row load may run past the sequence's end); ValueError for integers f32 cannot hold."""
    out = {}
    for j, t in enumerate(tensors):
        if not t.dtype.is_floating_point and t.numel() and int(t.abs().max()) >= 2 ** 24:
            raise ValueError(f"captured tensor {j} of a mod: integer values up to {int(t.abs().max())}; the kernel "
                             f"holds them in f32, exact below 2^24")
        flat = t.detach().to(torch.float32).cpu()
        out[f"{prefix}c{j}"] = torch.nn.functional.pad(flat, (0, CAPTURE_PAD)).contiguous()
    return out


@dataclass
class _Value:
    kind: str
    value: object  # Python number, SSA value, tile name, or ("tensor", j)
    is_int: bool = False
    index: bool = False  # a scalar held as an index (b, h and integer arithmetic on them), not an f32 load


class _Null:
    """Stands in for the IR namespaces in a dry run: every call does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


# aten op packet name -> how it lowers (`_Lowering.op_<kind>`); a name outside this table raises.
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min", "rsub": "rsub"}
COMPARE = ("ge", "gt", "le", "lt", "eq", "ne")
UNARY = ("neg", "abs", "exp", "tanh", "sigmoid", "logical_not", "bitwise_not", "relu", "reciprocal")
LOGICAL = {"bitwise_and": "mul", "logical_and": "mul", "bitwise_or": "max", "logical_or": "max"}
PASS = ("lift_fresh_copy", "clone", "alias", "detach", "_to_copy", "to", "type_as")
LOWERING = (*BINARY, *COMPARE, *UNARY, *LOGICAL, *PASS, "where", "index", "scalar_tensor", "clamp", "bitwise_xor",
            "logical_xor")


class _Lowering:
    """One walk of a traced graph: with a `Site` it emits the IR, without one it checks the ops and
    counts the scratch tiles (full, row, col) the emitting walk will use. With `grad` (the backward's
    dP - D tile; True in a dry run) it carries each value's tangent and multiplies `grad` by the result's."""

    def __init__(self, gm: torch.fx.GraphModule, mask: bool, prefix: str, site: Site | None, grad=None,
                 transposed: bool = False):
        self.gm, self.mask, self.prefix, self.site, self.grad = gm, mask, prefix, site, grad
        self.tangents = bool(grad is not None and grad is not False)
        self.transposed = site.transposed if site is not None else transposed
        if site is None:
            self.tile = self.scalar = self.pto = _Null()
        else:
            from ptofa.api import pto, scalar, tile

            self.tile, self.scalar, self.pto = tile, scalar, pto
        self.free = {"full": ["red_tmp"], "row": [], "col": []}
        self.made = {"full": 1, "row": 0, "col": 0}
        self.dying: set[str] = set()  # tiles of operands whose last use is the current node
        self.protected: set[str] = set()  # a tangent rule's operand tiles (never overwritten by the rule)
        self.tci_ops = 0
        self.neg = site.mask_value if site else -3.0e38

    # ---- tiles ----

    def t(self, name: str):
        """The SSA tile of a buffer name ('score' is the site's score tile)."""
        if self.site is None:
            return None
        special = {"score": self.site.scores, "red_tmp": self.site.tmp, "grad": self.grad}
        return special[name] if name in special else self.site.tiles[name]

    def alloc(self, kind: str) -> str:
        if self.free[kind]:
            name = self.free[kind].pop()
        else:
            name = f"{self.prefix}{kind}{self.made[kind]}"
            self.made[kind] += 1
        if self.site is not None:
            valid = {"full": (self.site.rows, self.site.keys), "row": (1, self.site.rows), "col": (1, self.site.keys)}
            self.tile.set_valid(self.t(name), *valid[kind])
        return name

    def kind_of(self, name: str) -> str:
        return "full" if name in ("score", "red_tmp", "grad") else name[len(self.prefix):].rstrip("0123456789")

    def temporary(self, v: _Value) -> None:
        """A value only this node reads: its tile may be overwritten in place and is freed after the node."""
        if v.kind in ("row", "col", "full"):
            self.dying.add(v.value)

    def col_view(self, name: str):
        """A row tile as a [rows, 1] column for the row-broadcast ops."""
        if self.site is None:
            return None
        return self.tile.reshape(self.t(name), self.site.rows, 1, blayout="col_major")

    def f32(self, v: _Value):
        """A const / scalar operand as an f32 scalar SSA value."""
        from ptofa.api import F32, I64

        if v.kind == "const":
            return self.scalar.const(float(v.value), F32)
        if v.index and self.site is not None:
            return self.scalar.to_float(self.scalar.index_cast(v.value, I64))
        return v.value

    # ---- walk ----

    def run(self):
        nodes = list(self.gm.graph.nodes)
        last = {}
        for i, node in enumerate(nodes):
            for arg in node.all_input_nodes:
                last[arg] = i
        env: dict = {}
        tan: dict = {}  # node -> its tangent (None: 0), with `grad`
        for i, node in enumerate(nodes):
            if node.op == "output":
                self.finish(env[node.args[0]], tan.get(node.args[0]))
                break
            # the tiles of operands whose last use this is, unless a value still alive shares one (a tangent
            # may be another value's tile)
            alive = {_tile(v) for a in env if last.get(a, -1) > i for v in (env[a], tan.get(a))}
            self.dying = {_tile(v) for a in node.all_input_nodes if last.get(a) == i
                          for v in (env[a], tan.get(a))} - alive - {None}
            env[node], tan[node] = self.step(node, env, tan)
            # operands whose last use this was give their tiles back, unless a result took one over (in
            # name order: a set's order follows the string hash, and the kernel text must not)
            for name in sorted(self.dying - {_tile(env[node]), _tile(tan[node])}):
                self.free[self.kind_of(name)].append(name)
        return self.made["full"], self.made["row"], self.made["col"], self.tci_ops

    # ---- tangents ----

    AFTER = ("exp", "tanh", "sigmoid", "reciprocal")  # ops whose derivative is taken from their result

    def step(self, node, env, tan) -> tuple[_Value, _Value | None]:
        """A node's value and tangent. The tangent comes before the value (whose op may overwrite its
        operands in place), except for the ops in AFTER, whose rule reads the result instead."""
        if not self.tangents:
            return self.node(node, env), None
        if node.op == "placeholder":
            v = self.node(node, env)
            return v, (_Value("const", 1.0) if v.value == "score" else None)
        operands = node.all_input_nodes
        if all(tan.get(a) is None for a in operands):
            return self.node(node, env), None
        name = _op_name(node.target)
        dying = set(self.dying)
        ptiles = {_tile(env[a]) for a in operands} - {None}
        ttiles = {_tile(tan[a]) for a in operands if tan.get(a) is not None} - {None}
        self.protected = ptiles | ttiles
        if name in self.AFTER:
            self.dying = dying - ttiles
            v = self.node(node, env)
            self.dying = (self.dying | (dying & ttiles)) - {_tile(v)}
            t = self.tangent_after(name, v, tan.get(operands[0]), node)
        else:
            self.dying = dying - ptiles
            t = self.tangent_before(name, node, env, tan)
            self.dying = (self.dying | (dying & ptiles)) - {_tile(t)}
            v = self.node(node, env)
        self.dying -= {_tile(t)}
        return v, t

    def fresh(self, v: _Value | None) -> _Value | None:
        """An intermediate of a tangent rule: free after the node (never an operand's tile)."""
        if _tile(v) is not None and v.value not in self.protected:
            self.dying.add(v.value)
        return v

    def tadd(self, x: _Value | None, y: _Value | None, node, sub: bool = False) -> _Value | None:
        if y is None:
            return x
        if x is None:
            return self.tmul(y, _Value("const", -1.0), node) if sub else y
        if x.kind == "const" and y.kind == "const":
            return _Value("const", x.value - y.value if sub else x.value + y.value)
        return self.binary("sub" if sub else "add", x, y, node)

    def tmul(self, t: _Value | None, v: _Value, node) -> _Value | None:
        """t * v (a tangent times a value), with the constant 0 and 1 folded."""
        if t is None or (v.kind == "const" and v.value == 0):
            return None
        if t.kind == "const" and v.kind == "const":
            return _Value("const", t.value * v.value)
        if t.kind == "const" and t.value == 1:
            return _Value(v.kind, v.value, False, v.index)
        if v.kind == "const" and v.value == 1:
            return t
        return self.binary("mul", t, v, node)

    def tangent_before(self, name: str, node, env, tan) -> _Value | None:
        def arg(a):
            return (env[a], tan.get(a)) if isinstance(a, torch.fx.Node) else (_Value("const", a), None)

        args = [arg(a) for a in node.args if not isinstance(a, (list, tuple, torch.dtype, torch.device))]
        if name in PASS:
            return args[0][1]
        if name == "where":
            cond, (a, ta), (b, tb) = args[0][0], args[1], args[2]
            if a.kind == "const" and math.isinf(a.value):
                return tb
            if b.kind == "const" and math.isinf(b.value):
                return ta
            zero = _Value("const", 0.0)
            return self.where(cond, ta or zero, tb or zero, node)
        if name == "neg":
            return self.tmul(args[0][1], _Value("const", -1.0), node)
        if name not in BINARY or BINARY[name] in ("max", "min"):
            raise NotImplementedError(f"the derivative of {node.target} w.r.t. the score is not lowered (it needs a "
                                      f"float comparison, or the op has none)")
        (a, ta), (b, tb) = args[:2]
        alpha = node.kwargs.get("alpha", 1)
        if alpha != 1:  # (add / sub only: b's value is not read below)
            tb = self.fresh(self.tmul(tb, _Value("const", alpha), node))
        op = BINARY[name]
        if op == "rsub":
            (a, ta), (b, tb), op = (b, tb), (a, ta), "sub"
        if op in ("add", "sub"):
            return self.tadd(ta, tb, node, sub=op == "sub")
        if op == "mul":
            return self.tadd(self.fresh(self.tmul(ta, b, node)), self.fresh(self.tmul(tb, a, node)), node)
        # (a / b)' = ta / b - a tb / b^2
        first = None if ta is None else self.fresh(self.binary("div", ta, b, node))
        if tb is None:
            return first
        second = self.fresh(self.tmul(tb, a, node))
        for _ in range(2):
            second = self.fresh(self.binary("div", second, b, node))
        return self.tadd(first, second, node, sub=True)

    def tangent_after(self, name: str, r: _Value, ta: _Value, node) -> _Value | None:
        one = _Value("const", 1.0)
        if name == "exp":  # exp' = exp
            return self.tmul(ta, r, node)
        if name == "tanh":  # 1 - r^2
            d = self.fresh(self.binary("mul", r, r, node))
            d = self.fresh(self.binary("sub", one, d, node))
        elif name == "sigmoid":  # r (1 - r)
            d = self.fresh(self.binary("sub", one, r, node))
            d = self.fresh(self.binary("mul", d, r, node))
        else:  # reciprocal: -r^2
            d = self.fresh(self.binary("mul", r, r, node))
            d = self.fresh(self.binary("mul", d, _Value("const", -1.0), node))
        return self.tmul(ta, d, node)

    def apply_grad(self, t: _Value | None) -> None:
        """grad *= the result's tangent."""
        from ptofa.api import F32

        if t is not None and t.kind == "const" and t.value == 1:
            return
        if t is None or t.kind == "const":
            self.tile.muls(self.t("grad"), self.scalar.const(0.0 if t is None else float(t.value), F32),
                           out=self.t("grad"))
            return
        self.dying.add("grad")
        self.binary("mul", _Value("full", "grad"), t, None)

    def node(self, node, env) -> _Value:
        if node.op == "placeholder":
            return self.leaf(node)
        if node.op == "get_attr":
            value = getattr(self.gm, node.target)
            if not _is_table(self.gm, node):
                return _Value("const", value.item(), not value.dtype.is_floating_point)
            j = [n for n, _ in _captured(self.gm)].index(node.target)
            return _Value("tensor", ("tensor", j, value), not value.dtype.is_floating_point)
        target = node.target
        name = _op_name(target)
        if name not in LOWERING:
            raise NotImplementedError(f"flex mod: the op {target} has no lowering to the kernel's vector ops "
                                      f"(lowered: {', '.join(sorted(LOWERING))})")
        val = node.meta.get("val")
        is_int = val is not None and not val.dtype.is_floating_point

        def arg(a):
            return env[a] if isinstance(a, torch.fx.Node) else _Value("const", a, isinstance(a, (bool, int)))

        args = [arg(a) for a in node.args if not isinstance(a, (list, tuple, torch.dtype, torch.device))]
        if name in PASS:
            src = args[0]
            if src.is_int and not is_int:  # int -> float: the f32 value already is one
                return _Value(src.kind, src.value, False, src.index)
            if is_int and not src.is_int:
                raise NotImplementedError(f"flex mod: {target} from float to an integer type (no rounding op lowered)")
            return src
        if node.kwargs.get("rounding_mode") is not None:
            raise NotImplementedError(f"flex mod: {target} with rounding_mode={node.kwargs['rounding_mode']!r} (no "
                                      f"rounding op lowered)")
        if name == "scalar_tensor":
            return _Value("const", node.args[0], is_int)
        if name == "index":
            return self.index(env[node.args[0]], [None if a is None else env[a] for a in node.args[1]], node)
        if name in BINARY:
            a, b = args[:2]
            alpha = node.kwargs.get("alpha", 1)
            if alpha != 1:
                b = self.binary("mul", b, _Value("const", alpha, isinstance(alpha, int)), node, keep=True)
            if BINARY[name] == "rsub":
                return self.binary("sub", b, a, node, is_int)
            return self.binary(BINARY[name], a, b, node, is_int)
        if name in COMPARE:
            return self.compare(name, args[0], args[1], node)
        if name in LOGICAL:
            return self.binary(LOGICAL[name], args[0], args[1], node, True)
        if name in ("bitwise_xor", "logical_xor"):
            return self.compare("ne", args[0], args[1], node)
        if name in UNARY:
            return self.unary(name, args[0], node)
        if name == "clamp":
            v = args[0]
            lo, hi = (node.args + (None, None))[1:3]
            if lo is not None:
                v = self.binary("max", v, _Value("const", lo), node, is_int)
            if hi is not None:
                v = self.binary("min", v, _Value("const", hi), node, is_int)
            return v
        if name == "where":
            return self.where(*args[:3], node)
        raise AssertionError(name)

    def leaf_name(self, node) -> str:
        names = ["b", "h", "q_idx", "kv_idx"] if self.mask else ["score", "b", "h", "q_idx", "kv_idx"]
        return names[[n for n in self.gm.graph.nodes if n.op == "placeholder"].index(node)]

    def leaf(self, node) -> _Value:
        which = self.leaf_name(node)
        s = self.site
        if which == "score":
            return _Value("full", "score")
        if which in ("b", "h"):
            return _Value("scalar", None if s is None else (s.b if which == "b" else s.h), True, index=True)
        kind = "row" if (which == "q_idx") != self.transposed else "col"
        name = self.alloc(kind)
        self.tci_ops += 1
        if s is not None:
            from ptofa.api import I32

            i32 = s.tiles[f"{self.prefix}{kind}i32"]
            self.tile.set_valid(i32, 1, s.rows if kind == "row" else s.keys)
            self.tile.ci(self.scalar.index_cast(s.q0 if which == "q_idx" else s.k0, I32), out=i32)
            self.tile.cvt(i32, out=self.t(name))
        return _Value(kind, name, True)

    def index(self, tensor: _Value, indices: list, node) -> _Value:
        """A captured tensor at b / h indices (a scalar load) or with q_idx / kv_idx as its last index
        (one row load)."""
        if tensor.kind != "tensor":
            raise NotImplementedError(f"flex mod: {node.target} of a value computed in the mod (only captured "
                                      f"tensors can be indexed)")
        _, j, value = tensor.value
        if len(indices) != value.dim() or any(i is None for i in indices):
            raise NotImplementedError(f"flex mod: {node.target} must index every dim of captured tensor {j} "
                                      f"{list(value.shape)} with b, h, q_idx or kv_idx")
        *lead, last = indices
        if any(i.kind != "scalar" or not i.index for i in lead) or last.kind not in ("scalar", "row", "col") or \
                (last.kind == "scalar" and not last.index):
            raise NotImplementedError(f"flex mod: {node.target}: captured tensor {j} indexed by a computed value; "
                                      f"its leading indices must be b or h and its last b, h, q_idx or kv_idx")
        is_int = not value.dtype.is_floating_point
        s = self.site
        if last.kind in ("row", "col") and node.args[1][-1].op != "placeholder":
            raise NotImplementedError(f"flex mod: {node.target}: captured tensor {j} indexed by an expression of "
                                      f"q_idx / kv_idx (only q_idx or kv_idx itself is a row load)")
        if s is None:
            return _Value("scalar" if last.kind == "scalar" else last.kind,
                          None if last.kind == "scalar" else self.alloc(last.kind), is_int)
        ptr = s.args[f"{self.prefix}c{j}"]
        row_len = value.shape[-1] + CAPTURE_PAD
        offset = self.scalar.const(0)
        for d, i in enumerate(lead):
            stride = row_len * math.prod(value.shape[d + 1:-1])
            offset = self.scalar.add(offset, self.scalar.mul(i.value, stride))
        if last.kind == "scalar":
            return _Value("scalar", self.pto.load_scalar(ptr, self.scalar.add(offset, last.value)), is_int)
        kind = last.kind
        n = s.rows if kind == "row" else s.keys
        which = self.leaf_name(node.args[1][-1])
        start = self.scalar.add(offset, s.q0 if which == "q_idx" else s.k0)
        name = self.alloc(kind)
        view = self.pto.as_tensor(self.pto.add_ptr(ptr, start), [1, n], [n, 1])
        self.pto.load(self.pto.slice_view(view, [0, 0], [1, n]), self.t(name))
        return _Value(kind, name, is_int)

    # ---- arithmetic ----

    def out_for(self, kind: str, *operands: _Value) -> str:
        """A tile for a result of `kind`: an operand's whose last use this is (in place), else a fresh one."""
        for v in operands:
            if v.kind == kind and v.value in self.dying:
                self.dying.discard(v.value)
                return v.value
        return self.alloc(kind)

    def binary(self, op: str, a: _Value, b: _Value, node, is_int: bool = False, keep: bool = False) -> _Value:
        tile = self.tile
        if a.kind == "const" and b.kind == "const":
            fn = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
                  "max": max, "min": min}[op]
            return _Value("const", fn(a.value, b.value), is_int)
        if a.kind in ("const", "scalar") and b.kind in ("const", "scalar"):
            if any(v.kind == "scalar" and not v.index for v in (a, b)) or not (a.is_int and b.is_int) or \
                    op not in ("add", "sub", "mul"):
                raise NotImplementedError(f"flex mod: {node.target} on two per-(b, h) values is lowered for integer "
                                          f"add / sub / mul of b, h and constants only (apply a loaded value to the "
                                          f"scores or an index one at a time)")
            fn = {"add": self.scalar.add, "sub": self.scalar.sub, "mul": self.scalar.mul}[op]
            av = a.value if a.kind == "scalar" else int(a.value)
            bv = b.value if b.kind == "scalar" else int(b.value)
            return _Value("scalar", fn(av, bv), True, index=True)
        if a.kind in ("const", "scalar"):  # scalar op tile
            if op in ("add", "mul", "max", "min"):
                return self.binary(op, b, a, node, is_int)
            out = self.out_for(b.kind, b)
            if op == "sub":  # s - x = -x + s
                tile.muls(self.t(b.value), self.f32(_Value("const", -1.0)), out=self.t(out))
                tile.adds(self.t(out), self.f32(a), out=self.t(out))
            else:  # s / x
                tile.rdivs(self.f32(a), self.t(b.value), out=self.t(out))
            return _Value(b.kind, out, is_int)
        if b.kind in ("const", "scalar"):  # tile op scalar
            out = self.out_for(a.kind, a)
            src, sv = self.t(a.value), self.f32(b)
            if op == "sub":
                if b.kind == "const":
                    tile.adds(src, self.f32(_Value("const", -b.value)), out=self.t(out))
                else:
                    tile.subs(src, sv, out=self.t(out))
            else:
                getattr(tile, {"add": "adds", "mul": "muls", "div": "divs", "max": "maxs", "min": "mins"}[op])(
                    src, sv, out=self.t(out))
            return _Value(a.kind, out, is_int)
        kinds = {a.kind, b.kind}
        if len(kinds) == 1:  # same shape: elementwise
            out = self.out_for(a.kind, a, b)
            getattr(tile, op)(self.t(a.value), self.t(b.value), out=self.t(out))
            return _Value(a.kind, out, is_int)
        if kinds == {"row", "col"}:  # broadcast the row side to a full tile first
            row = a if a.kind == "row" else b
            full = self.expand(row)
            self.dying.add(full.value)  # the broadcast is this op's alone: computed in place
            a, b = (full, b) if a is row else (a, full)
            return self.binary(op, a, b, node, is_int)
        # full op row / col: the row- or column-broadcast op, with the full tile first
        full, vec = (a, b) if a.kind == "full" else (b, a)
        out = self.out_for("full", full)
        fam = "row_expand" if vec.kind == "row" else "col_expand"
        vec_t = self.col_view(vec.value) if vec.kind == "row" else self.t(vec.value)
        tmp = dict(tmp=self.site.row_tmp) if vec.kind == "row" and self.site else {}
        flipped = full is b and op in ("sub", "div")
        getattr(tile, f"{fam}_{op}")(self.t(full.value), vec_t, out=self.t(out), **tmp)
        if flipped:  # v - x = -(x - v), v / x = 1 / (x / v)
            if op == "sub":
                tile.muls(self.t(out), self.f32(_Value("const", -1.0)), out=self.t(out))
            else:
                tile.rdivs(self.f32(_Value("const", 1.0)), self.t(out), out=self.t(out))
        return _Value("full", out, is_int)

    def expand(self, row: _Value) -> _Value:
        """A row value broadcast over the columns: a full tile."""
        out = self.alloc("full")
        self.tile.fill(self.f32(_Value("const", 0.0)), out=self.t(out))
        tmp = dict(tmp=self.site.row_tmp) if self.site else {}
        self.tile.row_expand_add(self.t(out), self.col_view(row.value), out=self.t(out), **tmp)
        return _Value("full", out, row.is_int)

    def affine(self, v: _Value, mul: float, add: float, lo: float | None = None, hi: float | None = None,
               absolute: bool = False) -> _Value:
        """clamp(|v| * mul + add, lo, hi) (|v| when `absolute`) into a fresh tile of v's kind."""
        if v.kind == "const":
            x = abs(v.value) if absolute else v.value
            x = x * mul + add
            x = x if lo is None else max(x, lo)
            return _Value("const", x if hi is None else min(x, hi), True)
        if v.kind == "scalar":
            raise NotImplementedError("flex mod: a comparison or boolean op on b / h alone (a per-head branch) is "
                                      "not lowered")
        out, c = self.out_for(v.kind, v), self.f32
        src = self.t(v.value)
        if absolute:
            self.tile.abs(src, out=self.t(out))
            src = self.t(out)
        self.tile.muls(src, c(_Value("const", mul)), out=self.t(out))
        if add:
            self.tile.adds(self.t(out), c(_Value("const", add)), out=self.t(out))
        if lo is not None:
            self.tile.maxs(self.t(out), c(_Value("const", lo)), out=self.t(out))
        if hi is not None:
            self.tile.mins(self.t(out), c(_Value("const", hi)), out=self.t(out))
        return _Value(v.kind, out, True)

    def compare(self, name: str, a: _Value, b: _Value, node) -> _Value:
        """Integer comparisons as clamps of d = a - b (exact: d is an integer in f32)."""
        if not (a.is_int and b.is_int):
            raise NotImplementedError(f"flex mod: {node.target} on floating-point values (comparisons are lowered "
                                      f"for integers: indices, captured integer tensors, booleans)")
        d = self.binary("sub", a, b, node, True)
        if d.kind != "const":
            self.dying.add(d.value)  # the difference is the comparison's own: clamped in place
        rule = {"ge": (1, 1), "gt": (1, 0), "le": (-1, 1), "lt": (-1, 0)}
        if name in rule:
            out = self.affine(d, *rule[name], lo=0.0, hi=1.0)
        elif name == "ne":
            out = self.affine(d, 1, 0, hi=1.0, absolute=True)
        else:  # eq: 1 - min(|d|, 1)
            ne = self.affine(d, 1, 0, hi=1.0, absolute=True)
            if ne.kind != "const":
                self.dying.add(ne.value)
            out = self.affine(ne, -1, 1)
        return out

    def unary(self, name: str, v: _Value, node) -> _Value:
        if name in ("logical_not", "bitwise_not"):
            if not v.is_int:
                raise NotImplementedError(f"flex mod: {node.target} of a float value")
            return self.affine(v, -1, 1)
        if v.kind == "const":
            x = v.value
            fn = {"neg": lambda: -x, "abs": lambda: abs(x), "exp": lambda: math.exp(x), "tanh": lambda: math.tanh(x),
                  "sigmoid": lambda: 1 / (1 + math.exp(-x)), "relu": lambda: max(x, 0),
                  "reciprocal": lambda: 1 / x}[name]
            return _Value("const", fn(), v.is_int)
        if v.kind == "scalar":
            raise NotImplementedError(f"flex mod: {node.target} of a per-(b, h) value is not lowered")
        tile, c = self.tile, lambda x: self.f32(_Value("const", x))
        out = self.out_for(v.kind, v)
        src, dst = self.t(v.value), self.t(out)
        if name == "neg":
            tile.muls(src, c(-1.0), out=dst)
        elif name == "abs":
            tile.abs(src, out=dst)
        elif name == "exp":
            tile.exp(src, out=dst)
        elif name == "relu":
            tile.maxs(src, c(0.0), out=dst)
        elif name == "reciprocal":
            tile.rdivs(c(1.0), src, out=dst)
        elif name == "sigmoid":  # 1 / (1 + exp(-x))
            tile.muls(src, c(-1.0), out=dst)
            tile.exp(dst, out=dst)
            tile.adds(dst, c(1.0), out=dst)
            tile.rdivs(c(1.0), dst, out=dst)
        else:  # tanh(x) = 1 - 2 / (exp(2x) + 1), the argument clamped as `builtin_mods.softcap.softcap_scores` does
            from ptofa.kernels.builtin_mods.softcap import SOFTCAP_CLAMP

            tile.muls(src, c(2.0), out=dst)
            tile.mins(dst, c(SOFTCAP_CLAMP), out=dst)
            tile.exp(dst, out=dst)
            tile.adds(dst, c(1.0), out=dst)
            tile.rdivs(c(-2.0), dst, out=dst)
            tile.adds(dst, c(1.0), out=dst)
        return _Value(v.kind, out, v.is_int)

    def where(self, cond: _Value, a: _Value, b: _Value, node) -> _Value:
        """cond * a + (1 - cond) * b; a -inf branch becomes the mask value added where it applies."""
        if cond.kind == "const":
            return a if cond.value else b
        inf_a = a.kind == "const" and math.isinf(a.value)
        inf_b = b.kind == "const" and math.isinf(b.value)
        if (inf_a and a.value > 0) or (inf_b and b.value > 0) or (inf_a and inf_b):
            raise NotImplementedError(f"flex mod: {node.target} with a +inf branch (or two infinite ones)")
        if inf_b:  # a + (1 - cond) * mask
            bias = self.affine(cond, -self.neg, self.neg)
            self.temporary(bias)
            return self.binary("add", a, bias, node)
        if inf_a:  # b + cond * mask
            bias = self.affine(cond, self.neg, 0.0)
            self.temporary(bias)
            return self.binary("add", b, bias, node)
        # on = cond * a, then cond -> 1 - cond and off = (1 - cond) * b in cond's tile when this is its
        # last use, out = on + off in on's: exact (cond is 0 or 1), two tiles at most
        cond_dying = cond.value in self.dying
        self.dying.discard(cond.value)  # read again below: not overwritten by `on`
        on = self.binary("mul", cond, a, node)
        self.temporary(on)
        if cond_dying:
            self.dying.add(cond.value)
        not_cond = self.affine(cond, -1, 1)
        self.temporary(not_cond)
        off = self.binary("mul", not_cond, b, node)
        self.temporary(off)
        out = self.binary("add", on, off, node, a.is_int and b.is_int)
        return out

    def finish(self, v: _Value, tangent: _Value | None = None) -> None:
        """Score mod: the result into the score tile (with `grad`: first grad times the result's tangent,
        which may be in the score tile). Mask mod: the mask value added where it is 0."""
        s, tile = self.site, self.tile
        if self.tangents:
            self.apply_grad(tangent)
        if self.mask:
            if v.kind == "const":
                if not v.value:
                    raise NotImplementedError("flex mask_mod: a mask that hides every entry")
                return
            if v.kind == "scalar":
                raise NotImplementedError("flex mask_mod: a mask that depends on b / h alone")
            self.dying.add(v.value)
            bias = self.affine(v, -self.neg, self.neg)  # 0 where kept, the mask value where hidden
            if s is not None:
                scores = s.scores
                if bias.kind == "full":
                    tile.add(scores, self.t(bias.value), out=scores)
                elif bias.kind == "row":
                    tile.row_expand_add(scores, self.col_view(bias.value), out=scores, tmp=s.row_tmp)
                else:
                    tile.col_expand_add(scores, self.t(bias.value), out=scores)
            return
        if v.kind == "full" and v.value == "score":
            return
        if v.kind in ("const", "scalar"):
            if s is not None:
                tile.fill(self.f32(v), out=s.scores)
            return
        if v.kind != "full":
            v = self.expand(v) if v.kind == "row" else v
        if v.kind == "col":
            if s is not None:
                tile.fill(self.f32(_Value("const", 0.0)), out=s.scores)
                tile.col_expand_add(s.scores, self.t(v.value), out=s.scores)
            return
        if s is not None:
            tile.adds(self.t(v.value), self.f32(_Value("const", 0.0)), out=s.scores)


def _tile(v: _Value | None) -> str | None:
    """The tile name of a value held in a tile, else None."""
    return v.value if v is not None and v.kind in ("row", "col", "full") else None


def _op_name(target) -> str:
    packet = getattr(target, "overloadpacket", None)  # aten.add.Tensor -> "add"
    return getattr(packet, "__name__", None) or getattr(target, "__name__", str(target))
