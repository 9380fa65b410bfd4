"""Per-chip constants of the timing model (`ptofa.sim.timing`): one table, one source of truth.

Every constant names its public source or says "assumption". None is fitted to a measured
FlashAttention time; the model ranks schedules and names the resource that bounds them.

Sources:

* CANN platform config: the per-chip `.ini` files the CANN compiler reads, published in
  github.com/hicann/runtime (`src/platform/platform_config/Ascend910B2.ini` and
  `Ascend910B4-1.ini` at commit d8beaaf0955bc307cdda0ae971275fb48f652a26,
  `src/platform/platform_config/cann/Ascend910B1.ini` at 40a53042498b39cbc15037d5a320da1337dcaf0d,
  `cann/Ascend910B3.ini` at a4fd6501122a9da5b1d3e1fb60c94efe534e8857, `cann/Ascend910B4.ini` at
  494dda3604a35ee34a40c4eca47475475fde5631; "910B4" below is `Ascend910B4.ini`): `[SoCInfo]` core
  counts and L2 size, `[AICoreSpec]` `cube_freq` and the cube size, `[AICoreMemoryRates]` bytes per
  cycle per AI core (`ddr_rate=32`, `l2_rate=110`, `l2_read_rate=110`, `l2_write_rate=86`,
  `ub_to_l2_rate=64`; the same on every 910B part).
* pto-isa A2/A3 cost model: the instruction cost model that ships with pto-isa
  (github.com/PTO-ISA/pto-isa, include/pto/costmodel/): per-core data-path bandwidths in
  `arch_config.hpp` (kA2A3ArchConfig, GB/s of 2^30 bytes at its kMainFrequencyHz = 1.85 GHz,
  turned into bytes per cycle below), vector instruction costs in
  `a2a3/cce_costmodel/cce_costmodel_vector_compute.hpp` (EstimateLinearCycles head, slope per
  repeat, tail) and the cube's `mad` in `cce_costmodel_cube.hpp`.

Rates are in bytes (or MACs) per cycle of the AI Core clock; AIC and AIV are assumed to run at
the ini's one `cube_freq` (assumption: the ini gives no separate vector clock).
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
# (cce_costmodel_vector_compute.hpp). A repeat is one 256 B chunk. pto-isa's vector stream model
# (github.com/azizbek-khabibov/pto-isa, a fork of pto-isa, commit
# bd32f495deacb41133ff8b24067e327f15f8afe3, include/pto/costmodel/a2a3/cce_costmodel/
# cce_costmodel_core.hpp, EstimateLinearCycles): head + tail is the instruction's start-up
# latency, paid at the start of a stream (the first vector instruction since the vector queue
# went idle); back-to-back instructions overlap it and pay only the slope. `ptofa.sim.timing`
# charges it that way: a V op that follows the previous one back to back pays no start-up.
VECTOR_INSTRUCTIONS: dict[str, tuple[int, int, int]] = {
    "vadd": (10, 2, 14), "vsub": (10, 2, 14), "vmax": (10, 2, 14), "vmin": (10, 2, 14),
    "vmul": (10, 2, 15), "vdiv": (11, 4, 19),
    "vadds": (13, 1, 18), "vmuls": (11, 1, 15), "vmaxs": (10, 1, 13), "vmins": (14, 1, 16),
    "vexp": (13, 2, 18), "vln": (13, 2, 20), "vsqrt": (14, 2, 25), "vrsqrt": (10, 1, 14),
    "vabs": (13, 1, 16), "vrelu": (10, 1, 13), "vsel": (13, 2, 14),
    "vand": (8, 2, 12), "vor": (8, 2, 12), "vnot": (8, 2, 12),
    # EstimateVconvCycles, calibrated on 910B3 (fp32 -> fp16, 0.90 * repeat + 27; the fork above)
    "vconv": (14, 1, 13),
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
    cube_cores: int  # AIC count: the ini's cube_core_cnt (one block = one AIC + its AIVs)
    clock_mhz: float  # the ini's cube_freq
    l2_bytes: int  # the ini's l2_size: one L2 shared by every core of the chip
    vec_per_cube: int = 2  # AIVs per block: the ini's vector_core_cnt / cube_core_cnt

    # Compute rates.
    # 16x16x16 fp16 MACs per cube execution (the ini's cube_m/n/k_size = 16; pto-isa A2/A3 cost
    # model: `mad` takes one cycle per 16x16x16 fractal of f16).
    cube_macs_per_cycle: int = 4096
    # Bytes of one vector repeat (Ascend C vector API: one repeat processes 256 B, 8 datablocks
    # of 32 B). The cycles a repeat takes are per instruction in VECTOR_INSTRUCTIONS.
    vec_bytes_per_cycle: int = 256
    # Cost multiplier of the few vector ops with no entry in VECTOR_INSTRUCTIONS' mapping
    # (column-broadcast div; assumption), applied to the binary-op slope.
    vec_transcendental_factor: float = 4.0
    # Cost multiplier of column reductions, sorts and arg-reductions, applied to the source
    # elements (assumption: a tree of halving passes costs about twice one pass). Row reductions
    # and row broadcasts are costed per instruction from pto-isa's A2/A3 code instead
    # (ptofa.sim.op_costs.row_reduce_cycles).
    vec_reduce_factor: float = 2.0

    # Data paths of one core, bytes per cycle.
    # On chip, pto-isa A2/A3 cost model (kA2A3ArchConfig): L1 -> L0A 441.0 and L1 -> L0B
    # 220.5 GB/s, i.e. 256 and 128 B/cycle (the ini's l1_to_l0_a/b_rate say 512 / 256; the
    # instruction-level figure is kept, the lower of the two).
    mte1_l1_to_l0a_bytes: float = _ptoisa_bytes_per_cycle(441.0)
    mte1_l1_to_l0b_bytes: float = _ptoisa_bytes_per_cycle(220.5)
    # GM side: every GM access goes through the L2. A load (MTE2, into L1 or UB) reads at the
    # ini's l2_read_rate, a cube store (FIX, L0C -> GM) writes at its l2_write_rate and a vector
    # store (MTE3) at its ub_to_l2_rate. These are one core's own port; what all cores move
    # together is bounded by the shared figures below (`shared_limits.shared_floor_us`).
    mte2_gm_bytes: float = 110.0
    fix_l0c_to_gm_bytes: float = 86.0
    mte3_ub_to_gm_bytes: float = 64.0

    # Shared by every core of a launch, bytes per cycle per AI core (the ini's rates are per AI
    # core; the chip's aggregate is that rate times cube_core_cnt).
    # L2: the ini's l2_rate (reads and writes together). Assumption: the L2 sustains each AI
    # core's rate with all of them streaming at once, and no more; the README shows the
    # headline predictions with it halved and doubled.
    l2_shared_bytes: float = 110.0
    # HBM: the ini's ddr_rate; times 24 cores at 1.8 GHz it is 1.38 TB/s on 910B2, the order of
    # the ~1.6 TB/s commonly quoted for 910B parts.
    hbm_shared_bytes: float = 32.0

    # Fixed costs in cycles.
    mte2_op_cycles: int = 50  # pto-isa perf-sim l2_hit_latency (include/pto/costmodel/perf_sim/config.hpp)
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

    # Fixed costs of a launch, in microseconds (wall time, not clock cycles). Public measurement
    # on A2/A3: github.com/hw-native-sys/simpler, docs/investigations/
    # 2026-06-aicore-cold-start-warmup.md (commit 3ebad469f0217449ab8d7c72af4e94c78dc1627d),
    # MIX tasks of 24 blocks on 72 AI cores, dispatch -> start per core.
    # A launch's first wave: a core's first task starts 0.3-5.6 us after dispatch (NoC / FFTS
    # routing, not software), and a launch waits for its slowest core: the measured maximum.
    first_wave_start_us: float = 5.6
    # Every later block on a core, and the first wave of a launch queued right behind another on
    # the same stream (the reduce after a split forward: a chained task): steady-state dispatch ->
    # start 0.2-0.5 us; a block starts when the last of its three cores (AIC + 2 AIV) does, the
    # upper end (`timing.launch_cycles`).
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
        """Cube peak, 2 flops per MAC."""
        return self.cube_cores * self.cube_macs_per_cycle * 2 * self.clock_hz

    @property
    def hbm_bytes_per_cycle_per_core(self) -> float:
        """HBM share of one block when every cube core streams (the ini's ddr_rate)."""
        return self.hbm_shared_bytes

    @property
    def hbm_bytes_per_s(self) -> float:
        """The chip's HBM bandwidth: every cube core's share together."""
        return self.hbm_shared_bytes * self.cube_cores * self.clock_hz

    @property
    def l2_bytes_per_s(self) -> float:
        """The chip's L2 bandwidth, reads and writes together: every AI core's share."""
        return self.l2_shared_bytes * self.cube_cores * self.clock_hz

    def host_synchronised_us(self, kernel_us: float) -> float:
        """What a host clock reads around one call that launches the kernel and then synchronises:
        the host's enqueue (`host_launch_us`), which the device waits for when nothing is queued
        ahead of the launch, then the kernel. The synchronize's own return to the host has no public
        figure and is not added, so this is a lower bound of such a reading."""
        return self.host_launch_us + kernel_us

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_mhz

    @property
    def block_start_cycles(self) -> float:
        return self.block_start_us * self.clock_mhz

    def first_wave_extra_cycles(self, queued: bool = False) -> float:
        """What a launch's first wave waits beyond a later block's start-up (nothing for a launch
        `queued` behind another)."""
        return 0.0 if queued else max(0.0, self.first_wave_start_us - self.block_start_us) * self.clock_mhz

    def with_cube_cores(self, cores: int | None) -> SocSpec:
        """This part's facts with `cores` cube cores (a device may expose fewer; None: its own)."""
        return self if cores is None or cores == self.cube_cores else dataclasses.replace(self, cube_cores=int(cores))

    def launch_start_us(self, block_dim: int, queued: bool = False) -> float:
        """Block start-ups on the busiest core of a launch: the first wave's (a later block's for a
        launch `queued` behind another), then one per later wave (`timing.launch_cycles`)."""
        first = self.block_start_us if queued else self.first_wave_start_us
        return first + (math.ceil(block_dim / self.cube_cores) - 1) * self.block_start_us


_MIB = 1 << 20
# cube_core_cnt, cube_freq and l2_size of each part's CANN platform config (see the module docstring).
SOCS: dict[str, SocSpec] = {
    "910B1": SocSpec("910B1", cube_cores=24, clock_mhz=1850.0, l2_bytes=192 * _MIB),
    "910B2": SocSpec("910B2", cube_cores=24, clock_mhz=1800.0, l2_bytes=192 * _MIB),
    "910B3": SocSpec("910B3", cube_cores=20, clock_mhz=1800.0, l2_bytes=192 * _MIB),
    "910B4": SocSpec("910B4", cube_cores=20, clock_mhz=1500.0, l2_bytes=96 * _MIB),
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
