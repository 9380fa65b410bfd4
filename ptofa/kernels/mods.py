"""Score and mask modifications as objects: the one hook of the forward kernel's softmax stage.

A modification is one object (`Mod`), not a switch threaded through the layers: it brings

* `tiles(config, prefix)`: its scratch tiles (`pipeline.TileSpec`, names starting with `prefix`);
  `pipeline.tile_plan` adds them, so the UB budget counts them;
* `params(prefix)`: its kernel arguments (`argspec.HostParam`); `argspec` adds them to the entry, the
  vector function receives them, and the caller passes their values by name at launch;
* `emit_forward(site, prefix)`: its IR on one row slice of scaled f32 scores (`Site`), called by
  `fa_fwd._softmax_slice` before the window mask; `emit_finish(site, prefix)`: its IR on the
  row statistics and O (`FinishSite`) before the kernel divides O by the row sums (attention sinks);
* `emit_setup(site, prefix)` once per vector kernel and `emit_unit(site, prefix)` once per work unit
  (`UnitSite`; the forward and dq kernels): values the slice hook reads, kept in `site.state` (ALiBi's
  row index and its head's slope);
* `grad_tiles(rows, cols, prefix)` and `emit_backward(site, prefix, grad)`: the backward kernels' side
  (`kernels/fa_bwd.py`): the forward IR on the recomputed scores, and `grad` (dP - D) multiplied by
  d(modified score) / d(score); the default is the forward IR alone, a derivative of 1 (masks, biases);
* `reference(scores, b, h, q_idx, kv_idx)`: the same modification in torch (broadcast index tensors),
  which the tests and the dense reference apply.

`FAConfig.mods` is a tuple of them, in the order they apply (`pipeline.mod_prefixes` prefixes their
names); each must be a frozen dataclass of plain fields (the kernel cache hashes and serialises the
config). `kernels/builtin_mods/` holds ptofa's own; `kernels/flexmods.py` makes them from
FlexAttention's Python callables.

Block sparsity (`FAConfig.block_ranges`): a [units, RANGE_FIELDS] i32 table, one row per work unit
(b, h, Q block) in unit order, gives the KV tiles [lo, hi) the unit visits and the tiles
[full_lo, full_hi) in which no mask hides an entry: both kernels loop over [lo, hi) only, and a
`Mod` with `mask=True` skips its IR on the full tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue


RANGE_FIELDS = ("lo", "hi", "full_lo", "full_hi")


@dataclass
class Site:
    """What a modification sees at the hook: one row slice of one KV tile."""

    scores: SSAValue  # [rows, keys valid] f32 scaled scores, modified in place
    tmp: SSAValue  # a free tile of the scores' shape (the softmax's reduction scratch)
    row_tmp: SSAValue  # scratch of the row-broadcast ops (the slice's exp scratch, free here)
    tiles: dict[str, SSAValue]  # every vector tile by name (a mod's own under its prefix)
    args: dict[str, SSAValue]  # the vector function's arguments by name
    b: SSAValue  # batch, or (varlen and KV-cache kernels) the unit's sequence (index)
    h: SSAValue  # query head (index)
    q0: SSAValue | None  # query position of the slice's first row (index; None without `config.mods`)
    k0: SSAValue | None  # key position of the tile's first column (index; None without `config.mods`)
    keys: SSAValue  # valid columns (index; queries of a transposed tile)
    rows: int  # rows of the slice (vec_s0; a vector core's rows of a backward tile)
    cols: int  # columns of a tile (tile_s1; a backward tile's)
    t: SSAValue  # the KV tile (index)
    full: tuple[SSAValue, SSAValue] | None = None  # the unit's unmasked tiles [full_lo, full_hi)
    mask_value: float = -3.0e38  # additive mask value of the softmax
    transposed: bool = False  # the backward's dkdv tiles: rows are keys (from k0), columns queries (from q0)
    seq_lens: tuple[SSAValue, SSAValue] | None = None  # (S0, S1) of the unit's sequence (index)
    state: dict | None = None  # what the mods' setup and unit hooks left (`UnitSite.state`)


@dataclass
class UnitSite:
    """What a modification sees once per vector kernel (`emit_setup`: b and h None) and once per unit (`emit_unit`)."""

    tiles: dict[str, SSAValue]
    args: dict[str, SSAValue]
    state: dict  # the kernel's: values the mods keep for their slice hook, by name (a mod's under its prefix)
    rows: int  # rows of the kernel's score tiles (vec_s0; a backward kernel's core rows)
    b: SSAValue | None = None  # the unit's batch or sequence (index)
    h: SSAValue | None = None  # its query head (index)


@dataclass
class FinishSite:
    """What a modification sees at the finish hook: this core's row statistics of one unit."""

    m: SSAValue  # [1, rows] f32 running max (the mask value for a row that saw no key), modified in place
    l: SSAValue  # [1, rows] f32 row sums of exp(s - m), modified in place
    o: SSAValue  # [rows, D] f32 sum of exp(s - m) v, modified in place (O = o / l follows)
    tiles: dict[str, SSAValue]
    args: dict[str, SSAValue]
    b: SSAValue
    h: SSAValue
    rows: int
    row_tmp: SSAValue  # the explicit scratch of a row-broadcast op on `o` (the UB budget counts no hidden one)
    split: SSAValue | None  # split-KV: the unit's split (index; None without split-KV)


class Mod:
    """The interface (see the module docstring); subclasses are frozen dataclasses."""

    name: str = "mod"
    mask: bool = False  # a mask: its IR is skipped on tiles the block ranges call full
    tci_ops: int = 0  # `tci` ops per row slice (each has a hidden ptoas scratch the UB budget counts)
    scores: bool = True  # it changes or masks scores (False: S may stay in the input dtype, `FAConfig.qk_dtype`)
    grad_tci_ops: int = 0  # the same per backward score tile (`emit_backward`)
    setup_tci_ops: int = 0  # the same once per vector kernel (`emit_setup`)
    # ptofa's own (`kernels/builtin_mods/`): its arguments and tiles keep flash-attn's names, unprefixed (one
    # of each per config), it brings every scratch tile it uses, and the kernels build it with all their switches.
    builtin: bool = False
    indexed: bool = True  # it reads a row's batch, head or positions (not with gqa_pack, whose rows are heads)
    hides: bool = True  # it may leave a query row no visible key (the kernels then fix O = 0, LSE = +inf)
    row_scratch: bool = True  # the backward's dkdv kernel gives it a row-broadcast scratch (`Site.row_tmp`)
    # It narrows the KV tiles a unit visits (the window, `builtin_mods/window.py`): the kernels ask the one
    # such mod of a config (`modlist.ModsMixin.narrowing`) for a unit's tile range and its crossing tiles' masks,
    # instead of calling the score hooks above, and its arguments follow the scale.
    narrows: bool = False

    def tiles(self, config, prefix: str) -> list:
        return []

    def params(self, prefix: str) -> list:
        return []

    def emit_forward(self, site: Site, prefix: str) -> None:
        """IR on the scores of one row slice (nothing by default)."""

    def emit_setup(self, site: UnitSite, prefix: str) -> None:
        """IR once per vector kernel, before its units (nothing by default)."""

    def emit_unit(self, site: UnitSite, prefix: str) -> None:
        """IR once per work unit of the forward and dq kernels, before its tiles (nothing by default)."""

    def emit_finish(self, site: FinishSite, prefix: str) -> None:
        """IR on the row statistics before O = O / l and LSE = m + ln(l) (nothing by default)."""

    def grad_tiles(self, rows: int, cols: int, prefix: str) -> list:
        """Scratch tiles of `emit_backward` on a backward kernel's [rows, cols] score tiles (per vector core)."""
        return []

    def emit_backward(self, site: Site, prefix: str, grad: SSAValue) -> None:
        """The backward kernels' hook: the forward IR on the recomputed scores, and `grad` ([rows, cols]
        f32, dP - D) times d(modified score) / d(score); by default the forward IR alone (a derivative of 1)."""
        self.emit_forward(site, prefix)

    def reference(self, scores, b, h, q_idx, kv_idx, values=None):
        """The modified scores; `values` the call's runtime arguments by name (a mod's scalars)."""
        raise NotImplementedError(f"{type(self).__name__}.reference")


def has_mod(mods: tuple, name: str) -> bool:
    """Whether `mods` holds the mod called `name` (a built-in one's: "softcap", "alibi")."""
    return any(m.name == name for m in mods)


def other_mods(mods: tuple) -> tuple:
    """The mods that are not built-in (traced FlexAttention mods, attention sinks): the ones some switches
    are not built with."""
    return tuple(m for m in mods if not m.builtin)
