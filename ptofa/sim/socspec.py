"""Per-chip constants of the timing model (`ptofa.sim.timing`): one table, one source of truth.

Every constant says where it comes from: fa-pipeline.md section 3 (core counts,
clocks, cube MACs), public Huawei material, or "assumption". None of them is fitted
to a measured FlashAttention time; the model is meant to rank schedules and show
which resource bounds them, not to reproduce a benchmark to the microsecond.

Rates are in bytes (or MACs) per cycle of the AI Core clock; AIC and AIV are
assumed to run at the same clock (assumption: the manual cost model of
fa-pipeline.md 3.4 gives one clock per SoC).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SocSpec:
    """Timing constants of one Ascend 910B part."""

    name: str
    cube_cores: int  # AIC count (fa-pipeline.md 3.1 / 3.4)
    clock_mhz: float  # cube clock (fa-pipeline.md 3.4, manual cost model presets)
    gm_scale: int = 1  # divides every GM bandwidth; 2 on 910B4 (fa-pipeline.md 3.4, manual cost model)
    vec_per_cube: int = 2  # AIVs per block (fa-pipeline.md 3.1)

    # Compute rates.
    # 16x16x16 fp16 MACs per cube execution (fa-pipeline.md 3.4; Huawei TBE "AI Core" docs).
    cube_macs_per_cycle: int = 4096
    # fp32 elementwise bytes per cycle per AIV. Public Huawei material (Ascend C vector
    # API): one vector repeat processes 256 B (8 datablocks of 32 B); assumption: one
    # repeat per cycle.
    vec_bytes_per_cycle: int = 256
    # Cost multiplier of exp / div / reciprocal over plain elementwise (assumption).
    vec_transcendental_factor: float = 4.0
    # Cost multiplier of row reductions (rowmax/rowsum), applied to the source
    # elements (assumption: a tree of halving passes costs about twice one pass).
    vec_reduce_factor: float = 2.0

    # Data-path bandwidths in bytes per cycle per core. GM traffic of the kernel
    # (K/V shared by blocks, the 2-3.5 MiB slot ring per block) is assumed to hit
    # the L2; these are port rates, all assumptions (no public per-path figure in
    # the studied sources).
    mte2_gm_to_l1_bytes: float = 128.0  # assumption
    mte2_gm_to_ub_bytes: float = 128.0  # assumption
    # L1 -> L0A/L0B (assumption: twice the 128 B/cycle a 128x128x128 fp16 matmul consumes).
    mte1_l1_to_l0_bytes: float = 256.0
    fix_l0c_to_gm_bytes: float = 128.0  # assumption
    mte3_ub_to_gm_bytes: float = 128.0  # assumption

    # HBM, used as a launch-level bound on the compulsory traffic (Q, K, V, O once).
    # Assumption: ~1.6 TB/s is the commonly quoted public figure for 910B parts; the
    # studied sources give none (fa-pipeline.md 3.4). Halved on 910B4 through gm_scale.
    hbm_bytes_per_s: float = 1.6e12

    # Fixed costs in cycles.
    mte2_op_cycles: int = 64  # assumption: DMA descriptor set-up and first-byte latency
    mte1_op_cycles: int = 16  # assumption
    m_op_cycles: int = 32  # assumption: cube pipeline fill/drain per tmatmul
    fix_op_cycles: int = 64  # assumption: like an MTE2 DMA
    v_op_cycles: int = 16  # assumption: vector instruction pipeline latency
    mte3_op_cycles: int = 64  # assumption: like an MTE2 DMA
    scalar_op_cycles: int = 2  # assumption: one IR scalar/control op is about two scalar instructions
    op_dispatch_cycles: int = 4  # assumption: scalar instructions to set up and issue one tile op
    intra_core_flag_cycles: int = 8  # assumption: set_flag -> wait_flag between two queues of a core
    cross_core_flag_cycles: int = 200  # assumption: FFTS flag set -> seen by the peer core (~0.1 us)
    pipe_op_cycles: int = 8  # assumption: scalar bookkeeping of talloc/tpush/tpop/tfree

    @property
    def vec_cores(self) -> int:
        return self.cube_cores * self.vec_per_cube

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    @property
    def peak_flops(self) -> float:
        """Cube peak, 2 flops per MAC (fa-pipeline.md 3.4)."""
        return self.cube_cores * self.cube_macs_per_cycle * 2 * self.clock_hz

    @property
    def hbm_bytes_per_cycle_per_core(self) -> float:
        """HBM share of one block when every cube core streams (total / cores)."""
        return self.hbm_bytes_per_s / self.gm_scale / self.cube_cores / self.clock_hz

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_mhz


SOCS: dict[str, SocSpec] = {
    "910B1": SocSpec("910B1", cube_cores=24, clock_mhz=1850.0),
    "910B2": SocSpec("910B2", cube_cores=24, clock_mhz=1800.0),
    "910B3": SocSpec("910B3", cube_cores=20, clock_mhz=1800.0),
    "910B4": SocSpec("910B4", cube_cores=20, clock_mhz=1500.0, gm_scale=2),
}


def get_soc(soc: str | SocSpec) -> SocSpec:
    if isinstance(soc, SocSpec):
        return soc
    try:
        return SOCS[soc]
    except KeyError:
        raise ValueError(f"unknown SoC {soc!r}; known: {', '.join(SOCS)}") from None
