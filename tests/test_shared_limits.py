"""The chip's shared limits in the timing model: the L2 and HBM that every core of a launch shares.

Each test builds a trace of pure GM traffic (or a FlashAttention shape) and checks what the
model predicts against the shared figures of `ptofa.sim.socspec`, not against a core's own port.
"""

from __future__ import annotations

import dataclasses

import pytest

from ptofa.pipeline import FAConfig, ProblemShape
from ptofa.sim.kernel_timing import gm_footprint_bytes, predict_kernel
from ptofa.sim.socspec import SOCS
from ptofa.sim.shared_limits import compulsory_bytes, hbm_bytes, shared_floor_us
from ptofa.sim.trace import Trace, TraceOp

SPEC = SOCS["910B2"]
ROWS, COLS = 128, 256  # one f32 tile: 128 KiB
TILE_BYTES = ROWS * COLS * 4
LOADS = 16  # tiles each block streams


def _streaming_trace(blocks: int, shared: bool) -> Trace:
    """Each block loads LOADS tiles from GM into one UB tile: distinct rows of one tensor per block,
    or (shared) the same rows for every block."""
    trace = Trace(block_dim=blocks)
    tensor = 1  # one GM buffer id
    for block in range(blocks):
        ops = trace.ops(block, "vec0")
        for i in range(LOADS):
            row = i * ROWS if shared else (block * LOADS + i) * ROWS
            view = (tensor, row * COLS * 4, (ROWS, COLS), (COLS, 1), 4)
            ops.append(TraceOp("vec0", block, "pto.tload", i + 1, "other", writes=(0,), nbytes=TILE_BYTES,
                               src_loc="gm", dst_loc="vec", gm_view=view))
    return trace


def test_one_core_streams_at_its_own_port() -> None:
    result = predict_kernel(_streaming_trace(1, shared=False), SPEC, block_dim=1)
    assert result.bound == "MTE2"
    port_us = SPEC.cycles_to_us(LOADS * (TILE_BYTES / SPEC.mte2_gm_bytes + SPEC.mte2_op_cycles))
    assert result.block_us[0] == pytest.approx(port_us)


def test_24_cores_of_pure_gm_traffic_share_the_chip_figure() -> None:
    """24 blocks each streaming their own data are predicted at the chip's shared HBM rate, not at 24
    times one core's port: the launch moves 24x the bytes, so it takes (nearly) 24x the HBM time."""
    one = predict_kernel(_streaming_trace(1, shared=False), SPEC, block_dim=1)
    cores = SPEC.cube_cores
    all_cores = predict_kernel(_streaming_trace(cores, shared=False), SPEC, block_dim=cores)
    total = cores * LOADS * TILE_BYTES
    assert all_cores.bound == "HBM"
    assert all_cores.kernel_us == pytest.approx(total / SPEC.hbm_bytes_per_s * 1e6)
    # Each block at its own port takes as long as the lone one; the shared HBM makes the launch
    # several times longer than that.
    assert all_cores.block_us[0] == pytest.approx(one.block_us[0])
    assert all_cores.kernel_us > 3 * (one.kernel_us - SPEC.first_wave_start_us)
    assert all_cores.l2_bound_us == pytest.approx(total / SPEC.l2_bytes_per_s * 1e6)


def test_reuse_is_served_by_the_l2() -> None:
    """The same bytes read by every block come from HBM once; the re-reads cost L2 bandwidth only."""
    cores = SPEC.cube_cores
    distinct = predict_kernel(_streaming_trace(cores, shared=False), SPEC, block_dim=cores)
    reused = predict_kernel(_streaming_trace(cores, shared=True), SPEC, block_dim=cores)
    assert gm_footprint_bytes(_streaming_trace(cores, shared=True)) == LOADS * TILE_BYTES
    assert reused.hbm_bound_us == pytest.approx(LOADS * TILE_BYTES / SPEC.hbm_bytes_per_s * 1e6)
    assert reused.l2_bound_us == pytest.approx(distinct.l2_bound_us)
    assert reused.kernel_us < distinct.kernel_us / 2
    assert reused.bound != "HBM"


def test_reuse_beyond_the_l2_capacity_misses() -> None:
    """With an L2 smaller than the re-read data, the re-reads that do not fit come from HBM."""
    cores = SPEC.cube_cores
    tiny = dataclasses.replace(SPEC, l2_bytes=LOADS * TILE_BYTES // 4)
    reused = predict_kernel(_streaming_trace(cores, shared=True), tiny, block_dim=cores)
    footprint = LOADS * TILE_BYTES
    rereads = (cores - 1) * footprint
    expected = footprint + rereads * (1 - tiny.l2_bytes / footprint)
    assert reused.hbm_bound_us == pytest.approx(expected / tiny.hbm_bytes_per_s * 1e6)


def test_flash_attention_kv_comes_from_hbm_once_it_no_longer_fits_the_l2() -> None:
    config = FAConfig(head=128)
    short = ProblemShape(1, 1, 4096, 4096)
    assert hbm_bytes(config, short, SPEC, 24) == compulsory_bytes(config, short)  # K/V re-reads hit the L2
    # One head with 1M keys: K and V are 512 MiB, far more than the 192 MiB L2.
    long = ProblemShape(1, 1, 4096, 1 << 20)
    kv_reads = long.flops(128) * 2 / (2 * config.cube_s0)
    kv_once = 2 * 128 * 2 * (1 << 20)
    extra = hbm_bytes(config, long, SPEC, 24) - compulsory_bytes(config, long)
    assert 0.5 * (kv_reads - kv_once) < extra < kv_reads - kv_once


def test_the_shared_floors_scale_with_their_constants() -> None:
    """The README's sensitivity rows: halving the L2 rate doubles the L2 floor, and so on."""
    nbytes = 1e9
    l2, hbm = shared_floor_us(SPEC, nbytes, nbytes)
    half = dataclasses.replace(SPEC, l2_shared_bytes=SPEC.l2_shared_bytes / 2, hbm_shared_bytes=SPEC.hbm_shared_bytes / 2)
    assert shared_floor_us(half, nbytes, nbytes) == pytest.approx((2 * l2, 2 * hbm))
    # 910B2's figures from its CANN platform config: 110 and 32 B/cycle per AI core, 24 cores, 1.8 GHz.
    assert SPEC.l2_bytes_per_s == pytest.approx(110 * 24 * 1.8e9)
    assert SPEC.hbm_bytes_per_s == pytest.approx(32 * 24 * 1.8e9)
