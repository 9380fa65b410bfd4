"""Per-chip constants of the timing model (`ptofa.sim.timing`): one table, one source of truth.

Every constant says where it comes from: fa-pipeline.md section 3 (core counts,
clocks, cube MACs), public Huawei material, or "assumption". None of them is fitted
to a measured FlashAttention time; the model is meant to rank schedules and show
which resource bounds them, not to reproduce a benchmark to the microsecond.

Rates are in bytes (or MACs) per cycle of the AI Core clock; AIC and AIV are
assumed to run at the same clock (assumption: the manual cost model of
fa-pipeline.md 3.4 gives one clock per SoC).

Public source "pto-isa A2/A3 cost model": the instruction cost model that ships with
pto-isa (github.com/PTO-ISA/pto-isa, include/pto/costmodel/): per-core data-path
bandwidths in `arch_config.hpp` (kA2A3ArchConfig, GB/s of 2^30 bytes at its
kMainFrequencyHz = 1.85 GHz, turned into bytes per cycle below), vector instruction
costs in `a2a3/cce_costmodel/cce_costmodel_vector_compute.hpp` (EstimateLinearCycles
head, slope per repeat, tail) and the cube's `mad` in `cce_costmodel_cube.hpp`.
"""

from __future__ import annotations

import dataclasses

import math
from dataclasses import dataclass

# pto-isa A2/A3 cost model (see the module docstring): its clock and byte unit.
_PTOISA_HZ = 1.85e9
_GIB = float(1 << 30)


def _ptoisa_bytes_per_cycle(gb_per_s: float) -> float:
    """A kA2A3ArchConfig bandwidth (GB/s of 2^30 B at 1.85 GHz) as bytes per cycle."""
    return gb_per_s * _GIB / _PTOISA_HZ


# Vector instructions: (head, cycles per repeat, tail), pto-isa A2/A3 cost model
# (cce_costmodel_vector_compute.hpp). A repeat is one 256 B chunk. An instruction
# separated from the previous one by pipe_barrier(PIPE_V) (ptoas puts one between
# dependent vector ops; pto-isa's composite tile ops put one between their steps)
# pays all three; `ptofa.sim.timing` charges every vector instruction that way.
VECTOR_INSTRUCTIONS: dict[str, tuple[int, int, int]] = {
    "vadd": (10, 2, 14), "vsub": (10, 2, 14), "vmax": (10, 2, 14), "vmin": (10, 2, 14),
    "vmul": (10, 2, 15), "vdiv": (11, 4, 19),
    "vadds": (13, 1, 18), "vmuls": (11, 1, 15), "vmaxs": (10, 1, 13), "vmins": (14, 1, 16),
    "vexp": (13, 2, 18), "vln": (13, 2, 20), "vsqrt": (14, 2, 25), "vrsqrt": (10, 1, 14),
    "vabs": (13, 1, 16), "vrelu": (10, 1, 13), "vsel": (13, 2, 14),
    "vand": (8, 2, 12), "vor": (8, 2, 12), "vnot": (8, 2, 12),
    "vconv": (14, 2, 18),  # EstimateVconvCycles (cce_costmodel_core.hpp)
    "vector_dup": (11, 1, 13), "vcopy": (11, 1, 13), "vbrcb": (0, 0, 18),
    "vcadd": (14, 7, 32), "vcgadd": (14, 1, 24), "vcgmax": (14, 1, 17), "vcgmin": (14, 1, 17),
    "vcmax": (6, 2, 0), "vcmin": (6, 2, 0),  # EstimateLinearCycles defaults
}
# A binary ALU op issued in count mode (as the row reductions' folds are) pays a dispatch
# floor (kCountModeFloorCycles, cce_costmodel_core.hpp).
VECTOR_COUNT_MODE_FLOOR = 16


@dataclass(frozen=True)
class SocSpec:
    """Timing constants of one Ascend 910B part."""

    name: str
    cube_cores: int  # AIC count (fa-pipeline.md 3.1 / 3.4)
    clock_mhz: float  # cube clock (fa-pipeline.md 3.4, manual cost model presets)
    gm_scale: int = 1  # divides every GM bandwidth; 2 on 910B4 (fa-pipeline.md 3.4, manual cost model)
    vec_per_cube: int = 2  # AIVs per block (fa-pipeline.md 3.1)

    # Compute rates.
    # 16x16x16 fp16 MACs per cube execution (fa-pipeline.md 3.4; Huawei TBE "AI Core" docs;
    # pto-isa A2/A3 cost model: `mad` takes one cycle per 16x16x16 fractal of f16).
    cube_macs_per_cycle: int = 4096
    # Bytes of one vector repeat (public Huawei material, Ascend C vector API: one repeat
    # processes 256 B, 8 datablocks of 32 B). The cycles a repeat takes are per
    # instruction in VECTOR_INSTRUCTIONS.
    vec_bytes_per_cycle: int = 256
    # Cost multiplier of the few vector ops with no entry in VECTOR_INSTRUCTIONS'
    # mapping (column-broadcast exp / div; assumption), applied to the binary-op slope.
    vec_transcendental_factor: float = 4.0
    # Cost multiplier of column reductions, sorts and arg-reductions, applied to the
    # source elements (assumption: a tree of halving passes costs about twice one pass).
    # Row reductions and row broadcasts are costed per instruction from pto-isa's A2/A3
    # code instead (ptofa.sim.timing.row_reduce_cycles).
    vec_reduce_factor: float = 2.0

    # Data-path bandwidths in bytes per cycle per core.
    # On chip, pto-isa A2/A3 cost model (kA2A3ArchConfig): L1 -> L0A 441.0 and
    # L1 -> L0B 220.5 GB/s, i.e. 256 and 128 B/cycle.
    mte1_l1_to_l0a_bytes: float = _ptoisa_bytes_per_cycle(441.0)
    mte1_l1_to_l0b_bytes: float = _ptoisa_bytes_per_cycle(220.5)
    # GM side: the kernel's GM traffic in the steady state is L2 traffic (the 2-3.5 MiB
    # slot ring a block writes and its sibling reads back microseconds later; K/V shared
    # by every Q block of a head), so it moves at pto-isa's perf-sim L2-hit rate:
    # l2_read_bw = l2_write_bw = 256 B/cycle with l2_hit_latency = 50 cycles
    # (include/pto/costmodel/perf_sim/config.hpp, "pypto CacheConfig default"; a hit's
    # duration is size / l2_bw + hit latency in perf_sim/cache_model.hpp). The same
    # cost model's per-path figures without an L2 (kA2A3ArchConfig: GM -> L1 135.0,
    # GM -> UB 100.9, L0C -> GM 70.0, UB -> GM 188.46 GB/s, i.e. 78 / 59 / 41 / 109
    # B/cycle) describe misses; the compulsory Q/K/V/O traffic is bounded by
    # `hbm_bytes_per_s` at launch level instead.
    mte2_gm_to_l1_bytes: float = 256.0
    mte2_gm_to_ub_bytes: float = 256.0
    fix_l0c_to_gm_bytes: float = 256.0
    mte3_ub_to_gm_bytes: float = 256.0

    # HBM, used as a launch-level bound on the compulsory traffic (Q, K, V, O once).
    # Assumption: ~1.6 TB/s is the commonly quoted public figure for 910B parts; the
    # studied sources give none (fa-pipeline.md 3.4). Halved on 910B4 through gm_scale.
    hbm_bytes_per_s: float = 1.6e12

    # Fixed costs in cycles.
    mte2_op_cycles: int = 50  # pto-isa perf-sim l2_hit_latency (see the GM rates above)
    mte1_op_cycles: int = 16  # assumption
    m_op_cycles: int = 6  # pto-isa A2/A3 cost model: `mad` head (kDefaultHeadCycles)
    fix_op_cycles: int = 50  # pto-isa perf-sim l2_hit_latency
    # Vector ops with no entry in VECTOR_INSTRUCTIONS' mapping: the binary-op head + tail
    # of the pto-isa A2/A3 cost model (vadd: 10 + 14).
    v_op_cycles: int = 24
    mte3_op_cycles: int = 50  # pto-isa perf-sim l2_hit_latency
    scalar_op_cycles: int = 2  # assumption: one IR scalar/control op is about two scalar instructions
    op_dispatch_cycles: int = 4  # assumption: scalar instructions to set up and issue one tile op
    intra_core_flag_cycles: int = 8  # assumption: set_flag -> wait_flag between two queues of a core
    cross_core_flag_cycles: int = 200  # assumption: FFTS flag set -> seen by the peer core (~0.1 us)
    pipe_op_cycles: int = 8  # assumption: scalar bookkeeping of talloc/tpush/tpop/tfree

    # Fixed costs of a launch, in microseconds (wall time, not clock cycles).
    # Block start-up: dispatch of a block to its cores until its kernel code starts. Public
    # measurement on A2/A3 (github.com/hw-native-sys/simpler, docs/investigations/
    # 2026-06-aicore-cold-start-warmup.md, a 24-block MIX task on 72 AI cores: dispatch ->
    # start 0.2-0.5 us per task in the steady state; a core's first task after the runtime
    # starts 0.3-5.6 us, average 2.3-3.9 us, from NoC/FFTS routing). A block starts when
    # the last of its three cores (AIC + 2 AIV) does: the upper end of the steady range.
    # Charged once per block a core runs (`timing.launch_cycles`), so once per wave.
    block_start_us: float = 0.5
    # Host enqueue of one kernel launch through a C launcher on 910B2 (github.com/triton-lang/
    # triton-ascend issue 1675: 8.599 us per launch for the optimised launcher, 12.142 us for
    # eager torch.add, NPU execution excluded). Host time: launches queued back to back hide
    # it behind the previous kernel, so the predicted kernel time does not include it; a lone
    # synchronous call pays it on top (`TimingResult.summary` says so).
    host_launch_us: float = 8.599

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

    @property
    def block_start_cycles(self) -> float:
        return self.block_start_us * self.clock_mhz

    def with_cube_cores(self, cores: int | None) -> SocSpec:
        """This part's facts with `cores` cube cores (a device may expose fewer; None: its own)."""
        return self if cores is None or cores == self.cube_cores else dataclasses.replace(self, cube_cores=int(cores))

    def launch_start_us(self, block_dim: int) -> float:
        """Block start-ups on the busiest core of a launch: one per wave (`timing.launch_cycles`)."""
        return math.ceil(block_dim / self.cube_cores) * self.block_start_us


SOCS: dict[str, SocSpec] = {
    "910B1": SocSpec("910B1", cube_cores=24, clock_mhz=1850.0),
    "910B2": SocSpec("910B2", cube_cores=24, clock_mhz=1800.0),
    "910B3": SocSpec("910B3", cube_cores=20, clock_mhz=1800.0),
    "910B4": SocSpec("910B4", cube_cores=20, clock_mhz=1500.0, gm_scale=2),
}
# The chip the simulator plans and times for when none is named (`--soc`, `soc=`).
DEFAULT_SOC = "910B2"


def get_soc(soc: str | SocSpec) -> SocSpec:
    if isinstance(soc, SocSpec):
        return soc
    try:
        return SOCS[soc]
    except KeyError:
        raise ValueError(f"unknown SoC {soc!r}; known: {', '.join(SOCS)}") from None
