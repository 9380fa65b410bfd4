"""LSE on adversarial inputs: many tied scores (what a clamp produces), at a large scale.

The cube's row sums (`cube_rowsum`) sum P after it is rounded to the input dtype for the PV
matmul, and the f16 exp (`exp_f16`) rounds the exponent's argument: when a row's scores tie,
every P of the row rounds the same way and the error no longer averages out. O divides the PV
matmul of the same rounded P by those sums and stays within the rule; the LSE does not, so the
automatic config sums P on the vectors in f32 whenever LSE is asked for.
"""

from __future__ import annotations

import math

import pytest
import torch

from ptofa.attention.core import attend, auto_config
from ptofa.pipeline import FAConfig
from ptofa.reference import check_accuracy, check_lse, reference_fa

S0, S1, HEAD = 64, 1024, 128
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def _tied_inputs(dtype: torch.dtype, lead: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Key 0 scores above the others, whose scores all tie at 0 (as clamped scores do)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, S0, 1, HEAD, generator=g).to(dtype)
    k = torch.zeros(1, S1, 1, HEAD)
    k[:, 0] = lead
    v = torch.randn(1, S1, 1, HEAD, generator=g).to(dtype)
    return q, k.to(dtype), v


def test_the_automatic_config_sums_p_on_the_vectors_when_lse_is_asked_for() -> None:
    without = auto_config(HEAD, "f16", s1=S1)
    with_lse = auto_config(HEAD, "f16", s1=S1, lse=True)
    assert without.cube_rowsum and without.exp_f16
    assert not with_lse.cube_rowsum and not with_lse.exp_f16


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("lead, scale", [(4.0, HEAD ** -0.5), (64.0, 1.0)])  # the second: a large scale
def test_lse_meets_the_rule_on_tied_scores(dtype: str, lead: float, scale: float) -> None:
    q, k, v = _tied_inputs(DTYPES[dtype], lead)
    ref = reference_fa(q, k, v, scale)
    out, lse = attend(q, k, v, scale=scale, return_lse=True, backend="sim",
                      config=auto_config(HEAD, dtype, s1=S1, lse=True))
    accuracy = check_accuracy(out.float(), ref.out32, ref.out_low)
    assert accuracy.passed, accuracy.summary()
    lse_accuracy = check_lse(lse, ref)
    assert lse_accuracy.passed, lse_accuracy.message


def test_the_cube_row_sums_with_the_f16_exp_miss_the_lse_rule_on_tied_scores() -> None:
    """Why the automatic config falls back: the same tied input with the forms the forward uses
    without LSE. O still passes; the LSE misses its tolerance."""
    q, k, v = _tied_inputs(torch.float16, 4.0)
    scale = HEAD ** -0.5
    ref = reference_fa(q, k, v, scale)
    config = FAConfig(head=HEAD, lse=True, cube_rowsum=True, exp_f16=True)
    out, lse = attend(q, k, v, scale=scale, return_lse=True, backend="sim", config=config)
    assert check_accuracy(out.float(), ref.out32, ref.out_low).passed
    assert not check_lse(lse, ref).passed
    assert math.isfinite(float(lse.max()))
