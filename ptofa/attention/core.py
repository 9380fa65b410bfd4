"""Attention on torch tensors: `attend`, the entry point below the public APIs.

    out, lse = attend(q, k, v, scale=0.125, window=(-1, 0), return_lse=True)

`attend` takes BSND tensors (Q [B, S0, N, D], K and V [B, S1, KVN, D] with N % KVN == 0,
fp16 or bf16), checks them, picks a kernel config (`auto_config`, or checks the one it is
given), takes the kernel from the in-process kernel cache and runs it on the simulator
(CPU tensors) or on an Ascend NPU. `ptofa.flash_attn_func`,
`ptofa.scaled_dot_product_attention` and `ptofa.attention.infiniop` are thin layers over it.

Kernel cache (`ptofa.launch.kernel_cache`): one kernel per `FAConfig`, in memory and on disk;
a second call with the same config emits, parses and compiles nothing.

Automatic config (`config=None`): the head dim and dtypes come from the tensors, the
variant switches from the call (masked iff a window is given, key_padding iff a mask is
given, lse iff asked for, and then no `prescale_q`: `pipeline.lse_prescale`), TILE_S1 / QK_PRELOAD from the timing model's ranking of the
shape's bucket (`ptofa.launch.tune`). Should that prediction fail, a fixed rule (with a
warning): 256 / 3 for S1 >= `LONG_S1` (the preload ring of three 256-key tiles fills),
128 / 2 for shorter key sequences.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import torch

from ptofa.attention.inputs import (_DTYPE_NAMES, check_qkv, check_window, dtype_name,  # noqa: F401 (re-exported)
                                    fixed_config)
from ptofa.attention.ops import config_from_json, flash_attn_fwd
from ptofa.launch.base import (TORCH_DTYPES, BackendUnavailable, check_alibi_slopes, check_softcap,  # noqa: F401 (re-exported)
                               normalize_key_mask, pad_heads)
from ptofa.kernels.builtin_mods.registry import with_builtin_mods
from ptofa.kernels.mods import has_mod
from ptofa.launch import dispatch
from ptofa.launch.splitkv import DenseSplit, plan_dense_split, tune_window
from ptofa.launch.dispatch import BACKEND_NAMES, backend_soc, launch_on, resolve_backend  # noqa: F401 (re-exported)
from ptofa.launch.kernel_cache import Kernel, clear_kernel_cache, get_kernel, kernel_cache_info
from ptofa.launch.plan import plan_forward
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, kernel_head
from ptofa.sim.socspec import DEFAULT_SOC, SocSpec, get_soc



# --------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------


def auto_config(head: int, in_dtype: str = "f16", *, s1: int, out_dtype: str | None = None, masked: bool = False,
                key_padding: bool = False, lse: bool = False, shape: ProblemShape | None = None,
                soc: str | SocSpec = DEFAULT_SOC) -> FAConfig:
    """The config `attend` runs with when none is given (see the module docstring): with
    `shape` (the call's sizes and window) the timing model's choice for it on `soc` (a name, or the
    `SocSpec` a backend plans for, whose cube-core count the ranking uses), without it (or when the
    prediction fails) the fixed rule."""
    if shape is not None:
        from ptofa.launch.tune import TuneShape, tune

        spec = get_soc(soc)
        cores = None if spec == get_soc(spec.name) else spec.cube_cores
        wanted = TuneShape(shape.batch, shape.heads, shape.kv_heads, shape.s0, shape.s1, head, in_dtype, out_dtype,
                           shape.window if masked else (-1, -1), key_padding, lse, spec.name, cores)
        try:
            return tune(wanted).config
        except (ConfigError, RuntimeError, ValueError) as error:
            warnings.warn(f"ptofa: automatic config: the timing model's ranking failed ({error}); "
                          f"using the fixed rule", RuntimeWarning, stacklevel=2)
    return fixed_config(head, in_dtype, s1=s1, out_dtype=out_dtype, masked=masked, key_padding=key_padding, lse=lse)


def with_score_mods(config: FAConfig, *, softcap: bool, alibi: bool, dropout: bool = False) -> FAConfig:
    """`config` with the softcap / ALiBi / dropout switches a call needs: an f32 softmax (the switches
    compute on f32 scores; `cube_rowsum` and `exp_f16` chosen again for it: dropout needs the vectors'
    row sums), or the config unchanged."""
    if not softcap and not alibi and not dropout:
        return config
    mods = with_builtin_mods(config.mods, softcap=softcap, alibi=alibi)
    if config.softmax_dtype == "f32" and not dropout:
        return dataclasses.replace(config, mods=mods)
    return dataclasses.replace(config, softmax_dtype="f32", cube_rowsum=None, exp_f16=None, mods=mods, dropout=dropout)


def check_config(config: FAConfig, *, head: int, in_dtype: str, out_dtype: str | None, masked: bool,
                 key_padding: bool, lse: bool, softcap: bool = False, alibi: bool = False, dropout: bool = False) -> None:
    """`ConfigError` unless `config` can run this call: same head dim and input dtype, the
    output dtype asked for, and every switch the call needs (a masked kernel also runs an
    unmasked call, a key-padding kernel one without a mask, an LSE kernel one without LSE)."""
    if not isinstance(config, FAConfig):
        raise ConfigError(f"config: must be a ptofa.pipeline.FAConfig, got {type(config).__name__}")
    if config.head != head:
        raise ConfigError(f"config: head={config.head} but q/k/v run on the kernel width kernel_head(D, Dv) = {head}")
    if config.in_dtype != in_dtype:
        raise ConfigError(f"config: in_dtype={config.in_dtype!r} but q/k/v are {TORCH_DTYPES[in_dtype]}")
    if out_dtype is not None and config.out_dtype != out_dtype:
        raise ConfigError(f"config: out_dtype={config.out_dtype!r} but out_dtype={TORCH_DTYPES[out_dtype]} was asked for")
    if config.varlen:
        raise ConfigError("config: varlen=True kernels take packed sequences (ptofa.launch.varlen), not [B, S, N, D] tensors")
    if masked and not config.narrowing:
        raise ConfigError(f"config: a window / causal mask needs the window mod in mods (mods=(WINDOW,) from "
                          f"ptofa.kernels.builtin_mods.window), the given config has mods={config.mods}")
    for name, needed in (("key_padding", key_padding), ("lse", lse)):
        if needed and not getattr(config, name):
            why = {"key_padding": "a key_padding_mask", "lse": "return_lse=True"}[name]
            raise ConfigError(f"config: {why} needs {name}=True, the given config has {name}=False")
    have = {"softcap": has_mod(config.mods, "softcap"), "alibi": has_mod(config.mods, "alibi"), "dropout": config.dropout}
    for name, needed, why in (("softcap", softcap, "softcap > 0"), ("alibi", alibi, "alibi_slopes"),
                              ("dropout", dropout, "dropout_p > 0")):
        if needed != have[name]:  # a switched-on kernel always applies its modification
            raise ConfigError(f"config: {name}={have[name]}, but the call has "
                              f"{why if needed else 'no ' + why}: they must agree")


# --------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------


def window_to_bounds(window: tuple[int, int], s0: int, s1: int) -> tuple[int, int] | None:
    """The kernel's (win_left, win_right) of a bottom-right window; None for (-1, -1)."""
    if tuple(window) == (-1, -1):
        return None
    return ProblemShape(1, 1, s0, s1, window=tuple(window)).window_bounds()


def out_dtype_name(out_dtype) -> str | None:
    """'f16' / 'bf16' / 'f32' of an out dtype given as a torch dtype or a name; None stays None."""
    if out_dtype is None:
        return None
    if isinstance(out_dtype, str):
        if out_dtype in TORCH_DTYPES:
            return out_dtype
        raise ValueError(f"out_dtype: {out_dtype!r} must be one of {tuple(TORCH_DTYPES)} or a torch dtype")
    return dtype_name(out_dtype, "out_dtype")


# --------------------------------------------------------------------------------------
# attend
# --------------------------------------------------------------------------------------


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    window: tuple[int, int] = (-1, -1),
    key_padding_mask: torch.Tensor | None = None,
    return_lse: bool = False,
    out_dtype: torch.dtype | str | None = None,
    backend: str = "auto",
    config: FAConfig | None = None,
    block_dim: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """FlashAttention forward on BSND tensors; returns `(out, lse)` (`lse` None unless asked for).

    q:         [B, S0, N, D], torch.float16 or torch.bfloat16; 1 <= D <= 256.
    k, v:      k [B, S1, KVN, D], v [B, S1, KVN, Dv] (1 <= Dv <= 256) in q's dtype, N % KVN == 0 (q
               head h reads kv head h // (N / KVN)). Non-contiguous inputs are copied. The kernel runs
               at the width `kernel_head(D, Dv)`; narrower q/k/v are zero-padded to it on the host.
    scale:     the softmax scale (flash-attn's default is 1 / sqrt(D)).
    window:    (left, right), bottom-right aligned as in flash-attn >= 2.1: query i sees key j
               iff i + S1 - S0 - left <= j <= i + S1 - S0 + right; -1 is unbounded, (-1, 0)
               is causal. Anything but (-1, -1) runs the masked kernel.
    key_padding_mask: [B, S1] or [S1], bool or integer, nonzero = the key takes part.
    return_lse: also return LSE [B, N, S0] fp32 (natural log; +inf for a row that sees no key,
               whose output row is 0).
    out_dtype: dtype of out (torch.float16, torch.bfloat16, torch.float32; default: q's).
    backend:   "sim" (CPU simulator, CPU tensors), "npu" (Ascend; CPU inputs are copied to
               the device and the results back), or "auto" (npu where one is usable, else sim).
    config:    an `FAConfig` to run instead of the automatic one; `ConfigError` if it cannot
               run this call (head = kernel_head(D, Dv), dtypes, or a switch the call needs is off).
    block_dim: blocks of the launch (default min(work units, cube cores)).

    Bad input raises `ValueError` (`ConfigError` for config rules) with one line naming the
    rule and the numbers; `backend="npu"` without an NPU raises `BackendUnavailable`.
    """
    check_qkv(q, k, v)
    left_right = check_window(window)
    bounds = window_to_bounds(left_right, q.shape[1], k.shape[1])
    return run_attention(q, k, v, scale=scale, bounds=bounds, key_padding_mask=key_padding_mask,
                         return_lse=return_lse, out_dtype=out_dtype, backend=backend, config=config,
                         block_dim=block_dim)


def run_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None,
    bounds: tuple[int, int] | None = None,
    key_padding_mask=None,
    return_lse: bool = False,
    out_dtype=None,
    backend: str = "auto",
    config: FAConfig | None = None,
    block_dim: int | None = None,
    out: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
    stream=None,
    names: tuple[str, str, str] = ("q", "k", "v"),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    dropout: tuple[float, int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`attend` with the kernel's window bounds given directly (`bounds` = (win_left, win_right),
    the right one may be negative; None = no window), and for `ptofa.attention.infiniop`: an `out`
    tensor to write, a `workspace` used as the slot rings, a `stream` (NPU); `softcap` (> 0: scores
    capped) and `alibi_slopes` (fp32 [N] or [B, N]) as flash-attn's; `dropout` = (p, seed, offset)
    of the kernel's generator (`ptofa.kernels.dropout`; None: no dropout).

    Head dims: the kernel of width `kernel_head(D, Dv)` runs on q/k/v zero-padded to it
    (`ptofa.launch.base.pad_heads`); out is O's first Dv columns."""
    backend = resolve_backend(backend)
    batch, s0, heads, head, s1, kv_heads = check_qkv(q, k, v, names)
    head_v = v.shape[3]
    width = kernel_head(head, head_v)
    q, k, v = pad_heads(width, *(t.detach() for t in (q, k, v)))
    if scale is None:
        scale = 1.0 / math.sqrt(head)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale: {scale!r} must be a finite number")
    if backend == "sim" and q.device.type != "cpu":
        raise ValueError(f"device: the sim backend runs on CPU tensors; {names[0]} is on {q.device}")
    in_dtype = _DTYPE_NAMES[q.dtype]
    wanted_out = out_dtype_name(out_dtype)
    key_mask = None
    if key_padding_mask is not None:
        key_mask = normalize_key_mask(torch.as_tensor(key_padding_mask), batch, s1)
    masked = bounds is not None
    softcap = check_softcap(softcap)
    alibi = check_alibi_slopes(alibi_slopes, batch, heads)
    if alibi is not None and alibi.device != q.device:
        raise ValueError(f"alibi_slopes: on {alibi.device}, but {names[0]} is on {q.device}")
    mods = dict(softcap=softcap > 0, alibi=alibi is not None, dropout=dropout is not None)
    if block_dim is not None and (isinstance(block_dim, bool) or not isinstance(block_dim, int) or block_dim < 1):
        raise ValueError(f"block_dim: {block_dim!r} must be an int >= 1")
    soc = backend_soc(backend)
    if config is None:
        tuned = ProblemShape(batch, heads, s0, s1, kv_heads=kv_heads, window=tune_window(bounds, s0, s1))
        config = auto_config(width, in_dtype, s1=s1, out_dtype=wanted_out, masked=masked,
                             key_padding=key_mask is not None, lse=return_lse, shape=tuned, soc=soc)
        config = with_score_mods(config, **mods)
        if key_mask is None and out is None and workspace is None and block_dim is None and dropout is None:
            split = dense_split(config, q, k, v, scale=float(scale), bounds=bounds, return_lse=return_lse,
                                backend=backend, soc=soc, softcap=softcap, alibi=alibi)
            if split is not None:
                return _true_head(split[0], head_v), split[1]
    else:
        check_config(config, head=width, in_dtype=in_dtype, out_dtype=wanted_out, masked=masked,
                     key_padding=key_mask is not None, lse=return_lse, **mods)
    shape = ProblemShape(batch, heads, s0, s1, kv_heads=kv_heads)
    shape.check(config)
    if config.key_padding and key_mask is None:  # a key-padding kernel run without a mask: every key takes part
        key_mask = torch.ones(s1, dtype=torch.int8)
    plan = plan_forward(config, shape, soc, scale=float(scale), bounds=bounds, key_mask=key_mask, block_dim=block_dim,
                        softcap=softcap, alibi=alibi, dropout=dropout)
    o = out if out is not None and width == head_v else torch.full(
        (batch, s0, heads, config.head), math.nan, dtype=TORCH_DTYPES[config.out_dtype], device=q.device)
    lse = torch.full((batch, heads, s0), math.nan, device=q.device) if config.lse else None
    tensors = {"q": q.contiguous(), "k": k.contiguous(), "v": v.contiguous(), "o": o, "lse": lse, "key_mask": key_mask,
               "alibi_slopes": alibi}
    # A simulator report (deadlock, out-of-bounds access) raises SimError, a RuntimeError.
    launch_on(backend, plan, tensors, workspace=workspace, stream=stream)
    if out is not None and o is not out:
        out.copy_(o[..., :head_v])
        o = out
    return _true_head(o, head_v), (lse if return_lse else None)


def _true_head(o: torch.Tensor, head_v: int) -> torch.Tensor:
    """O's first `head_v` columns (the rest are the zero-padded V's zero columns), contiguous."""
    return o if o.shape[-1] == head_v else o[..., :head_v].contiguous()


@flash_attn_fwd.register_kernel(None)
def _flash_attn_fwd(q, k, v, scale, masked, win_left, win_right, key_padding_mask, out_dtype, backend, config,
                    deterministic=True, softcap=0.0, alibi_slopes=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0):
    """`ptofa::flash_attn_fwd` (`ptofa.attention.ops`): `run_attention` with LSE (`deterministic` is the backward's)."""
    bounds = (win_left, win_right) if masked else None
    return run_attention(q, k, v, scale=scale, bounds=bounds, key_padding_mask=key_padding_mask, return_lse=True,
                         out_dtype=out_dtype, backend=backend, config=config_from_json(config), softcap=softcap,
                         alibi_slopes=alibi_slopes,
                         dropout=(dropout_p, dropout_seed, dropout_offset) if dropout_p else None)


def run_dense_split(split: DenseSplit, q, k, v, *, return_lse: bool, backend: str, out=None,
                    workspace: torch.Tensor | None = None, stream=None, alibi: torch.Tensor | None = None):
    """Launch a planned split on [B, S*, N, D] tensors; returns (out [B,S0,N,D], lse [B,N,S0] or None).

    `out` (contiguous, written in place) and `workspace` (at least `split.workspace_bytes()`,
    holding the slot rings and the partials) are the caller's when given."""
    batch, s0, heads, head = q.shape
    s1, kv_heads = k.shape[1], k.shape[2]
    if out is None:
        out = torch.empty((batch, s0, heads, head), dtype=TORCH_DTYPES[split.config.out_dtype], device=q.device)
    lse = torch.full((heads, batch * s0), math.inf, device=q.device) if return_lse else None
    tensors = {"q": q.reshape(batch * s0, heads, head).contiguous(),
               "k": k.reshape(batch * s1, kv_heads, head).contiguous(),
               "v": v.reshape(batch * s1, kv_heads, head).contiguous(),
               "o": out.view(batch * s0, heads, head), "lse": lse, "block_table": None, "alibi_slopes": alibi}
    dispatch.launch_on(backend, split.plan, tensors, workspace=workspace, stream=stream)
    dense_lse = lse.reshape(heads, batch, s0).permute(1, 0, 2).contiguous() if return_lse else None
    return out.view(batch, s0, heads, head), dense_lse


def dense_split(config: FAConfig, q, k, v, *, scale: float, bounds: tuple[int, int] | None, return_lse: bool,
                backend: str, soc: str | SocSpec, num_splits: int = 0, softcap: float = 0.0,
                alibi: torch.Tensor | None = None):
    """Run the dense problem split-KV when the timing model says a split helps (`num_splits` 0)
    or as told (> 1); returns (out [B,S0,N,D], lse [B,N,S0] or None), or None to run unsplit.
    (`softcap` and the ALiBi slopes `alibi` go to a config with those switches.)"""
    batch, s0, heads, _ = q.shape
    split = plan_dense_split(config, batch, s0, k.shape[1], heads, k.shape[2], bounds, soc, scale=scale,
                             num_splits=num_splits, softcap=softcap, alibi=alibi)
    if split is None:
        return None
    return run_dense_split(split, q, k, v, return_lse=return_lse, backend=backend, alibi=alibi)


__all__ = [
    "BackendUnavailable",
    "ConfigError",
    "Kernel",
    "attend",
    "auto_config",
    "check_config",
    "clear_kernel_cache",
    "get_kernel",
    "kernel_cache_info",
    "run_attention",
]


def check_dropout(dropout_p) -> float:
    """flash-attn's `dropout_p` as a float in [0, 1); ValueError otherwise."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: {dropout_p!r} must be a float in [0, 1)")
    return float(dropout_p)


def dropout_seed_offset() -> tuple[int, int]:
    """(seed, offset) of one dropout call: two int32 values drawn from torch's default generator, so
    `torch.manual_seed(s)` reproduces a call (and its mask) and consecutive calls differ."""
    seed, offset = torch.randint(-2**31, 2**31, (2,), dtype=torch.int64).tolist()
    return seed, offset


def unsupported_arguments(dropout_p, softcap, alibi_slopes, dropout: bool = False) -> None:
    """`NotImplementedError` for dropout where the call's kernels have none (`dropout` False),
    `ValueError` for a dropout_p outside [0, 1), a softcap that is not a float >= 0 or ALiBi slopes
    that are not an fp32 tensor (their shape is checked with the tensors'); every flash-attn call
    checks its arguments here first."""
    check_dropout(dropout_p)
    if dropout_p != 0.0 and not dropout:
        raise NotImplementedError(f"dropout_p: {dropout_p} is not supported by this call's kernels "
                                  f"(pass dropout_p=0.0, as flash-attn's callers do for evaluation)")
    check_softcap(softcap)
    if alibi_slopes is not None and (not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32):
        raise ValueError(f"alibi_slopes: must be a float32 tensor [nheads] or [batch, nheads], got "
                         f"{getattr(alibi_slopes, 'dtype', type(alibi_slopes).__name__)}")


def flash_attn_returns(out, lse, return_attn_probs: bool, return_lse: bool, s_dmask=None):
    """flash-attn's return convention: out; (out, softmax_lse, S_dmask) with return_attn_probs
    (S_dmask None without dropout, `ptofa.attention.attn_probs`' with); ptofa's return_lse gives (out, lse)."""
    if return_attn_probs and return_lse:
        raise ValueError("return_attn_probs and return_lse: pass one; return_attn_probs=True already returns "
                         "(out, softmax_lse, S_dmask)")
    if return_attn_probs:
        return out, lse, s_dmask
    return (out, lse) if return_lse else out
