"""Ring attention: one attention over a sequence sharded across the ranks of a torch.distributed group.

    q, k, v = (zigzag_shard(x, world, rank) for x in (q_full, k_full, v_full))
    out = ptofa.ring_flash_attn_func(q, k, v, causal=True)            # this rank's rows of O
    out_full = zigzag_unshard(all_gathered_outs)

Each rank holds its shard of Q, K and V. In step s of W (the group's size) a rank attends its Q to
the K/V shard of rank (rank - s) mod W while that shard travels on to the next rank
(`torch.distributed.batch_isend_irecv`, posted before the local kernel runs, waited after it), as
ring attention does (Liu et al. 2023, arXiv:2310.01889). The local attention of a step is ptofa's
forward custom op (`ptofa.attention.ops.flash_attn_fwd`, the op `flash_attn_func` calls) with an
fp32 O and its LSE, one launch per group of sequences with equal lengths (one for the dense form);
the steps' partials are merged by ptofa's split-KV reduce kernel (`kernels/fa_reduce.py`), the
launch that combines a split-KV forward's partials: the running result is split 0 of a two-split
partials buffer, the step's partial split 1, and the reduce writes the merge back into split 0.
With a gloo group and CPU tensors every kernel runs on the simulator; with an hccl group and NPU
tensors on the NPU.

Causal attention is balanced by zigzag sharding (`ptofa.attention.zigzag`, as the
ring-flash-attention package and Megatron-Core's context parallelism lay it out): the sequence is cut into 2W chunks and
rank r holds chunks r and 2W-1-r, so in every step after the first each rank has the same work,
half its rows against a whole shard or all its rows against half a shard:

* step 0: the rank's own K/V, causal (the two chunks are in order, so the local causal mask is the
  global one);
* K/V from a lower rank j < r: chunk j lies before both of r's chunks and chunk 2W-1-j after both,
  so all of r's rows see chunk j whole and nothing of the other;
* K/V from a higher rank j > r: r's first chunk sees nothing, its second sees both of j's chunks.

Non-causal attention takes any sharding (shards of any lengths, K/V shards unlike Q's). The
varlen form shards every sequence of a packed batch the same way (`zigzag_shard_varlen`).

The backward runs the backward kernels (`ptofa.attention.backward.attention_backward`, the backward
op's implementation) per step with the merged O and LSE, their gradients as the f32 accumulators
(`grads_f32`); dQ stays on the rank, the fp32 dK and dV of a K/V shard travel with it around the
ring, each rank adding its part, and arrive back at their owner after the last step, where they are
rounded to the input dtype once.

Arguments ptofa's kernels support but whose global positions a shard cannot see (a sliding
window, ALiBi) and the key-padding mask raise NotImplementedError naming them; so do dropout and
a config. Ranks whose shards do not fit the rule (zigzag lengths for causal, one head layout
and dtype everywhere) all raise one ValueError naming the rank and the numbers; a group that
is not initialized raises ValueError before anything is sent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ptofa.attention import backward
from ptofa.attention.core import check_qkv, check_window, flash_attn_returns, unsupported_arguments, window_to_bounds
from ptofa.attention.group import agree, check_shards, gather_ints, group_ranks, peer
from ptofa.attention.ops import flash_attn_fwd
from ptofa.attention.zigzag import seqlens_of_cu, zigzag_rows
from ptofa.launch.calls import Workspace, plan_kernel, reduce_block_dim
from ptofa.launch.dispatch import backend_soc, launch_on, resolve_backend
from ptofa.launch.kernel_cache import reduce_kernel
from ptofa.pipeline import REDUCE_TABLE, FAConfig, kernel_head

_DTYPE_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16"}


class _RingLink:
    """Sends this rank's tensors to the next rank of the ring and receives the previous rank's,
    posted together (`batch_isend_irecv`) so that the transfer overlaps what runs before `wait`."""

    def __init__(self, group, rank: int, world: int) -> None:
        self.group = group
        self.next, self.prev = peer(group, (rank + 1) % world), peer(group, (rank - 1) % world)

    def post(self, send: Sequence[torch.Tensor], receive: Sequence[torch.Tensor]):
        """Post the sends and receives; `wait` on what this returns (it keeps the sent tensors alive until then)."""
        sent = [t.contiguous() for t in send]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in sent]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in receive]
        return sent, list(receive), dist.batch_isend_irecv(ops)

    @staticmethod
    def wait(posted) -> list[torch.Tensor]:
        """The received tensors, once every send and receive of `posted` completed."""
        _, receive, works = posted
        for work in works:
            work.wait()
        return receive


# --------------------------------------------------------------------------------------
# The ring's layout: which rows of which rank each step attends
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runs:
    """Rows of a packed shard, one (start, rows) run per sequence."""

    runs: tuple[tuple[int, int], ...]

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.runs)


@dataclass(frozen=True)
class RingLayout:
    """Every rank's shard: its rows per sequence (`q_lens[rank][seq]`, `k_lens[rank][seq]`) and, for
    causal attention, how they split into the two zigzag chunks (`lo[rank][seq]`)."""

    world: int
    rank: int
    q_lens: tuple[tuple[int, ...], ...]
    k_lens: tuple[tuple[int, ...], ...]
    causal: bool
    lo: tuple[tuple[int, ...], ...] | None = None

    def rows(self, rank: int, lens: tuple[tuple[int, ...], ...], part: str) -> Runs:
        """The runs of `rank`'s shard: every row ("all"), or the first ("lo") / second ("hi") zigzag chunk."""
        runs, start = [], 0
        for seq, n in enumerate(lens[rank]):
            lo = self.lo[rank][seq] if self.lo is not None else n
            runs.append({"all": (start, n), "lo": (start, lo), "hi": (start + lo, n - lo)}[part])
            start += n
        return Runs(tuple(runs))

    def step(self, step: int) -> tuple[int, Runs, Runs, bool]:
        """(the rank whose K/V this rank holds in `step`, its Q rows, the K/V rows, causal mask) of the step."""
        src = (self.rank - step) % self.world
        q_part, k_part = "all", "all"
        if self.causal and step:
            q_part, k_part = ("all", "lo") if src < self.rank else ("hi", "all")
        return (src, self.rows(self.rank, self.q_lens, q_part), self.rows(src, self.k_lens, k_part),
                self.causal and step == 0)


def ring_layout(q_lens: Sequence[int], k_lens: Sequence[int], causal: bool, group, what: str) -> RingLayout:
    """The layout of every rank's shard, gathered from the ranks; ValueError (on every rank alike)
    when a causal shard is not the zigzag shard of its sequences or its K/V rows are not its Q rows."""
    rank, world = group_ranks(group)
    every = gather_ints([*q_lens, *k_lens], group, f"{what}: sequences")
    half = len(q_lens)
    all_q = tuple(tuple(v[:half]) for v in every)
    all_k = tuple(tuple(v[half:]) for v in every)
    if not causal:
        return RingLayout(world, rank, all_q, all_k, False)
    for r in range(world):
        if all_q[r] != all_k[r]:
            raise ValueError(f"{what}: causal ring attention shards Q and K/V alike; rank {r} holds {list(all_q[r])} "
                             f"query rows but {list(all_k[r])} key rows per sequence")
    lo = []
    for r in range(world):
        lo.append([])
        for seq in range(half):
            length = sum(all_q[p][seq] for p in range(world))
            (_, lo_n), (_, hi_n) = zigzag_rows(length, world, r)
            if all_q[r][seq] != lo_n + hi_n:
                shards = [all_q[p][seq] for p in range(world)]
                raise ValueError(f"{what}: causal ring attention needs zigzag shards (zigzag_shard): sequence {seq} "
                                 f"has {length} rows, so rank {r} must hold chunks {r} and {2 * world - 1 - r} = "
                                 f"{lo_n} + {hi_n} rows; the ranks hold {shards}")
            lo[-1].append(lo_n)
    return RingLayout(world, rank, all_q, all_k, True, tuple(tuple(x) for x in lo))


# --------------------------------------------------------------------------------------
# One step's attention and the merge
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RingCall:
    """What one ring attention call runs with (checked once, at the API edge)."""

    scale: float
    softcap: float
    deterministic: bool
    backend: str
    group: object
    layout: RingLayout


def _groups(q_runs: Runs, k_runs: Runs) -> dict[tuple[int, int], list[int]]:
    """Sequences by (query rows, key rows), those with both: one dense launch per group."""
    found: dict[tuple[int, int], list[int]] = {}
    for seq, ((_, m), (_, n)) in enumerate(zip(q_runs.runs, k_runs.runs)):
        if m and n:
            found.setdefault((m, n), []).append(seq)
    return found


def _spans(runs: Runs, seqs: list[int]) -> list[slice]:
    """The rows of each of `seqs` in the shard (one slice per sequence: runs are contiguous)."""
    return [slice(runs.runs[s][0], runs.runs[s][0] + runs.runs[s][1]) for s in seqs]


def _stack(x: torch.Tensor, runs: Runs, seqs: list[int]) -> torch.Tensor:
    """[len(seqs), rows, ...] of the sequences' runs (all of one length)."""
    return torch.stack([x[rows] for rows in _spans(runs, seqs)])


class _Partials:
    """The fp32 partials of the split-KV reduce kernel for two splits over this rank's T rows: per
    split O [T, N, width] then LSE [N, T] (`pipeline.partial_elems`); split 0 holds the result so far,
    a step writes split 1 and `merge` runs the reduce kernel, which writes the merge into split 0."""

    def __init__(self, rows: int, heads: int, head_v: int, in_dtype: torch.dtype, device, call: RingCall) -> None:
        self.rows, self.heads, self.head_v = rows, heads, head_v
        self.config = FAConfig(head=kernel_head(head_v), in_dtype=_DTYPE_NAMES[in_dtype], out_dtype="f32", lse=True)
        self.width = self.config.head
        self.o_elems = rows * heads * self.width
        self.per_split = self.o_elems + heads * rows
        self.buffer = torch.zeros(2 * self.per_split, dtype=torch.float32, device=device)
        self.lse(0).fill_(-math.inf)  # a row no step reaches has no weight in a merge
        self.call = call

    def o(self, split: int) -> torch.Tensor:
        start = split * self.per_split
        return self.buffer[start:start + self.o_elems].view(self.rows, self.heads, self.width)

    def lse(self, split: int) -> torch.Tensor:
        start = split * self.per_split + self.o_elems
        return self.buffer[start:start + self.heads * self.rows].view(self.heads, self.rows)

    def put(self, split: int, spans: list[slice], o: torch.Tensor, lse: torch.Tensor) -> None:
        """A step's O [sequences, rows, N, Dv] and LSE [sequences, N, rows] of the sequences at `spans` into
        `split`; the forward's +inf LSE of a row that saw no key is the reduce's -inf (weight 0)."""
        lse = torch.where(torch.isposinf(lse), -math.inf, lse)
        for i, rows in enumerate(spans):
            self.o(split)[rows, :, :self.head_v] = o[i]
            self.lse(split)[:, rows] = lse[i]

    def merge(self, runs: Runs) -> None:
        """Split 1 merged into split 0 over `runs` by the reduce kernel (`kernels/fa_reduce.py`)."""
        table = torch.tensor([(head, start + first, min(self.config.cube_s0, rows - first), 2)
                              for head in range(self.heads) for start, rows in runs.runs
                              for first in range(0, rows, self.config.cube_s0)], dtype=torch.int32)
        if not table.numel():
            return
        table = table.reshape(-1, len(REDUCE_TABLE))
        soc = backend_soc(self.call.backend)
        values = {"partials": Workspace(0), "units": table, "heads": self.heads, "s0": self.rows,
                  "num_units": int(table.shape[0])}
        plan = plan_kernel(reduce_kernel(self.config), values, reduce_block_dim(int(table.shape[0]), soc.cube_cores),
                           soc, workspace=self.buffer.numel() * 4, outputs=("o", "lse"))
        launch_on(self.call.backend, plan, {"o": self.o(0), "lse": self.lse(0)}, workspace=self.buffer)
        lse = self.lse(0)  # a row no merged split saw a key of leaves the reduce with +inf: weight 0 again
        lse.masked_fill_(torch.isposinf(lse), -math.inf)


def _attend(q, k, v, q_runs: Runs, k_runs: Runs, causal: bool, call: RingCall, partials: _Partials,
            split: int) -> Runs:
    """One step's local attention, ptofa's forward op (fp32 O, LSE) per group of equal-length sequences,
    into `split` of the partials; returns the query rows it wrote (a sequence without keys here has none)."""
    groups = _groups(q_runs, k_runs)
    for (m, n), seqs in groups.items():
        left, right = window_to_bounds((-1, 0), m, n) if causal else (0, 0)
        o, lse = flash_attn_fwd(_stack(q, q_runs, seqs), _stack(k, k_runs, seqs), _stack(v, k_runs, seqs), call.scale,
                                causal, left, right, None, torch.float32, call.backend, None, call.deterministic,
                                call.softcap, None)
        partials.put(split, _spans(q_runs, seqs), o, lse)
    return Runs(tuple(q_runs.runs[seq] for seqs in groups.values() for seq in seqs))


def _attend_backward(q, k, v, out, lse, dout, q_runs: Runs, k_runs: Runs, causal: bool, call: RingCall,
                     dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> None:
    """One step's gradients, the backward kernels per group (the backward op's `attention_backward`) with
    their f32 accumulators as outputs, added into the fp32 dq and the travelling dk, dv: every gradient
    is rounded once, after the last step, as on one device."""
    for (m, n), seqs in _groups(q_runs, k_runs).items():
        bounds = window_to_bounds((-1, 0), m, n) if causal else None
        lse_seqs = torch.stack([lse[:, rows] for rows in _spans(q_runs, seqs)])
        grads = backward.attention_backward(
            _stack(q, q_runs, seqs), _stack(k, k_runs, seqs), _stack(v, k_runs, seqs), _stack(out, q_runs, seqs),
            lse_seqs.contiguous(), _stack(dout, q_runs, seqs), softmax_scale=call.scale, bounds=bounds,
            deterministic=call.deterministic, backend=call.backend, softcap=call.softcap, grads_f32=True)
        for acc, runs, grad in ((dq, q_runs, grads[0]), (dk, k_runs, grads[1]), (dv, k_runs, grads[2])):
            for i, rows in enumerate(_spans(runs, seqs)):
                acc[rows] += grad[i]


def _empty_like_shard(x: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.empty((rows, *x.shape[1:]), dtype=x.dtype, device=x.device)


def ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 call: RingCall) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [T, N, Dv] in q's dtype, lse [N, T] fp32) of packed shards q [T, N, D], k/v [Tk, KVN, D*]."""
    layout = call.layout
    link = _RingLink(call.group, layout.rank, layout.world)
    partials = _Partials(q.shape[0], q.shape[1], v.shape[2], q.dtype, q.device, call)
    kv = [k, v]
    for step in range(layout.world):
        _, q_runs, k_runs, causal = layout.step(step)
        posted = None
        if step + 1 < layout.world:
            rows = sum(layout.k_lens[(layout.rank - step - 1) % layout.world])
            posted = link.post(kv, [_empty_like_shard(t, rows) for t in kv])
        written = _attend(q, *kv, q_runs, k_runs, causal, call, partials, 0 if step == 0 else 1)
        if step:
            partials.merge(written)
        if posted is not None:
            kv = link.wait(posted)
    lse = partials.lse(0).clone()
    lse.masked_fill_(torch.isneginf(lse), math.inf)  # flash-attn's convention for a row that saw no key
    return partials.o(0)[..., :v.shape[2]].to(q.dtype), lse


def ring_backward(q, k, v, out, lse, dout, call: RingCall) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of `ring_forward`'s shards from its out and lse; dk/dv of a K/V shard travel with it."""
    layout = call.layout
    link = _RingLink(call.group, layout.rank, layout.world)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = [k, v]
    dkv = None  # the travelling fp32 dK, dV of the K/V shard held in this step
    dkv_posted = None
    for step in range(layout.world):
        _, q_runs, k_runs, causal = layout.step(step)
        kv_posted = None
        if step + 1 < layout.world:
            rows = sum(layout.k_lens[(layout.rank - step - 1) % layout.world])
            kv_posted = link.post(kv, [_empty_like_shard(t, rows) for t in kv])
        if dkv_posted is None:
            dkv = [torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in kv]
        else:
            dkv = link.wait(dkv_posted)
        _attend_backward(q, *kv, out, lse, dout, q_runs, k_runs, causal, call, dq, *dkv)
        rows = sum(layout.k_lens[(layout.rank - step - 1) % layout.world])
        dkv_posted = link.post(dkv, [torch.empty((rows, *t.shape[1:]), dtype=torch.float32, device=t.device)
                                     for t in dkv])
        if kv_posted is not None:
            kv = link.wait(kv_posted)
    dk, dv = link.wait(dkv_posted)  # this rank's own shard, back from its last holder
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    """Ring attention on the autograd graph: `ring_forward`, and `ring_backward` on the saved out and lse."""

    @staticmethod
    def forward(ctx, q, k, v, call: RingCall):
        out, lse = ring_forward(q.detach(), k.detach(), v.detach(), call)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.call = call
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(q, k, v, out, lse, grad_out.to(q.dtype).contiguous(), ctx.call)
        return dq, dk, dv, None


# --------------------------------------------------------------------------------------
# The public calls
# --------------------------------------------------------------------------------------


def _not_supported(window_size, alibi_slopes, key_padding_mask, config) -> None:
    """NotImplementedError for what a shard cannot compute from its local positions."""
    if tuple(check_window(window_size, "window_size")) != (-1, -1):
        raise NotImplementedError(f"window_size: {tuple(window_size)} is not supported by ring attention (a "
                                  f"sliding window needs each K/V block's global position; causal=True is)")
    if alibi_slopes is not None:
        raise NotImplementedError("alibi_slopes: not supported by ring attention (ALiBi's bias needs global "
                                  "positions); ulysses_flash_attn_func supports it")
    if key_padding_mask is not None:
        raise NotImplementedError("key_padding_mask: not supported by ring attention (the mask would have to "
                                  "travel with K/V); pass the sequences packed to ring_flash_attn_varlen_func")
    if config is not None:
        raise NotImplementedError("config: ring attention runs each step with the automatic config (fp32 O and "
                                  "LSE for the merge); a config of its own is not supported")


def _ring_call(q, k, v, q_lens, k_lens, softmax_scale, causal, softcap, deterministic, backend, group,
               what: str) -> RingCall:
    check_shards(q, k, v, ("q", "k", "v"), group)
    layout = ring_layout(q_lens, k_lens, bool(causal), group, what)
    resolved = resolve_backend(backend)
    if resolved == "sim" and dist.get_backend(group) != "gloo":
        raise ValueError(f"backend: the simulator runs CPU tensors, which need a gloo group; this group is "
                         f"{dist.get_backend(group)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    return RingCall(scale, float(softcap), bool(deterministic), resolved, group, layout)


def ring_flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    key_padding_mask: torch.Tensor | None = None,
    return_lse: bool = False,
    backend: str = "auto",
    config: FAConfig | None = None,
    group=None,
):
    """`flash_attn_func` over a sequence sharded across the ranks of `group` (default: the world).

    q: [B, S_q, N, D], k/v [B, S_k, KVN, D / Dv]: this rank's shard of the sequence, float16 or bfloat16,
    GQA/MQA as `flash_attn_func`. With causal=True every rank holds the `zigzag_shard` of Q, K and V
    (S_q = S_k, the zigzag lengths of the whole); without, any shards (lengths may differ between ranks
    and between Q and K/V). Every rank must call with the same B, heads, head dims and dtype.
    softmax_scale, causal (bottom-right = top-left, Q and K/V being one sequence), softcap, deterministic,
    return_attn_probs, return_lse, backend: as `flash_attn_func`. window_size other than (-1, -1),
    alibi_slopes, key_padding_mask, config and dropout raise NotImplementedError.
    group: a torch.distributed process group (gloo with CPU tensors on the simulator, hccl on NPUs).

    Returns this rank's rows of O [B, S_q, N, Dv] in q's dtype (and lse [B, N, S_q] as flash_attn_func);
    differentiable in q, k, v (each rank gets the gradients of its own shards).
    """
    def check() -> None:
        unsupported_arguments(dropout_p, softcap, alibi_slopes)
        _not_supported(window_size, alibi_slopes, key_padding_mask, config)
        check_qkv(q, k, v)

    agree(check, group)
    batch, s_q, heads, _ = q.shape
    s_k = k.shape[1]
    call = _ring_call(q, k, v, [s_q] * batch, [s_k] * batch, softmax_scale, causal, softcap, deterministic, backend,
                      group, "ring_flash_attn_func")
    out, lse = _RingAttention.apply(q.reshape(batch * s_q, heads, -1), k.reshape(batch * s_k, k.shape[2], -1),
                                    v.reshape(batch * s_k, v.shape[2], -1), call)
    out = out.view(batch, s_q, heads, -1)
    lse = lse.view(heads, batch, s_q).permute(1, 0, 2)
    return flash_attn_returns(out, lse, return_attn_probs, return_lse)


def ring_flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
    backend: str = "auto",
    group=None,
):
    """`flash_attn_varlen_func` over packed sequences sharded across the ranks of `group`.

    q [total_q, N, D], k/v [total_k, KVN, D / Dv]: this rank's rows of every sequence, packed;
    cu_seqlens_q / cu_seqlens_k: this rank's (int32 [B + 1]), max_seqlen_q / max_seqlen_k at least its
    longest. With causal=True each sequence is zigzag-sharded (`zigzag_shard_varlen`), its lengths any
    (uneven sequences, lengths not a multiple of 2W); without, any shards. Every rank has the same B.
    The other arguments as `ring_flash_attn_func`. Returns this rank's out [total_q, N, Dv] (and lse
    [N, total_q], flash-attn's varlen layout); differentiable in q, k, v.
    """
    def check() -> tuple[list[int], list[int]]:
        unsupported_arguments(dropout_p, softcap, alibi_slopes)
        _not_supported(window_size, alibi_slopes, None, None)
        if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (q, k, v)):
            raise ValueError(f"shapes: q [total_q, N, D], k and v [total_k, KVN, D] expected, got "
                             f"{[tuple(getattr(t, 'shape', ())) for t in (q, k, v)]}")
        check_qkv(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0))
        q_lens = seqlens_of_cu(cu_seqlens_q, q.shape[0], "cu_seqlens_q")
        k_lens = seqlens_of_cu(cu_seqlens_k, k.shape[0], "cu_seqlens_k")
        if len(q_lens) != len(k_lens):
            raise ValueError(f"cu_seqlens: {len(q_lens)} query sequences but {len(k_lens)} key sequences")
        if max(q_lens) > max_seqlen_q or max(k_lens) > max_seqlen_k:
            raise ValueError(f"max_seqlen: this rank's longest sequences ({max(q_lens)}, {max(k_lens)}) exceed "
                             f"max_seqlen_q={max_seqlen_q}, max_seqlen_k={max_seqlen_k}")
        return q_lens, k_lens

    q_lens, k_lens = agree(check, group)
    call = _ring_call(q, k, v, q_lens, k_lens, softmax_scale, causal, softcap, deterministic, backend, group,
                      "ring_flash_attn_varlen_func")
    out, lse = _RingAttention.apply(q, k, v, call)
    return flash_attn_returns(out, lse, return_attn_probs, return_lse)


__all__ = ["RingCall", "RingLayout", "Runs", "ring_backward", "ring_flash_attn_func", "ring_flash_attn_varlen_func",
           "ring_forward", "ring_layout"]
