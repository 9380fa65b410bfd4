"""`run_fa run`: build, run and check one case on a backend, and its variants, each through the
one path of the layers below (no launch code here):

* a FlashAttention forward case (`ptofa.runner.run_case`), with `--balance` also the balanced
  split-KV launch (`ptofa.launch.balance`), with `--decode` / `--num-splits` the serving shapes
  (`ptofa.cli.serving_run`);
* `--backward`: the backward kernels on the forward's O and LSE (`run_backward_case`; packed
  sequences: `run_varlen_backward_case`), dq, dk, dv checked and their time predicted;
* `KERNEL_FILE --arg ...`: any kernel's entry (`run_kernel_file`, `ptofa.run_kernel`; the `--arg`
  syntax in `ptofa.cli.kernel_run`).
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path

import click
import numpy
import torch

from ptofa.cli.bwd_cli import MAX_CHECKED_SCORES, backward_config
from ptofa.cli.kernel_run import parse_arg
from ptofa.kernels.mods import has_mod
from ptofa.cli.serving_cli import read_seqlens, serving_options
from ptofa.cli.switches import (InputError, config_options, console, int_list, kv_heads_option, make_config,
                                print_results, score_mod_options, window_of, with_score_mods)
from ptofa.launch.base import TORCH_DTYPES
from ptofa.pipeline import ConfigError, FAConfig, ProblemShape, kernel_head
from ptofa.sim.bwd_timing import predict_backward
from ptofa.sim.options import FAULTS, RunOptions


@click.command()
@click.argument("kernel_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--arg", "kernel_args", multiple=True, metavar="NAME=VALUE",
              help="With KERNEL_FILE: one entry argument, a tensor dtype:shape (f32:1000x256, zeros:f32:64), a .npy "
                   "file or a number; repeat for every argument.")
@click.option("--out", "kernel_out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With KERNEL_FILE: save every tensor argument after the run as OUT/NAME.npy.")
@click.option("--backend", type=click.Choice(["sim", "npu", "auto"]), default="auto", show_default=True,
              help="sim = CPU simulator of the emitted .pto; npu = Ascend device; auto = npu when available, else sim.")
@click.option("--batch", type=int, default=1, show_default=True, help="B (batch).")
@click.option("--heads", type=int, default=2, show_default=True, help="N (query heads).")
@kv_heads_option
@click.option("--s0", type=int, default=None, help="Query length S0 (any >= 1) [default: 256; 1 with --decode].")
@click.option("--s1", type=int, default=4096, show_default=True, help="Key/value length S1 (any >= 1).")
@click.option("--seqlens", callback=lambda ctx, p, v: int_list(v, "--seqlens"), default=None, metavar="L1,L2,...",
              help="Varlen prefill: packed sequences of these query lengths (0 allowed); replaces --batch/--s0/--s1.")
@click.option("--kv-seqlens", callback=lambda ctx, p, v: int_list(v, "--kv-seqlens"), default=None, metavar="L1,L2,...",
              help="Varlen key/value lengths per sequence [default: --seqlens].")
@serving_options
@config_options
@score_mod_options
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs (and key-mask lengths).")
@click.option("--block-dim", type=int, default=None,
              help="Blocks to launch (default: min(work units, cube cores)).")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the .pto (and build files) in this folder.")
@click.option("--timeline", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the timing model's timeline of one block (.svg or .png); sim backend only.")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the timing model's per-queue timeline of every replayed block as Chrome trace events "
                   "(FILE.json: Perfetto, chrome://tracing, MindStudio Insight); sim backend only.")
@click.option("--soc", default="910B2", show_default=True, help="Chip of the timing model (910B1..910B4).")
@click.option("--inject-fault", type=click.Choice(FAULTS), default=None, hidden=True,
              help="Test only: the simulator breaks the parsed kernel this way, to exercise its reports.")
@click.option("--backward", is_flag=True,
              help="Also run the backward kernels on the forward's O and LSE (with --seqlens the varlen backward, one "
                   "launch per kernel over unit tables): check dq, dk, dv; predict their time (sim).")
@click.option("--atomic", is_flag=True, help="With --backward: the atomic-add dQ mode (prep + dkdv + post kernels).")
@click.option("--head-dim-v", "head_v", type=int, default=None,
              help="V's (and O's) head dimension Dv, 1..256 [default: --head-dim]; the kernel runs at the width "
                   "kernel_head(D, Dv) with zero-padded inputs.")
@click.option("--balance", is_flag=True,
              help="Also run the dense shape through the balanced split-KV launch (per-unit splits chosen by the "
                   "timing model, e.g. only the last wave's units; then the reduce kernel): check it and predict both "
                   "launches (sim).")
def run(kernel_file: Path | None, kernel_args: tuple[str, ...], kernel_out: Path | None, backend: str, batch: int, heads: int, kv_heads: int | None, s0: int | None, s1: int, seqlens: list[int] | None,
        kv_seqlens: list[int] | None, seqlens_file: Path | None, decode: bool, cache_len: int | None, page_size: int,
        num_splits: int | None, head: int, tile_s1: int, qk_preload: int, dtype: str, out_dtype: str | None,
        causal: bool, window: tuple[int, int] | None, key_padding: bool, lse: bool, prescale_q: bool,
        softmax_dtypes: tuple[str, ...], softcap: float, alibi: bool, seed: int, block_dim: int | None,
        keep: Path | None, timeline: Path | None, trace: Path | None, soc: str, inject_fault: str | None,
        backward: bool, atomic: bool, balance: bool, head_v: int | None) -> None:
    """Build, run and check the kernel against the torch reference; print one result row.

    With KERNEL_FILE (any .pto: `run_fa run k.pto --arg x=f32:64x256 --arg rows=64 --block-dim 2`) run that
    kernel's entry with the `--arg` values instead, on the simulator or an NPU, and print the timing model's
    prediction (`ptofa.run_kernel`)."""
    import dataclasses

    if kernel_file is not None:
        sys.exit(run_kernel_file(kernel_file, kernel_args, block_dim, backend, soc, seed, timeline, trace, kernel_out,
                                 lambda line: console.print(line, markup=False, soft_wrap=True)))
    if kernel_args or kernel_out is not None:
        raise InputError("--arg / --out: only with a KERNEL_FILE (run_fa run FILE.pto --arg NAME=VALUE ...)")

    from ptofa.reference import make_key_mask
    from ptofa.runner import BackendUnavailable, resolve_backend, run_case
    from ptofa.launch.varlen import varlen_shape

    head_v = head if head_v is None else head_v
    try:
        width = kernel_head(head, head_v)
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None
    head_dims = None if (head, head_v) == (width, width) else (head, head_v)
    if head_dims is not None and (decode or num_splits is not None or seqlens or kv_seqlens or seqlens_file
                                  or balance or backend == "npu"):
        raise InputError(f"--head-dim {head} --head-dim-v {head_v}: inputs padded to the kernel width {width} run "
                         f"dense on the sim backend here (ptofa.flash_attn_varlen_func takes them packed)")
    config = make_config(width, tile_s1, qk_preload, dtype, out_dtype, causal, window, key_padding, lse, prescale_q,
                         softmax_dtypes)
    config = with_score_mods(config, softcap, alibi)
    if seqlens_file is not None:
        seqlens = read_seqlens(seqlens_file, seqlens)
    if decode or num_splits is not None:
        if backward:
            raise InputError("--backward: not with --decode / --num-splits (the backward kernels run prefill batches: "
                             "dense, or packed with --seqlens)")
        if config.score_mods:
            raise InputError("--softcap / --alibi: not with --decode / --num-splits in run_fa (flash_attn_with_kvcache "
                             "and flash_attn_varlen_func take softcap and alibi_slopes)")
        from ptofa.cli.serving_run import run_serving

        sys.exit(run_serving(config, backend, batch, heads, kv_heads, s0, seqlens, kv_seqlens, decode, cache_len,
                             page_size, num_splits, window_of(causal, window), seed, soc))
    s0 = 256 if s0 is None else s0
    if key_padding and (seqlens is not None or kv_seqlens is not None):
        raise InputError("--key-padding-mask: not with --seqlens / --kv-seqlens (packed sequences take their key "
                         "lengths from --kv-seqlens)")
    try:
        if seqlens is not None or kv_seqlens is not None:
            config = dataclasses.replace(config, varlen=True)
            shape = varlen_shape(seqlens or kv_seqlens, kv_seqlens or seqlens, heads, kv_heads or heads,
                                 window_of(causal, window))
        else:
            shape = ProblemShape(batch, heads, s0, s1, kv_heads=kv_heads, window=window_of(causal, window))
        shape.check(config)
    except ConfigError as exc:
        raise InputError(f"invalid shape: {exc}") from None
    if trace is not None and trace.suffix.lower() != ".json":
        raise InputError(f"--trace {trace}: Chrome trace events are JSON; the file name must end in .json")
    backend = resolve_backend(backend)
    if backward:
        from ptofa.cli.bwd_cli import backward_config

        backward_config(config, atomic)
    if inject_fault is not None and backend != "sim":
        raise InputError(f"--inject-fault is a simulator option; the {backend} backend runs the kernel as built")
    if balance and (backend != "sim" or backward or key_padding or config.varlen or block_dim is not None):
        raise InputError("--balance: a dense shape on the sim backend, without --backward, --key-padding-mask, "
                         "--seqlens or --block-dim")
    key_mask = None
    if key_padding:
        key_mask, lengths = make_key_mask(batch, s1, seed)
        console.print(f"key-padding mask: valid keys per batch {lengths} of {s1}")
    try:
        result = run_case(config, shape, backend=backend, seed=seed, keep_dir=keep, block_dim=block_dim,
                          timing=True, timeline=timeline, trace=trace, soc=soc, options=RunOptions(fault=inject_fault),
                          key_mask=key_mask, softcap=softcap, head_dims=head_dims)
    except BackendUnavailable as exc:
        raise InputError(str(exc)) from None
    print_results([result])
    if head_dims is not None:
        console.print(f"head dims D={head}, Dv={head_v}: run on the kernel width {width} (inputs zero-padded on the host)")
    if result.message and not result.passed:
        click.echo(result.message, err=True)
    for path in (timeline, trace):
        if path is not None and result.predicted_us is not None:
            console.print(f"timeline written to {path}")
    if balance:
        from ptofa.launch.balance import balanced_line, run_balanced

        split = run_balanced(config, shape, backend, seed, soc)
        print_results([split])
        console.print(balanced_line(split), markup=False)
        if result.predicted_us and split.predicted_us:
            console.print(f"balanced split vs unsplit: {result.predicted_us / split.predicted_us:.2f}x predicted speedup")
        sys.exit(0 if result.passed and split.passed else 1)
    if backward and result.passed:
        passed = run_backward_case(config, shape, result.predicted_us, seed, soc, block_dim,
                                   lambda line: console.print(line, markup=False), backend, atomic, softcap,
                                   head_dims)
        sys.exit(0 if passed else 1)
    sys.exit(0 if result.passed else 1)


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
    mods = dict(softcap=softcap, alibi_slopes=default_alibi_slopes(shape.heads) if has_mod(config.mods, "alibi") else None)
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
    mods = dict(softcap=softcap, alibi_slopes=default_alibi_slopes(shape.heads) if has_mod(config.mods, "alibi") else None)
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


def run_kernel_file(pto_file: Path, arg_texts: tuple[str, ...], block_dim: int | None, backend: str, soc: str,
                    seed: int, timeline: Path | None, trace: Path | None, out: Path | None, echo) -> int:
    """Run `pto_file` with the parsed `--arg`s; print the report; exit code 0 (ran) or 1 (the run failed)."""
    from ptofa.ir.textio import PtoCheckError
    from ptofa.launch.base import BackendUnavailable
    from ptofa.launch.kernel import KernelArgError, load_kernel, run_kernel
    from ptofa.sim.errors import SimError
    from ptofa.sim.timeline import write_chrome_trace, write_timeline

    generator = torch.Generator().manual_seed(seed)
    args = dict(parse_arg(text, generator) for text in arg_texts)
    if block_dim is None:
        raise InputError("--block-dim: a kernel of your own needs its block count (e.g. --block-dim 8)")
    if trace is not None and trace.suffix.lower() != ".json":
        raise InputError(f"--trace {trace}: Chrome trace events are JSON; the file name must end in .json")
    try:
        kernel = load_kernel(pto_file)
        run = run_kernel(kernel, args, block_dim, backend=backend, soc=soc)
    except PtoCheckError as exc:
        echo(str(exc))
        return 1
    except (KernelArgError, BackendUnavailable, NotImplementedError) as exc:
        raise InputError(str(exc)) from None
    except SimError as exc:
        echo(f"{pto_file}: the simulator stopped: {exc}")
        return 1
    echo(run.summary())
    if run.timing is not None:
        if timeline is not None:
            write_timeline(run.timing, timeline)
            echo(f"timeline written to {timeline}")
        if trace is not None:
            write_chrome_trace(run.timing, trace)
            echo(f"trace written to {trace}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, value in args.items():
            if isinstance(value, torch.Tensor):
                array = value.float() if value.dtype == torch.bfloat16 else value
                numpy.save(out / f"{name}.npy", array.numpy())
        echo(f"tensor arguments written to {out}/NAME.npy")
    return 0
