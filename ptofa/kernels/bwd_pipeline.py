"""FlashAttention backward configuration: knobs, legality rules, tile plans, budgets.

The backward runs as two mixed cube/vector kernels (`ptofa.kernels.fa_bwd`):

* `dq`   one work unit per (batch, q head, Q block of `dq_block_q` rows); the unit
         loops over the KV tiles of `dq_block_kv` keys that its rows see. Its cube first
         computes G = dO O^T of the block's rows and passes it to the vectors as the unit's
         first sdp entry; the vectors take D = diag(G) (= rowsum(dO * O), written to GM for
         the other kernel), then per tile P = exp(scale S - LSE) and dS = scale * P * (dP - D);
         the cube accumulates dQ = dS K in L0C and stores it once, in the input dtype.
* `dkdv` one work unit per (batch, kv head, KV block of `block_kv` keys); the unit loops
         over the group's q heads and the Q blocks of `block_q` rows that see the block.
         The cube computes the transposed scores S^T = K Q^T and dP^T = V dO^T (the
         transposed operands Q^T, dO^T are DN loads into the right operand, the verified
         K^T form), the vectors P^T and dS^T, and the cube dV += P^T dO, dK += dS^T Q,
         both kept in L0C for the whole unit and stored once.

Neither kernel uses atomics: each output element has one writer, so the backward is
deterministic (bit-identical across runs and block counts).

With `atomic_dq` the backward is instead three kernels, and the dq kernel is not run:

* `prep` one unit per (batch, q head, `dq_block_q` rows): the cube's G = dO O^T through pipe
         `gd`, the vectors' D = diag(G), and zeros over those rows of the f32 dQ accumulator
         (so the launch needs no host memset).
* `dkdv` as above, and per step also dQ_part = dS K: each vector core transposes its
         dS^T rows (`ttrans`) and pushes them through a third pipe (`dsq`, whose cube slot
         holds the two cores' [block_q, block_kv / 2] pieces one under the other), the
         cube computes dS_0 K_0 + dS_1 K_1 into `dq_acc` and adds it atomically into an
         f32 GM accumulator (zeroed by prep). dS reuses the dS^T mat / left tiles, so
         this mode needs block_q == block_kv.
* `post` vector-only: dQ f32 -> input dtype.

D comes from the cube, not from the vectors' rowsum(dO * O), so that dP - D is exactly 0 where the
references' is: with one visible key O = V, and dP_ij = dO_i . V_j and D_i = dO_i . O_i are the same
products summed by the same matmul in the same K order (D chunks included), so dS, dQ and dK are exact
zeros (the f32 products of a vector row sum, in another order, left 1e-6 of noise).

In either mode dQ, dK and dV accumulate in f32 (L0C, or the atomic mode's GM accumulator) and are
rounded to the input dtype once, when stored. `grads_f32` stores the f32 accumulators unrounded
instead (the atomic mode then has no post kernel: its accumulator is dQ), for callers that add
several backwards' gradients and round the sum once (ring attention adds one per ring step).

Every kernel width of the forward (`SUPPORTED_HEAD`, 16..256). Above 128 the cube's operands are
split in two D chunks (`d_chunk` = 80, 96, 112 or 128, as the forward's): S = Q K^T and dP = dO V^T
accumulate over the chunks, and dQ, dK, dV have one L0C accumulator per chunk. The L0A / L0B
operands (`operands`) each get a tile of their own when they all fit; otherwise those of one
shape share a ring of tiles, moved in from L1 before each use (`operand_tiles`: D = 96 with
128-query steps, D = 128 / 256 with [128, 128] right operands, the dq kernel's Q / dO at 256).
L0C is what limits the dkdv kernel above 128: its dK and dV accumulators (2 x block_kv x D
f32) beside S^T and dP^T. `dkdv_passes=2` runs a unit's steps twice, dV first (S^T, P^T,
dV += P^T dO), then dK (S^T, dP^T, dS^T, dK += dS^T Q), so one accumulator serves both: one
more GEMM per score (S^T twice) for 64-key blocks at D = 256. `default_config` holds the
block sizes and passes the timing model chose per head dim and mode (`DEFAULT_BLOCKS`, at
`TUNED_HEADS`; a width between them takes the next tuned one's).

`varlen` runs packed sequences (Q [total_q, N, D], K / V [total_k, KVN, D], LSE and D
[N, total_q]) as one batch of rows: the dq and dkdv kernels read their units from a host-built
table (`pipeline.UNIT_TABLE` entries, `ptofa.launch.varlen.backward_tables`: for dkdv `head` is the
KV head and `q_block` the KV block) instead of decoding them from the unit index, and see each
sequence's rows through its own starts, lengths and diagonal (window and ALiBi; ALiBi's slopes
[B, N] by the table's `seq`); prep and post are row-wise and the same as the uniform ones.

`mods` (`kernels/mods.py` objects, as `FAConfig.mods`; other than the built-in ones, uniform batches without the switches)
apply each modification's forward IR to the recomputed scores of both kernels and multiply dP - D by
its derivative (`Mod.emit_backward`); with `block_ranges` each unit's tile range and unmasked tiles come
from a host table (`q_tile_ranges`: per dq unit its KV tiles, `kv_tile_ranges`: per dkdv unit its Q
blocks, in `mods.RANGE_FIELDS`), as the forward's `FAConfig.block_ranges`; their scratch
(`Mod.grad_tiles`, on the kernel's [rows, cols] tiles, transposed in dkdv) and kernel arguments (`Mod.params`) join the plan and the entry.

`key_padding` adds the forward kernel's i8 key mask (and its batch stride) to the dq and dkdv
kernels' arguments; their vectors turn it into an additive bias on the scores.

The atomic adds of different units to one dQ row come in any order, so this mode is not
bit-identical across runs or block counts. As in `pipeline.py`, the
builder allocates exactly `tile_plan(config, kernel)` and the budget is computed from
the same list; the pipe rules are the forward's (`slot ring reuse`, `preload vs slot
ring`), applied to the backward's own slot sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptofa.pipeline import (
    DTYPE_BYTES,
    IN_DTYPES,
    MAX_MATMUL_DIM,
    SPLIT_HEAD,
    SUPPORTED_HEAD,
    VEC_CORES,
    Budget,
    BudgetRow,
    ConfigError,
    PipeSpec,
    TileSpec,
    mod_prefixes,
)
from ptofa.ir.target import (ALIGNMENT, CAPACITY, EXPDIF_TMP_BYTES, HIDDEN_ROWEXPAND_TMP_BYTES, VEC_ROW_BYTES,
                              serves_as_rowexpand_tmp)
from ptofa.ir.target import align as _align
from ptofa.ir.target import HIDDEN_TCI_TMP
from ptofa.kernels.hostparam import mod_params
from ptofa.kernels.mods import other_mods
from ptofa.modlist import ModsMixin, canonical

KERNELS = ("dq", "dkdv")
ATOMIC_KERNELS = ("prep", "dkdv", "post")
ALL_KERNELS = ("dq", "prep", "dkdv", "post")
BWD_HEADS = SUPPORTED_HEAD
BLOCK_SIZES = (32, 64, 128)
# trowexpand* ops with ptoas's hidden 8 KiB UB scratch: in the dq kernel's vector function the
# sub for dP - D (its expdif for P takes the plan's `exp_tmp`, `target.EXPDIF_TMP_BYTES`). The
# dkdv vectors use tcolexpandadd (no scratch), and with a key mask one trowexpandadd (the mask
# of a unit's keys, one per row).
ROWEXPAND_OPS = {"dq": 1, "dkdv": 0, "prep": 0, "post": 0}


def rowexpand_ops(c: BwdConfig, kernel: str) -> int:
    """trowexpand* ops (each with ptoas's hidden UB scratch) in `kernel`'s vector function (the mods'
    take explicit scratch: `exp_tmp` in dq, `mods_row_tmp` in dkdv)."""
    steps = c.dkdv_passes if kernel == "dkdv" else 1  # passes over the steps
    vr, cols = c.vec_rows(kernel), c.block_q if kernel == "dkdv" else c.dq_block_kv
    # dropout's trowexpandadd on its [vr, cols] i32 bits (dropout.needs_hidden_tmp)
    drop_bits = vr * cols * DTYPE_BYTES["i32"]
    drop = steps if c.dropout and kernel in ("dq", "dkdv") and not serves_as_rowexpand_tmp(drop_bits) else 0
    return ROWEXPAND_OPS[kernel] + int(kernel == "dkdv" and c.key_padding) * c.dkdv_passes + drop


def tci_ops(c: BwdConfig, kernel: str) -> int:
    """tci ops (each with ptoas's hidden UB scratch) in `kernel`'s vector function: ALiBi's row index
    once, and its column positions once per pass over the steps."""
    steps = c.dkdv_passes if kernel == "dkdv" else 1  # passes over the steps
    setup = sum(m.setup_tci_ops for m in c.score_mods)  # (ALiBi's row index)
    dropout = 2 * steps if c.dropout else 0  # the generator's query and key lines
    mods = steps * sum(m.grad_tci_ops for m in c.score_mods)  # the mods' index leaves
    return setup + dropout + mods if kernel in ("dq", "dkdv") else 0


@dataclass(frozen=True)
class BwdConfig(ModsMixin):
    """Compile-time knobs of the backward kernels, validated on creation."""

    head: int = 128
    in_dtype: str = "f16"  # Q, K, V, O, dO, dQ, dK, dV
    block_kv: int = 64  # dkdv: keys per work unit (dK, dV accumulators live in L0C)
    block_q: int = 128  # dkdv: query rows per step
    dq_block_q: int = 64  # dq: query rows per work unit
    dq_block_kv: int = 64  # dq: keys per step
    preload: int = 3  # steps the cube computes scores ahead of the gradient matmuls (the forward's default)
    slot_num: int = 8
    target: str = "a3"
    atomic_dq: bool = False  # prep + dkdv (with atomic dQ) + post instead of dq + dkdv
    key_padding: bool = False  # an i8 key mask ([B, S1] or [S1]) hides padding keys from every query
    dkdv_passes: int = 1  # 2: a dkdv unit runs its steps twice, dV first, then dK, through one L0C accumulator
    varlen: bool = False  # packed sequences: the dq and dkdv kernels walk a host-built unit table (`backward_tables`)
    dropout: bool = False  # the forward's dropout mask regenerated (`kernels/dropout.py`): dP and (dV) P dropped
    grads_f32: bool = False  # dQ, dK, dV stored as their f32 accumulators, unrounded (see `grad_dtype`)
    mods: tuple = ()  # `mods.Mod` objects with IR on the scores (`scoremods.apply_backward`)
    block_ranges: bool = False  # each unit's tiles / Q blocks [lo, hi) and unmasked ones from a host table

    def __post_init__(self) -> None:
        object.__setattr__(self, "mods", canonical(self.mods))  # (a tuple: a JSON round trip gives a list)
        _check(self)
        for kernel in self.kernels:
            over = [row for row in budget(self, kernel).rows if row.used > row.capacity]
            if over:
                raise ConfigError(f"memory budget exceeded (rule: local tiles must fit each on-chip space), "
                                  f"{kernel} kernel:\n" + budget(self, kernel).table(only_over=True))

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernels one backward launches, in order (atomic with `grads_f32`: no post, the f32
        accumulator dq_acc is the dQ output)."""
        if self.atomic_dq:
            return ATOMIC_KERNELS[:-1] if self.grads_f32 else ATOMIC_KERNELS
        return KERNELS

    @property
    def grad_dtype(self) -> str:
        """dQ, dK and dV in GM: the input dtype (each rounded once from its f32 accumulator), or with
        `grads_f32` the accumulators themselves, for a caller that adds the gradients of several
        backwards and rounds the sum once (ring attention: one backward per ring step)."""
        return "f32" if self.grads_f32 else self.in_dtype

    @property
    def d_split(self) -> int:
        """D chunks of the cube's matmul operands: 1, or 2 for head dims above 128 (L0A / L0B budgets)."""
        return 1 if self.head <= SPLIT_HEAD else 2

    @property
    def d_chunk(self) -> int:
        return self.head // self.d_split

    @property
    def sync_period(self) -> int:
        return self.slot_num if self.slot_num <= 2 else self.slot_num // 2

    def rows_cols(self, kernel: str) -> tuple[int, int]:
        """(rows, cols) of one step's score tile: [q rows, keys] for dq, [keys, q rows] for dkdv;
        [q rows, D] of one unit for the row-wise prep and post kernels."""
        if kernel in ("prep", "post"):
            return self.dq_block_q, self.head
        return (self.dq_block_q, self.dq_block_kv) if kernel == "dq" else (self.block_kv, self.block_q)

    def pipes(self, kernel: str) -> tuple[PipeSpec, ...]:
        """C2V: the f32 scores and their gradients side by side (dq: first G = dO O^T of each unit, in its first
        dq_block_q columns); V2C: P (dkdv only) and dS in the input dtype; with `atomic_dq`, V2C `dsq`: each vector
        core's dS piece [block_q, block_kv / 2] (cube slot: both, stacked); prep: C2V `gd`, G of each unit."""
        if kernel == "post":
            return ()
        if kernel == "prep":
            return (PipeSpec("gd", 0, 1, self.dq_block_q, self.dq_block_q, "f32"),)
        rows, cols = self.rows_cols(kernel)
        back = 2 * cols if kernel == "dkdv" else cols
        pipes = (PipeSpec("sdp", 0, 1, rows, 2 * cols, "f32"), PipeSpec("pds", 1, 2, rows, back, self.in_dtype))
        if kernel == "dkdv" and self.atomic_dq:
            pipes += (PipeSpec("dsq", 2, 2, VEC_CORES * cols, rows // VEC_CORES, self.in_dtype),)
        return pipes

    def slot_bytes_per_block(self, kernel: str) -> int:
        return sum(p.slot_bytes * self.slot_num for p in self.pipes(kernel))

    def vec_rows(self, kernel: str) -> int:
        return self.rows_cols(kernel)[0] // VEC_CORES

    def summary(self) -> str:
        return (f"head={self.head} in={self.in_dtype} block_kv={self.block_kv} block_q={self.block_q} "
                f"dq_block_q={self.dq_block_q} dq_block_kv={self.dq_block_kv} preload={self.preload} "
                f"slot_num={self.slot_num}" + (" masked" if self.narrowing else "") + (" atomic_dq" if self.atomic_dq else "")
                + (" key_padding" if self.key_padding else "") + (" dkdv_passes=2" if self.dkdv_passes == 2 else "")
                + "".join(f" {m.name}" for m in self.score_mods if m.builtin)
                + (" varlen" if self.varlen else "") + (" dropout" if self.dropout else "")
                + (" grads_f32" if self.grads_f32 else "")
                + (" mods=" + "+".join(m.name for m in other_mods(self.score_mods)) if other_mods(self.score_mods) else "")
                + (" block_ranges" if self.block_ranges else ""))


# (block_kv, block_q, dkdv_passes) of the dkdv kernel and dq_block_kv of the dq kernel per
# (head dim, atomic_dq), chosen by the timing model (B = N = 1, S0 = S1 = 8192, f16, predicted
# launches; the README's backward section lists the candidates). Above D = 128 the dK and dV
# accumulators of a block (2 x block_kv x D f32) leave too little of L0C's 128 KiB for S^T and
# dP^T; the atomic mode also holds the dQ piece [block_q, D] and needs block_q == block_kv.
DEFAULT_BLOCKS = {
    (64, False): (64, 128, 1, 64), (96, False): (64, 128, 1, 64), (128, False): (64, 128, 1, 64),
    (192, False): (64, 64, 1, 64), (256, False): (64, 128, 2, 128),
    (64, True): (64, 64, 1, 64), (96, True): (64, 64, 1, 64), (128, True): (64, 64, 1, 64),
    (192, True): (64, 64, 2, 64), (256, True): (32, 32, 1, 64),
}
TUNED_HEADS = tuple(sorted({head for head, _ in DEFAULT_BLOCKS}))  # the widths the block sizes were chosen at


def default_config(head: int, in_dtype: str = "f16", *, atomic_dq: bool = False,
                   key_padding: bool = False, target: str = "a3", varlen: bool = False, dropout: bool = False, grads_f32: bool = False,
                   mods: tuple = (), block_ranges: bool = False) -> BwdConfig:
    """The backward kernels for a head dim and switches, with the block sizes and dkdv passes of
    `DEFAULT_BLOCKS` (a width between its entries takes the next entry up's, whose tiles are at least
    as large; `ConfigError` for a head dim the backward does not support)."""
    if head not in BWD_HEADS:
        raise ConfigError(f"head dim: head={head} is not a kernel width; the backward supports {BWD_HEADS} (other "
                          f"head dims run on kernel_head(D, Dv) with zero-padded columns)")
    tuned = min(d for d in TUNED_HEADS if d >= head)
    block_kv, block_q, passes, dq_block_kv = DEFAULT_BLOCKS[(tuned, atomic_dq)]
    return BwdConfig(head=head, in_dtype=in_dtype, atomic_dq=atomic_dq, key_padding=key_padding,
                     target=target, block_kv=block_kv, block_q=block_q, dkdv_passes=passes, dq_block_kv=dq_block_kv,
                     varlen=varlen, dropout=dropout, grads_f32=grads_f32, mods=mods,
                     block_ranges=block_ranges)


def _check(c: BwdConfig) -> None:
    def fail(rule: str, detail: str) -> None:
        raise ConfigError(f"{rule}: {detail}")

    c.check_mods(fail)

    if c.in_dtype not in IN_DTYPES:
        fail("dtypes", f"in_dtype={c.in_dtype!r} must be one of {IN_DTYPES}")
    if c.target not in ("a2", "a3"):
        fail("target", f"target={c.target!r}; only a2/a3 (dav-c220) are supported")
    if c.head not in BWD_HEADS:
        fail("head dim", f"head={c.head} is not a kernel width; the backward supports {BWD_HEADS} (other head dims "
                         f"run on kernel_head(D, Dv) with zero-padded columns)")
    if c.dkdv_passes not in (1, 2):
        fail("dkdv passes", f"dkdv_passes={c.dkdv_passes} must be 1 (dK and dV together) or 2 (dV, then dK)")
    if c.d_chunk % 16 != 0:
        fail("head dim", f"D chunk {c.d_chunk} (head={c.head} / {c.d_split}) must be a multiple of 16 (cube fractal)")
    for name in ("block_kv", "block_q", "dq_block_q", "dq_block_kv"):
        if getattr(c, name) not in BLOCK_SIZES:
            fail("block size", f"{name}={getattr(c, name)} must be one of {BLOCK_SIZES}")
    if max(c.head, c.block_q, c.block_kv) > MAX_MATMUL_DIM:
        fail("matmul dims", f"m/k/n must be <= {MAX_MATMUL_DIM}")
    if c.slot_num < 1 or c.slot_num % c.sync_period != 0:
        fail("slot ring reuse", f"slot_num={c.slot_num} must be >= 1 and a multiple of its sync period {c.sync_period}")
    if c.preload < 1:
        fail("preload", f"preload={c.preload} must be >= 1")
    if c.dq_block_q > 2 * c.dq_block_kv:
        fail("D on the cube", f"the dq kernel's G = dO O^T [dq_block_q, dq_block_q] rides its sdp slot [dq_block_q, "
                              f"2 dq_block_kv]: dq_block_q={c.dq_block_q} must be <= 2 * dq_block_kv = {2 * c.dq_block_kv}")
    if c.atomic_dq and c.block_q != c.block_kv:
        fail("atomic dQ tiles", f"atomic_dq needs block_q == block_kv (dS [block_q, block_kv] reuses the dS^T "
                                f"[block_kv, block_q] mat and left tiles), got block_q={c.block_q}, block_kv={c.block_kv}")
    if (other_mods(c.score_mods) or c.block_ranges) and (c.narrowing or c.key_padding or c.varlen or c.dropout):
        fail("modification objects", "mods other than the built-in ones are built for uniform batches without the "
                                     "window and switches (key_padding, varlen, dropout: write them as mods), got "
                                     + c.summary())
    if c.varlen and c.key_padding:
        fail("varlen key padding", "varlen=True with key_padding=True: packed sequences have no padding keys "
                                   "(a sequence's keys are its cu_seqlens range)")
    limit = c.slot_num - c.sync_period + 1
    if c.preload >= limit:
        fail("preload vs slot ring", f"preload={c.preload} must be < slot_num - sync_period + 1 = "
                                     f"{c.slot_num} - {c.sync_period} + 1 = {limit} (batched free credits)")


@dataclass(frozen=True)
class Operand:
    """One L0A / L0B matmul operand of a kernel, listed in the order the cube first uses it."""

    role: str  # "q", "kt", ... or per D chunk "q0", "q1"
    stage: str  # qk / pv (timing-model colours)
    loc: str  # left / right
    rows: int
    cols: int
    unit: bool  # loaded once per work unit: it stays in L0 when it has a tile of its own

    @property
    def nbytes(self) -> int:
        return _align(self.rows * self.cols * DTYPE_BYTES["f16"], ALIGNMENT[self.loc])  # f16 or bf16


def chunk_names(c: BwdConfig, name: str) -> list[str]:
    """Names of a per-D-chunk tile or operand: `name` alone, or name0, name1 when the cube splits D."""
    return [name] if c.d_split == 1 else [f"{name}{i}" for i in range(c.d_split)]


def operands(c: BwdConfig, kernel: str) -> list[Operand]:
    """The L0A / L0B operands of `kernel`'s matmuls: [rows, D chunk] pieces of Q, dO, K, V and their
    transposes, and dS (dq) or P^T, dS^T (dkdv)."""
    dc = c.d_chunk
    rows, cols = c.rows_cols(kernel)
    if kernel == "dq":  # S = Q K^T, dP = dO V^T (summed over the D chunks), dQ[:, j] = dS K[:, j]
        return ([Operand(r, "qk", "left", rows, dc, True) for r in chunk_names(c, "q") + chunk_names(c, "do")]
                + [Operand("ds", "pv", "left", rows, cols, False)]
                + [Operand(r, "qk", "right", dc, cols, False) for r in chunk_names(c, "kt") + chunk_names(c, "vt")]
                + [Operand(r, "pv", "right", cols, dc, False) for r in chunk_names(c, "k")])
    if kernel == "prep":  # G = dO O^T
        return ([Operand(r, "qk", "left", rows, dc, True) for r in chunk_names(c, "do")]
                + [Operand(r, "qk", "right", dc, rows, False) for r in chunk_names(c, "ot")])
    if kernel != "dkdv":
        return []
    # S^T = K Q^T, dP^T = V dO^T (summed over the D chunks), dV[:, j] = P^T dO[:, j], dK[:, j] = dS^T Q[:, j]
    return ([Operand(r, "qk", "left", rows, dc, True) for r in chunk_names(c, "k") + chunk_names(c, "v")]
            + [Operand(r, "pv", "left", rows, cols, False) for r in ("pt", "dst")]
            + [Operand(r, "qk", "right", dc, cols, False) for r in chunk_names(c, "qt") + chunk_names(c, "dot")]
            + [Operand(r, "pv", "right", cols, dc, False) for r in chunk_names(c, "do") + chunk_names(c, "q")])


def grad_accs(c: BwdConfig) -> dict[str, list[str]]:
    """The dkdv kernel's L0C accumulators of dV and dK, per D chunk: their own, or with
    `dkdv_passes=2` one set that holds dV in the first pass and dK in the second."""
    if c.dkdv_passes == 2:
        return {"dv": chunk_names(c, "dkv_acc"), "dk": chunk_names(c, "dkv_acc")}
    return {"dv": chunk_names(c, "dv_acc"), "dk": chunk_names(c, "dk_acc")}


def dkdv_passes(c: BwdConfig) -> tuple[tuple[str, ...], ...]:
    """The gradients each pass of a dkdv unit over its steps computes: (dv, dk) at once, or dv then dk."""
    return (("dv",), ("dk",)) if c.dkdv_passes == 2 else (("dv", "dk"),)


def operand_tiles(c: BwdConfig, kernel: str) -> dict[str, str]:
    """Operand role -> the L0A / L0B tile that holds it. Every operand gets a tile of its own when
    they all fit the space; otherwise the operands of one shape share a ring of two tiles (one when
    two per shape do not fit), taken in turn in the order the cube uses them (so a move fills one
    tile while the matmul reads the other), and each is moved in from L1 before every use."""
    names: dict[str, str] = {}
    for loc in ("left", "right"):
        ops = [o for o in operands(c, kernel) if o.loc == loc]
        if sum(o.nbytes for o in ops) <= CAPACITY[loc]:
            names.update({o.role: f"{o.role}_{loc}" for o in ops})
            continue
        groups: dict[tuple[int, int], list[Operand]] = {}
        for o in ops:
            groups.setdefault((o.rows, o.cols), []).append(o)
        ring = 2 if sum(min(2, len(g)) * g[0].nbytes for g in groups.values()) <= CAPACITY[loc] else 1
        for gi, group in enumerate(groups.values()):
            prefix = "r" if len(groups) == 1 else f"r{gi}_"
            for i, o in enumerate(group):
                names[o.role] = f"{o.role}_{loc}" if len(group) == 1 else f"{prefix}{i % ring}_{loc}"
    return names


def resident_roles(c: BwdConfig, kernel: str) -> frozenset[str]:
    """Unit-level operands with a tile of their own: moved into L0 once per work unit."""
    names = operand_tiles(c, kernel)
    shared = {n for n in names.values() if list(names.values()).count(n) > 1}
    return frozenset(o.role for o in operands(c, kernel) if o.unit and names[o.role] not in shared)


def tile_plan(c: BwdConfig, kernel: str) -> list[TileSpec]:
    """Every tile the builder allocates for `kernel` ("dq" or "dkdv"), per core."""
    if kernel not in c.kernels:
        raise ValueError(f"kernel={kernel!r} must be one of {c.kernels}")
    dc, dt = c.d_chunk, c.in_dtype
    rows, cols = c.rows_cols(kernel)
    vr = rows // VEC_CORES
    if kernel == "post":
        return _post_plan(c)
    nz = dict(blayout="col_major", slayout="row_major", dynamic=True)
    zn = dict(slayout="col_major", dynamic=True)
    acc = dict(blayout="col_major", slayout="row_major", fractal=1024, dynamic=True)
    dyn = dict(dynamic=True)

    def chunked(name: str, stage: str, loc: str, r: int, cc: int, dtype: str, **kw) -> list[TileSpec]:
        return [TileSpec(n, "cube", stage, loc, r, cc, dtype, **kw) for n in chunk_names(c, name)]

    if kernel == "prep":  # rows = queries: G = dO O^T (O^T loaded as the dq kernel's V^T)
        mats = [*chunked("do_mat", "qk", "mat", rows, dc, dt, **nz), *chunked("ot_mat", "qk", "mat", dc, rows, dt, **zn)]
        accs = [TileSpec("g_acc", "cube", "qk", "acc", rows, rows, "f32", **acc)]
    elif kernel == "dq":  # rows = queries, cols = keys (G = dO O^T: through vt_mat, vt and dp_acc)
        mats = [
            *chunked("q_mat", "qk", "mat", rows, dc, dt, **nz),
            *chunked("do_mat", "qk", "mat", rows, dc, dt, **nz),
            *chunked("kt_mat", "qk", "mat", dc, cols, dt, **zn),
            *chunked("vt_mat", "qk", "mat", dc, cols, dt, **zn),
            *chunked("k_mat", "pv", "mat", cols, dc, dt, **nz),
            TileSpec("ds_mat", "cube", "pv", "mat", rows, cols, dt, **nz),
        ]
        accs = [TileSpec("s_acc", "cube", "qk", "acc", rows, cols, "f32", **acc),
                TileSpec("dp_acc", "cube", "qk", "acc", rows, cols, "f32", **acc),
                *chunked("dq_acc", "pv", "acc", rows, dc, "f32", **acc)]
    else:  # rows = keys, cols = queries
        mats = [
            *chunked("k_mat", "qk", "mat", rows, dc, dt, **nz),
            *chunked("v_mat", "qk", "mat", rows, dc, dt, **nz),
            *chunked("qt_mat", "qk", "mat", dc, cols, dt, **zn),
            *chunked("dot_mat", "qk", "mat", dc, cols, dt, **zn),
            *chunked("do_mat", "pv", "mat", cols, dc, dt, **nz),
            *chunked("q_mat", "pv", "mat", cols, dc, dt, **nz),
            TileSpec("pt_mat", "cube", "pv", "mat", rows, cols, dt, **nz),
            TileSpec("dst_mat", "cube", "pv", "mat", rows, cols, dt, **nz),
        ]
        accs = [TileSpec("st_acc", "cube", "qk", "acc", rows, cols, "f32", **acc),
                TileSpec("dpt_acc", "cube", "qk", "acc", rows, cols, "f32", **acc)]
        for name in dict.fromkeys(n for names in grad_accs(c).values() for n in names):
            accs.append(TileSpec(name, "cube", "pv", "acc", rows, dc, "f32", **acc))
        if c.atomic_dq:  # K's rows of each vector core's keys, [block_q, D chunk] like the Q right tile they move into
            mats += [t for i in range(VEC_CORES) for t in chunked(f"kp{i}_mat", "pv", "mat", cols, dc, dt, **nz)]
            accs += chunked("dqp_acc", "pv", "acc", cols, dc, "f32", **acc)
    l0: dict[str, TileSpec] = {}
    names = operand_tiles(c, kernel)
    for o in operands(c, kernel):
        layout = dict(slayout="row_major") if o.loc == "left" else dict(slayout="col_major")
        l0.setdefault(names[o.role], TileSpec(names[o.role], "cube", o.stage, o.loc, o.rows, o.cols, dt, dynamic=True,
                                              **layout))
    cube = mats + [t for t in l0.values() if t.loc == "left"] + [t for t in l0.values() if t.loc == "right"] + accs
    if kernel == "prep":
        return cube + [*gram_tiles(vr),
                       TileSpec("dsum_col", "vector", "p", "vec", vr, 1, "f32", blayout="col_major"),
                       TileSpec("stat_row", "vector", "p", "vec", 1, vr, "f32", **dyn),
                       TileSpec("zeros", "vector", "p", "vec", vr, c.head, "f32", **dyn)]  # over the f32 dQ rows
    if kernel == "dq":
        vector = [
            *gram_tiles(vr),
            TileSpec("dsum_col", "vector", "p", "vec", vr, 1, "f32", blayout="col_major"),
            TileSpec("stat_row", "vector", "p", "vec", 1, vr, "f32", **dyn),  # LSE, then D (row view)
            TileSpec("lse_all", "vector", "p", "vec", 1, vr, "f32"),
            # trowexpandexpdif's explicit scratch (`target.EXPDIF_TMP_BYTES`)
            TileSpec("exp_tmp", "vector", "p", "vec", 1, EXPDIF_TMP_BYTES // DTYPE_BYTES["f32"], "f32"),
        ]
        vector += _key_mask_tiles(c, cols)
    else:
        vector = [
            TileSpec("stat_row", "vector", "p", "vec", 1, cols, "f32", **dyn),  # -LSE, then -D per query column
            TileSpec("nlse_row", "vector", "p", "vec", 1, cols, "f32", **dyn),
        ]
        vector += _key_mask_tiles(c, vr)
        if c.key_padding:  # the bias of this core's keys, one per row, for the unit ([1, vr] viewed as [vr, 1])
            vector.append(TileSpec("kbias_row", "vector", "p", "vec", 1, vr, "f32"))
        if c.atomic_dq:  # dS^T rows (out_half) -> dS piece, through ttrans's scratch of out_half's size
            vector += [TileSpec("trans_tmp", "vector", "p", "vec", vr, cols, dt, **dyn),
                       TileSpec("ds_piece", "vector", "p", "vec", cols, vr, dt, **dyn)]
    if c.dropout:  # the generator's tiles (`kernels/dropout.py`): i32 bits, the lines, and in dkdv the keep
        # factor (held from dP^T to P^T across the score modifications; the dq kernel's is mask_tmp)
        vector += [TileSpec("drop_bits", "vector", "p", "vec", vr, cols, "i32", **dyn),
                   *([TileSpec("drop_keep", "vector", "p", "vec", vr, cols, "f32", **dyn)] if kernel == "dkdv" else []),
                   TileSpec("drop_rows", "vector", "p", "vec", 1, vr, "i32", **dyn),
                   TileSpec("drop_cols", "vector", "p", "vec", 1, cols, "i32", **dyn),
                   TileSpec("drop_tmp", "vector", "p", "vec", 1, max(vr, cols), "i32", **dyn)]
    for mod, prefix in zip(c.score_mods, mod_prefixes(c.score_mods)):  # (the first full scratch is mask_tmp)
        vector += mod.grad_tiles(vr, cols, prefix)
    if any(m.row_scratch for m in c.score_mods) and kernel == "dkdv":  # the mods' row-broadcast scratch (dq's: exp_tmp)
        vector.append(TileSpec("mods_row_tmp", "vector", "p", "vec", 1, EXPDIF_TMP_BYTES // DTYPE_BYTES["f32"], "f32"))
    vector += [
        TileSpec("s_tile", "vector", "p", "vec", vr, cols, "f32", **dyn),
        TileSpec("dp_tile", "vector", "p", "vec", vr, cols, "f32", **dyn),
        TileSpec("mask_tmp", "vector", "p", "vec", vr, cols, "f32", **dyn),
        TileSpec("out_half", "vector", "p", "vec", vr, cols, dt, **dyn),
    ]
    return cube + vector


def _key_mask_tiles(c: BwdConfig, keys: int) -> list[TileSpec]:
    """The key mask of `keys` keys as loaded (i8), converted (f16, f32) and made a bias; the rows are at
    least 32 bytes (a vector tile's row alignment: 32 i8 columns for the 16 keys of a 32-key block's core)."""
    if not c.key_padding:
        return []
    cols = _align(keys, VEC_ROW_BYTES // DTYPE_BYTES["i8"])
    return [TileSpec(f"kpm_{dt}", "vector", "p", "vec", 1, cols, dt, dynamic=True) for dt in ("i8", "f16", "f32")]


def gram_tiles(vr: int) -> list[TileSpec]:
    """A vector core's [vr, vr] block of G = dO O^T (its rows, their own columns), the identity that keeps
    its diagonal, and the row sum's scratch (`bwd_tiles.gram_diagonal`)."""
    return [TileSpec(name, "vector", "p", "vec", vr, vr, "f32", dynamic=True) for name in ("gram", "gram_eye", "gram_tmp")]


def _post_plan(c: BwdConfig) -> list[TileSpec]:
    """post: dQ rows f32 -> input dtype."""
    vr, d = c.dq_block_q // VEC_CORES, c.head
    return [TileSpec("dq_f32", "vector", "p", "vec", vr, d, "f32", dynamic=True),
            TileSpec("dq_out", "vector", "p", "vec", vr, d, c.in_dtype, dynamic=True)]


def budget(c: BwdConfig, kernel: str) -> Budget:
    """Bytes per on-chip space (UB per vector core) of `kernel`'s tile plan, with alignment."""
    plan = tile_plan(c, kernel)
    rows = []
    for space in ("vec", "mat", "left", "right", "acc"):
        items = [(t.name, _align(t.nbytes, ALIGNMENT[space])) for t in plan if t.loc == space]
        if space == "vec":
            items += [(f"hidden_rowexpand_tmp{i}", HIDDEN_ROWEXPAND_TMP_BYTES) for i in range(rowexpand_ops(c, kernel))]
            items += [(f"hidden_tci_tmp{i}", HIDDEN_TCI_TMP[32][1]) for i in range(tci_ops(c, kernel))]
        rows.append(BudgetRow(space, sum(b for _, b in items), CAPACITY[space], tuple(items)))
    return Budget(tuple(rows), c.slot_bytes_per_block(kernel))


def work_units(c: BwdConfig, kernel: str, batch: int, heads: int, kv_heads: int, s0: int, s1: int) -> int:
    """Work units of one launch of `kernel`."""
    if kernel == "post":
        return -(-(batch * s0 * heads) // c.dq_block_q)
    if kernel in ("dq", "prep"):
        return batch * heads * -(-s0 // c.dq_block_q)
    return batch * kv_heads * -(-s1 // c.block_kv)


def entry_args(c: BwdConfig, kernel: str) -> tuple[tuple[str, str], ...]:
    """(name, PTO IR type) of `kernel`'s entry function: the one list the builder and the launch use."""
    dt = c.in_dtype
    ptrs = {"dq": ("q", "k", "v", "o", "do", "lse", "dq", "dsum"), "dkdv": ("q", "k", "v", "do", "lse", "dsum", "dk", "dv"),
            "prep": ("o", "do", "dsum", "dq_acc"), "post": ("dq_acc", "dq")}[kernel]
    if kernel == "dkdv" and c.atomic_dq:
        ptrs += ("dq_acc",)
    elem = {"lse": "f32", "dsum": "f32", "dq_acc": "f32", **{g: c.grad_dtype for g in ("dq", "dk", "dv")}}
    args = [("ffts", "!pto.ptr<i64>")]
    if kernel == "prep":  # the `gd` ring (f32)
        args.append(("slots", "!pto.ptr<f32>"))
    if kernel in ("prep", "post"):
        return tuple(args + [(n, f"!pto.ptr<{elem.get(n, dt)}>") for n in ptrs]
                     + [(n, "i64") for n in ("batch", "heads", "s0")])
    args += [("slots", "!pto.ptr<f32>"), ("slots_h", f"!pto.ptr<{dt}>")]
    args += [(n, f"!pto.ptr<{elem.get(n, dt)}>") for n in ptrs]
    args += [(n, "i64") for n in ("batch", "heads", "kv_heads", "s0", "s1")]
    args.append(("scale", "f32"))
    if c.narrowing:  # (the window's bounds)
        args += [(p.name, "i64") for p in c.narrowing.params("")]
    if c.key_padding:  # the forward kernel's names: a [B, S1] mask has stride S1, a shared [S1] one 0
        args.insert(args.index(("batch", "i64")), ("key_mask", "!pto.ptr<i8>"))
        args.append(("key_mask_stride", "i64"))
    if c.dropout and kernel in ("dq", "dkdv"):  # the forward kernel's names and values
        args += [("drop_seed", "i64"), ("drop_offset", "i64"), ("drop_cut", "f32"), ("drop_scale", "f32")]
    if c.varlen:  # the forward varlen kernel's names: the unit table and its length
        args.insert(args.index(("batch", "i64")), ("units", "!pto.ptr<i32>"))
        args.insert(args.index(("scale", "f32")), ("num_units", "i64"))
    if c.block_ranges and kernel in ("dq", "dkdv"):
        args.insert(args.index(("batch", "i64")), (f"{'q' if kernel == 'dq' else 'kv'}_tile_ranges", "!pto.ptr<i32>"))
    for p in mod_params(c.score_mods):  # the forward kernel's names (a pointer's doc names its element type last)
        args.append((p.name, f"!pto.ptr<{p.doc.split()[-1]}>" if p.c_type.endswith("*")
                     else {"float": "f32", "int64_t": "i64"}[p.c_type]))
    return tuple(args)

