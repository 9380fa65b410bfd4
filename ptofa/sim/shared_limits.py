"""The chip's shared limits on a launch: every core's GM loads and stores pass through the one L2
(`SocSpec.l2_bytes_per_s`, reads and writes together) and what misses it through HBM
(`SocSpec.hbm_bytes_per_s`). A launch takes at least the time those shared rates allow, however
fast each core's own ports are; `timing.predict`, `bwd_timing` and `kernel_timing` take the larger
of their replayed time and these floors."""

from __future__ import annotations

import math

from ptofa.pipeline import DTYPE_BYTES, FAConfig, ProblemShape
from ptofa.sim.socspec import SocSpec


def compulsory_bytes(config: FAConfig, shape: ProblemShape) -> int:
    """Q, K, V read once and O written once (BSND, or packed rows for varlen; K/V with kv_heads)."""
    packed = shape.seqlens is not None
    q_rows = shape.s0 if packed else shape.batch * shape.s0
    k_rows = shape.s1 if packed else shape.batch * shape.s1
    in_b, out_b = DTYPE_BYTES[config.in_dtype], DTYPE_BYTES[config.out_dtype]
    return config.head * (shape.heads * q_rows * (in_b + out_b) + 2 * shape.kv_heads * k_rows * in_b)


def gm_bytes(ops) -> int:
    """GM bytes that traced ops load (`tload` from GM) and store (`tstore` to GM), pipe slots included:
    every one of them passes through the chip's L2."""
    total = 0
    for op in ops:
        if op.op == "pto.tload" and op.src_loc == "gm":
            total += op.nbytes
        elif op.op == "pto.tstore" and op.dst_loc == "gm":
            total += op.nbytes
    return total


def shared_floor_us(spec: SocSpec, l2_bytes: float, hbm_bytes: float) -> tuple[float, float]:
    """(L2 us, HBM us): what every core of a launch moves together, at the chip's shared L2 rate
    (`SocSpec.l2_bytes_per_s`, reads and writes together) and HBM rate (`SocSpec.hbm_bytes_per_s`).
    A launch takes at least both, however fast each core's own ports are."""
    return l2_bytes / spec.l2_bytes_per_s * 1e6, hbm_bytes / spec.hbm_bytes_per_s * 1e6


def l2_miss_fraction(resident_bytes: float, working_set_bytes: float) -> float:
    """Share of re-reads that miss an L2 of `resident_bytes` free for a working set of `working_set_bytes`
    (assumption: the part that does not fit misses, the rest hits)."""
    if working_set_bytes <= resident_bytes:
        return 0.0
    return 1.0 - max(resident_bytes, 0.0) / working_set_bytes


def hbm_bytes(config: FAConfig, shape: ProblemShape, spec: SocSpec, block_dim: int) -> float:
    """Bytes a FlashAttention launch moves to and from HBM: Q, K, V and O once (`compulsory_bytes`),
    plus the K/V re-reads that miss the L2.

    Each unit (one Q block of one head, or two with `q_pair`) reads the K and V of every key it sees,
    so K/V are read once per unit; the first read of each comes from HBM, the others hit the L2 while the K/V of
    the heads in flight fit beside the blocks' slot rings (`FAConfig.gm_slot_bytes_per_block`, both
    live in GM and so in the L2). At long S they no longer fit and the re-reads come from HBM."""
    in_b = DTYPE_BYTES[config.in_dtype]
    packed = shape.seqlens is not None
    kv_heads = shape.kv_heads * (1 if packed else shape.batch)
    kv_once = 2 * config.head * in_b * shape.kv_heads * (shape.s1 if packed else shape.batch * shape.s1)
    kv_reads = shape.flops(config.head) * in_b / (2 * config.cube_s0 * (2 if config.q_pair else 1))
    concurrent = min(block_dim, spec.cube_cores)
    units_per_kv_head = max(1.0, shape.work_units(config) / kv_heads)
    in_flight = min(kv_heads, math.ceil(concurrent / units_per_kv_head) + 1)
    resident = spec.l2_bytes - config.gm_slot_bytes_per_block * concurrent
    miss = l2_miss_fraction(resident, in_flight * kv_once / kv_heads)
    return compulsory_bytes(config, shape) + max(0.0, kv_reads - kv_once) * miss


def launch_floors_us(config: FAConfig, shape: ProblemShape, spec: SocSpec, block_dim: int,
                     gm_bytes_per_unit: float) -> tuple[float, float]:
    """(L2 us, HBM us) of a FlashAttention launch whose units each move `gm_bytes_per_unit` through GM."""
    return shared_floor_us(spec, gm_bytes_per_unit * shape.work_units(config), hbm_bytes(config, shape, spec, block_dim))


def limiting(replay_us: float, l2_us: float, hbm_us: float, bound: str) -> tuple[float, str]:
    """(launch us, bound): the replayed time unless a shared limit takes longer."""
    return max((replay_us, bound), (l2_us, "L2"), (hbm_us, "HBM"), key=lambda t: t[0])
