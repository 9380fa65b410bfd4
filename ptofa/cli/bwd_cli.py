"""`run_fa build --backward` and `run_fa run --backward`: the backward kernels from the command line.

`run` builds and runs the forward kernel (with LSE) and then the backward kernels on its
O and LSE, checks dq, dk and dv against fp64 autograd with the accuracy rule, and prints
the timing model's backward time, the backward/forward ratio and what bounds each kernel.
With `--seqlens` (packed sequences) the forward is the varlen one and the backward the varlen
backward (one launch of each kernel over unit tables), checked per sequence and predicted from
its unit tables.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import torch

from ptofa.launch.base import TORCH_DTYPES
from ptofa.kernels.bwd_pipeline import BwdConfig, budget, default_config
from ptofa.sim.bwd_timing import predict_backward
from ptofa.kernels.fa_bwd import emit_bwd
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape
from ptofa.cli.switches import InputError

# Largest B * N * S0 * S1 the fp64 autograd reference is run for (it holds several such tensors).
MAX_CHECKED_SCORES = 1 << 24


def backward_config(config: FAConfig, atomic: bool = False) -> BwdConfig:
    """The backward kernels for a forward config's switches (`atomic`: the atomic-add dQ mode, 64-query
    dkdv steps; a varlen config: the kernels over unit tables), or `InputError` naming what they lack."""
    if config.out_dtype != config.in_dtype:  # (--key-padding-mask with --seqlens: the varlen config refuses it)
        raise InputError(f"--backward: --out-dtype not supported by the backward kernels (dq, dk, dv are in the "
                         f"input dtype {config.in_dtype}, not {config.out_dtype})")
    try:
        return default_config(config.head, config.in_dtype, masked=config.masked, target=config.target,
                              atomic_dq=atomic, key_padding=config.key_padding, softcap=config.softcap,
                              alibi=config.alibi, varlen=config.varlen)
    except ConfigError as exc:
        raise InputError(f"invalid backward config: {exc}") from None


def build_backward(config: FAConfig, out_dir: Path, echo, atomic: bool = False) -> None:
    """Write the backward kernels' `.pto` files into `out_dir`, with their budgets."""
    bwd = backward_config(config, atomic)
    out_dir.mkdir(parents=True, exist_ok=True)
    echo(f"backward config: {bwd.summary()}")
    for kernel in bwd.kernels:
        text = emit_bwd(bwd, kernel)
        path = out_dir / f"fa_bwd_{kernel}.pto"
        tmp = path.with_suffix(".pto.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        echo(f"[{kernel}]\n{budget(bwd, kernel).table()}")
        echo(f"wrote {path} ({len(text.splitlines())} lines)")


def run_backward_case(config: FAConfig, shape: ProblemShape, forward_us: float | None, seed: int, soc: str,
                      block_dim: int | None, echo, backend: str = "sim", atomic: bool = False,
                      softcap: float = 0.0, head_dims: tuple[int, int] | None = None) -> bool:
    """Forward (for O and LSE), backward, gradient check and timing; True when the gradients pass.
    `head_dims` (D, Dv): inputs of those head dims, zero-padded to the kernels' width `config.head`.
    On `backend="npu"` both run on the NPU and the timing model is not run (it replays the
    kernels on the simulator: `--backend sim`)."""
    import ptofa
    from ptofa.launch.base import case_key_mask, pad_heads
    from ptofa.attention.backward import BackwardBuffers, attention_backward, reference_backward, run_backward
    from ptofa.reference import default_alibi_slopes, make_inputs

    bwd = backward_config(config, atomic)
    if config.varlen:
        return run_varlen_backward_case(config, shape, forward_us, seed, soc, block_dim, echo, backend, atomic, softcap)
    dtype = TORCH_DTYPES[config.in_dtype]
    head, head_v = head_dims or (config.head, config.head)
    q, k, v = make_inputs(shape, head, seed, dtype, shape.kv_heads, head_v)
    dout = torch.randn(*q.shape[:3], head_v, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    fwd = dataclasses.replace(config, lse=True)
    mask = case_key_mask(config, shape, None, seed)  # a random ragged one with --key-padding-mask
    mods = dict(softcap=softcap, alibi_slopes=default_alibi_slopes(shape.heads) if config.alibi else None)
    out, lse = ptofa.flash_attn_func(q, k, v, window_size=shape.window, key_padding_mask=mask, return_lse=True,
                                     backend=backend, config=fwd, **mods)
    scale = shape.default_scale(head)
    out, lse = out.contiguous(), lse.contiguous()
    wide = pad_heads(config.head, q, k, v, out, dout)  # the kernels' width (the tensors as they are when it is theirs)
    grads = BackwardBuffers.zeros(wide[0], wide[1], atomic=atomic)
    if backend == "npu":
        grads.dq, grads.dk, grads.dv = attention_backward(
            q, k, v, out, lse, dout, softmax_scale=scale, window=shape.window, deterministic=not atomic,
            backend=backend, config=bwd, block_dim=block_dim, key_padding_mask=mask, **mods)
        results = None
    else:
        results = run_backward(bwd, shape, *wide[:4], lse, wide[4], grads, scale, block_dim=block_dim, trace=True,
                               key_mask=mask, **mods)
        grads.dq, grads.dk, grads.dv = grads.dq[..., :head], grads.dk[..., :head], grads.dv[..., :head_v]
    scores = shape.batch * shape.heads * shape.s0 * shape.s1
    passed = _check(grads.dq, grads.dk, grads.dv, scores, "B*N*S0*S1", echo,
                    lambda: reference_backward(q, k, v, dout, scale, shape.window, mask, **mods))
    echo(f"backward config: {bwd.summary()}")
    if results is None:
        echo("backward timing model not run on the npu backend (it replays the kernels: --backend sim)")
    else:
        echo(predict_backward(results, bwd, shape, soc).summary(forward_us))
    return passed


def _check(dq, dk, dv, scores: int, what: str, echo, reference) -> bool:
    """The accuracy rule on dq, dk and dv against `reference()` (a `GradReference`), one line each; True
    when all pass. Above `MAX_CHECKED_SCORES` scores (`what` says how they are counted) the reference is
    not run: only finiteness is printed, and the case passes."""
    from ptofa.attention.backward import check_gradients

    if scores > MAX_CHECKED_SCORES:
        echo(f"gradient check skipped: {what} = {scores} > {MAX_CHECKED_SCORES} (the fp64 autograd reference "
             f"would hold several tensors of that size); finite: "
             f"{all(bool(torch.isfinite(g).all()) for g in (dq, dk, dv))}")
        return True
    acc = check_gradients(dq, dk, dv, reference())
    for name, a in acc.items():
        echo(f"{name}: pass err {a.err:.2e} <= tol {a.tolerance:.2e} (2 x input-dtype error {a.ref16_err:.2e} + 1e-5)"
             if a.passed else f"{name}: FAIL err {a.err:.2e} > tol {a.tolerance:.2e}")
    return all(a.passed for a in acc.values())


def run_varlen_backward_case(config: FAConfig, shape: ProblemShape, forward_us: float | None, seed: int, soc: str,
                             block_dim: int | None, echo, backend: str = "sim", atomic: bool = False,
                             softcap: float = 0.0) -> bool:
    """`run_backward_case` for packed sequences (`shape.seqlens`): the varlen forward (O and LSE), then one
    launch of each backward kernel over the batch's unit tables (`attention.backward.run_varlen_backward`),
    dq, dk, dv checked against the per-sequence fp64 reference, and on the sim backend the timing model's
    prediction from the unit tables (`bwd_timing.predict_backward(..., tables=)`)."""
    import ptofa
    from ptofa.attention.backward import reference_varlen_backward, run_varlen_backward
    from ptofa.launch.varlen import make_varlen_inputs
    from ptofa.reference import default_alibi_slopes

    bwd = backward_config(config, atomic)
    q_lens, k_lens = [q for q, _ in shape.seqlens], [k for _, k in shape.seqlens]
    q, k, v = make_varlen_inputs(shape, config, seed)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1)).to(q.dtype)
    cu_q, cu_k = (torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32) for lens in (q_lens, k_lens))
    mods = dict(softcap=softcap, alibi_slopes=default_alibi_slopes(shape.heads) if config.alibi else None)
    out, lse = ptofa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), window_size=shape.window,
                                            return_lse=True, backend=backend, **mods)
    scale = shape.default_scale(config.head)
    run = run_varlen_backward(q, k, v, out, lse, dout, q_lens, k_lens, softmax_scale=scale, window=shape.window,
                              deterministic=not atomic, backend=backend, block_dim=block_dim, soc=soc,
                              trace=backend == "sim", **mods)
    scores = shape.heads * sum(a * b for a, b in shape.seqlens)
    passed = _check(*run.grads, scores, "N*sum(q_len*k_len)", echo,
                    lambda: reference_varlen_backward(q, k, v, dout, q_lens, k_lens, scale, shape.window, **mods))
    echo(f"backward config: {bwd.summary()}")
    if run.results is None:
        echo("backward timing model not run: " + ("no launch (no query rows or no keys)" if run.config is None else
                                                  "on the npu backend (it replays the kernels: --backend sim)"))
    else:
        echo(predict_backward(run.results, run.config, run.shape, soc, tables=run.tables).summary(forward_us))
    return passed
