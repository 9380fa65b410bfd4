"""Key-padding masks in the backward: both modes, with and without a window, a per-batch or a
shared mask, through `attention_backward` on the simulator and through the recorded NPU launch."""

from __future__ import annotations

import pytest
import torch

import ptofa
from ptofa.launch import npu
from ptofa.attention.backward import attention_backward, check_gradients, reference_backward
from ptofa.kernels.bwd_pipeline import BwdConfig, budget, entry_args
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.pipeline import ConfigError
from ptofa.kernels.builtin_mods.window import window_mods

from fake_npu import install_fake_npu
from test_backward_npu import _nbytes, _replay_on_sim
from test_backward import _inputs


def _mask(b: int, s1: int, shared: bool) -> torch.Tensor:
    """Ragged valid lengths per batch (one batch with a hole in the middle), or one shared row."""
    if shared:
        mask = torch.ones(s1, dtype=torch.bool)
        mask[s1 // 3: s1 // 2] = False
        return mask
    mask = torch.ones(b, s1, dtype=torch.bool)
    mask[0, s1 - 25:] = False
    mask[-1, 10:40] = False
    return mask


def _grads(q, k, v, dout, window, mask, deterministic=True, backend="sim", **kwargs):
    out, lse = ptofa.flash_attn_func(q, k, v, window_size=window, key_padding_mask=mask, return_lse=True, backend="sim")
    win = None if window == (-1, -1) else window
    return attention_backward(q, k, v, out, lse, dout, window=win, key_padding_mask=mask, deterministic=deterministic,
                              backend=backend, **kwargs)


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("window, shared, dtype, d", [
    ((-1, -1), False, torch.float16, 64),
    ((-1, 0), True, torch.bfloat16, 64),
    ((30, 10), False, torch.float16, 128),
])
def test_masked_gradients_match_fp64_autograd_with_the_mask(deterministic, window, shared, dtype, d):
    """GQA 2, two batches, tails on both sides; padding keys get exactly zero dk and dv."""
    q, k, v, dout = _inputs(2, 4, 2, 77, 93, d, dtype)
    mask = _mask(2, 93, shared)
    dq, dk, dv = _grads(q, k, v, dout, window, mask, deterministic)
    acc = check_gradients(dq, dk, dv, reference_backward(q, k, v, dout, window=window, key_padding_mask=mask))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}
    hidden = ~mask.reshape(-1, 93).expand(2, 93)
    assert (dk[hidden] == 0).all() and (dv[hidden] == 0).all() and dk[~hidden].abs().sum() > 0


def test_the_mask_reaches_the_kernels():
    """The same O and LSE with the mask left out of the backward fail the rule: the test above
    would see kernels that ignore it."""
    q, k, v, dout = _inputs(1, 2, 1, 64, 96)
    mask = _mask(1, 96, shared=False)
    out, lse = ptofa.flash_attn_func(q, k, v, key_padding_mask=mask, return_lse=True, backend="sim")
    grads = attention_backward(q, k, v, out, lse, dout, backend="sim")
    acc = check_gradients(*grads, reference_backward(q, k, v, dout, key_padding_mask=mask))
    assert not acc["dk"].passed and not acc["dv"].passed


def test_a_batch_without_keys_gets_zero_gradients():
    q, k, v, dout = _inputs(2, 2, 2, 40, 70)
    mask = torch.ones(2, 70, dtype=torch.bool)
    mask[1] = False
    dq, dk, dv = _grads(q, k, v, dout, (-1, -1), mask)
    assert (dq[1] == 0).all() and (dk[1] == 0).all() and (dv[1] == 0).all()
    acc = check_gradients(dq, dk, dv, reference_backward(q, k, v, dout, key_padding_mask=mask))
    assert all(a.passed for a in acc.values())


def test_the_kernels_take_the_forward_kernels_mask_arguments():
    for atomic in (False, True):
        config = BwdConfig(head=64, key_padding=True, atomic_dq=atomic, block_q=64 if atomic else 128)
        for kernel in config.kernels:
            args = dict(entry_args(config, kernel))
            wanted = kernel in ("dq", "dkdv")
            assert (args.get("key_mask"), args.get("key_mask_stride")) == (
                ("!pto.ptr<i8>", "i64") if wanted else (None, None))
    dkdv = budget(BwdConfig(head=64, key_padding=True), "dkdv").rows[0]
    assert "hidden_rowexpand_tmp0" in dict(dkdv.items) and "pto.trowexpandadd" in emit_bwd(BwdConfig(key_padding=True), "dkdv")


@pytest.mark.parametrize("mask, message", [
    (torch.ones(3, 93, dtype=torch.bool), "key padding mask: shape (3, 93) must be [B, S1] = [2, 93] or [S1] = [93]"),
    (torch.ones(2, 93), "key padding mask: dtype torch.float32 must be bool or an integer type"),
])
def test_a_bad_mask_is_refused_before_anything_runs(mask, message):
    q, k, v, dout = _inputs(2, 2, 2, 40, 93)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        attention_backward(q, k, v, q, torch.zeros(2, 2, 40), dout, key_padding_mask=mask, backend="sim")


def test_a_config_without_key_padding_is_refused_with_a_mask():
    q, k, v, dout = _inputs(1, 2, 2, 40, 93)
    with pytest.raises(ConfigError, match="key_padding=False.*key_padding_mask given: True"):
        attention_backward(q, k, v, q, torch.zeros(1, 2, 40), dout, key_padding_mask=torch.ones(93, dtype=torch.bool),
                           config=BwdConfig(head=64), backend="sim")


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
def test_the_npu_launch_passes_the_mask_and_its_stride(monkeypatch, deterministic):
    """Recorded launches replayed on the simulator from their addresses: the per-batch mask's
    address and stride S1 reach the mixed kernels and the gradients pass the rule."""
    calls = install_fake_npu(monkeypatch, npu, 24)
    q, k, v, dout = _inputs(2, 4, 2, 77, 93)
    mask = _mask(2, 93, shared=False)
    out, lse = ptofa.flash_attn_func(q, k, v, window_size=(-1, 0), key_padding_mask=mask, return_lse=True, backend="sim")
    config = BwdConfig(head=64, mods=window_mods(), key_padding=True, atomic_dq=not deterministic,
                       block_q=128 if deterministic else 64)
    _replay_on_sim(calls, config, {**_nbytes(q, k, lse), "key_mask": mask.numel()})
    grads = attention_backward(q, k, v, out.contiguous(), lse.contiguous(), dout, window=(-1, 0), key_padding_mask=mask,
                               deterministic=deterministic, backend="npu")
    for call in calls:
        if "key_mask" in call.values:
            assert call.values["key_mask_stride"] == 93
    assert sum("key_mask" in call.values for call in calls) == (2 if deterministic else 1)  # dq / dkdv, not prep, post
    acc = check_gradients(*grads, reference_backward(q, k, v, dout, window=(-1, 0), key_padding_mask=mask))
    assert all(a.passed for a in acc.values()), {name: str(a) for name, a in acc.items()}


def test_cli_run_backward_with_a_key_mask_checks_all_three_gradients(tmp_path):
    from click.testing import CliRunner

    from ptofa.cli.main import main

    result = CliRunner().invoke(main, ["run", "--backward", "--key-padding-mask", "--causal", "--head", "64",
                                       "--s0", "70", "--s1", "90", "--heads", "2"])
    assert result.exit_code == 0, result.output
    assert [line.split(":")[0] for line in result.output.splitlines() if line.endswith("+ 1e-5)")] == ["dq", "dk", "dv"]
    assert "key_padding" in result.output
    build = CliRunner().invoke(main, ["build", "--backward", "--key-padding-mask", "-o", str(tmp_path)])
    assert build.exit_code == 0 and "key_mask_stride" in (tmp_path / "fa_bwd_dkdv.pto").read_text()
