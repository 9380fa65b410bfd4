"""S in the QK slot in the input dtype (`FAConfig.qk_dtype`): the cube's FIX store rounds the scores
as torch's input-dtype attention does, and the vectors widen them to f32 for the softmax."""

from __future__ import annotations

import pytest
import torch

from ptofa.attention.core import attend
from ptofa.fa_builder import emit_fa
from ptofa.kernels import argspec
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.reference import check_accuracy, check_lse, make_key_mask, reference_fa
from ptofa.runner import run_case
from ptofa.kernels.builtin_mods.window import window_mods

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def test_automatic_choice_and_the_explicit_old_form() -> None:
    for dtype in DTYPES:
        assert FAConfig(in_dtype=dtype).qk_dtype == dtype and FAConfig(in_dtype=dtype, lse=True).qk_dtype == "f32"
    assert FAConfig(softmax_dtype="f16").qk_dtype == "f16"
    old, new = FAConfig(qk_dtype="f32"), FAConfig()
    assert old.pipes[0].dtype == "f32" and old.pipes[0].slot_bytes == 2 * new.pipes[0].slot_bytes
    assert "qk_f32" in old.variant and "qk_f32" not in new.variant
    for bad in (dict(qk_dtype="bf16"), dict(qk_dtype="f32", softmax_dtype="f16"), dict(qk_dtype="f8")):
        with pytest.raises(ConfigError, match="QK slot dtype"):
            FAConfig(**bad)


def _vector_func(config: FAConfig) -> str:
    return emit_fa(config).split(f"func.func @{argspec.VECTOR_FUNC_NAME}")[1]


def test_the_vectors_widen_each_slice_once() -> None:
    """One tcvt more per row slice than the f32 slot (the load into the P tile, widened into S's), and
    one for the row max the default takes on the f16 scores before (`FAConfig.input_row_max`)."""
    old, new = _vector_func(FAConfig(qk_dtype="f32", exp_f16=False)), _vector_func(FAConfig(exp_f16=False))
    assert FAConfig(exp_f16=False).input_row_max and not FAConfig(qk_dtype="f32").input_row_max
    assert new.count("pto.tcvt") == old.count("pto.tcvt") + 2 * FAConfig().vec_buffers
    # with the f16 exp as well (sub_f16, the default) S is never widened: no f32 score tile at all
    assert FAConfig().sub_f16 and "s_tile" not in _vector_func(FAConfig()) and "s_tile" in new


CASES = {  # head, shape, switches, scale (None: 1/sqrt(D)); scale 1.0 gives scores of magnitude ~ sqrt(D)
    "lse_ragged": (128, ProblemShape(1, 2, 200, 700), dict(lse=True), None),
    "large_scores": (128, ProblemShape(1, 2, 300, 600), dict(), 1.0),
    "causal_large_lse": (128, ProblemShape(1, 1, 384, 512, window=(-1, 0)), dict(mods=window_mods(), lse=True), 0.5),
    "window_padding_gqa": (64, ProblemShape(2, 4, 150, 300, kv_heads=2, window=(40, 0)),
                           dict(mods=window_mods(), lse=True, key_padding=True), None),
}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_o_and_lse_meet_the_rule(dtype: str, name: str) -> None:
    head, shape, switches, scale = CASES[name]
    config = FAConfig(head=head, tile_s1=128, qk_preload=2, in_dtype=dtype, qk_dtype=dtype, **switches)
    key_mask = make_key_mask(shape.batch, shape.s1, seed=3)[0] if switches.get("key_padding") else None
    result = run_case(config, shape, backend="sim", seed=3, scale=scale, key_mask=key_mask)
    assert result.status == "pass", result.message


def _tied_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Key 0 scores far above or below the others, which all tie at 0 (a clamp), at scale 1."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 64, 1, 128, generator=g).to(dtype)
    k = torch.zeros(1, 1024, 1, 128)
    k[:, 0] = 64.0
    v = torch.randn(1, 1024, 1, 128, generator=g).to(dtype)
    return q, k.to(dtype), v


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_tied_scores_at_a_large_scale(dtype: str) -> None:
    """The automatic config on tied scores: without LSE the input-dtype S meets the rule (the f16
    exp rounds S - m anyway); with LSE the slot stays f32 and O and LSE meet it."""
    q, k, v = _tied_inputs(DTYPES[dtype])
    ref = reference_fa(q, k, v, 1.0)
    for lse, slot in ((False, dtype), (True, "f32")):
        config = FAConfig(head=128, in_dtype=dtype, lse=lse)
        assert config.qk_dtype == slot
        out, *rest = attend(q, k, v, scale=1.0, return_lse=lse, backend="sim", config=config)
        accuracy = check_accuracy(out.float(), ref.out32, ref.out_low)
        assert accuracy.passed, accuracy.summary()
        if lse:
            assert check_lse(rest[0], ref).passed, check_lse(rest[0], ref).message


def test_why_lse_kernels_keep_an_f32_slot() -> None:
    """The LSE form (f32 exp, the vectors' row sums) with fp16 S misses the O rule on the tied input."""
    q, k, v = _tied_inputs(torch.float16)
    ref = reference_fa(q, k, v, 1.0)
    out, _ = attend(q, k, v, scale=1.0, return_lse=True, backend="sim", config=FAConfig(lse=True, qk_dtype="f16"))
    assert not check_accuracy(out.float(), ref.out32, ref.out_low).passed
