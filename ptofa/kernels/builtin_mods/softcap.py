"""Softcapping (Gemma 2, flash-attn's `softcap`) as a built-in `mods.Mod`: s = softcap * tanh(s / softcap)
on the scaled f32 scores, before the masks.

A2/A3 have no tanh instruction. `softcap_scores` composes it from ops the verified forms list
(`tmuls`, `tmins`, `texp`, `tadds`, `tdivs` with the scalar first):

    x = min(s * (2 / softcap), SOFTCAP_CLAMP)     t - 1 = -2 / (exp(x) + 1)
    s = softcap * (t - 1) + softcap

exp(x) stays finite (x <= 30: exp(30) = 1.07e13), and tanh(15) rounds to 1 in f32 anyway
(1 - tanh(15) = 1.9e-13), so the clamp changes nothing; for x -> -inf exp(x) -> 0 and
t -> -1 exactly. The absolute error of t in f32 is a few ulp of 1 (the test measures
max |t - torch.tanh| over a dense grid: `tests/test_scoremods.py`), so the capped score
is within softcap * 4e-7 of the exact one; relative to t it is large only where |t| is
small, where the absolute error is what reaches the softmax.

The backward needs d(capped)/ds = 1 - tanh^2 = (1 - t)(1 + t); `softcap_grad` multiplies
it into dP - D from the t - 1 that `softcap_scores` leaves in its tmp tile.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from xdsl.ir import SSAValue

from ptofa.api import F32, scalar, tile
from ptofa.kernels.hostparam import HostParam
from ptofa.kernels.mods import Mod, Site

# Largest x = 2 s / softcap the tanh's exp sees (exp(30) = 1.07e13 is finite in f32; tanh(15) is 1 in f32).
SOFTCAP_CLAMP = 30.0


def softcap_scores(scores: SSAValue, tmp: SSAValue, softcap: SSAValue, rcp2: SSAValue) -> None:
    """scores = softcap * tanh(scores / softcap) in place; tmp (same valid shape) is left holding
    tanh - 1 (for `softcap_grad`). `rcp2` is 2 / softcap (a kernel argument, as is `softcap`)."""
    tile.muls(scores, rcp2, out=tmp)  # x = 2 s / c
    tile.mins(tmp, scalar.const(SOFTCAP_CLAMP, F32, name="softcap_clamp"), out=tmp)
    tile.exp(tmp, out=tmp)
    tile.adds(tmp, scalar.const(1.0, F32, name="one"), out=tmp)
    tile.rdivs(scalar.const(-2.0, F32, name="minus_two"), tmp, out=tmp)  # t - 1 = -2 / (exp(x) + 1)
    tile.muls(tmp, softcap, out=scores)
    tile.adds(scores, softcap, out=scores)  # c (t - 1) + c = c t


def softcap_grad(grad: SSAValue, tmp: SSAValue) -> None:
    """grad *= 1 - t^2 = (1 - t)(1 + t), with tmp = t - 1 from `softcap_scores` (tmp is changed)."""
    tile.mul(grad, tmp, out=grad)  # (t - 1) g
    tile.adds(tmp, scalar.const(2.0, F32, name="two"), out=tmp)  # t + 1
    tile.mul(grad, tmp, out=grad)  # (t^2 - 1) g
    tile.muls(grad, scalar.const(-1.0, F32, name="minus_one"), out=grad)


@dataclass(frozen=True)
class Softcap(Mod):
    """Softcapping; its arguments keep flash-attn's name, softcap, and 2 / softcap (`values`)."""

    name: str = "softcap"
    builtin = True
    indexed = False  # (the same cap for every row: GQA packing keeps it)
    hides = False
    row_scratch = False
    # S may reach it in the input dtype as it reaches the plain kernel (tests/test_scoremods.py measures it)
    scores = False

    def params(self, prefix: str) -> list:
        return [HostParam("softcap", "float", ctypes.c_float, "softcap: scores = softcap * tanh(scores / softcap)"),
                HostParam("softcap_rcp2", "float", ctypes.c_float, "2 / softcap")]

    @staticmethod
    def values(softcap: float) -> dict[str, float]:
        """The kernel arguments of a call's `softcap` (> 0)."""
        return {"softcap": float(softcap), "softcap_rcp2": 2.0 / softcap}

    def emit_forward(self, site: Site, prefix: str) -> None:
        softcap_scores(site.scores, site.tmp, site.args["softcap"], site.args["softcap_rcp2"])

    def emit_backward(self, site: Site, prefix: str, grad: SSAValue) -> None:
        self.emit_forward(site, prefix)  # leaves tanh - 1 in site.tmp
        softcap_grad(grad, site.tmp)

    def reference(self, scores, b, h, q_idx, kv_idx, values=None):
        cap = values["softcap"]
        return torch.tanh(scores / cap) * cap
