"""FlashAttention backward configuration: knobs, legality rules, tile plans, budgets.

The backward runs as two mixed cube/vector kernels (`ptofa.kernels.fa_bwd`):

* `dq`   one work unit per (batch, q head, Q block of `dq_block_q` rows); the unit
         loops over the KV tiles of `dq_block_kv` keys that its rows see. Its vectors
         first compute D = rowsum(dO * O) of the block's rows (the preprocess step,
         written to GM for the other kernel), then per tile P = exp(scale S - LSE) and
         dS = scale * P * (dP - D); the cube accumulates dQ = dS K in L0C and stores it
         once, in the input dtype.
* `dkdv` one work unit per (batch, kv head, KV block of `block_kv` keys); the unit loops
         over the group's q heads and the Q blocks of `block_q` rows that see the block.
         The cube computes the transposed scores S^T = K Q^T and dP^T = V dO^T (the
         transposed operands Q^T, dO^T are DN loads into the right operand, the verified
         K^T form), the vectors P^T and dS^T, and the cube dV += P^T dO, dK += dS^T Q,
         both kept in L0C for the whole unit and stored once.

Neither kernel uses atomics: each output element has one writer, so the backward is
deterministic (bit-identical across runs and block counts).

With `atomic_dq` the backward is instead three kernels, and the dq kernel is not run:

* `prep` vector-only, one unit per (batch, q head, `dq_block_q` rows): D = rowsum(dO * O), and
         zeros over those rows of the f32 dQ accumulator (so the launch needs no host memset).
* `dkdv` as above, and per step also dQ_part = dS K: each vector core transposes its
         dS^T rows (`ttrans`) and pushes them through a third pipe (`dsq`, whose cube slot
         holds the two cores' [block_q, block_kv / 2] pieces one under the other), the
         cube computes dS_0 K_0 + dS_1 K_1 into `dq_acc` and adds it atomically into an
         f32 GM accumulator (zeroed by prep). dS reuses the dS^T mat / left tiles, so
         this mode needs block_q == block_kv.
* `post` vector-only: dQ f32 -> input dtype.

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

from ptofa.pipeline import DTYPE_BYTES, IN_DTYPES, MAX_MATMUL_DIM, VEC_CORES, Budget, BudgetRow, ConfigError, PipeSpec, TileSpec
from ptofa.ir.target import ALIGNMENT, CAPACITY, EXPDIF_TMP_BYTES, HIDDEN_ROWEXPAND_TMP_BYTES
from ptofa.ir.target import align as _align

KERNELS = ("dq", "dkdv")
ATOMIC_KERNELS = ("prep", "dkdv", "post")
ALL_KERNELS = ("dq", "prep", "dkdv", "post")
BWD_HEADS = (64, 128)
BLOCK_SIZES = (64, 128)
# trowexpand* ops with ptoas's hidden 8 KiB UB scratch: in the dq kernel's vector function the
# sub for dP - D (its expdif for P takes the plan's `exp_tmp`, `target.EXPDIF_TMP_BYTES`). The
# dkdv vectors use tcolexpandadd (no scratch), and with a key mask one trowexpandadd (the mask
# of a unit's keys, one per row).
ROWEXPAND_OPS = {"dq": 1, "dkdv": 0, "prep": 0, "post": 0}


def rowexpand_ops(c: BwdConfig, kernel: str) -> int:
    """trowexpand* ops (each with ptoas's hidden UB scratch) in `kernel`'s vector function."""
    return ROWEXPAND_OPS[kernel] + int(kernel == "dkdv" and c.key_padding)


@dataclass(frozen=True)
class BwdConfig:
    """Compile-time knobs of the backward kernels, validated on creation."""

    head: int = 128
    in_dtype: str = "f16"  # Q, K, V, O, dO, dQ, dK, dV
    masked: bool = False  # causal / sliding window; the bounds are runtime arguments
    block_kv: int = 64  # dkdv: keys per work unit (dK, dV accumulators live in L0C)
    block_q: int = 128  # dkdv: query rows per step
    dq_block_q: int = 64  # dq: query rows per work unit
    dq_block_kv: int = 64  # dq: keys per step
    preload: int = 3  # steps the cube computes scores ahead of the gradient matmuls (the forward's default)
    slot_num: int = 8
    target: str = "a3"
    atomic_dq: bool = False  # prep + dkdv (with atomic dQ) + post instead of dq + dkdv
    key_padding: bool = False  # an i8 key mask ([B, S1] or [S1]) hides padding keys from every query

    def __post_init__(self) -> None:
        _check(self)
        for kernel in self.kernels:
            over = [row for row in budget(self, kernel).rows if row.used > row.capacity]
            if over:
                raise ConfigError(f"memory budget exceeded (rule: local tiles must fit each on-chip space), "
                                  f"{kernel} kernel:\n" + budget(self, kernel).table(only_over=True))

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernels one backward launches, in order."""
        return ATOMIC_KERNELS if self.atomic_dq else KERNELS

    @property
    def sync_period(self) -> int:
        return self.slot_num if self.slot_num <= 2 else self.slot_num // 2

    def rows_cols(self, kernel: str) -> tuple[int, int]:
        """(rows, cols) of one step's score tile: [q rows, keys] for dq, [keys, q rows] for dkdv;
        [q rows, D] of one unit for the vector-only prep and post kernels."""
        if kernel in ("prep", "post"):
            return self.dq_block_q, self.head
        return (self.dq_block_q, self.dq_block_kv) if kernel == "dq" else (self.block_kv, self.block_q)

    def pipes(self, kernel: str) -> tuple[PipeSpec, ...]:
        """C2V: the f32 scores and their gradients side by side; V2C: P (dkdv only) and dS in the input dtype;
        with `atomic_dq`, V2C `dsq`: each vector core's dS piece [block_q, block_kv / 2] (cube slot: both, stacked)."""
        if kernel in ("prep", "post"):
            return ()
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
                f"slot_num={self.slot_num}" + (" masked" if self.masked else "") + (" atomic_dq" if self.atomic_dq else "")
                + (" key_padding" if self.key_padding else ""))


def _check(c: BwdConfig) -> None:
    def fail(rule: str, detail: str) -> None:
        raise ConfigError(f"{rule}: {detail}")

    if c.in_dtype not in IN_DTYPES:
        fail("dtypes", f"in_dtype={c.in_dtype!r} must be one of {IN_DTYPES}")
    if c.target not in ("a2", "a3"):
        fail("target", f"target={c.target!r}; only a2/a3 (dav-c220) are supported")
    if c.head not in BWD_HEADS:
        fail("head dim", f"head={c.head}: the backward supports {BWD_HEADS} (dK/dV accumulators in L0C)")
    for name in ("block_kv", "block_q", "dq_block_q", "dq_block_kv"):
        if getattr(c, name) not in BLOCK_SIZES:
            fail("block size", f"{name}={getattr(c, name)} must be one of {BLOCK_SIZES}")
    if max(c.head, c.block_q, c.block_kv) > MAX_MATMUL_DIM:
        fail("matmul dims", f"m/k/n must be <= {MAX_MATMUL_DIM}")
    if c.slot_num < 1 or c.slot_num % c.sync_period != 0:
        fail("slot ring reuse", f"slot_num={c.slot_num} must be >= 1 and a multiple of its sync period {c.sync_period}")
    if c.preload < 1:
        fail("preload", f"preload={c.preload} must be >= 1")
    if c.atomic_dq and c.block_q != c.block_kv:
        fail("atomic dQ tiles", f"atomic_dq needs block_q == block_kv (dS [block_q, block_kv] reuses the dS^T "
                                f"[block_kv, block_q] mat and left tiles), got block_q={c.block_q}, block_kv={c.block_kv}")
    limit = c.slot_num - c.sync_period + 1
    if c.preload >= limit:
        fail("preload vs slot ring", f"preload={c.preload} must be < slot_num - sync_period + 1 = "
                                     f"{c.slot_num} - {c.sync_period} + 1 = {limit} (batched free credits)")


def tile_plan(c: BwdConfig, kernel: str) -> list[TileSpec]:
    """Every tile the builder allocates for `kernel` ("dq" or "dkdv"), per core."""
    if kernel not in c.kernels:
        raise ValueError(f"kernel={kernel!r} must be one of {c.kernels}")
    d, dt = c.head, c.in_dtype
    rows, cols = c.rows_cols(kernel)
    vr = rows // VEC_CORES
    if kernel in ("prep", "post"):
        return _vector_only_plan(c, kernel)
    nz = dict(blayout="col_major", slayout="row_major", dynamic=True)
    zn = dict(slayout="col_major", dynamic=True)
    left = dict(slayout="row_major", dynamic=True)
    right = dict(slayout="col_major", dynamic=True)
    acc = dict(blayout="col_major", slayout="row_major", fractal=1024, dynamic=True)
    dyn = dict(dynamic=True)
    if kernel == "dq":  # rows = queries, cols = keys
        cube = [
            TileSpec("q_mat", "cube", "qk", "mat", rows, d, dt, **nz),
            TileSpec("do_mat", "cube", "qk", "mat", rows, d, dt, **nz),
            TileSpec("kt_mat", "cube", "qk", "mat", d, cols, dt, **zn),
            TileSpec("vt_mat", "cube", "qk", "mat", d, cols, dt, **zn),
            TileSpec("k_mat", "cube", "pv", "mat", cols, d, dt, **nz),
            TileSpec("ds_mat", "cube", "pv", "mat", rows, cols, dt, **nz),
            TileSpec("q_left", "cube", "qk", "left", rows, d, dt, **left),
            TileSpec("do_left", "cube", "qk", "left", rows, d, dt, **left),
            TileSpec("ds_left", "cube", "pv", "left", rows, cols, dt, **left),
            TileSpec("kt_right", "cube", "qk", "right", d, cols, dt, **right),
            TileSpec("vt_right", "cube", "qk", "right", d, cols, dt, **right),
            TileSpec("k_right", "cube", "pv", "right", cols, d, dt, **right),
            TileSpec("s_acc", "cube", "qk", "acc", rows, cols, "f32", **acc),
            TileSpec("dp_acc", "cube", "qk", "acc", rows, cols, "f32", **acc),
            TileSpec("dq_acc", "cube", "pv", "acc", rows, d, "f32", **acc),
        ]
        vector = [
            TileSpec("o_in", "vector", "p", "vec", vr, d, dt, **dyn),
            TileSpec("do_in", "vector", "p", "vec", vr, d, dt, **dyn),
            TileSpec("o_f32", "vector", "p", "vec", vr, d, "f32", **dyn),
            TileSpec("do_f32", "vector", "p", "vec", vr, d, "f32", **dyn),
            TileSpec("dsum_col", "vector", "p", "vec", vr, 1, "f32", blayout="col_major"),
            TileSpec("stat_row", "vector", "p", "vec", 1, vr, "f32", **dyn),  # LSE, then D (row view)
            TileSpec("lse_all", "vector", "p", "vec", 1, vr, "f32"),
            # trowexpandexpdif's explicit scratch (`target.EXPDIF_TMP_BYTES`)
            TileSpec("exp_tmp", "vector", "p", "vec", 1, EXPDIF_TMP_BYTES // DTYPE_BYTES["f32"], "f32"),
        ]
        vector += _key_mask_tiles(c, cols)
    else:  # rows = keys, cols = queries
        cube = [
            TileSpec("k_mat", "cube", "qk", "mat", rows, d, dt, **nz),
            TileSpec("v_mat", "cube", "qk", "mat", rows, d, dt, **nz),
            TileSpec("qt_mat", "cube", "qk", "mat", d, cols, dt, **zn),
            TileSpec("dot_mat", "cube", "qk", "mat", d, cols, dt, **zn),
            TileSpec("do_mat", "cube", "pv", "mat", cols, d, dt, **nz),
            TileSpec("q_mat", "cube", "pv", "mat", cols, d, dt, **nz),
            TileSpec("pt_mat", "cube", "pv", "mat", rows, cols, dt, **nz),
            TileSpec("dst_mat", "cube", "pv", "mat", rows, cols, dt, **nz),
            TileSpec("k_left", "cube", "qk", "left", rows, d, dt, **left),
            TileSpec("v_left", "cube", "qk", "left", rows, d, dt, **left),
            TileSpec("pt_left", "cube", "pv", "left", rows, cols, dt, **left),
            TileSpec("dst_left", "cube", "pv", "left", rows, cols, dt, **left),
            *[TileSpec(name, "cube", "qk", "right", r, cc, dt, **right) for name, (r, cc) in _right_tiles(c).items()],
            TileSpec("st_acc", "cube", "qk", "acc", rows, cols, "f32", **acc),
            TileSpec("dpt_acc", "cube", "qk", "acc", rows, cols, "f32", **acc),
            TileSpec("dv_acc", "cube", "pv", "acc", rows, d, "f32", **acc),
            TileSpec("dk_acc", "cube", "pv", "acc", rows, d, "f32", **acc),
        ]
        if c.atomic_dq:  # K's rows of each vector core's keys, [block_q, D] like the Q right tile they move into
            cube += [TileSpec(f"kp{i}_mat", "cube", "pv", "mat", cols, d, dt, **nz) for i in range(VEC_CORES)]
            cube.append(TileSpec("dqp_acc", "cube", "pv", "acc", cols, d, "f32", **acc))
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
    vector += [
        TileSpec("s_tile", "vector", "p", "vec", vr, cols, "f32", **dyn),
        TileSpec("dp_tile", "vector", "p", "vec", vr, cols, "f32", **dyn),
        TileSpec("mask_tmp", "vector", "p", "vec", vr, cols, "f32", **dyn),
        TileSpec("out_half", "vector", "p", "vec", vr, cols, dt, **dyn),
    ]
    return cube + vector


def _key_mask_tiles(c: BwdConfig, keys: int) -> list[TileSpec]:
    """The key mask of `keys` keys as loaded (i8), converted (f16, f32) and made a bias."""
    if not c.key_padding:
        return []
    return [TileSpec(f"kpm_{dt}", "vector", "p", "vec", 1, keys, dt, dynamic=True) for dt in ("i8", "f16", "f32")]


def _vector_only_plan(c: BwdConfig, kernel: str) -> list[TileSpec]:
    """prep: one core's rows of O and dO (input dtype), as f32, D, and zeros for the f32 dQ accumulator;
    post: dQ rows f32 -> input dtype."""
    vr, d, dt = c.dq_block_q // VEC_CORES, c.head, c.in_dtype
    dyn = dict(dynamic=True)
    if kernel == "post":
        return [TileSpec("dq_f32", "vector", "p", "vec", vr, d, "f32", **dyn),
                TileSpec("dq_out", "vector", "p", "vec", vr, d, dt, **dyn)]
    return [
        TileSpec("o_in", "vector", "p", "vec", vr, d, dt, **dyn),
        TileSpec("do_in", "vector", "p", "vec", vr, d, dt, **dyn),
        TileSpec("o_f32", "vector", "p", "vec", vr, d, "f32", **dyn),
        TileSpec("do_f32", "vector", "p", "vec", vr, d, "f32", **dyn),
        TileSpec("dsum_col", "vector", "p", "vec", vr, 1, "f32", blayout="col_major"),
        TileSpec("stat_row", "vector", "p", "vec", 1, vr, "f32", **dyn),
        TileSpec("zeros", "vector", "p", "vec", vr, d, "f32", **dyn),  # stored over the f32 dQ accumulator's rows
    ]


def _right_tiles(c: BwdConfig) -> dict[str, tuple[int, int]]:
    """The dkdv kernel's right operands: Q^T, dO^T ([D, block_q]) for the scores and dO, Q
    ([block_q, D]) for the gradients; when D == block_q the two pairs share two tiles (L0B)."""
    if c.head == c.block_q:
        return {"r0_right": (c.head, c.block_q), "r1_right": (c.head, c.block_q)}
    return {"qt_right": (c.head, c.block_q), "dot_right": (c.head, c.block_q),
            "do_right": (c.block_q, c.head), "q_right": (c.block_q, c.head)}


def right_roles(c: BwdConfig) -> dict[str, str]:
    """Role (qt, dot, do, q) -> the dkdv right tile that holds it."""
    if c.head == c.block_q:
        return {"qt": "r0_right", "dot": "r1_right", "do": "r0_right", "q": "r1_right"}
    return {role: f"{role}_right" for role in ("qt", "dot", "do", "q")}


def budget(c: BwdConfig, kernel: str) -> Budget:
    """Bytes per on-chip space (UB per vector core) of `kernel`'s tile plan, with alignment."""
    plan = tile_plan(c, kernel)
    rows = []
    for space in ("vec", "mat", "left", "right", "acc"):
        items = [(t.name, _align(t.nbytes, ALIGNMENT[space])) for t in plan if t.loc == space]
        if space == "vec":
            items += [(f"hidden_rowexpand_tmp{i}", HIDDEN_ROWEXPAND_TMP_BYTES) for i in range(rowexpand_ops(c, kernel))]
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
    elem = {"lse": "f32", "dsum": "f32", "dq_acc": "f32"}
    args = [("ffts", "!pto.ptr<i64>")]
    if kernel in ("prep", "post"):
        return tuple(args + [(n, f"!pto.ptr<{elem.get(n, dt)}>") for n in ptrs]
                     + [(n, "i64") for n in ("batch", "heads", "s0")])
    args += [("slots", "!pto.ptr<f32>"), ("slots_h", f"!pto.ptr<{dt}>")]
    args += [(n, f"!pto.ptr<{elem.get(n, dt)}>") for n in ptrs]
    args += [(n, "i64") for n in ("batch", "heads", "kv_heads", "s0", "s1")]
    args.append(("scale", "f32"))
    if c.masked:
        args += [("win_left", "i64"), ("win_right", "i64")]
    if c.key_padding:  # the forward kernel's names: a [B, S1] mask has stride S1, a shared [S1] one 0
        args.insert(args.index(("batch", "i64")), ("key_mask", "!pto.ptr<i8>"))
        args.append(("key_mask_stride", "i64"))
    return tuple(args)

