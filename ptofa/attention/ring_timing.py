"""Predicted time of each step of a ring attention forward: the kernel against the link.

    steps = predict_ring_steps(batch=1, heads=8, kv_heads=8, seqlen=8192, head_dim=128, world=4, causal=True)
    print(describe(steps))

In step s a rank runs its local kernel while it sends the K/V shard it holds to the next rank
(`ptofa.attention.ring`), so a step takes the longer of the two: the step's compute, the slowest
rank's predicted kernel time (the timing model's prediction of the launch with the automatic config,
`ptofa.launch.tune.predict_config`; zigzag sharding gives every rank the same work after step 0),
and the transfer of one K/V shard over the link (bytes / bandwidth). The communication hides
behind the compute when the transfer is the shorter. The last step sends nothing. Left out: the
merge of each step's partials (the split-KV reduce kernel, a pass over this rank's O in fp32) and
the link's latency. All figures are predicted, for the simulated chip `soc`.

Link bandwidths (one direction, one link: the ring sends to one neighbour), public figures of the
Ascend 910 given at Hot Chips 31 (2019, Huawei's Da Vinci talk, as reported by AnandTech's live
blog "Hot Chips 31 Live Blogs: Huawei Da Vinci Architecture"): three HCCS ports of 240 Gbit/s and
RoCE v2 at 2 x 100 Gbit/s. No public per-link figure of the 910B was found; pass `link_gbps` for
a measured one (e.g. `npu-smi info -t hccs-bw`, or an HCCL send/recv benchmark).
"""

from __future__ import annotations

from dataclasses import dataclass

from ptofa.attention.core import auto_config
from ptofa.attention.zigzag import zigzag_rows
from ptofa.launch.tune import TuneShape, predict_config
from ptofa.pipeline import DTYPE_BYTES, ProblemShape, kernel_head
from ptofa.sim.socspec import DEFAULT_SOC, get_soc

# Gbit/s of one link, see the module docstring.
LINK_GBPS = {"hccs": 240.0, "roce": 100.0}


@dataclass(frozen=True)
class RingStep:
    """One step of the ring (predicted): the kernels' shapes (query rows, key rows, causal) of the slowest
    rank, its kernel time, the bytes it sends and their time on the link, and the step's time."""

    step: int
    kernels: tuple[tuple[int, int, bool], ...]
    compute_us: float
    sent_bytes: int
    comm_us: float

    @property
    def step_us(self) -> float:
        return max(self.compute_us, self.comm_us)

    @property
    def hidden(self) -> bool:
        """The transfer ends before the kernel does."""
        return self.comm_us <= self.compute_us


def _kernel_us(batch: int, heads: int, kv_heads: int, rows: int, keys: int, causal: bool, head_dim: int,
               dtype: str, soc) -> float:
    """The timing model's launch time of one step's kernel with the config `flash_attn_fwd` picks for it."""
    window = (-1, 0) if causal else (-1, -1)
    width = kernel_head(head_dim)
    shape = ProblemShape(batch, heads, rows, keys, kv_heads=kv_heads, window=window)
    config = auto_config(width, dtype, s1=keys, out_dtype="f32", masked=causal, lse=True, shape=shape, soc=soc)
    tuned = TuneShape(batch, heads, kv_heads, rows, keys, width, dtype, "f32", window, False, True, soc.name)
    return float(predict_config(config, tuned).predicted_us)


def predict_ring_steps(*, batch: int, heads: int, kv_heads: int, seqlen: int, head_dim: int, world: int,
                       causal: bool, dtype: str = "bf16", link: str = "hccs", link_gbps: float | None = None,
                       soc: str = DEFAULT_SOC) -> list[RingStep]:
    """The predicted steps of `ring_flash_attn_func` on `world` ranks over a sequence of `seqlen` rows
    (zigzag shards; causal or not), each rank holding [batch, seqlen / world, heads, head_dim] of Q and
    [batch, seqlen / world, kv_heads, head_dim] of K and V in `dtype` ("f16" or "bf16")."""
    if link not in LINK_GBPS and link_gbps is None:
        raise ValueError(f"link: {link!r} must be one of {tuple(LINK_GBPS)}, or pass link_gbps")
    gbps = LINK_GBPS.get(link) if link_gbps is None else float(link_gbps)
    spec = get_soc(soc)
    shards = [sum(n for _, n in zigzag_rows(seqlen, world, r)) for r in range(world)]
    los = [zigzag_rows(seqlen, world, r)[0][1] for r in range(world)]
    cache: dict[tuple[int, int, bool], float] = {}

    def timed(rows: int, keys: int, masked: bool) -> float:
        if rows == 0 or keys == 0:
            return 0.0
        if (rows, keys, masked) not in cache:
            cache[rows, keys, masked] = _kernel_us(batch, heads, kv_heads, rows, keys, masked, head_dim, dtype, spec)
        return cache[rows, keys, masked]

    steps = []
    for step in range(world):
        worst: tuple[float, tuple[int, int, bool]] = (-1.0, (0, 0, False))
        for rank in range(world):
            src = (rank - step) % world
            rows, keys, masked = shards[rank], shards[src], causal and step == 0
            if causal and step:
                rows, keys = (shards[rank], los[src]) if src < rank else (shards[rank] - los[rank], shards[src])
            worst = max(worst, (timed(rows, keys, masked), (rows, keys, masked)))
        sent = 0 if step == world - 1 else 2 * batch * max(shards) * kv_heads * head_dim * DTYPE_BYTES[dtype]
        steps.append(RingStep(step, (worst[1],), worst[0], sent, sent * 8 / (gbps * 1e9) * 1e6))
    return steps


def describe(steps: list[RingStep]) -> str:
    """One line per step and the total, every figure labelled predicted."""
    lines = []
    for s in steps:
        (rows, keys, masked), = s.kernels
        kernel = f"step {s.step}: kernel {rows} x {keys}{' causal' if masked else ''} predicted {s.compute_us:.1f} us"
        if not s.sent_bytes:
            lines.append(f"{kernel}, nothing to send -> {s.step_us:.1f} us")
            continue
        verdict = "comm hidden" if s.hidden else "comm-bound"
        lines.append(f"{kernel}, send {s.sent_bytes / 1024:.0f} KiB predicted {s.comm_us:.1f} us -> "
                     f"{s.step_us:.1f} us ({verdict})")
    lines.append(f"ring forward predicted {sum(s.step_us for s in steps):.1f} us over {len(steps)} steps "
                 f"(merges and link latency not counted)")
    return "\n".join(lines)


__all__ = ["LINK_GBPS", "RingStep", "describe", "predict_ring_steps"]
