"""The window as a built-in mod (`kernels/builtin_mods/window.py`): its torch reference is the dense
reference's flash-attn definition (`reference.visible_mask`), its kernel arguments are the ones every
masked kernel's entry lists, and its values are the host geometry's bounds (`visibility.kernel_bounds`)."""

from __future__ import annotations

import pytest
import torch

from ptofa.kernels import argspec
from ptofa.kernels.builtin_mods.window import WINDOW
from ptofa.kernels.bwd_pipeline import BwdConfig, entry_args as bwd_entry_args, tile_plan as bwd_tile_plan
from ptofa.pipeline import FAConfig
from ptofa.reference import visible_mask
from ptofa.kernels.builtin_mods.window import window_mods

WINDOWS = [(-1, 0), (-1, -1), (0, 0), (2, 1), (3, -1), (-1, 2), (0, 5)]


@pytest.mark.parametrize("s0, s1", [(5, 7), (7, 5), (6, 6), (1, 9)])
@pytest.mark.parametrize("window", WINDOWS)
def test_reference_is_the_dense_visible_mask(s0: int, s1: int, window: tuple[int, int]) -> None:
    scores = torch.randn(2, 3, s0, s1, generator=torch.Generator().manual_seed(s0 * 10 + s1), dtype=torch.float64)
    b, h = torch.arange(2)[:, None, None, None], torch.arange(3)[None, :, None, None]
    q_idx, kv_idx = torch.arange(s0)[None, None, :, None], torch.arange(s1)[None, None, None, :]
    values = {**WINDOW.values(window, s0, s1), "s0": s0, "s1": s1}
    masked = WINDOW.reference(scores, b, h, q_idx, kv_idx, values)
    seen = visible_mask(s0, s1, window).unsqueeze(1).expand_as(scores)
    assert torch.equal(masked[seen], scores[seen])
    assert bool((masked[~seen] == -torch.inf).all())


def test_values_bound_an_unbounded_side_by_the_lengths() -> None:
    assert WINDOW.values((-1, 0), 5, 7) == {"win_left": 12, "win_right": 0}
    assert WINDOW.values((3, -1), 5, 7) == {"win_left": 3, "win_right": 12}


def test_is_a_hiding_mask() -> None:
    """`Mod.mask` (its IR skipped on full tiles) and `Mod.hides` (a row may see no key) are flags."""
    assert WINDOW.mask is True and WINDOW.hides is True and WINDOW.builtin is True


def test_kernel_arguments_are_the_mods() -> None:
    names = [p.name for p in WINDOW.params()]
    assert names == ["win_left", "win_right"]
    fwd = [p.name for p in argspec.host_params(FAConfig(mods=window_mods()))]
    assert [n for n in fwd if n in names] == names
    assert not set(names) & {p.name for p in argspec.host_params(FAConfig())}
    for kernel in ("dq", "dkdv"):
        assert [n for n, _ in bwd_entry_args(BwdConfig(mods=window_mods()), kernel) if n in names] == names
        assert not set(names) & {n for n, _ in bwd_entry_args(BwdConfig(), kernel)}


def test_one_of_the_mods() -> None:
    """The window is one of a config's mods: after the score mods whatever order it is given in, back from
    the config's JSON, at most one mod that narrows the tiles, and its kernel arguments after the scale."""
    from ptofa.attention.ops import config_from_json
    from ptofa.kernels.builtin_mods.softcap import Softcap
    from ptofa.pipeline import ConfigError

    config = FAConfig(mods=(WINDOW, Softcap()), lse=True)
    assert config == FAConfig(mods=(Softcap(), WINDOW), lse=True) and config.mods == (Softcap(), WINDOW)
    assert config.narrowing is WINDOW and config.score_mods == (Softcap(),)
    assert config_from_json(config.json_text) == config
    assert FAConfig().narrowing is None and BwdConfig(mods=window_mods()).narrowing == WINDOW
    names = [p.name for p in argspec.host_params(config)]
    assert names[names.index("scale") + 1:names.index("scale") + 3] == ["win_left", "win_right"]
    for make in (FAConfig, BwdConfig):
        with pytest.raises(ConfigError, match="at most one is built"):
            make(mods=(WINDOW, WINDOW))

