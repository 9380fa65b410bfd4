"""A config's modification objects (`kernels/mods.py`) as the kernels see them: the score mods, whose IR
runs at the softmax's hooks, and the one mod that narrows the KV tiles a unit visits (the window).
`FAConfig` and `BwdConfig` keep them in one tuple, `mods`, in `canonical` order. (Imports nothing: the
configs below the kernels' layer use it.)"""

from __future__ import annotations


def canonical(mods) -> tuple:
    """`mods` in a config's order: the score mods as given, then the narrowing one (it masks last)."""
    mods = tuple(mods)
    return tuple(m for m in mods if not m.narrows) + tuple(m for m in mods if m.narrows)


class ModsMixin:
    """A config's view of its `mods` (FAConfig, BwdConfig)."""

    mods: tuple

    @property
    def score_mods(self) -> tuple:
        """The mods with IR at the score hooks: all but the narrowing one."""
        return tuple(m for m in self.mods if not m.narrows)

    @property
    def narrowing(self):
        """The mod that narrows the KV tiles a unit visits (`Window`), or None."""
        return next((m for m in self.mods if m.narrows), None)

    def check_mods(self, fail) -> None:
        """At most one narrowing mod (`fail(rule, detail)` raises)."""
        narrowing = [m.name for m in self.mods if m.narrows]
        if len(narrowing) > 1:
            fail("modification objects", f"mods={'+'.join(m.name for m in self.mods)} hold {len(narrowing)} mods "
                                         f"that narrow a unit's tiles ({'+'.join(narrowing)}); at most one is built")
