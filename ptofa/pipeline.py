"""FlashAttention configuration: tuning knobs, legality rules and memory budgets.

`FAConfig` is the one place where the kernel's compile-time knobs are checked
(docs/sources.md §4.3). The tiles the builder allocates are listed here, by
`tile_plan`, and the builder allocates exactly those: the memory budget is
computed from the same list, so the two cannot drift apart.

`ProblemShape` holds the runtime arguments (B, N, S0, S1) and checks them
against a config.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field, fields, replace

from ptofa.ir.target import (ALIGNMENT, CAPACITY, EXPDIF_TMP_BYTES, HIDDEN_ROWEXPAND_TMP_BYTES, KIB,  # noqa: F401 (re-exported)
                          SPACE_NAMES)
from ptofa.ir.target import align as _align
from ptofa.ir.target import HIDDEN_TCI_TMP
from ptofa.modlist import ModsMixin, canonical
from ptofa.visibility import UNBOUNDED, kernel_bounds, visible_pairs  # noqa: F401 (re-exported)

# The varlen kernel's unit table: UNIT_FIELDS int32 per work unit, in this order (ptofa.launch.varlen builds it).
UNIT_TABLE = ("q_start", "q_len", "k_start", "k_len", "head", "q_block", "seq", "split", "splits")
UNIT_FIELDS = len(UNIT_TABLE)
# The split-KV reduce kernel's table: one entry per unit split more than once (ptofa.launch.varlen.reduce_table),
# in the reduce's (head, packed row) coordinates.
REDUCE_TABLE = ("head", "row", "rows", "splits")
MAX_SPLITS = 16  # split-KV: most splits of one unit's KV tiles (num_splits)

# Rows of a softmax row slice below which the vector stage does not split it further
# to double-buffer it (docs/sources.md §4.3: vec_s0 * 4 bytes a multiple of 32).
MIN_VEC_S0 = 8
# Fewest Q rows a vector core scales at once (prescale_q): its three [rows, D] tiles take
# 8 KiB at D = 128, which fits beside every TILE_S1 = 512 softmax working set.
MIN_PRESCALE_ROWS = 4
PRESCALE_TILES = (("q_in", None), ("q_f32", "f32"), ("q_out", None))  # (name, dtype; None: the input dtype)

DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i8": 1, "i32": 4, "i64": 8}
VEC_CORES = 2
SUPPORTED_TILE_S1 = (128, 256, 512, 1024)
CUBE_S1_CHOICES = (64, 128)
SPLIT_HEAD = 128  # head dims above this split the cube stages in two D chunks with 64-row Q blocks
MAX_HEAD = 256  # the largest head dim (q/k and v); flash-attn's limit
CUBE_FRACTAL = 16  # a D chunk is a whole number of cube fractals (16 elements)
# The compiled head dims (kernel widths): a multiple of 16 up to SPLIT_HEAD (one D chunk), a multiple
# of 32 above it (two D chunks of a multiple of 16). Any other head dim 1..MAX_HEAD runs on the next
# width up, its Q/K/V zero-padded on the host (`kernel_head`, `ptofa.attention.core.pad_head`).
SUPPORTED_HEAD = tuple(d for d in range(CUBE_FRACTAL, MAX_HEAD + 1, CUBE_FRACTAL)
                       if d % (CUBE_FRACTAL * (1 if d <= SPLIT_HEAD else 2)) == 0)
# `cube_rowsum`: columns of ones the cube appends to each V sub-tile (one cube fractal wide), so
# that the PV matmul also sums each row of P into the last ROWSUM_COLS columns of its accumulator.
ROWSUM_COLS = 16
IN_DTYPES = ("f16", "bf16")
SOFTMAX_DTYPES = ("f32", "f16")
# A key-mask row per tile: i8 from GM, converted up to the softmax dtype (the additive bias).
KEY_MASK_TILES = {"f32": ("kpm_i8", "kpm_f16", "kpm_f32"), "f16": ("kpm_i8", "kpm_f16")}
OUT_DTYPES = ("f16", "bf16", "f32")
MAX_MATMUL_DIM = 4095


class ConfigError(ValueError):
    """A configuration or problem shape breaks a legality rule."""


def kernel_head(head: int, head_v: int | None = None) -> int:
    """The compiled head dim (a `SUPPORTED_HEAD` width) that runs q/k head dim `head` and v head dim
    `head_v` (default `head`): the smallest width >= both. Q, K and V are zero-padded up to it on the
    host (`ptofa.launch.base.pad_heads`): zero columns of Q and K leave Q K^T unchanged, zero columns
    of V give zero columns of O (and of dV), which are sliced off. ConfigError outside 1..MAX_HEAD."""
    head_v = head if head_v is None else head_v
    for name, d in (("head_dim", head), ("head_dim_v", head_v)):
        if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_HEAD:
            raise ConfigError(f"head dim: {name}={d!r} must be an int in 1..{MAX_HEAD}")
    return next(w for w in SUPPORTED_HEAD if w >= max(head, head_v))


@dataclass(frozen=True)
class TileSpec:
    """One `pto.alloc_tile` of the kernel, as the builder emits it."""

    name: str
    core: str  # "cube" or "vector"
    stage: str  # pipeline stage the tile belongs to: qk, p, pv, gu (timing-model colours)
    loc: str  # vec / mat / left / right / acc
    rows: int
    cols: int
    dtype: str
    blayout: str = "row_major"
    slayout: str = "none_box"
    fractal: int = 512
    dynamic: bool = False  # valid=?x?: the builder sets the valid shape per use (ragged tails)
    valid_cols: int | None = None  # a static valid shape of all rows and these columns (None: all)

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class PipeSpec:
    """One of the three global-entry GM slot pipes."""

    name: str
    pipe_id: int
    dir_mask: int  # 1 = cube->vector (C2V), 2 = vector->cube (V2C)
    rows: int  # full (cube-side) slot shape
    cols: int
    dtype: str

    @property
    def slot_bytes(self) -> int:
        return self.rows * self.cols * DTYPE_BYTES[self.dtype]

    @property
    def half_rows(self) -> int:
        return self.rows // VEC_CORES


# FAConfig's fields that None resolves from the others (`FAConfig.__post_init__`).
AUTO_FIELDS = ("exp_ring", "out_dtype", "cube_s0", "cube_s1", "cube_rowsum", "qk_dtype", "exp_f16")


@dataclass(frozen=True)
class FAConfig(ModsMixin):
    """Compile-time knobs of the FlashAttention kernel, validated on creation."""

    head: int = 128
    tile_s1: int = 256
    qk_preload: int = 3
    cube_s0: int | None = None  # Q rows per work unit: 128, or 64 for head dims above 128
    # Keys per cube sub-tile: 64 (L1 staging, L0A/L0B operands and QK accumulator double-buffered: the next
    # sub-tile's loads overlap this one's matmul), or 128 (single-buffered; the only width with QK_PRELOAD =
    # 1). None: 128 with QK_PRELOAD = 1, and for D > 128 with TILE_S1 < 512 (64-row Q blocks: the timing
    # model puts 64x64 matmuls 1-7 % behind there), else 64.
    cube_s1: int | None = None
    slot_num: int = 8
    exp_ring: int | None = None  # defaults to qk_preload; any other value is rejected
    in_dtype: str = "f16"  # Q, K, V and P
    out_dtype: str | None = None  # O; defaults to in_dtype
    key_padding: bool = False  # an i8 [B, S1] (or [S1]) key mask is an argument
    lse: bool = False  # write LSE [B, heads, S0] fp32 ([heads, total_q] for varlen)
    varlen: bool = False  # packed ragged sequences; work units come from a host-built table
    page_size: int = 0  # > 0: K/V live in a paged cache [pages, page_size, KVN, D] read through a block table
    split_kv: bool = False  # a unit covers one split of its KV tiles and writes fp32 partial O and LSE (fa_reduce combines)
    gqa_pack: bool = False  # decode (one query row per sequence): a unit's rows are the q heads of one KV head
    # The vectors scale Q by the softmax scale once per unit and hand it to the cube through a
    # fourth (V2C) pipe, one unit ahead; compute_p then has no per-tile scaling pass.
    prescale_q: bool = True
    # Softmax row-slice buffers per vector core: 1 (whole-tile-height slices), 2 (half-height
    # slices, the next one loading while this one computes), or 0: 1 when its plan fits the
    # UB, else 2. Every vector instruction pays a fixed head and tail, so the taller single
    # slice does the same work in fewer instructions.
    slice_buffers: int = 0
    # The softmax's working dtype (CANN's inner-precise modes): "f32" (high precision) stores the
    # scores as f32 and computes the row max, exp and row sum in f32; "f16" (high performance,
    # fp16 inputs, no LSE; masks add -30000) has the cube's FIX pipe round the scores to f16 and
    # computes the row max, exp and row sum on f16 tiles, so each vector pass covers twice the
    # elements and P needs no conversion. The running max, row sums, rescale and O stay f32.
    softmax_dtype: str = "f32"
    # The row sums of P from the cube instead of the vectors' `trowsum` (f32 softmax, one D chunk):
    # each V sub-tile in L1 carries ROWSUM_COLS columns of ones after its D columns (filled once
    # per block with `texpands`), so the PV matmul also writes rowsum(P_t) into the accumulator's
    # last columns; they travel in the PV slot, and compute_gu rescales and sums them as it does
    # O. Costs the cube D + 16 instead of D output columns per PV matmul (+12.5 % at D = 128).
    # None: on for an f32 softmax with one D chunk whenever the plan fits (with D = 128 the QK
    # accumulator and K's L0B operand then have one buffer, `qk_buffers`), and LSE is not asked
    # for: the sums of P rounded to the input dtype carry that rounding into the LSE, which misses
    # the accuracy rule when many scores tie (a clamp; tests/test_cube_rowsum.py); O divides the
    # PV matmul of the same rounded P by them and meets it.
    cube_rowsum: bool | None = None
    # An f32 softmax's exp in f16: x = S - m_new rounded to f16 (in f32 then the tcvt P needs anyway, or
    # `sub_f16`), exp on the f16 tile (half the vector repeats), which is P in f16 already; the statistics
    # stay f32. Rounding x <= 0 to f16 perturbs P by |x| * 2^-12 relatively; P is rounded to f16 for the
    # PV matmul in either case. fp16 inputs (A2/A3 have no bf16 exp). None: with `cube_rowsum` for fp16.
    exp_f16: bool | None = None
    # The dtype of S in the QK slot (the GM pipe between the cube's QK and the vectors' softmax):
    # "f32", or the input dtype, in which the cube's FIX pipe rounds the accumulator on its store
    # and the vectors convert each row slice back to f32 (through the P tile) before an f32
    # softmax. An input-dtype S halves the slot's bytes, the largest share of a unit's GM traffic
    # and so of the shared L2's (sim/shared_limits.py); it rounds S as torch's input-dtype
    # attention does (its matmul output is in the input dtype), which the accuracy rule compares
    # against (tests/test_qk_dtype.py). An f16 softmax stores f16 S. None: the input dtype, or f32
    # when LSE is asked for: with the vectors' f32 exp and row sums (the LSE form) rounded S
    # misses the O rule on tied scores at a large scale (fp16: err 1.03e-4 against a tolerance of
    # 8.9e-5), where the f16 exp of the form without LSE rounds S - m to f16 anyway.
    qk_dtype: str | None = None
    target: str = "a3"
    # Score / mask modifications as objects with their IR, tiles and arguments (`kernels/mods.py`, `builtin_mods/`).
    mods: tuple = ()
    # Block sparsity: a [units, 4] i32 table (`kernels/mods.py`) gives each unit's KV tiles [lo, hi), [full_lo, full_hi) unmasked.
    block_ranges: bool = False
    # Dropout on P (`kernels/dropout.py`): an in-kernel generator's keep mask; f32 softmax, the vectors' row sums.
    dropout: bool = False
    # A unit is two Q blocks of one (batch, head) sharing each KV tile loaded once into L1 (`pair_o_view`, fa_fwd).
    q_pair: bool = False
    # The automatic fields this config resolved and the values they got. `dataclasses.replace`
    # carries them over: a field still at its resolved value is automatic again and re-resolved for
    # the new switches (replace(config, lse=True) gets the LSE form's qk_dtype, cube_rowsum, ...);
    # one the caller changed is kept. Not compared, not in the JSON.
    auto: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mods", canonical(self.mods))  # (a tuple: a JSON round trip gives a list)
        for name, resolved in self.auto:
            if getattr(self, name) == resolved:
                object.__setattr__(self, name, None)
        automatic = tuple(name for name in AUTO_FIELDS if getattr(self, name) is None)
        if self.exp_ring is None:
            object.__setattr__(self, "exp_ring", self.qk_preload)
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", self.in_dtype)
        if self.cube_s0 is None:
            object.__setattr__(self, "cube_s0", 128 if self.head <= SPLIT_HEAD else 64)
        if self.cube_s1 is None:
            narrow = self.qk_preload == 1 or (self.head > SPLIT_HEAD and self.tile_s1 < 512)
            object.__setattr__(self, "cube_s1", 128 if narrow else 64)
        if self.qk_dtype is None:  # S in the input dtype where its accuracy was measured (no LSE, dropout, score mods)
            exact = (self.lse or self.dropout or any(m.scores for m in self.score_mods)) and self.softmax_dtype == "f32"
            object.__setattr__(self, "qk_dtype", "f32" if exact else self.in_dtype)
        def exp_f16(rowsum) -> bool:  # as given, or the automatic rule (for the budget trial below and for the field)
            return self.exp_f16 if self.exp_f16 is not None else bool(rowsum) and self.in_dtype == "f16" and self.softmax_dtype == "f32"
        if self.cube_rowsum is None:  # (its plan with the S dtype above: the row max may take the input-dtype scores)
            object.__setattr__(self, "cube_rowsum", self.softmax_dtype == "f32" and self.d_split == 1
                               and not self.lse and not self.dropout and _fits(self, cube_rowsum=True, exp_f16=exp_f16(True)))
        object.__setattr__(self, "exp_f16", exp_f16(self.cube_rowsum))
        _check_config(self)
        plan = budget(self)
        over = [row for row in plan.rows if row.used > row.capacity]
        if over:
            raise ConfigError(
                "memory budget exceeded (rule: local tiles must fit each on-chip space):\n"
                + plan.table(only_over=True)
            )
        # The config as JSON (the custom op's `config` argument), made once here so that a model
        # under torch.compile only reads an attribute: dynamo cannot pass a frozen dataclass to a
        # function it runs at trace time on every torch version (2.11 fails on it).
        object.__setattr__(self, "auto", tuple((name, getattr(self, name)) for name in automatic))
        object.__setattr__(self, "json_text", json.dumps({k: v for k, v in asdict(self).items() if k != "auto"},
                                                         sort_keys=True, default=repr))
        if self.qk_preload == 4:
            warnings.warn(
                "qk_preload=4 risks the ptoas --enable-insert-sync event-id deadlock "
                "(docs/sources.md §4.2); 2 or 3 is the tested range on hardware",
                stacklevel=2,
            )

    # Derived sizes (docs/sources.md §4.1).
    @property
    def tile_factor(self) -> int:
        """kTileFactor: CUBE_S1-wide sub-tiles per logical S1 tile."""
        return self.tile_s1 // self.cube_s1

    @property
    def slice_factor(self) -> int:
        """Row slices per vector core and score tile (per slice buffer): a slice holds as many
        bytes as 128 f32 keys of the core's rows, so it spans vec_rows / (TILE_S1 / 128) rows
        of f32 scores, or twice as many (up to all the core's rows) of f16 scores."""
        pair = 2 if self.q_pair and self.softmax_dtype == "f16" else 1  # (`pair_o_view`)
        return max(1, self.tile_s1 // 128 * DTYPE_BYTES[self.softmax_dtype] // 4) * pair

    @property
    def pair_o_view(self) -> bool:
        """UB room for `q_pair`'s second O: an f16 softmax halves its row slices (`slice_factor`); an f32 one (whose
        vector work is the bound) keeps them and converts O into a view of p_half (free in `_finish`) where it fits."""
        return (self.q_pair and self.softmax_dtype == "f32" and self.out_dtype == self.in_dtype
                and self.vec_buffers == 1 and self.vec_s0 * self.tile_s1 == self.vec_rows * self.head)

    @property
    def cube_buffers(self) -> int:
        """Buffers of the cube's per-sub-tile tiles: 2 with 64-key sub-tiles, 1 with 128 (whose
        operands fill L0A/L0B and whose accumulators fill L0C once)."""
        return 2 if self.cube_s1 == 64 else 1

    @property
    def qk_buffers(self) -> int:
        """Buffers of the QK accumulator and of K's L0B operand: `cube_buffers`, or 1 where the
        cube row sum's wider V operand and PV accumulator leave no room for two (D = 128)."""
        if self.cube_buffers == 1 or not self.cube_rowsum:
            return self.cube_buffers
        dc, s0, s1, width = self.d_chunk, self.cube_s0, self.cube_s1, self.pv_cols
        el = DTYPE_BYTES[self.in_dtype]
        right = 2 * (dc * s1 + s1 * width) * el
        acc = 2 * s0 * s1 * 4 + s0 * width * 4
        return 2 if right <= CAPACITY["right"] and acc <= CAPACITY["acc"] else 1

    @property
    def pv_cols(self) -> int:
        """Columns of the PV accumulator and slot: D, plus ROWSUM_COLS of row sums with `cube_rowsum`."""
        return self.head + (ROWSUM_COLS if self.cube_rowsum else 0)

    @property
    def vec_rows(self) -> int:
        """Rows each vector core owns in a block (TILE_UP_DOWN split)."""
        return self.cube_s0 // VEC_CORES

    @property
    def vec_buffers(self) -> int:
        """Softmax row-slice buffers per vector core: `slice_buffers`, or (0) 1 when the
        single-buffered plan fits the UB (prescale_q's tiles at MIN_PRESCALE_ROWS), else 2
        when the halved slice keeps MIN_VEC_S0 rows, else 1."""
        if self.slice_buffers:
            return self.slice_buffers
        if self.cube_s0 // VEC_CORES // self.slice_factor // 2 < MIN_VEC_S0:
            return 1
        single = object.__new__(FAConfig)  # unvalidated: its budget is what is being checked
        single.__dict__.update({f.name: getattr(self, f.name) for f in fields(self)}, slice_buffers=1)
        used = _vec_bytes(single, _main_plan(single))
        if self.prescale_q:
            used += _vec_bytes(single, _prescale_tiles(single, MIN_PRESCALE_ROWS), hidden=False)
        return 1 if used <= CAPACITY["vec"] else 2

    @property
    def vec_s0(self) -> int:
        """Rows of one softmax row slice: CUBE_S0 / VEC_CORES / slice_factor / vec_buffers."""
        return self.cube_s0 // VEC_CORES // self.slice_factor // self.vec_buffers

    @property
    def rowexpand_ops(self) -> int:
        """trowexpand* ops with ptoas's hidden UB scratch: compute_gu's trowexpandmul (none with `cube_rowsum`:
        the first `exp_tmp`), the final trowexpanddiv, sub_f16's subtraction (compute_p's trowexpandexpdif takes
        `exp_tmp`). Tests count them in the emitted IR and check the simulator's UB peak."""
        # (dropout, q_pair: compute_gu's and the final trowexpand* take the first `exp_tmp`, an f16 softmax's pair
        # `bcast_tmp`; sub_f16's f16 broadcast has no f16 scratch to take)
        return (0 if self.dropout or self.q_pair else 1 if self.cube_rowsum else 2) + self.sub_f16 * self.vec_buffers * (1 + self.q_pair)

    @property
    def prescale_rows(self) -> int:
        """Q rows the vectors scale per step (prescale_q): the largest power of two up to the
        core's rows whose tiles fit in the UB the rest of the plan leaves, at least
        MIN_PRESCALE_ROWS (fewer steps: each step pays the DMA and vector fixed costs)."""
        rows = self.vec_rows
        free = CAPACITY["vec"] - _vec_bytes(self, _main_plan(self))
        while rows > MIN_PRESCALE_ROWS and _vec_bytes(self, _prescale_tiles(self, rows), hidden=False) > free:
            rows //= 2
        return rows

    @property
    def input_row_max(self) -> bool:
        """An f32 softmax takes each slice's row max on its f16 scores as loaded (exact: a max of f16
        values), before they are widened: half the vector repeats and column folds of the f32 max.
        Where nothing changes the scores on the vectors (Q prescaled; no mask or score modification)
        and red_tmp serves nothing else (the cube's row sums)."""
        changed = self.mods or self.key_padding or self.block_ranges
        return (self.softmax_dtype == "f32" and self.qk_dtype == "f16" and bool(self.cube_rowsum) and self.prescale_q
                and not changed)

    @property
    def sub_f16(self) -> bool:
        """With `input_row_max` and `exp_f16`, S and the new row max m are f16 values: x = S - m is one f16
        subtraction, the f16 rounding the f32 form gives x after its f32 subtraction (`_softmax_slice`)."""
        return self.input_row_max and bool(self.exp_f16)

    @property
    def sync_period(self) -> int:
        return self.slot_num if self.slot_num <= 2 else self.slot_num // 2

    @property
    def pipes(self) -> tuple[PipeSpec, ...]:
        """QK (C2V), P (V2C), PV (C2V), and with `prescale_q` the scaled Q block (V2C)."""
        pipes = (
            PipeSpec("qk", 0, 1, self.cube_s0, self.tile_s1, self.qk_dtype),
            PipeSpec("p", 1, 2, self.cube_s0, self.tile_s1, self.in_dtype),
            PipeSpec("pv", 2, 1, self.cube_s0, self.pv_cols, "f32"),
        )
        if self.prescale_q:
            pipes += (PipeSpec("q", 3, 2, self.cube_s0, self.head, self.in_dtype),)
        return pipes

    @property
    def d_split(self) -> int:
        """D chunks of the cube stages: 1, or 2 for head dims above 128 (L0A/L0B/L0C budgets)."""
        return 1 if self.head <= SPLIT_HEAD else 2

    @property
    def d_chunk(self) -> int:
        return self.head // self.d_split

    @property
    def needs_row_fix(self) -> bool:
        """A query row may see no key at all (mask or key padding): O = 0, LSE = +inf there."""
        return self.key_padding or self.varlen or any(m.hides for m in self.mods) or self.block_ranges

    @property
    def gm_slot_bytes_per_block(self) -> int:
        return sum(p.slot_bytes * self.slot_num for p in self.pipes)

    @property
    def gm_slot_f32_per_block(self) -> int:
        """Per-block stride of the slot workspace in f32 elements."""
        return self.gm_slot_bytes_per_block // 4

    @property
    def variant(self) -> str:
        """The kernel's switches in one word list (empty for the plain forward kernel)."""
        others = not all(m.builtin for m in self.score_mods)
        parts = [name for name, on in (("masked", self.narrowing is not None), ("key_padding", self.key_padding), ("lse", self.lse),
                                       ("varlen", self.varlen), (f"page_size={self.page_size}", self.page_size),
                                       ("split_kv", self.split_kv), ("gqa_pack", self.gqa_pack),
                                       ("no_prescale_q", not self.prescale_q),
                                       ("softmax_f16", self.softmax_dtype == "f16"),
                                       ("qk_f32", self.qk_dtype == "f32"),
                                       *((m.name, True) for m in self.score_mods if m.builtin),
                                       ("mods=" + "+".join(m.name for m in self.score_mods if not m.builtin), others),
                                       ("block_ranges", self.block_ranges),
                                       ("dropout", self.dropout), ("q_pair", self.q_pair)) if on]
        return " ".join(parts)

    def summary(self) -> str:
        return (
            f"head={self.head} tile_s1={self.tile_s1} qk_preload={self.qk_preload} "
            f"cube_s0={self.cube_s0} cube_s1={self.cube_s1} slot_num={self.slot_num} "
            f"exp_ring={self.exp_ring} k_tile_factor={self.tile_factor} vec_s0={self.vec_s0}x{self.vec_buffers} "
            f"in={self.in_dtype} out={self.out_dtype}" + (f" {self.variant}" if self.variant else "")
        )


def _check_config(c: FAConfig) -> None:
    def fail(rule: str, detail: str) -> None:
        raise ConfigError(f"{rule}: {detail}")

    if c.in_dtype not in IN_DTYPES or c.out_dtype not in OUT_DTYPES:
        fail("dtypes", f"in_dtype={c.in_dtype!r}, out_dtype={c.out_dtype!r}; Q/K/V must be one of {IN_DTYPES} "
                       f"and O one of {OUT_DTYPES}")
    if c.page_size and (not c.varlen or c.page_size % c.tile_s1 != 0):
        fail("paged cache", f"page_size={c.page_size} must be a multiple of tile_s1={c.tile_s1} (a KV tile lies in "
                            f"one page) and needs varlen=True (the unit table), got varlen={c.varlen}")
    if c.split_kv and not c.varlen:
        fail("split-KV", "split_kv=True needs varlen=True: the split of each unit comes from the unit table")
    if c.gqa_pack and (not c.varlen or c.narrowing):
        fail("GQA packing", f"gqa_pack=True needs varlen=True (the unit table) and no window in mods (a packed block's rows "
                            f"share one query position), got varlen={c.varlen}, mods={c.mods}")
    if c.varlen and c.key_padding:
        fail("varlen", "varlen kernels take their key lengths from cu_seqlens; a key-padding mask is not supported with them")
    if c.target not in ("a2", "a3"):
        fail("target", f"target={c.target!r}; only a2/a3 (dav-c220) are supported")
    if c.head not in SUPPORTED_HEAD:
        fail("head dim", f"head={c.head} is not a kernel width: a multiple of {CUBE_FRACTAL} up to {SPLIT_HEAD} (one D "
                         f"chunk) or of {2 * CUBE_FRACTAL} up to {MAX_HEAD} (two D chunks of whole cube fractals), "
                         f"{SUPPORTED_HEAD}; other head dims run on kernel_head(D) with zero-padded columns")
    want_s0 = 128 if c.head <= SPLIT_HEAD else 64
    if c.cube_s0 != want_s0 or c.cube_s1 not in CUBE_S1_CHOICES:
        fail("cube tile", f"cube_s0={c.cube_s0}, cube_s1={c.cube_s1}; head={c.head} is built with "
                          f"{want_s0}-row Q blocks and sub-tiles of {' or '.join(map(str, CUBE_S1_CHOICES))} keys")
    if c.tile_s1 % c.cube_s1 != 0:
        fail("divisibility", f"cube_s1={c.cube_s1} must divide tile_s1={c.tile_s1}")
    if c.tile_s1 not in SUPPORTED_TILE_S1:
        fail("tile_s1", f"tile_s1={c.tile_s1} must be one of {SUPPORTED_TILE_S1}")
    k = c.slice_factor
    if c.cube_s0 % (VEC_CORES * k) != 0:
        fail("divisibility", f"cube_s0={c.cube_s0} must be a multiple of 2*slice_factor={2 * k}")
    if c.slice_buffers not in (0, 1, 2):
        fail("slice buffers", f"slice_buffers={c.slice_buffers} must be 0 (automatic), 1 or 2")
    if c.softmax_dtype not in SOFTMAX_DTYPES:
        fail("softmax dtype", f"softmax_dtype={c.softmax_dtype!r} must be one of {SOFTMAX_DTYPES}")
    if c.cube_rowsum and (c.softmax_dtype != "f32" or c.d_split != 1):
        fail("cube row sum", f"cube_rowsum=True needs softmax_dtype='f32' and one D chunk (head <= {SPLIT_HEAD}), got "
                             f"softmax_dtype={c.softmax_dtype!r}, head={c.head}")
    if c.exp_f16 and (c.softmax_dtype != "f32" or not c.cube_rowsum or c.in_dtype != "f16"):
        fail("exp in f16", f"exp_f16=True is a variant of the f32 softmax with the cube's row sums (the vectors "
                           f"would sum f16 P) for fp16 inputs (P is the exp's tile; A2/A3 have no bf16 exp), got "
                           f"softmax_dtype={c.softmax_dtype!r}, cube_rowsum={c.cube_rowsum}, in_dtype={c.in_dtype!r}")
    if c.softmax_dtype == "f16" and (c.in_dtype != "f16" or c.lse):
        # An LSE from f16 row sums misses the LSE accuracy rule (D=256: err 4.2e-4 against a
        # tolerance of 3.0e-4). Split-KV's partial LSEs are fine: a partial's row-sum error
        # scales its O and its weight alike, so the combined O has the unsplit kernel's error.
        fail("softmax dtype", f"softmax_dtype='f16' is built for fp16 inputs without LSE, got "
                              f"in_dtype={c.in_dtype!r}, lse={c.lse}; use 'f32'")
    if c.qk_dtype not in ("f32", c.in_dtype) or (c.softmax_dtype == "f16" and c.qk_dtype != "f16"):
        fail("QK slot dtype", f"qk_dtype={c.qk_dtype!r} must be 'f32' or the input dtype {c.in_dtype!r} ('f16' with "
                              f"softmax_dtype='f16', whose scores are f16 tiles)")
    c.check_mods(fail)
    if c.score_mods and c.softmax_dtype != "f32":
        fail("score modification", f"mods={'+'.join(m.name for m in c.score_mods)} are computed on f32 scores: they need "
                                   f"softmax_dtype='f32', got {c.softmax_dtype!r}")
    if len({m.name for m in c.score_mods if m.builtin}) < sum(m.builtin for m in c.score_mods):  # (their names: unprefixed)
        fail("modification objects", "mods=" + "+".join(m.name for m in c.score_mods) + " holds a built-in mod twice")
    if c.gqa_pack and any(m.indexed for m in c.score_mods):  # (a packed unit's rows: heads at one position)
        fail("modification objects", f"mods={'+'.join(m.name for m in c.score_mods if m.indexed)} read a row's head or "
                                     f"position (a packed unit's rows are heads), got gqa_pack=True")
    if c.block_ranges and (c.softmax_dtype != "f32" or c.varlen or c.narrowing):
        fail("block ranges", f"block_ranges=True is built for an f32 softmax over uniform batches without a window "
                             f"(the mods mask; the table is in the uniform unit order), got "
                             f"softmax_dtype={c.softmax_dtype!r}, varlen={c.varlen}, mods={c.mods}")
    if c.dropout and (c.softmax_dtype != "f32" or c.cube_rowsum or c.split_kv):
        fail("dropout", f"dropout=True drops P after its row sums on f32 scores: it needs softmax_dtype='f32', "
                        f"cube_rowsum=False and split_kv=False, got softmax_dtype={c.softmax_dtype!r}, "
                        f"cube_rowsum={c.cube_rowsum}, split_kv={c.split_kv}")
    if c.dropout and (not all(m.builtin for m in c.score_mods) or c.block_ranges):
        fail("dropout", "dropout=True with modification objects other than the built-in ones (mods / block_ranges) is not built: their "
                        "scores and masks are not dropped, got mods=" + "+".join(m.name for m in c.score_mods if not m.builtin))
    others = ("key_padding", "varlen", "lse", "mods", "block_ranges", "dropout")
    if c.q_pair and (any(getattr(c, n) for n in others) or c.d_split != 1 or (c.softmax_dtype != "f32" and c.tile_s1 > 512)):
        fail("paired Q blocks", f"q_pair=True is built for the dense forward with head <= {SPLIT_HEAD} (and tile_s1 <= "
                                f"512 for an f16 softmax, whose row slices it halves), got head={c.head}, tile_s1="
                                f"{c.tile_s1}, softmax_dtype={c.softmax_dtype!r}, "
                                + ", ".join(f"{n}={getattr(c, n)!r}" for n in others))
    vec_s0, stat_bytes = c.vec_s0, DTYPE_BYTES[c.softmax_dtype]
    if vec_s0 < MIN_VEC_S0 or (vec_s0 * 4) % 32 != 0 or (vec_s0 * stat_bytes) % 32 != 0:
        fail("vector row slice", f"vec_s0={vec_s0} rows: vec_s0*4 and vec_s0*{stat_bytes} bytes (softmax_dtype="
                                 f"{c.softmax_dtype}) must be multiples of 32 (vec_s0 >= {MIN_VEC_S0})")
    if c.cube_s0 * c.cube_s1 * 4 > 64 * KIB:
        fail("L0C", f"cube_s0*cube_s1*4 = {c.cube_s0 * c.cube_s1 * 4} B exceeds 64 KiB")
    if c.cube_s0 * c.head * 4 > 64 * KIB:
        fail("L0C", f"cube_s0*head*4 = {c.cube_s0 * c.head * 4} B exceeds 64 KiB")
    if c.d_chunk % 16 != 0:
        fail("head dim", f"D chunk {c.d_chunk} must be a multiple of 16 (cube fractal)")
    if max(c.cube_s0, c.cube_s1, c.head, c.tile_s1) > MAX_MATMUL_DIM:
        fail("matmul dims", f"m/k/n and ACC cols must be <= {MAX_MATMUL_DIM}")
    if c.slot_num < 1:
        fail("slot_num", f"slot_num={c.slot_num} must be >= 1")
    if c.slot_num % c.sync_period != 0:
        fail(
            "slot ring reuse",
            f"slot_num={c.slot_num} must be a multiple of its sync period {c.sync_period} "
            f"(slot_num <= 2 or even): TALLOC waits for a free credit only when t % {c.sync_period} == 0, "
            f"so the talloc at t={c.slot_num} re-binds slot 0 before its entry is freed",
        )
    if c.exp_ring != c.qk_preload:
        fail("exp ring", f"exp_ring={c.exp_ring} must equal qk_preload={c.qk_preload}")
    if c.qk_preload < 1:
        fail("qk_preload", f"qk_preload={c.qk_preload} must be >= 1")
    limit = c.slot_num - c.sync_period + 1
    if c.qk_preload >= limit:
        fail(
            "preload vs slot ring",
            f"qk_preload={c.qk_preload} must be < slot_num - sync_period + 1 = "
            f"{c.slot_num} - {c.sync_period} + 1 = {limit} (batched free credits)",
        )
    if c.qk_preload == 1 and c.tile_factor != 1:
        fail("preload vs tile factor", f"qk_preload=1 needs k_tile_factor=1 (tile_s1=cube_s1=128), got "
                                       f"tile_s1={c.tile_s1}, cube_s1={c.cube_s1}")


def chunk_names(c: FAConfig, name: str) -> list[str]:
    """Names of a per-D-chunk tile: `name` alone, or name0, name1 when the cube stages split D."""
    return [name] if c.d_split == 1 else [f"{name}{i}" for i in range(c.d_split)]


QK_BUFFERED = ("k_right", "s_acc")  # cube tiles with `qk_buffers` buffers (the others: `cube_buffers`)
PAIR_RESIDENT = ("v_mat",)  # `q_pair`: the L1 tiles of a whole KV tile, one buffer per sub-tile
PAIR_STATE, PAIR_SUFFIX = ("m_all", "l_all", "m_all_h", "o_tile", "l_acc"), "_b"  # each block's own (+ exp_ring)


def cube_buffer_names(c: FAConfig, name: str) -> list[str]:
    """Names of a cube tile that sub-tiles alternate: an L1 staging tile, L0A/L0B operand or QK
    accumulator; two (sub-tile i uses buffer i % 2) with 64-key sub-tiles, else one."""
    n = c.qk_buffers if name in QK_BUFFERED else c.cube_buffers
    n = c.tile_factor if c.q_pair and name in PAIR_RESIDENT else n  # (the whole KV tile: both blocks use it)
    return [f"{name}{i}" for i in range(n)] if n > 1 else [name]


def cube_buffer_name(c: FAConfig, name: str, sub: int) -> str:
    """The buffer of cube tile `name` that sub-tile `sub` uses."""
    names = cube_buffer_names(c, name)
    return names[sub % len(names)]


def buffer_names(c: FAConfig, name: str) -> list[str]:
    """Names of a softmax row-slice tile: `name` alone, or name0, name1 when the slices are double-buffered."""
    return [name] if c.vec_buffers == 1 else [f"{name}{i}" for i in range(c.vec_buffers)]


def tile_plan(c: FAConfig) -> list[TileSpec]:
    """Every tile the builder allocates, per core. The builder allocates from this list.

    `dynamic` tiles carry a runtime valid shape: the Q block's rows (a ragged last Q
    block), a sub-tile's keys (a ragged last KV tile), the rows a vector core stores.
    """
    tiles = _main_plan(c)
    for mod, prefix in zip(c.score_mods, mod_prefixes(c.score_mods)):
        tiles += [] if mod.builtin else mod.tiles(c, prefix)
    if c.prescale_q:
        tiles += _prescale_tiles(c, c.prescale_rows)
    return tiles


def mod_prefixes(mods: tuple) -> list[str]:
    """Each mod's name prefix: `mod<i>_`, i counting the mods before it that are not built-in; a built-in one's
    names are flash-attn's (no prefix), and it leaves the others' as they were."""
    return ["" if m.builtin else f"mod{sum(not o.builtin for o in mods[:i])}_" for i, m in enumerate(mods)]


def _prescale_tiles(c: FAConfig, rows: int) -> list[TileSpec]:
    """Q rows of the next unit: loaded (input dtype), scaled in f32, stored (input dtype); a
    separate store tile lets the next step's load overlap this step's vector work."""
    return [TileSpec(name, "vector", "qk", "vec", rows, c.head, dtype or c.in_dtype, dynamic=True)
            for name, dtype in PRESCALE_TILES]


def _main_plan(c: FAConfig) -> list[TileSpec]:
    """The tiles of every kernel of the family (all but the prescale_q tiles)."""
    d, s0, s1, ts1 = c.head, c.cube_s0, c.cube_s1, c.tile_s1
    rows, vs0, dt, sd = c.vec_rows, c.vec_s0, c.in_dtype, c.softmax_dtype
    nz = dict(blayout="col_major", slayout="row_major")
    col = dict(blayout="col_major")
    dyn = dict(dynamic=True)
    dc = c.d_chunk  # Q, K, V and O are processed in d_split chunks of dc columns of D
    acc = dict(blayout="col_major", slayout="row_major", fractal=1024)
    vc = dc + (ROWSUM_COLS if c.cube_rowsum else 0)  # V's columns in L1/L0B and the PV accumulator's
    tiles = [
        # cube: L1 staging, L0A/L0B operands, L0C accumulators (Q and O per D chunk)
        *[TileSpec(name, "cube", "qk", "mat", s0, dc, dt, **nz, **dyn) for name in chunk_names(c, "q_mat")],
        *[TileSpec(n, "cube", "qk", "mat", dc, s1, dt, slayout="col_major", **dyn) for n in cube_buffer_names(c, "k_mat")],
        *[TileSpec(n, "cube", "pv", "mat", s1, vc, dt, **nz, **dyn) for n in cube_buffer_names(c, "v_mat")],
        *[TileSpec(n, "cube", "pv", "mat", s0, s1, dt, **nz, **dyn) for n in cube_buffer_names(c, "p_mat")],
        *[TileSpec(name, "cube", "qk", "left", s0, dc, dt, slayout="row_major", **dyn) for name in chunk_names(c, "q_left")],
        *[TileSpec(n, "cube", "pv", "left", s0, s1, dt, slayout="row_major", **dyn) for n in cube_buffer_names(c, "p_left")],
        *[TileSpec(n, "cube", "qk", "right", dc, s1, dt, slayout="col_major", **dyn) for n in cube_buffer_names(c, "k_right")],
        *[TileSpec(n, "cube", "pv", "right", s1, vc, dt, slayout="col_major", **dyn) for n in cube_buffer_names(c, "v_right")],
        *[TileSpec(n, "cube", "qk", "acc", s0, s1, "f32", **acc, **dyn) for n in cube_buffer_names(c, "s_acc")],
        *[TileSpec(name, "cube", "pv", "acc", s0, vc, "f32", **acc) for name in chunk_names(c, "o_acc")],
        # vector: softmax working set for one row slice (red_tmp is also the mask tile), in the
        # softmax dtype; an f32 softmax converts P into p_half, an f16 one computes it in place.
        *[TileSpec(name, "vector", "p", "vec", vs0, ts1, sd, **dyn) for name in buffer_names(c, "s_tile") * (not c.sub_f16)],
        TileSpec("red_tmp", "vector", "p", "vec", vs0, ts1, "f16" if c.input_row_max else sd, **dyn),
        # trowexpandexpdif's explicit scratch, one per slice buffer (`target.EXPDIF_TMP_BYTES`)
        *[TileSpec(name, "vector", "p", "vec", 1, EXPDIF_TMP_BYTES // DTYPE_BYTES[sd], sd)
          for name in buffer_names(c, "exp_tmp")],
        *([TileSpec(name, "vector", "p", "vec", vs0, ts1, dt, **dyn) for name in buffer_names(c, "p_half")]
          if sd == "f32" else []),
        # a slice's row max and row sum (none with the cube's row sums), in the softmax dtype
        *[TileSpec(name, "vector", "p", "vec", vs0, 1, sd, **col)
          for name in (("m_slice",) if c.cube_rowsum else ("m_slice", "l_slice") if sd == "f32" else ("m_half", "l_half"))],
        # input_row_max: the f16 max, an [R, 1] column, or where that is not 32 bytes (8 rows) an ND tile of
        # one valid column, widened into an f32 one whose column m_slice takes (`_softmax_slice`)
        *([TileSpec("m_half", "vector", "p", "vec", vs0, 1, "f16", **col)] if c.input_row_max and vs0 >= 16 else
          [TileSpec(name, "vector", "p", "vec", vs0, 16, dt_, valid_cols=1) for name, dt_ in (("m_half", "f16"),
                                                                                           ("m_wide", "f32"))]
          if c.input_row_max else []),
        # sub_f16 with 8-row slices: m as a row-major 32-byte block per row, f32 then f16 (the f16 column is 16 B)
        *([TileSpec(n, "vector", "p", "vec", vs0, 16, t) for n, t in (("m_bc", "f32"), ("m_bch", "f16"))]
          if c.sub_f16 and vs0 < 16 else []),
        # an f16 softmax keeps an f16 copy of the running max (exact: a max of f16 scores) and
        # the tile's f16 row sums; compute_p converts them to the f32 statistics once per tile
        *([TileSpec(name, "vector", "p", "vec", 1, rows, sd) for name in ("m_all_h", "l_tile_h")]
          if sd != "f32" else []),
        # vector: per-row state of the core's rows, and GU tiles. The running
        # statistics are allocated as [1, R] rows because compute_p slices them per
        # row slice with pto.subview, whose source must come from alloc_tile (a
        # subview of a treshape fails to legalize in ptoas 0.60, docs/sources.md §2.13);
        # the [R, 1] column views the row-broadcast ops need are treshapes of them.
        TileSpec("m_all", "vector", "p", "vec", 1, rows, "f32"),
        TileSpec("l_all", "vector", "p", "vec", 1, rows, "f32"),
        TileSpec("m_new", "vector", "p", "vec", 1, rows, "f32"),
        TileSpec("alpha_new", "vector", "p", "vec", 1, rows, "f32"),
        *([] if c.cube_rowsum else [TileSpec("l_tile", "vector", "p", "vec", 1, rows, "f32")]),
        TileSpec("alpha_cur", "vector", "gu", "vec", rows, 1, "f32", **col),
        TileSpec("pv_tile", "vector", "gu", "vec", rows, d, "f32"),
        TileSpec("o_tile", "vector", "gu", "vec", rows, d, "f32", **dyn),
    ]
    tiles += [TileSpec(f"exp_ring{r}", "vector", "p", "vec", rows, 1, "f32", **col) for r in range(c.exp_ring)]
    if c.cube_rowsum:  # the PV slot's row-sum columns of this tile, and their running sum (also trowmax's tmp)
        tiles += [TileSpec(name, "vector", "gu", "vec", rows, ROWSUM_COLS, "f32") for name in ("l_pv", "l_acc")]
    if c.out_dtype != "f32" and not c.pair_o_view:  # (split-KV: a unit of one split stores O itself; the others fp32 partials)
        tiles.append(TileSpec("o_out", "vector", "gu", "vec", rows, d, c.out_dtype, **dyn))
    if c.key_padding:  # one key-mask row per tile: i8 from GM -> f16 -> f32 additive bias
        tiles += [TileSpec(name, "vector", "p", "vec", 1, ts1, name[4:], **dyn) for name in KEY_MASK_TILES[sd]]
    if c.needs_row_fix:  # per-row "has a visible key" flag and the fixed row sum
        tiles += [TileSpec("row_ok", "vector", "gu", "vec", 1, rows, "f32"), TileSpec("l_fix", "vector", "gu", "vec", 1, rows, "f32")]
    if c.lse or c.split_kv:
        tiles.append(TileSpec("lse_row", "vector", "gu", "vec", 1, rows, "f32", **dyn))
    if c.q_pair:  # the second block's Q in L1 (it takes turns with the first in L0A) and its own state
        tiles += [replace(t, name=t.name + PAIR_SUFFIX) for t in tiles
                  if t.name in ("q_mat", *PAIR_STATE) or t.name.startswith("exp_ring")]
        if sd != "f32":  # the f32 broadcasts' scratch, which an f16 softmax's exp_tmp cannot be (`rowexpand_ops`)
            tiles.append(TileSpec("bcast_tmp", "vector", "gu", "vec", 1, EXPDIF_TMP_BYTES // 4, "f32"))
    if c.dropout:  # the generator's i32 tiles (`kernels/dropout.py`; its keep factor goes to red_tmp, its key
        # row to ALiBi's key positions `alibi_i32` when there are: ALiBi is done with them by then)
        tiles += [TileSpec("drop_bits", "vector", "p", "vec", vs0, ts1, "i32", **dyn),
                  *([] if any(m.name == "alibi" for m in c.score_mods) else [TileSpec("drop_cols", "vector", "p", "vec", 1,
                                                                                  ts1, "i32", **dyn)]),
                  TileSpec("drop_rows", "vector", "p", "vec", 1, vs0, "i32", **dyn),
                  TileSpec("drop_rows_tmp", "vector", "p", "vec", 1, vs0, "i32", **dyn)]
    for mod, prefix in zip(c.score_mods, mod_prefixes(c.score_mods)):  # (a built-in mod's count in choosing the slices and
        tiles += mod.tiles(c, prefix) if mod.builtin else []  # prescale rows, as the kernel's own; the others' do not)
    return tiles


@dataclass(frozen=True)
class BudgetRow:
    space: str
    used: int
    capacity: int
    items: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Budget:
    rows: tuple[BudgetRow, ...]
    gm_slot_bytes_per_block: int

    def table(self, only_over: bool = False) -> str:
        lines = [f"{'space':<5} {'used':>10} {'capacity':>10}  tiles"]
        for r in self.rows:
            if only_over and r.used <= r.capacity:
                continue
            flag = "  OVER" if r.used > r.capacity else ""
            items = ", ".join(f"{n} {b // KIB if b % KIB == 0 else b / KIB:g}K" for n, b in r.items)
            lines.append(f"{SPACE_NAMES[r.space]:<5} {r.used:>10} {r.capacity:>10}  {items}{flag}")
        if not only_over:
            lines.append(f"GM slots per block: {self.gm_slot_bytes_per_block} bytes")
        return "\n".join(lines)


def budget(c: FAConfig) -> Budget:
    """Bytes per on-chip space (UB per vector core) from `tile_plan`, with alignment."""
    rows = []
    plan = tile_plan(c)
    for space in ("vec", "mat", "left", "right", "acc"):
        items = _space_items(c, plan, space, hidden=space == "vec")
        rows.append(BudgetRow(space, sum(b for _, b in items), CAPACITY[space], tuple(items)))
    return Budget(tuple(rows), c.gm_slot_bytes_per_block)


def _space_items(c: FAConfig, tiles: list[TileSpec], space: str, hidden: bool) -> list[tuple[str, int]]:
    """(name, aligned bytes) of the tiles in `space`, and (hidden) ptoas's hidden UB scratch."""
    items = [(t.name, _align(t.nbytes, ALIGNMENT[space])) for t in tiles if t.loc == space]
    if hidden:
        items += [(f"hidden_rowexpand_tmp{i}", HIDDEN_ROWEXPAND_TMP_BYTES) for i in range(c.rowexpand_ops)]
        items += [(f"hidden_tci_tmp{i}", HIDDEN_TCI_TMP[32][1])
                  for i in range(2 * c.dropout + sum(m.setup_tci_ops + c.vec_buffers * m.tci_ops for m in c.score_mods))]
    return items


def _vec_bytes(c: FAConfig, tiles: list[TileSpec], hidden: bool = True) -> int:
    return sum(b for _, b in _space_items(c, tiles, "vec", hidden))


def _fits(c: FAConfig, **changes) -> bool:
    """Whether `c` with `changes` (unvalidated) fits every on-chip space, prescale_q's tiles at their minimum."""
    trial = object.__new__(FAConfig)
    trial.__dict__.update({f.name: getattr(c, f.name) for f in fields(c)}, **changes)
    plan = _main_plan(trial)
    if any(sum(b for _, b in _space_items(trial, plan, space, hidden=space == "vec")) > CAPACITY[space]
           for space in ("mat", "left", "right", "acc")):
        return False
    used = _vec_bytes(trial, plan)
    if trial.prescale_q:
        used += _vec_bytes(trial, _prescale_tiles(trial, MIN_PRESCALE_ROWS), hidden=False)
    return used <= CAPACITY["vec"]


@dataclass(frozen=True)
class ProblemShape:
    """Runtime arguments of one launch: Q [B,S0,N,D], K/V [B,S1,KVN,D], O [B,S0,N,D], LSE [B,N,S0].

    `kv_heads` (default `heads`) divides `heads`: q head h reads kv head h // (heads / kv_heads).
    `window` = (left, right) is the bottom-right aligned visibility band (-1: unbounded;
    causal is (-1, 0)); anything but (-1, -1) needs a masked kernel.
    """

    batch: int = 1
    heads: int = 1
    s0: int = 128
    s1: int = 1024
    kv_heads: int | None = None
    window: tuple[int, int] = (-1, -1)
    # Varlen: (q_len, k_len) per packed sequence; then batch = len(seqlens), s0 / s1 = the totals.
    seqlens: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        object.__setattr__(self, "window", tuple(self.window))
        if self.seqlens is not None:
            object.__setattr__(self, "seqlens", tuple((int(q), int(k)) for q, k in self.seqlens))

    def check(self, c: FAConfig) -> None:
        for name in ("batch", "heads", "kv_heads", "s0", "s1"):
            if getattr(self, name) < 1:
                raise ConfigError(f"problem shape: {name}={getattr(self, name)} must be >= 1")
        if self.heads % self.kv_heads != 0:
            raise ConfigError(f"grouped heads: heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")
        if len(self.window) != 2 or min(self.window) < -1:
            raise ConfigError(f"window: {self.window} must be (left, right) with each >= -1 (-1 = unbounded)")
        if self.window != (-1, -1) and not c.narrowing:
            raise ConfigError(f"window: {self.window} needs a kernel with the window mod (FAConfig(mods=(WINDOW,)), --causal or --window)")
        if (self.seqlens is not None) != c.varlen:
            raise ConfigError("varlen: sequence lengths go with a varlen kernel (FAConfig(varlen=True)) and only with it")
        if self.seqlens is not None and any(q < 0 or k < 0 for q, k in self.seqlens):
            raise ConfigError(f"varlen: sequence lengths must be >= 0, got {list(self.seqlens)}")

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def num_tiles(self, c: FAConfig) -> int:
        return -(-self.s1 // c.tile_s1)

    def q_blocks(self, c: FAConfig | None = None) -> int:
        """Q blocks of `c.cube_s0` rows (128 without a config)."""
        return -(-self.s0 // (c.cube_s0 if c is not None else 128))

    def work_units(self, c: FAConfig | None = None) -> int:
        """(batch, head, Q block) units shared by the persistent blocks (two Q blocks a unit with `q_pair`)."""
        rows = c.cube_s0 if c is not None else 128
        if self.seqlens is not None:
            return self.heads * sum(-(-q // rows) for q, _ in self.seqlens)
        return self.batch * self.heads * (-(-self.q_blocks(c) // 2) if c is not None and c.q_pair else self.q_blocks(c))

    def window_bounds(self) -> tuple[int, int]:
        """The kernel's window arguments: -1 (unbounded) becomes s0 + s1, which no offset reaches."""
        return kernel_bounds(self.window, self.s0, self.s1)

    def visible_pairs(self) -> int:
        """(query, key) pairs of one head (summed over the batch) that the window leaves visible."""
        seqs = self.seqlens if self.seqlens is not None else ((self.s0, self.s1),) * self.batch
        return sum(visible_pairs(s0, s1, self.window) for s0, s1 in seqs)

    def flops(self, head: int, visible_pairs: int | None = None) -> int:
        """Matmul-only convention A: 4*N*D times the visible score entries of the batch (B*S0*S1 unmasked)."""
        pairs = self.visible_pairs() if visible_pairs is None else visible_pairs
        return 4 * self.heads * pairs * head

    def default_scale(self, head: int) -> float:
        return 1.0 / math.sqrt(head)


def partial_elems(c: FAConfig, shape: ProblemShape, num_splits: int) -> tuple[int, int]:
    """f32 elements of the split-KV partials for at most `num_splits` splits of a unit: per split i,
    O_i [S0, N, D] then LSE_i [N, S0] (S0 = total_q), one block after the other, so where split i
    lies does not depend on how many splits the launch or the unit has. Returns (O, LSE) totals."""
    if num_splits < 1:
        raise ConfigError(f"split-KV: num_splits={num_splits} must be >= 1")
    return num_splits * shape.s0 * shape.heads * c.head, num_splits * shape.heads * shape.s0


def workspace_bytes(c: FAConfig, shape: ProblemShape, block_dim: int, num_splits: int = 1) -> int:
    """GM workspace of one launch: the blocks' slot rings, then (split-KV) the partial O and LSE
    of `num_splits` splits (the most splits of any unit of the launch).

    The one formula the simulator, the NPU path and InfiniOp's workspace size use."""
    slots = c.gm_slot_bytes_per_block * block_dim
    if not c.split_kv:
        return slots
    return slots + 4 * sum(partial_elems(c, shape, num_splits))



def lse_prescale(lse: bool) -> bool:
    """The automatic configs' `prescale_q`: off when the kernel writes LSE. The LSE is the backward's
    (it recomputes P = exp(scale Q K^T - LSE) from f32 scores of the unscaled inputs) and flash-attn's
    (f32 scores); Q scaled and rounded to the input dtype shifts it by that dtype's rounding (~0.005 at
    |scale s| ~ 2 in bf16), so a row with one visible key would get P != 1 and dV a sum of rounded terms."""
    return not lse
