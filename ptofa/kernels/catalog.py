"""Every kernel ptofa emits, one entry per distinct form: the set a real ptoas must compile.

The forward kernel's (head, tile_s1, qk_preload) grid at the head dims of `GRID_HEADS`, each
switch of `FAConfig` on its own and in the combinations the calls use (`flash_attn_func`,
varlen, paged decode, split-KV, GQA packing), those that fit 1024-key tiles (`WIDE_SWITCHES`), the
paired Q blocks' forms (`PAIR_CONFIGS`), the split-KV reduce kernel, and the backward
kernels of every `BwdConfig` the calls build; the other kernel widths (`WIDTH_HEADS`: any head
dim and any (D, Dv) pair runs on one of them) with the default tiles and the switches of
`WIDTH_SWITCHES`, forward and backward; then the reusable kernels of `ptofa.kernels.lib` (row
softmax, RMSNorm, LayerNorm, rotary embedding, GEMM, GEMM + activation). `run_fa catalog` lists or writes them; the `ptoas`-marked
test compiles each unedited, and a CPU test parses and verifies each.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import torch

from ptofa.kernels.builtin_mods.alibi import Alibi
from ptofa.kernels.builtin_mods.softcap import Softcap
from ptofa.kernels.builtin_mods.window import WINDOW
from ptofa.kernels.bwd_pipeline import TUNED_HEADS, BwdConfig, default_config
from ptofa.kernels.mods import other_mods
from ptofa.pipeline import SUPPORTED_HEAD, SUPPORTED_TILE_S1, ConfigError, FAConfig

# The head dims of the full tile grid and the switch sets (the tuned widths), and the other kernel
# widths, which the catalog holds with one tile config each (`WIDTH_SWITCHES`): the forms are the
# same at every width, only the numbers differ.
GRID_HEADS = TUNED_HEADS  # (64, 96, 128, 192, 256)
WIDTH_HEADS = tuple(d for d in SUPPORTED_HEAD if d not in GRID_HEADS)
WIN = (WINDOW,)  # the window (causal and every sliding window: its bounds are runtime arguments)
# What a width runs: the plain kernel, the autograd op's (LSE on) masked bf16 kernel, packed varlen.
WIDTH_SWITCHES: tuple[dict, ...] = (dict(), dict(mods=WIN, lse=True, in_dtype="bf16"), dict(varlen=True, lse=True))


@dataclass(frozen=True)
class Kernel:
    """One emitted kernel: a file name, what it is, and how to emit its text."""

    name: str
    summary: str
    emit: Callable[[], str]


def _grid() -> Iterator[FAConfig]:
    """Every legal point of the forward grid (qk_preload 4 included: it is legal, with a warning)."""
    for head, tile_s1, preload in itertools.product(GRID_HEADS, SUPPORTED_TILE_S1, (1, 2, 3, 4)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                yield FAConfig(head=head, tile_s1=tile_s1, qk_preload=preload)
            except ConfigError:
                continue


SOFTCAP, ALIBI = (Softcap(),), (Alibi(),)  # the built-in mods of a call, in its order
BOTH = SOFTCAP + ALIBI

# Switch sets on top of a (head, tile_s1) base; every one must be legal (a test builds them all).
SWITCHES: tuple[dict, ...] = (
    dict(mods=WIN),
    dict(key_padding=True),
    dict(lse=True),
    dict(in_dtype="bf16"),
    dict(out_dtype="f32"),
    dict(mods=WIN, key_padding=True, lse=True, in_dtype="bf16", out_dtype="f32"),
    dict(varlen=True),
    dict(varlen=True, mods=WIN, lse=True),
    dict(varlen=True, page_size=256),
    dict(varlen=True, page_size=256, mods=WIN),
    dict(varlen=True, split_kv=True),
    dict(varlen=True, split_kv=True, mods=WIN, lse=True),
    dict(varlen=True, split_kv=True, gqa_pack=True, page_size=256),
    dict(varlen=True, gqa_pack=True, page_size=256, in_dtype="bf16"),
    dict(prescale_q=False),
    dict(prescale_q=False, mods=WIN, lse=True, in_dtype="bf16"),
    dict(prescale_q=False, varlen=True, split_kv=True, gqa_pack=True, page_size=256),
    dict(softmax_dtype="f16"),
    dict(softmax_dtype="f16", out_dtype="f32", prescale_q=False),
    dict(softmax_dtype="f16", varlen=True, page_size=256, gqa_pack=True),
    dict(softmax_dtype="f16", mods=WIN, key_padding=True),
    dict(softmax_dtype="f16", varlen=True, mods=WIN),
    dict(softmax_dtype="f16", varlen=True, split_kv=True, mods=WIN),
    # the f32 softmax's row sums on the vectors (trowsum) and its exp in f32, as before cube_rowsum /
    # exp_f16 (benchmarks/validate_model.py models the published kernels with them)
    dict(cube_rowsum=False, exp_f16=False),
    dict(cube_rowsum=False, exp_f16=False, prescale_q=False, mods=WIN, lse=True),
    dict(exp_f16=False),
    # the built-in mods (kernels/builtin_mods/): softcapping and ALiBi, alone and with the calls' other switches
    dict(mods=SOFTCAP),
    dict(mods=ALIBI),
    dict(mods=BOTH + WIN, lse=True, in_dtype="bf16"),
    dict(mods=BOTH + WIN, varlen=True, split_kv=True, lse=True),
    dict(mods=BOTH, varlen=True, page_size=256),
    dict(mods=SOFTCAP, varlen=True, split_kv=True, gqa_pack=True, page_size=256),
    # dropout (kernels/dropout.py): the dense and varlen calls' kernels, with the score modifications
    dict(dropout=True),
    dict(dropout=True, mods=WIN, lse=True, in_dtype="bf16"),
    dict(dropout=True, varlen=True, mods=WIN, lse=True),
    dict(dropout=True, varlen=True),
    dict(dropout=True, varlen=True, page_size=256),
    dict(dropout=True, mods=BOTH + WIN, lse=True),
)
SWITCH_BASES = ((64, 128), (128, 256), (256, 256))
# TILE_S1 = 1024 (D <= 128, QK_PRELOAD = 2) with the calls' switches whose plans fit the UB beside
# its 1024-key rows (the key mask's, dropout's and ALiBi's do not).
WIDE_SWITCHES: tuple[dict, ...] = (
    dict(mods=WIN),
    dict(mods=WIN, lse=True, in_dtype="bf16"),
    dict(varlen=True, split_kv=True, mods=WIN, lse=True),
    dict(varlen=True, split_kv=True, gqa_pack=True),
    dict(prescale_q=False, out_dtype="f32"),
    dict(softmax_dtype="f16"),
    dict(softmax_dtype="f16", varlen=True, mods=WIN),
)

# Paired Q blocks (`FAConfig.q_pair`, the dense forward): both softmax dtypes at their widest tiles (1024 and
# 512 keys; the f32 one at 512 too), bf16 at D = 64, and unscaled Q with an f32 O.
PAIR_CONFIGS: tuple[dict, ...] = (
    dict(head=128, tile_s1=1024, qk_preload=2),
    dict(head=128, tile_s1=512, qk_preload=3),
    dict(head=128, tile_s1=512, qk_preload=2, softmax_dtype="f16"),
    dict(head=64, tile_s1=256, qk_preload=3, in_dtype="bf16"),
    dict(head=128, tile_s1=256, qk_preload=2, prescale_q=False, out_dtype="f32"),
)


def _flex_mods() -> list[tuple]:
    """Traced FlexAttention mods (kernels/flexmods.py): a relative bias under a causal mask, ALiBi from a
    captured slope table with softcapping by tanh under a sliding window, a document mask from
    captured document ids (row and column loads), and (the backward's only) a smooth score mod through
    the quotient, sigmoid, exp and reciprocal rules under a prefix-LM mask."""
    from ptofa.kernels.flexmods import trace_mod

    slopes, doc = torch.ones(8), torch.zeros(4096, dtype=torch.int32)
    mods = (
        (lambda s, b, h, q, kv: s + (q - kv) * 0.01, lambda b, h, q, kv: q >= kv),
        (lambda s, b, h, q, kv: torch.tanh((s - slopes[h] * (q - kv).abs()) / 30.0) * 30.0,
         lambda b, h, q, kv: (q >= kv) & (q - kv <= 256)),
        (None, lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv)),
        (lambda s, b, h, q, kv: s / (2.0 + torch.sigmoid(s)) + torch.exp(s * 0.1) - 1.0 / (3.0 + s * s * 0.01),
         lambda b, h, q, kv: (kv < 24) | (q >= kv)),
    )
    return [tuple(trace_mod(fn, mask)[0] for fn, mask in ((score_mod, False), (mask_mod, True)) if fn)
            for score_mod, mask_mod in mods]


def flex_configs() -> list[FAConfig]:
    """The `_flex_mods` with block ranges, the document mask with attention sinks."""
    from ptofa.kernels.scoremods import Sinks

    configs = []
    shapes = ((64, 128, "f16"), (64, 128, "bf16"), (64, 128, "f16"))
    for traced, (head, tile_s1, dtype) in zip(_flex_mods()[:3], shapes):  # (the fourth is the backward's)
        traced += (Sinks(),) if not any(not m.mask for m in traced) else ()  # attention sinks at the finish hook
        for buffers, prescale in ((0, True), (2, True), (0, False), (2, False)):  # as attention.flex.flex_config
            try:
                configs.append(FAConfig(head=head, tile_s1=tile_s1, qk_preload=2, in_dtype=dtype, lse=True,
                                        mods=traced, block_ranges=True, slice_buffers=buffers, prescale_q=prescale))
                break
            except ConfigError:
                continue
    return configs  # (head, tile_s1): small, default, D split in two


def kvcache_mod_configs() -> list[FAConfig]:
    """`flash_attn_with_kvcache`'s mods on the varlen kernel: a paged, windowed, split-KV decode with a
    score_mod reading the sequence (b) from a captured table and a mask_mod, with attention sinks (split 0
    takes them); a contiguous, windowed one with softcap, ALiBi and sinks, without LSE (S in the input dtype)."""
    from ptofa.kernels.flexmods import trace_mod
    from ptofa.kernels.scoremods import Sinks

    seq_bias = torch.ones(8)
    score = trace_mod(lambda s, b, h, q, kv: s + seq_bias[b] * (kv - q) * 0.01, False)[0]
    mask = trace_mod(lambda b, h, q, kv: kv >= 16, True)[0]
    forms = (dict(in_dtype="f16", lse=True, page_size=256, split_kv=True, mods=(score, mask, Sinks())),
             dict(in_dtype="bf16", mods=(Softcap(), Sinks(), Alibi())))
    configs = []
    for form in forms:
        for buffers, prescale in ((0, True), (2, True), (0, False), (2, False)):  # as attention.flex.with_mods
            try:
                configs.append(FAConfig(head=128, tile_s1=128, qk_preload=2, varlen=True, slice_buffers=buffers,
                                        prescale_q=prescale, **{**form, "mods": form["mods"] + WIN}))
                break
            except ConfigError:
                continue
    return configs


def _flex_name(mods: tuple) -> str:
    digest = hashlib.sha256("".join(map(repr, mods)).encode()).hexdigest()[:8]
    return "_flex_" + "_".join(m.name for m in mods) + "_" + digest


def _name(c: FAConfig) -> str:
    parts = [f"fa_d{c.head}_t{c.tile_s1}_p{c.qk_preload}_{c.in_dtype}"]
    if c.out_dtype != c.in_dtype:
        parts.append(f"o{c.out_dtype}")
    parts += ["masked"] * (c.narrowing is not None)
    parts += [flag for flag in ("key_padding", "lse", "varlen", "split_kv", "gqa_pack") if getattr(c, flag)]
    parts += [m.name for m in c.score_mods if m.builtin] + [flag for flag in ("dropout", "q_pair") if getattr(c, flag)]
    if c.page_size:
        parts.append(f"page{c.page_size}")
    if other_mods(c.score_mods):
        parts.append(_flex_name(other_mods(c.score_mods))[1:])
    if not c.prescale_q:
        parts.append("no_prescale_q")
    if c.softmax_dtype != "f32":
        parts.append(f"softmax_{c.softmax_dtype}")
    with warnings.catch_warnings():  # (qk_preload=4 warns again)
        warnings.simplefilter("ignore")
        auto = dataclasses.replace(c, cube_rowsum=None, exp_f16=None)  # named only where they differ from it
    if auto.cube_rowsum and not c.cube_rowsum:
        parts.append("vector_rowsum")
    if auto.exp_f16 and c.cube_rowsum and not c.exp_f16:
        parts.append("exp_f32")
    return "_".join(parts)


def forward_configs() -> list[FAConfig]:
    """The grid, then every switch set on each base, then the other widths, without repeats."""
    configs = list(_grid())
    for (head, tile_s1), switches in itertools.product(SWITCH_BASES, SWITCHES):
        configs.append(FAConfig(head=head, tile_s1=tile_s1, **switches))
    configs += [FAConfig(head=128, tile_s1=1024, qk_preload=2, **switches) for switches in WIDE_SWITCHES]
    configs += [FAConfig(head=head, **switches) for head, switches in itertools.product(WIDTH_HEADS, WIDTH_SWITCHES)]
    configs += flex_configs() + kvcache_mod_configs()
    configs += [FAConfig(q_pair=True, **switches) for switches in PAIR_CONFIGS]
    return list(dict.fromkeys(configs))


def backward_configs() -> list[BwdConfig]:
    """Deterministic (dq + dkdv) and atomic-dQ (prep + dkdv + post) modes of every head dim, with the
    block sizes `attention_backward` picks (`bwd_pipeline.default_config`), and each with a
    key-padding mask on top of a window; then the other widths, each mode once (f16 deterministic,
    bf16 masked atomic); then the varlen form (packed sequences, unit tables) of both modes of every
    grid head dim, without and with a window, in bf16 with one, and with softcap and ALiBi on a window."""
    grid = [default_config(head, dtype, mods=WIN * masked, atomic_dq=atomic)
            for atomic, head, dtype, masked in itertools.product((False, True), GRID_HEADS, ("f16", "bf16"),
                                                                 (False, True))]
    varlen = [default_config(head, dtype, atomic_dq=atomic, varlen=True, mods=BOTH * mods + WIN * masked)
              for atomic, head, (dtype, masked, mods) in itertools.product(
                  (False, True), GRID_HEADS, (("f16", False, False), ("f16", True, False), ("bf16", True, False),
                                              ("f16", True, True)))]
    return (grid + [default_config(head, mods=WIN, key_padding=True, atomic_dq=atomic)
                    for atomic, head in itertools.product((False, True), GRID_HEADS)]
            + [default_config(head, mods=BOTH + WIN, atomic_dq=atomic)
               for atomic, head in itertools.product((False, True), GRID_HEADS)]
            + [default_config(128, dtype, mods=SOFTCAP if softcap else ALIBI)
               for dtype, softcap in itertools.product(("f16", "bf16"), (False, True))]
            + [default_config(head, dtype, mods=WIN * masked, atomic_dq=atomic)
               for head, (dtype, masked, atomic) in itertools.product(WIDTH_HEADS, (("f16", False, False),
                                                                                  ("bf16", True, True)))]
            + varlen
            # dropout (kernels/dropout.py): both modes of every grid head dim, the masked bf16 and the
            # score modifications' forms on a key mask
            + [default_config(head, dtype, mods=WIN * masked, atomic_dq=atomic, dropout=True)
               for atomic, head, (dtype, masked) in itertools.product((False, True), GRID_HEADS,
                                                                      (("f16", False), ("bf16", True)))]
            + [default_config(128, key_padding=True, mods=BOTH + WIN, atomic_dq=atomic, dropout=True)
               for atomic in (False, True)]
            # and its varlen form (each packed sequence's own positions), both modes of every grid head dim
            + [default_config(head, dtype, mods=WIN * masked, atomic_dq=atomic, varlen=True, dropout=True)
               for atomic, head, (dtype, masked) in itertools.product((False, True), GRID_HEADS,
                                                                      (("f16", False), ("bf16", True)))]
            + [default_config(128, mods=BOTH + WIN, atomic_dq=atomic, varlen=True, dropout=True)
               for atomic in (False, True)]
            # f32 gradient outputs (ring attention's steps): both modes of every grid head dim, f16 and masked bf16
            + [default_config(head, dtype, mods=WIN * masked, atomic_dq=atomic, grads_f32=True)
               for atomic, head, (dtype, masked) in itertools.product((False, True), GRID_HEADS,
                                                                      (("f16", False), ("bf16", True)))]
            # the forward's flex mods (kernels/flexmods.py: their forward IR and derivative) with block ranges,
            # both modes, the D split in two once
            + [default_config(head, dtype, atomic_dq=atomic, mods=mods, block_ranges=True)
               for mods, (head, dtype) in zip(_flex_mods(), ((64, "f16"), (64, "bf16"), (256, "f16"), (128, "bf16")))
               for atomic in (False, True)])


def backward_kernels(b: BwdConfig) -> tuple[str, ...]:
    """The kernels of `b` the catalog lists: all of them, but of a varlen, dropout or f32-gradient config
    only the dq and dkdv kernels (its row-wise prep and post are the plain config's, the same text)."""
    return tuple(k for k in b.kernels if not (b.varlen or b.dropout or b.grads_f32) or k in ("dq", "dkdv"))


def kernels() -> list[Kernel]:
    """Every kernel of the catalog, forward first, the library's last."""
    from ptofa.ir.textio import print_pto
    from ptofa.kernels.fa_fwd import emit_fa
    from ptofa.kernels.fa_bwd import emit_bwd
    from ptofa.kernels.fa_reduce import emit_reduce
    from ptofa.kernels.lib import library

    out: list[Kernel] = []
    for c in forward_configs():
        out.append(Kernel(_name(c), c.summary(), lambda c=c: emit_fa(c)))
        if c.split_kv:
            out.append(Kernel(_name(c).replace("fa_", "fa_reduce_", 1), f"split-KV reduce of {c.summary()}",
                              lambda c=c: emit_reduce(c)))
    for b in backward_configs():
        for kernel in backward_kernels(b):
            name = (f"fa_bwd_{kernel}_d{b.head}_{b.in_dtype}" + ("_masked" if b.narrowing else "")
                    + ("_atomic" if b.atomic_dq else "") + ("_key_padding" if b.key_padding else "")
                    + "".join(f"_{m.name}" for m in b.score_mods if m.builtin)
                    + ("_varlen" if b.varlen else "") + ("_dropout" if b.dropout else "")
                    + ("_grads_f32" if b.grads_f32 else "")
                    + (_flex_name(other_mods(b.score_mods)) if other_mods(b.score_mods) else "") + ("_ranges" if b.block_ranges else ""))
            mods = ("".join(f" {m.name}" for m in b.score_mods if m.builtin)
                    + (" varlen=True" if b.varlen else "") + (" dropout" if b.dropout else "")
                    + (" grads_f32" if b.grads_f32 else "")
                    + (" mods=" + "+".join(m.name for m in other_mods(b.score_mods)) if other_mods(b.score_mods) else "")
                    + (" block_ranges" if b.block_ranges else ""))
            out.append(Kernel(name, f"backward {kernel}: head={b.head} {b.in_dtype} masked={b.narrowing is not None} "
                                    f"atomic_dq={b.atomic_dq} key_padding={b.key_padding}{mods}",
                              lambda b=b, k=kernel: emit_bwd(b, k)))
    out += [Kernel(k.name, k.summary, lambda k=k: print_pto(k.build())) for k in library()]
    return out


@click.command("catalog")
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write every kernel here as NAME.pto, with index.tsv (name, what it is).")
@click.option("--check", "verify", is_flag=True, help="Parse and verify every kernel (what `run_fa check` does).")
def catalog_cmd(out: Path | None, verify: bool) -> None:
    """List (or write, or check) every kernel ptofa emits: the forward grid and switches,
    the split-KV reduce, the backward kernels, the library's kernels. Exit 1 when --check finds an error."""
    from ptofa.ir.textio import PtoCheckError, check_text

    failed = 0
    rows = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for k in kernels():
        text = k.emit()
        status = ""
        if verify:
            try:
                check_text(text, f"{k.name}.pto")
                status = "ok"
            except PtoCheckError as exc:
                failed += 1
                status = "FAILED"
                click.echo(f"{k.name}: {exc}", err=True)
        if out is not None:
            tmp = out / f"{k.name}.pto.tmp"
            tmp.write_text(text)
            tmp.replace(out / f"{k.name}.pto")
        rows.append(f"{k.name}\t{k.summary}" + (f"\t{status}" if status else ""))
        click.echo(rows[-1])
    if out is not None:
        (out / "index.tsv").write_text("\n".join(rows) + "\n")
        click.echo(f"wrote {len(rows)} kernels to {out}")
    sys.exit(1 if failed else 0)


__all__ = ["GRID_HEADS", "Kernel", "SWITCHES", "WIDTH_HEADS", "WIDTH_SWITCHES", "backward_configs", "backward_kernels",
           "catalog_cmd", "forward_configs", "kernels"]
