"""FlashAttention backward on torch tensors: run the backward kernels, and their reference.

`attention_backward(q, k, v, out, lse, dout)` returns (dq, dk, dv) for the forward
`out = softmax(scale Q K^T + mask) V` whose `out` and `lse` the forward kernel wrote
(`ptofa.flash_attn_func(..., return_lse=True)`): no S or P is kept between the passes.
It launches the two kernels of `ptofa.kernels.fa_bwd` one after the other: `dq` (which
also writes D = rowsum(dO * O), the diagonal of its cube's dO O^T) and then `dkdv`, on the simulator or on an NPU (one
`plan.plan_backward` launched by `sim.launch` or `npu.launch`);
with `deterministic=False` instead `prep` (D), `dkdv` with atomic-add dQ into an f32 buffer,
and `post` (dQ f32 -> input dtype).

`reference_backward` is torch autograd through the same attention in fp64 and in the
input dtype; `check_gradients` applies the FlashAttention accuracy rule (`check_accuracy`:
error against fp64 <= 2 x the input-dtype computation's error + 1e-5) to each gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ptofa.attention.ops import flash_attn_bwd
from ptofa.ir.textio import ParsedModule
from ptofa.kernels.builtin_mods.registry import with_builtin_mods
from ptofa.kernels.bwd_pipeline import BwdConfig, default_config, work_units
from ptofa.kernels.mods import has_mod
from ptofa.launch import sim
from ptofa.launch.base import check_alibi_slopes, check_softcap, normalize_key_mask, pad_heads
from ptofa.launch.dispatch import backend_soc, launch_on, resolve_backend
from ptofa.launch.plan import backward_kernel, plan_backward
from ptofa.launch.varlen import backward_tables, varlen_shape
from ptofa.pipeline import ConfigError, ProblemShape, kernel_head
from ptofa.reference import Accuracy, alibi_bias, check_accuracy, modify_scores, visible_mask
from ptofa.sim.executor import SimResult
from ptofa.sim.memory import GmPointer
from ptofa.sim.options import RunOptions
from ptofa.sim.socspec import DEFAULT_SOC, SocSpec
from ptofa.sim.timing import blocks_to_trace

_DTYPE_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16"}


def parsed_kernels(config: BwdConfig) -> dict[str, ParsedModule]:
    """The backward kernels of `config`, emitted, parsed from their text and verified (once)."""
    return {kernel: backward_kernel(config, kernel).parsed for kernel in config.kernels}


def _check_inputs(q, k, v, out, lse, dout) -> None:
    tensors = {"q": q, "k": k, "v": v, "out": out, "dout": dout, "lse": lse}
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"attention_backward: {name} must be a torch.Tensor, got {type(x).__name__}")
    if q.dtype not in _DTYPE_NAMES:
        raise TypeError(f"attention_backward: q.dtype={q.dtype} must be torch.float16 or torch.bfloat16")
    for name in ("k", "v", "out", "dout"):
        if tensors[name].dtype != q.dtype:
            raise TypeError(f"attention_backward: {name}.dtype={tensors[name].dtype} must equal q.dtype={q.dtype}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"attention_backward: q [B,S0,N,D], k [B,S1,KVN,D] and v [B,S1,KVN,Dv] expected, got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    b, s0, n, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or n % k.shape[2] != 0:
        raise ValueError(f"attention_backward: k {tuple(k.shape)} must be [B={b}, S1, KVN, D={d}] with N={n} a multiple of KVN")
    o_shape = (b, s0, n, v.shape[3])
    if out.shape != o_shape or dout.shape != o_shape:
        raise ValueError(f"attention_backward: out {tuple(out.shape)} and dout {tuple(dout.shape)} must be "
                         f"[B, S0, N, Dv] = {list(o_shape)}")
    kernel_head(d, v.shape[3])  # ConfigError for a head dim outside 1..MAX_HEAD
    if tuple(lse.shape) != (b, n, s0) or lse.dtype != torch.float32:
        raise ValueError(f"attention_backward: lse must be float32 [B, N, S0] = [{b}, {n}, {s0}], got {lse.dtype} {tuple(lse.shape)}")


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    *,
    softmax_scale: float | None = None,
    window: tuple[int, int] | None = None,
    deterministic: bool = True,
    backend: str = "auto",
    config: BwdConfig | None = None,
    block_dim: int | None = None,
    bounds: tuple[int, int] | None = None,
    key_padding_mask: torch.Tensor | None = None,
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    dropout: tuple[float, int, int] | None = None,
    grads_f32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of attention, flash-attn's conventions, run by the backward kernels.

    q: [B, S0, N, D]; k: [B, S1, KVN, D]; v: [B, S1, KVN, Dv]; out, dout: [B, S0, N, Dv] (N a multiple
    of KVN: GQA/MQA, dk/dv are summed over each kv head's q heads); all float16 or all bfloat16;
    1 <= D, Dv <= 256. Non-contiguous tensors are copied. The kernels run at the width
    kernel_head(D, Dv) on tensors zero-padded to it (`ptofa.launch.base.pad_heads`; zero dO columns
    give zero dV columns, zero Q/K columns leave dP and dS unchanged); the true columns are returned.
    lse:     [B, N, S0] float32 from the forward (`flash_attn_func(..., return_lse=True)`);
             +inf marks a row that sees no key (its gradients are 0).
    softmax_scale: default 1 / sqrt(D).
    window:  (left, right), bottom-right aligned as flash-attn (-1 unbounded; causal is (-1, 0));
             None = no mask.
    deterministic: True: the kernels accumulate without atomics (one writer per element), so
             the result is bit-identical across runs. False: dQ is accumulated by the dkdv
             kernel with atomic-add stores into an f32 buffer (no dq kernel; 64-query steps),
             then cast; the order of the adds, and so dQ's last bits, may vary.
    backend: "sim" (CPU simulator), "npu" (built with ptoas + bisheng, launched through torch_npu:
             `ptofa.launch.npu.launch`; `BackendUnavailable` without an NPU) or
             "auto" (npu where usable).
    bounds:  the kernel's own (win_left, win_right) window arguments instead of `window`, as
             the forward op takes them (`ptofa.attention.core.window_to_bounds`; torch's top-left
             causal is the right bound S0 - S1, which `window` cannot say when S0 < S1).
    key_padding_mask: [B, S1] or [S1] bool / integer, nonzero = the key takes part (the forward's
             mask: padding keys get no probability, so their dk, dv are 0).
    softcap, alibi_slopes: the forward's (`ptofa.flash_attn_func`): softcap > 0 caps the scores,
             alibi_slopes (fp32 [N] or [B, N]) adds ALiBi's bias; the slopes get no gradient.
    dropout: the forward's (p, seed, offset) (`ptofa.kernels.dropout`): the kernels regenerate its mask.
    grads_f32: return the kernels' f32 accumulators unrounded (`BwdConfig.grads_f32`), for a caller
             that adds several backwards' gradients and rounds the sum once (ring attention).
    Returns dq, dk, dv in q's dtype (float32 with `grads_f32`) and the shapes of q, k and v.
    """
    _check_inputs(q, k, v, out, lse, dout)
    d, d_v = q.shape[3], v.shape[3]
    width = kernel_head(d, d_v)
    q, k, v, out, lse, dout = (x.detach().contiguous() for x in (*pad_heads(width, q, k, v, out), lse,
                                                                 *pad_heads(width, dout)))
    if backend not in ("auto", "sim", "npu"):
        raise ValueError(f"attention_backward: backend={backend!r} must be 'auto', 'sim' or 'npu'")
    b, s0, n, _ = q.shape
    s1, kvn = k.shape[1], k.shape[2]
    if bounds is not None and window is not None:
        raise ValueError(f"attention_backward: pass window={window} or bounds={bounds}, not both")
    win = (-1, -1) if window is None else tuple(int(w) for w in window)
    shape = ProblemShape(b, n, s0, s1, kvn, win)
    masked = win != (-1, -1) or bounds is not None
    dtype = _DTYPE_NAMES[q.dtype]
    atomic = not deterministic
    key_mask = None if key_padding_mask is None else normalize_key_mask(key_padding_mask, b, s1)
    padded = key_mask is not None
    softcap = check_softcap(softcap)
    slopes = check_alibi_slopes(alibi_slopes, b, n)
    mods = dict(mods=with_builtin_mods((), softcap=softcap > 0, alibi=slopes is not None, window=masked),
                dropout=dropout is not None, grads_f32=grads_f32)
    cfg = config or default_config(width, dtype, atomic_dq=atomic, key_padding=padded, **mods)
    if (cfg.head != width or cfg.in_dtype != dtype or cfg.atomic_dq != atomic or cfg.key_padding != padded
            or cfg.mods != mods["mods"] or cfg.dropout != mods["dropout"]
            or cfg.grads_f32 != grads_f32):
        raise ConfigError(f"attention_backward: config (head={cfg.head}, in_dtype={cfg.in_dtype}, "
                          f"atomic_dq={cfg.atomic_dq}, key_padding={cfg.key_padding}, mods={cfg.mods}, "
                          f"grads_f32={cfg.grads_f32}) does not match the inputs (kernel width "
                          f"kernel_head(D={d}, Dv={d_v}) = {width}, {dtype}, window={win}, deterministic="
                          f"{deterministic}, key_padding_mask given: {padded}, softcap={softcap}, alibi_slopes given: "
                          f"{slopes is not None}, dropout={dropout is not None}, grads_f32={grads_f32})")
    if s0 < 1 or s1 < 1 or min(win) < -1:
        raise ValueError(f"attention_backward: S0={s0}, S1={s1} must be >= 1 and window={win} entries >= -1")
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    grads = BackwardBuffers.zeros(q, k, atomic=atomic, grads_f32=grads_f32)
    backend = resolve_backend(backend)
    if backend == "npu":
        _check_buffers(cfg, grads, key_mask)
        plan = plan_backward(cfg, shape, backend_soc(backend), scale=scale, bounds=bounds, key_mask=key_mask,
                             block_dim=block_dim, softcap=softcap, alibi=slopes, dropout=dropout)
        launch_on(backend, plan, _tensors(q, k, v, out, lse, dout, grads, key_mask, slopes))
    else:
        run_backward(cfg, shape, q, k, v, out, lse, dout, grads, scale, block_dim=block_dim, bounds=bounds,
                     key_mask=key_mask, softcap=softcap, alibi_slopes=slopes, dropout=dropout)
    if width == d and width == d_v:
        return grads.dq, grads.dk, grads.dv
    return grads.dq[..., :d].contiguous(), grads.dk[..., :d].contiguous(), grads.dv[..., :d_v].contiguous()


@dataclass
class BackwardBuffers:
    """The kernels' outputs: dq, dk, dv (zeroed: a unit that sees nothing stores nothing), D,
    and in atomic mode the f32 dQ accumulator (NaN-filled: the prep kernel zeroes it before the
    dkdv kernel adds into it, so a row it missed shows up as NaN). With `grads_f32` (the config's)
    dq, dk, dv are f32, and in atomic mode dq is the accumulator itself (no post kernel)."""

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    dsum: torch.Tensor  # D = rowsum(dO * O) = diag(dO O^T), [B, N, S0] f32, written by the dq (or prep) kernel
    dq_acc: torch.Tensor | None = None  # [B, S0, N, D] f32, atomic mode only

    @classmethod
    def zeros(cls, q: torch.Tensor, k: torch.Tensor, atomic: bool = False, grads_f32: bool = False) -> BackwardBuffers:
        b, s0, n, _ = q.shape
        acc = torch.full(q.shape, math.nan, dtype=torch.float32) if atomic else None
        dtype = torch.float32 if grads_f32 else q.dtype
        dq = acc if acc is not None and grads_f32 else torch.zeros(q.shape, dtype=dtype, device=q.device)
        return cls(dq, torch.zeros(k.shape, dtype=dtype, device=k.device), torch.zeros(k.shape, dtype=dtype, device=k.device),
                   torch.full((b, n, s0), math.nan), acc)


def _tensors(q, k, v, out, lse, dout, grads: BackwardBuffers, key_mask=None,
             alibi_slopes=None) -> dict[str, torch.Tensor | None]:
    """The backward kernels' tensors by entry-argument name (no dq where it is the f32 accumulator dq_acc:
    one tensor under two names would be two device copies, the unwritten one copied back too)."""
    dq = None if grads.dq is grads.dq_acc else grads.dq
    return {"q": q, "k": k, "v": v, "o": out, "do": dout, "lse": lse, "dq": dq, "dk": grads.dk, "dv": grads.dv,
            "dsum": grads.dsum, "dq_acc": grads.dq_acc, "key_mask": key_mask, "alibi_slopes": alibi_slopes}


def _check_buffers(config: BwdConfig, grads: BackwardBuffers, key_mask) -> None:
    if config.atomic_dq and grads.dq_acc is None:
        raise ValueError("run_backward: an atomic_dq config needs grads.dq_acc (BackwardBuffers.zeros(..., atomic=True))")
    if config.key_padding and key_mask is None:
        raise ValueError("run_backward: a key_padding config needs key_mask (backend.normalize_key_mask)")


def run_backward(config: BwdConfig, shape: ProblemShape, q, k, v, out, lse, dout, grads: BackwardBuffers, scale: float,
                 *, block_dim: int | None = None, trace: bool = False, bounds: tuple[int, int] | None = None,
                 key_mask: torch.Tensor | None = None, soc: str | SocSpec = DEFAULT_SOC, softcap: float = 0.0,
                 alibi_slopes: torch.Tensor | None = None,
                 tables: dict[str, torch.Tensor] | None = None,
                 dropout: tuple[float, int, int] | None = None) -> dict[str, SimResult]:
    """Launch `config.kernels` (dq, dkdv; or prep, dkdv, post) on the simulator; `grads` is written in place
    (a varlen config: packed sequences as one batch, with the unit `tables` of `varlen.backward_tables`).

    With `trace`, each launch records the blocks the timing model needs (`ptofa.sim.bwd_timing`):
    one per distinct unit count, or every block when a window or packed sequences give units unequal work."""
    _check_buffers(config, grads, key_mask)
    if has_mod(config.mods, "alibi") and alibi_slopes is None:
        raise ValueError("run_backward: an alibi config needs alibi_slopes (fp32 [N] or [B, N])")
    plan = plan_backward(config, shape, soc, scale=scale, bounds=bounds, key_mask=key_mask, block_dim=block_dim,
                         softcap=softcap, alibi=alibi_slopes, tables=tables, dropout=dropout)
    options = {}
    for call in plan.calls:
        units = work_units(config, call.name, shape.batch, shape.heads, shape.kv_heads, shape.s0, shape.s1)
        traced = None if config.narrowing or config.varlen else blocks_to_trace(call.block_dim, units)
        options[call.name] = RunOptions(trace=trace, trace_blocks=traced if trace else None)
    results = sim.launch(plan, _tensors(q, k, v, out, lse, dout, grads, key_mask, alibi_slopes), options=options)
    return {call.name: result for call, result in zip(plan.calls, results)}


def varlen_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                    dout: torch.Tensor, q_lens: list[int], k_lens: list[int], *, softmax_scale: float | None = None,
                    window: tuple[int, int] = (-1, -1), deterministic: bool = True, backend: str = "auto",
                    block_dim: int | None = None, soc: str | SocSpec = DEFAULT_SOC, softcap: float = 0.0,
                    alibi_slopes: torch.Tensor | None = None,
                    dropout: tuple[float, int, int] | None = None) -> tuple[torch.Tensor, ...]:
    """Gradients (dq, dk, dv) of packed variable-length attention (`flash_attn_varlen_func`), in one
    launch of each backward kernel for the whole batch: the dq and dkdv kernels walk the unit tables
    of `varlen.backward_tables` (ragged lengths, sequences of length 0, the window per sequence,
    bottom-right aligned; GQA/MQA), the row-wise prep and post (atomic mode) run over all rows.

    q: [total_q, N, D]; k: [total_k, KVN, D]; v: [total_k, KVN, Dv]; out, dout: [total_q, N, Dv];
    lse: [N, total_q] float32 (the varlen forward's, +inf for a row that sees no key); q_lens, k_lens:
    the sequences' lengths (sum to total_q, total_k). softcap, alibi_slopes (fp32 [N] or [B, N], B the
    number of sequences; each sequence's bias with its own lengths), dropout (p, seed, offset; each sequence's
    mask at its own positions, `ptofa.kernels.dropout.packed_keep_masks`): the forward's. The kernels run at
    kernel_head(D, Dv) on zero-padded copies, as `attention_backward`. The other arguments as
    `attention_backward` (`soc` the simulated chip). Returns dq, dk, dv in q's dtype and shapes."""
    return run_varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, softmax_scale=softmax_scale, window=window,
                               deterministic=deterministic, backend=backend, block_dim=block_dim, soc=soc,
                               softcap=softcap, alibi_slopes=alibi_slopes, dropout=dropout).grads


@dataclass
class VarlenBackward:
    """What `run_varlen_backward` ran: the gradients (dq, dk, dv) and, when there was a launch, its
    config, shape (`varlen.varlen_shape`), unit tables and (sim backend) the `SimResult` of each kernel."""

    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    config: BwdConfig | None = None
    shape: ProblemShape | None = None
    tables: dict[str, torch.Tensor] | None = None
    results: dict[str, SimResult] | None = None


def run_varlen_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                        dout: torch.Tensor, q_lens: list[int], k_lens: list[int], *, softmax_scale: float | None = None,
                        window: tuple[int, int] = (-1, -1), deterministic: bool = True, backend: str = "auto",
                        block_dim: int | None = None, soc: str | SocSpec = DEFAULT_SOC, softcap: float = 0.0,
                        alibi_slopes: torch.Tensor | None = None, trace: bool = False,
                        dropout: tuple[float, int, int] | None = None) -> VarlenBackward:
    """`varlen_backward`, returning what it launched too; `trace`: the simulator records the blocks the
    timing model needs (`ptofa.sim.bwd_timing.predict_backward(results, config, shape, tables=tables)`)."""
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or k.shape[:2] != v.shape[:2]:
        raise ValueError(f"varlen_backward: q [total_q, N, D], k [total_k, KVN, D] and v [total_k, KVN, Dv] expected, "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if tuple(lse.shape) != (q.shape[1], q.shape[0]):
        raise ValueError(f"varlen_backward: lse must be [N, total_q] = [{q.shape[1]}, {q.shape[0]}], got {tuple(lse.shape)}")
    if len(q_lens) != len(k_lens) or sum(q_lens) != q.shape[0] or sum(k_lens) != k.shape[0]:
        raise ValueError(f"varlen_backward: q_lens {list(q_lens)} and k_lens {list(k_lens)} must be as many and sum to "
                         f"total_q={q.shape[0]}, total_k={k.shape[0]}")
    q4, k4, v4, out4, dout4 = (x.unsqueeze(0) for x in (q, k, v, out, dout))  # one batch of packed rows
    lse4 = lse.unsqueeze(0)
    _check_inputs(q4, k4, v4, out4, lse4, dout4)
    if backend not in ("auto", "sim", "npu"):
        raise ValueError(f"varlen_backward: backend={backend!r} must be 'auto', 'sim' or 'npu'")
    window = tuple(int(w) for w in window)
    if min(window) < -1:
        raise ValueError(f"varlen_backward: window={window} entries must be >= -1")
    heads, d, d_v, kv_heads = q.shape[1], q.shape[2], v.shape[2], k.shape[1]
    atomic = not deterministic
    softcap = check_softcap(softcap)
    slopes = check_alibi_slopes(alibi_slopes, len(q_lens), heads)
    if q.shape[0] == 0 or k.shape[0] == 0:  # no query rows, or rows that see no key: no gradient
        return VarlenBackward((torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)))
    width = kernel_head(d, d_v)
    q4, k4, v4, out4, lse4, dout4 = (x.detach().contiguous() for x in (*pad_heads(width, q4, k4, v4, out4), lse4,
                                                                       *pad_heads(width, dout4)))
    cfg = default_config(width, _DTYPE_NAMES[q.dtype], atomic_dq=atomic, varlen=True,
                         mods=with_builtin_mods((), softcap=softcap > 0, alibi=slopes is not None, window=window != (-1, -1)),
                         dropout=dropout is not None)
    shape = varlen_shape(list(q_lens), list(k_lens), heads, kv_heads, window)
    tables = backward_tables(cfg, list(q_lens), list(k_lens), heads, kv_heads, window)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    grads = BackwardBuffers.zeros(q4, k4, atomic=atomic)
    backend = resolve_backend(backend)
    if backend == "npu":
        plan = plan_backward(cfg, shape, backend_soc(backend), scale=scale, block_dim=block_dim, softcap=softcap,
                             alibi=slopes, tables=tables, dropout=dropout)
        launch_on(backend, plan, _tensors(q4, k4, v4, out4, lse4, dout4, grads, alibi_slopes=slopes))
        results = None
    else:
        results = run_backward(cfg, shape, q4, k4, v4, out4, lse4, dout4, grads, scale, block_dim=block_dim, soc=soc,
                               softcap=softcap, alibi_slopes=slopes, tables=tables, trace=trace, dropout=dropout)
    return VarlenBackward((grads.dq[0, ..., :d].contiguous(), grads.dk[0, ..., :d].contiguous(),
                           grads.dv[0, ..., :d_v].contiguous()), cfg, shape, tables, results)


def launch_args(config: BwdConfig, kernel: str, shape: ProblemShape, tensors: dict[str, torch.Tensor], scale: float,
                blocks: int, bounds: tuple[int, int] | None = None) -> dict[str, object]:
    """`kernel`'s entry arguments by entry-argument name, for a direct `simulate` call: the tensors (q k v o do lse dq
    dk dv dsum, dq_acc in atomic mode, key_mask with a key mask), the plan's values on `blocks` blocks, and a
    NaN-filled slot workspace (a slot read before its write shows up as NaN)."""
    plan = plan_backward(config, shape, DEFAULT_SOC, scale=scale, bounds=bounds, key_mask=tensors.get("key_mask"),
                         block_dim=blocks)
    workspace = GmPointer.of(torch.full((max(plan.workspace_bytes, 4) // 4,), math.nan))
    return sim.arguments(plan.call(kernel), tensors, workspace)


# ======================================================================================
# Reference and the accuracy rule
# ======================================================================================


@dataclass(frozen=True)
class GradReference:
    """fp64 gradients and the same autograd in the input dtype (BSND; dk, dv with KVN heads)."""

    exact: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    low: tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _attention(q, k, v, scale: float, window: tuple[int, int], key_padding_mask=None, softcap: float = 0.0,
               alibi_slopes=None, dropout=None) -> torch.Tensor:
    """softmax(scale Q K^T) V in q's dtype, with rows that see no key giving 0 (and zero gradients);
    softcap and ALiBi as `reference.modify_scores`; `dropout` = (keep [B, N, S0, S1] bool, p) drops
    P's entries and scales the kept ones by 1 / (1 - p)."""
    b, s0, n, _ = q.shape
    s1, kvn = k.shape[1], k.shape[2]
    group = n // kvn
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    vis = visible_mask(s0, s1, window, key_padding_mask, batch=b).unsqueeze(1)
    scores = (qh @ kh.transpose(-1, -2)) * scale
    bias = None if alibi_slopes is None else alibi_bias(alibi_slopes, b, n, s0, s1, torch.float64)
    scores = modify_scores(scores, softcap, bias)
    scores = scores.masked_fill(~vis, -1e4 if q.dtype != torch.float64 else -1e300)
    p = torch.softmax(scores, dim=-1) * vis.to(q.dtype)
    if dropout is not None:
        p = p * dropout[0].to(q.dtype) / (1.0 - dropout[1])
    return (p @ vh).transpose(1, 2)


def reference_backward(q, k, v, dout, scale: float | None = None, window: tuple[int, int] = (-1, -1),
                       key_padding_mask: torch.Tensor | None = None, softcap: float = 0.0,
                       alibi_slopes: torch.Tensor | None = None,
                       dropout: tuple[torch.Tensor, float] | None = None) -> GradReference:
    """torch autograd through attention in fp64 and in the input dtype, with the same dO (and key mask,
    softcap, ALiBi slopes, dropout mask and p)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    def grads(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        leaves = [x.detach().to(dtype).requires_grad_(True) for x in (q, k, v)]
        _attention(*leaves, scale, tuple(window), key_padding_mask, softcap, alibi_slopes,
                   dropout).backward(dout.to(dtype))
        return tuple(x.grad for x in leaves)

    return GradReference(grads(torch.float64), grads(q.dtype))


def reference_varlen_backward(q, k, v, dout, q_lens: list[int], k_lens: list[int], scale: float | None = None,
                              window: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: torch.Tensor | None = None,
                              dropout: tuple[list[torch.Tensor], float] | None = None) -> GradReference:
    """`reference_backward` of each packed sequence on its own rows (bottom-right window and ALiBi
    bias per sequence; slopes [N] or [B, N]), packed as q [total_q, N, D], k [total_k, KVN, D] and
    v [total_k, KVN, Dv]; a sequence without queries or keys gets 0. `dropout` = (keep masks, one
    [N, q_len, k_len] per sequence, p)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    exact = [torch.zeros(x.shape, dtype=torch.float64) for x in (q, k, v)]
    low = [torch.zeros_like(x) for x in (q, k, v)]
    q0 = k0 = 0
    for index, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
        rows, keys = slice(q0, q0 + q_len), slice(k0, k0 + k_len)
        q0, k0 = q0 + q_len, k0 + k_len
        if q_len and k_len:
            slopes = None if alibi_slopes is None else (alibi_slopes if alibi_slopes.dim() == 1
                                                        else alibi_slopes[index:index + 1])
            drop = None if dropout is None else (dropout[0][index][None], dropout[1])
            ref = reference_backward(q[rows][None], k[keys][None], v[keys][None], dout[rows][None], scale, window,
                                     softcap=softcap, alibi_slopes=slopes, dropout=drop)
            for grads, found in ((exact, ref.exact), (low, ref.low)):
                grads[0][rows], grads[1][keys], grads[2][keys] = (g[0] for g in found)
    return GradReference(tuple(exact), tuple(low))


def check_gradients(dq, dk, dv, ref: GradReference) -> dict[str, Accuracy]:
    """The accuracy rule applied to dq, dk and dv separately (against fp64, with the input dtype's error)."""
    return {name: check_accuracy(ours, exact, low)
            for name, ours, exact, low in zip(("dq", "dk", "dv"), (dq, dk, dv), ref.exact, ref.low)}


@flash_attn_bwd.register_kernel(None)
def _flash_attn_bwd(q, k, v, out, lse, dout, scale, masked, win_left, win_right, backend, deterministic=True,
                    key_padding_mask=None, softcap=0.0, alibi_slopes=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0):
    """`ptofa::flash_attn_bwd` (`ptofa.attention.ops`): `attention_backward` with out and dO in q's dtype."""
    bounds = (win_left, win_right) if masked else None
    return attention_backward(q, k, v, out.to(q.dtype), lse, dout.to(q.dtype), softmax_scale=scale, bounds=bounds,
                              backend=backend, deterministic=deterministic, key_padding_mask=key_padding_mask,
                              softcap=softcap, alibi_slopes=alibi_slopes,
                              dropout=(dropout_p, dropout_seed, dropout_offset) if dropout_p else None)


__all__ = ["BackwardBuffers", "GradReference", "attention_backward", "check_gradients",
           "launch_args", "parsed_kernels", "reference_backward", "reference_varlen_backward", "run_backward",
           "run_varlen_backward", "VarlenBackward", "varlen_backward"]
