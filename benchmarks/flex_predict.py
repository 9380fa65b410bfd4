"""Predicted time (the timing model, 910B2) of each built-in score / mask modification, and of a document
mask against its visited tiles (block sparsity: it costs what a dense problem of the same tiles costs).

    PYTHONPATH=. python benchmarks/flex_predict.py [--seq 2048] [--heads 3] [--head-dim 128] [--markdown]

Every row runs one forward kernel on the simulator with a trace and replays it (`sim.timing.predict`:
all blocks traced, the launch's busiest block and the shared L2 / HBM floors). The base is the plain
kernel of `flash_attn_func` without LSE (the automatic config's fixed rule, `attention.inputs.fixed_config`);
each row adds one modification the way the calls add it: causal and a sliding window as the kernel's
window bounds, softcap and ALiBi as their switches, sinks and FlexAttention callables as mod objects
(`attention.flex.with_mods`, an f32 QK slot), masks from callables with per-unit tile ranges. The
document rows split S into equal documents (every tile of a document full, so the mask's IR is
skipped) and compare with the dense batch of the same visited tiles: B = documents, S / documents each.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from ptofa.attention.core import with_score_mods
from ptofa.attention.flex import call_mods, mod_arguments, tile_ranges, with_mods
from ptofa.attention.inputs import fixed_config
from ptofa.launch.plan import plan_forward
from ptofa.launch.sim import launch
from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.sim.options import RunOptions
from ptofa.sim.timing import predict

SOC = "910B2"


def predicted(config: FAConfig, shape: ProblemShape, tensors: dict, **plan_args) -> tuple[float, str]:
    """(predicted kernel us, bound) of one launch of `config` on `tensors` (q, k, v BSND and the mods'
    arguments), simulated with a trace of every block."""
    s0, d = shape.s0, config.head
    plan = plan_forward(config, shape, SOC, scale=d ** -0.5, **plan_args)
    o = torch.empty(shape.batch, s0, shape.heads, d, dtype=tensors["q"].dtype)
    lse = torch.empty(shape.batch, shape.heads, s0) if config.lse else None
    (sim,) = launch(plan, {**tensors, "o": o, "lse": lse}, options=RunOptions(trace=True))
    timed = predict(sim.trace, plan.config, plan.shape, soc=plan.soc, block_dim=plan.block_dim)
    return float(timed.kernel_us), timed.bound


def inputs(batch: int, heads: int, s: int, d: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(batch, s, heads, d, generator=g).half() for n in ("q", "k", "v")}


def with_callables(base: FAConfig, tensors: dict, shape: ProblemShape, score_mod=None, mask_mod=None, sinks=None):
    """(config, tensors) of a call with FlexAttention callables and / or sinks on `base`."""
    mods, traced = call_mods(score_mod, mask_mod, sinks, shape.heads)
    config = with_mods(dataclasses.replace(base, block_ranges=mask_mod is not None), mods)
    args = mod_arguments(config, traced, sinks)
    if mask_mod is not None:
        args["tile_ranges"] = tile_ranges(mask_mod, shape.batch, shape.heads, shape.s0, shape.s1, config.cube_s0,
                                          config.tile_s1)
    return config, {**tensors, **args}


def document_mask(s: int, docs: int):
    doc = torch.arange(s) * docs // s

    def same_doc(b, h, qi, kv, doc=doc):  # (a default argument: the tracer captures it as a kernel argument)
        return doc[qi] == doc[kv]

    return same_doc


def rows(s: int, heads: int, d: int) -> list[tuple[str, str, FAConfig, ProblemShape, dict, dict]]:
    """(modification, how the call adds it, config, shape, tensors, plan arguments) of each table row."""
    tensors = inputs(1, heads, s, d)
    shape = ProblemShape(1, heads, s, s)
    base = fixed_config(d, "f16", s1=s)
    masked = fixed_config(d, "f16", s1=s, masked=True)
    slopes = torch.linspace(0.5, 0.01, heads)
    bias = torch.linspace(-1.0, 1.0, heads)
    out = [
        ("none (plain kernel)", "flash_attn_func", base, shape, tensors, {}),
        ("causal", "causal=True (window bounds)", masked, shape, tensors, dict(bounds=(2 * s, 0))),
        ("sliding window 256", "window_size=(256, 0)", masked, shape, tensors, dict(bounds=(256, 0))),
        ("softcap 30", "softcap=30.0 (switch)", with_score_mods(base, softcap=True, alibi=False), shape, tensors,
         dict(softcap=30.0)),
        ("ALiBi", "alibi_slopes (switch)", with_score_mods(base, softcap=False, alibi=True), shape,
         {**tensors, "alibi_slopes": slopes}, dict(alibi=slopes)),
    ]
    for what, how, kwargs in (
            ("sinks", "sinks= (Sinks mod, no LSE)", dict(sinks=torch.zeros(heads))),
            ("causal as a mask_mod", "mask_mod (traced, tile ranges)", dict(mask_mod=lambda b, h, qi, kv: qi >= kv)),
            ("document mask, 4 documents", "mask_mod (traced, tile ranges)", dict(mask_mod=document_mask(s, 4))),
            ("relative-position bias", "score_mod (traced)",
             dict(score_mod=lambda sc, b, h, qi, kv: sc + (qi - kv) * 0.01)),
            ("head bias (captured [H])", "score_mod (traced)", dict(score_mod=lambda sc, b, h, qi, kv: sc + bias[h])),
            ("softcap 30 by tanh", "score_mod (traced)",
             dict(score_mod=lambda sc, b, h, qi, kv: torch.tanh(sc / 30.0) * 30.0))):
        config, args = with_callables(base, tensors, shape, **kwargs)
        out.append((what, how, config, shape, args, {}))
    batched = ProblemShape(4, heads, s // 4, s // 4)
    out.append(("(dense batch of the same tiles: B=4, S/4)", "flash_attn_func", base, batched,
                inputs(4, heads, s // 4, d), {}))
    return out


def form(config: FAConfig) -> str:
    prescale = "" if config.prescale_q else ", no prescale"
    return f"{config.tile_s1}/{config.qk_preload}, QK {config.qk_dtype}{prescale}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048, help="S0 = S1")
    parser.add_argument("--heads", type=int, default=3, help="B = 1; 3 heads of 2048 rows are 48 units, 2 waves")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    header = ("modification", "added as", "tile/preload, slot", "predicted us", "vs plain", "bound")
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|---|---|---|---:|---:|---|")
    plain = None
    for what, how, config, shape, tensors, plan_args in rows(args.seq, args.heads, args.head_dim):
        us, bound = predicted(config, shape, tensors, **plan_args)
        plain = plain or us
        cells = (what, how, form(config), f"{us:.1f}", f"{us / plain:.2f}", bound)
        print(("| " + " | ".join(cells) + " |") if args.markdown else "  ".join(cells), flush=True)
    print(f"\npredicted by the timing model ({SOC}; B = 1, N = {args.heads}, S0 = S1 = {args.seq}, "
          f"D = {args.head_dim}, fp16); {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
