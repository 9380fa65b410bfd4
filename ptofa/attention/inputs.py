"""The checks and the fixed config rule an attention call applies before it plans a launch: dtypes,
q/k/v shapes, windows, and the automatic config without a timing model (`core.auto_config` ranks
configs by the model when it knows the call's shape). Below `core` and `flex`, which both use them."""

from __future__ import annotations

import torch

from ptofa.kernels.builtin_mods.window import window_mods
from ptofa.launch.base import TORCH_DTYPES
from ptofa.pipeline import ConfigError, FAConfig, kernel_head, lse_prescale

# S1 from which the automatic config takes TILE_S1 = 256 with QK_PRELOAD = 3 (three tiles in flight).
LONG_S1 = 3 * 256
# (tile_s1, qk_preload) candidates of the automatic config, by preference.
LONG_TILES = ((256, 3), (128, 2))
SHORT_TILES = ((128, 2), (256, 3))
_DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


def fixed_config(head: int, in_dtype: str = "f16", *, s1: int, out_dtype: str | None = None, masked: bool = False,
                 key_padding: bool = False, lse: bool = False) -> FAConfig:
    """The automatic config's fixed rule: by S1, the first legal (tile_s1, qk_preload) candidate."""
    candidates = LONG_TILES if s1 >= LONG_S1 else SHORT_TILES
    first_error: ConfigError | None = None
    for tile_s1, qk_preload in candidates:
        try:
            return FAConfig(head=head, tile_s1=tile_s1, qk_preload=qk_preload, in_dtype=in_dtype, out_dtype=out_dtype,
                            mods=window_mods(masked), key_padding=key_padding, lse=lse, prescale_q=lse_prescale(lse))
        except ConfigError as error:
            first_error = first_error or error
    assert first_error is not None
    raise first_error


def dtype_name(dtype: torch.dtype, what: str) -> str:
    """'f16' / 'bf16' / 'f32' of a torch dtype, or ValueError naming `what`."""
    if dtype not in _DTYPE_NAMES:
        raise ValueError(f"{what}: dtype {dtype} is not supported (torch.float16, torch.bfloat16 or torch.float32)")
    return _DTYPE_NAMES[dtype]


def check_qkv(q, k, v, names: tuple[str, str, str] = ("q", "k", "v")) -> tuple[int, int, int, int, int, int]:
    """(B, S0, N, D, S1, KVN) of BSND q/k/v (v's head dim Dv may differ from D: `v.shape[-1]`),
    or ValueError with the rule and the numbers (ConfigError for a head dim above MAX_HEAD)."""
    for name, t in zip(names, (q, k, v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: must be a torch.Tensor, got {type(t).__name__}")
    qn, kn, vn = names
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"rank: {qn}, {kn} and {vn} must be 4-D [B, S, N, D]; got {qn} {tuple(q.shape)}, "
                         f"{kn} {tuple(k.shape)}, {vn} {tuple(v.shape)}")
    for name, t in zip(names, (q, k, v)):
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name}: the last dim (head_dim) must be contiguous, stride 1; got stride {t.stride(-1)} "
                             f"(shape {tuple(t.shape)}, strides {t.stride()})")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"dtype: {qn}, {kn} and {vn} must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype: {q.dtype} is not supported; {qn}, {kn} and {vn} must be torch.float16 or torch.bfloat16")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"shape: {kn} {tuple(k.shape)} and {vn} {tuple(v.shape)} must have the same [B, S, N] "
                         f"(only the head dims may differ)")
    batch, s0, heads, head = q.shape
    kb, s1, kv_heads, kd = k.shape
    if kb != batch:
        raise ValueError(f"batch: {qn} has B={batch} but {kn}/{vn} have B={kb}")
    if kd != head:
        raise ValueError(f"head_dim: {qn} has D={head} but {kn} has D={kd}")
    for name, n in (("B", batch), (f"{qn} seqlen", s0), (f"{kn}/{vn} seqlen", s1), (f"{qn} heads", heads),
                    (f"{kn}/{vn} heads", kv_heads)):
        if n < 1:
            raise ValueError(f"shape: {name}={n} must be >= 1; got {qn} {tuple(q.shape)}, {kn} {tuple(k.shape)}")
    if heads % kv_heads != 0:
        raise ValueError(f"grouped heads: {qn} heads={heads} must be a multiple of {kn}/{vn} heads={kv_heads}")
    kernel_head(head, v.shape[3])  # ConfigError for a head dim outside 1..MAX_HEAD
    devices = {t.device for t in (q, k, v)}
    if len(devices) != 1:
        raise ValueError(f"device: {qn}, {kn} and {vn} must be on one device; got {q.device}, {k.device}, {v.device}")
    return batch, s0, heads, head, s1, kv_heads


def check_window(window, name: str = "window") -> tuple[int, int]:
    """(left, right) with each an int >= -1 (-1 = unbounded), or ValueError."""
    try:
        left, right = (int(w) for w in window)
        ok = all(int(w) == w for w in window)
    except (TypeError, ValueError):
        ok = False
    if not ok or left < -1 or right < -1:
        raise ValueError(f"{name}: {tuple(window) if isinstance(window, (tuple, list)) else window!r} must be "
                         f"(left, right) with each an int >= -1 (-1 = unbounded)")
    return left, right
