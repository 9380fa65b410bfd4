"""Execution trace of a simulated launch: the contract between the functional
simulator (which records it) and the timing model (which replays it).

The simulator appends one `TraceOp` per executed op of interest (tile ops, pipe
ops, and one `scalar` record per executed scalar/control op batch) to the list
of the core that ran it, in program order. Buffers are identified by small
integers: one id per `pto.alloc_tile` execution root (aliases made by
`treshape`/`subview` report the root's id), and one id per pipe slot
(`("slot", pipe_id, slot_index)` mapped to an int by the simulator), so that
read-after-write and write-after-read hazards can be found by id.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class TraceOp:
    core: str  # "cube", "vec0", "vec1"
    block: int  # block index of the launch
    op: str  # op name, e.g. "pto.tload", "pto.tmatmul", "pto.tpop_from_aic"
    line: int  # 1-based line in the .pto file (0 when unknown)
    stage: str  # "qk", "p", "pv", "gu" or "other" (from tile names / pipe ids)
    reads: tuple[int, ...] = ()  # buffer ids read (tiles and GM slots)
    writes: tuple[int, ...] = ()  # buffer ids written
    nbytes: int = 0  # bytes moved by loads / stores / movs
    elems: int = 0  # elements processed by a vector op (valid region of the dst)
    macs: int = 0  # multiply-accumulates of a matmul (m*k*n)
    src_loc: str = ""  # memory space of the source tile/view ("gm", "mat", "acc", "vec", ...)
    dst_loc: str = ""  # memory space of the destination
    pipe_id: int = -1  # for pipe ops: the pipe id
    pipe_kind: str = ""  # "talloc", "tpush", "tpop", "tfree" for pipe ops
    pipe_index: int = -1  # producer t or consumer u counter value used by this op
    scalar_ops: int = 0  # for op == "scalar": number of scalar/control ops batched
    extra: dict = field(default_factory=dict)
    # elements read from the source by a vector op, when that differs from `elems`
    # (row reductions: src [r, c] -> dst [r, 1]); 0 means "same as elems"
    src_elems: int = 0
    # widest element (bytes) among a vector op's tile operands: a vector repeat moves 256 B,
    # so an f16 op takes half the repeats of an f32 one (a cast counts its wider side)
    elem_bytes: int = 4
    rows: int = 0  # valid rows of a vector op's destination (the column broadcast of trowexpand*)
    # GM side of a load or store: (buffer id, byte offset, shape, strides in elements, element bytes),
    # so the timing model can tell a re-read of the same bytes (an L2 hit) from new bytes (HBM)
    gm_view: tuple = ()


@dataclass
class Trace:
    """Per (block, core) op lists of one launch."""

    block_dim: int
    cores: dict[tuple[int, str], list[TraceOp]] = field(default_factory=dict)

    def ops(self, block: int, core: str) -> list[TraceOp]:
        return self.cores.setdefault((block, core), [])
