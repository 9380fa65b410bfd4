"""Attention sinks (`Sinks`) and the kernels' hooks that apply `config.mods` in order (`apply_setup`,
`apply_unit`, `apply_forward`, `apply_backward`, `apply_finish`); the built-in mods are in `builtin_mods/`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue

from ptofa.api import F32, pto, scalar, tile
from ptofa.kernels.hostparam import HostParam
from ptofa.kernels.mods import FinishSite, Mod, Site, UnitSite
from ptofa.pipeline import mod_prefixes


@dataclass(frozen=True)
class Sinks(Mod):
    """Attention sinks (gpt-oss): a per-head logit that joins each row's softmax denominator, so that
    O = sum_j exp(s_j) v_j / (exp(sink[h]) + sum_j exp(s_j)) and LSE = ln(exp(sink[h]) + sum_j exp(s_j)).
    The sinks are an f32 [H] argument (`<prefix>sinks`).

    At the finish hook the sink is one more key without a value, merged as the online softmax merges a
    tile: m' = max(m, sink), alpha = exp(m - m'), l = alpha * l + exp(sink - m'), O = alpha * O, m = m'.
    Every exp is of a value <= 0, so any sink is exact; a row that saw no key (m the mask value) gets
    alpha = 0, l = 1, O = 0 and LSE = sink, the limit of the formula. Split-KV: only split 0 of a unit
    takes the sink (its partial LSE carries it into the reduce's weights), so it counts once."""

    name: str = "sinks"
    scores = False  # (a class attribute: the scores are the plain kernel's, S may be rounded as there)

    def tiles(self, config, prefix: str) -> list:
        from ptofa.pipeline import TileSpec

        return [TileSpec(f"{prefix}{name}", "vector", "gu", "vec", 1, config.vec_rows, "f32")
                for name in ("sink_row", "sink_alpha")]

    def params(self, prefix: str) -> list:
        import ctypes

        return [HostParam(f"{prefix}sinks", "uint8_t*", ctypes.c_void_p, "attention sinks [H], f32")]

    def emit_finish(self, site: FinishSite, prefix: str) -> None:
        if site.split is None:
            self._merge(site, prefix)
            return
        with pto.if_(scalar.eq(site.split, 0, name="sink_split")):
            self._merge(site, prefix)

    @staticmethod
    def _merge(site: FinishSite, prefix: str) -> None:
        sink = pto.load_scalar(site.args[f"{prefix}sinks"], site.h, name="sink")
        row, alpha = site.tiles[f"{prefix}sink_row"], site.tiles[f"{prefix}sink_alpha"]
        tile.maxs(site.m, sink, out=row)  # m'
        tile.sub(site.m, row, out=alpha)
        tile.exp(alpha, out=alpha)  # exp(m - m')
        tile.mul(site.l, alpha, out=site.l)
        tile.mov(row, site.m)
        tile.muls(row, scalar.const(-1.0, F32, name="minus_one"), out=row)
        tile.adds(row, sink, out=row)
        tile.exp(row, out=row)  # exp(sink - m')
        tile.add(site.l, row, out=site.l)
        alpha_col = tile.reshape(alpha, site.rows, 1, name="sink_alpha_col", blayout="col_major")
        tile.row_expand_mul(site.o, alpha_col, out=site.o, tmp=site.row_tmp)


# The forward kernel's hooks: where its mods apply.


def _each_mod(mods: tuple, site: Site, emit) -> None:
    """emit(mod, prefix) for each mod in order; a mask's only on tiles outside the unit's full range."""
    for mod, prefix in zip(mods, mod_prefixes(mods)):
        if mod.mask and site.full is not None:
            lo, hi = site.full
            with pto.if_(scalar.or_(scalar.lt(site.t, lo), scalar.ge(site.t, hi))):
                emit(mod, prefix)
        else:
            emit(mod, prefix)


def apply_forward(config, site: Site) -> None:
    """The hook: `config.mods` in order; a mask's IR only on tiles outside the unit's full range."""
    _each_mod(config.score_mods, site, lambda mod, prefix: mod.emit_forward(site, prefix))


def apply_backward(mods: tuple, site: Site, grad: SSAValue | None) -> None:
    """The backward kernels' hook (`BwdConfig.mods`, the forward config's mods with IR on the scores):
    each mod's forward IR on the recomputed scores in order and, with `grad` (dP - D), its derivative
    multiplied in, so grad ends as dP - D times the chain's derivative; without `grad` (the dkdv
    kernel's dV-only pass) the forward IR alone. A mask's IR only on tiles outside the unit's full range."""
    if grad is None:
        _each_mod(mods, site, lambda mod, prefix: mod.emit_forward(site, prefix))
    else:
        _each_mod(mods, site, lambda mod, prefix: mod.emit_backward(site, prefix, grad))


def apply_setup(mods: tuple, site: UnitSite) -> None:
    """Each mod's IR once per vector kernel (`Mod.emit_setup`)."""
    for mod, prefix in zip(mods, mod_prefixes(mods)):
        mod.emit_setup(site, prefix)


def apply_unit(mods: tuple, site: UnitSite) -> None:
    """Each mod's IR once per work unit (`Mod.emit_unit`)."""
    for mod, prefix in zip(mods, mod_prefixes(mods)):
        mod.emit_unit(site, prefix)


def apply_finish(config, site: FinishSite) -> None:
    """The finish hook: each of `config.mods` in order."""
    for mod, prefix in zip(config.score_mods, mod_prefixes(config.score_mods)):
        mod.emit_finish(site, prefix)
