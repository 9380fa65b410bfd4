"""Every built-in mod by name, and a call's flash-attn arguments as mods (`with_builtin_mods`)."""

from __future__ import annotations

from ptofa.kernels.builtin_mods.alibi import Alibi
from ptofa.kernels.builtin_mods.softcap import Softcap
from ptofa.kernels.builtin_mods.window import WINDOW, Window

BUILTIN_MODS = {mod.name: mod for mod in (Softcap, Alibi, Window)}  # name -> class (a config's JSON names them)


def with_builtin_mods(mods: tuple, *, softcap: bool, alibi: bool = False, window: bool | None = None) -> tuple:
    """`mods` with the built-in mods a call asks for, and without those it does not: softcap before the
    others, ALiBi after them (flash-attn's order; a score_mod applies after softcap, before ALiBi), the
    window last (`window=None`: as in `mods`)."""
    others = tuple(m for m in mods if not m.builtin)
    window = any(m.narrows for m in mods) if window is None else window
    return (Softcap(),) * softcap + others + (Alibi(),) * alibi + (WINDOW,) * window


def revive(mods: list) -> tuple:
    """The mods of a config's JSON (`FAConfig.json_text`: each a dict of its plain fields) as objects; only
    built-in ones come back (a traced mod's graph is not JSON), `NotImplementedError` naming another."""
    others = [m.get("name") for m in mods if m.get("name") not in BUILTIN_MODS]
    if others:
        raise NotImplementedError(f"config: mods {others} do not come back from JSON; only the built-in "
                                  f"{sorted(BUILTIN_MODS)} do")
    return tuple(BUILTIN_MODS[m["name"]](**m) for m in mods)
