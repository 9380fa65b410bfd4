"""Property tests of the pipe protocol (docs/sources.md §3.5) and of the tile_buf type syntax."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from ptofa.sim.errors import SimSlotHazard
from ptofa.sim.pipes import PipeProtocol, pending_drain, sync_period


# Slot counts the protocol is safe for: a multiple of the sync period (<= 2 or even).
SAFE_SLOT_NUMS = st.integers(1, 16).filter(lambda s: s % sync_period(s) == 0)


@settings(max_examples=300, deadline=None)
@given(
    slot_num=SAFE_SLOT_NUMS,
    pushes=st.integers(0, 120),
    schedule=st.lists(st.integers(0, 2), min_size=1, max_size=2000),
)
def test_batched_credits_never_overwrite_a_live_slot_and_drain_exactly(slot_num, pushes, schedule):
    """Random interleavings of one cube producer and two vector consumers (C2V, global entries).

    - a slot is never re-allocated before both consumers freed the entry that last used it;
    - when the consumers pop and free everything, the producer never blocks for good;
    - at the end the destructor drains exactly the credits that are pending (no hang, none left).
    """
    pipe = PipeProtocol(0, 1, slot_num, 1024)
    actors = ("cube", "vec0", "vec1")
    steps = itertools.chain(schedule, itertools.cycle((0, 1, 2)))  # random prefix, then round-robin
    stalled = 0
    while pipe.pushes["cube"] < pushes or any(pipe.frees[c] < pushes for c in ("vec0", "vec1")):
        actor = actors[next(steps)]
        progressed = False
        if actor == "cube" and pipe.allocs["cube"] < pushes:
            if not pipe.alloc_needs_credit("cube") or pipe.has_credit("cube"):
                if pipe.alloc_needs_credit("cube"):
                    pipe.take_credit("cube")
                t = pipe.alloc("cube")
                # slot t % S last held entry t - S: both consumers must have freed it
                assert all(pipe.frees[c] >= t - slot_num + 1 for c in ("vec0", "vec1"))
                pipe.push("cube")
                progressed = True
        elif actor != "cube" and pipe.has_data(actor):
            pipe.pop(actor)
            pipe.release(actor)
            progressed = True
        stalled = 0 if progressed else stalled + 1
        if stalled > 6:  # nobody could move on its turn: let every actor try in order
            moved = False
            for a in actors:
                if a == "cube" and pipe.allocs["cube"] < pushes and (not pipe.alloc_needs_credit("cube") or pipe.has_credit("cube")):
                    moved = True
                elif a != "cube" and pipe.has_data(a):
                    moved = True
            assert moved, f"deadlock with consumers keeping up: {pipe.describe()}"
            stalled = 0
    assert pipe.imbalance() is None
    for consumer in ("vec0", "vec1"):
        assert pipe.free[(consumer, "cube")] == pending_drain(pushes, slot_num)


@pytest.mark.parametrize("slot_num", [5, 7, 9])
def test_odd_slot_num_reuses_a_live_slot(slot_num):
    """pto-isa's TALLOC waits only when t % SyncPeriod == 0: with S = 5 (P = 2) the talloc at
    t = 5 re-binds slot 0 without waiting; the simulator reports it instead of racing."""
    pipe = PipeProtocol(0, 1, slot_num, 1024)
    for _ in range(slot_num):
        assert not pipe.alloc_needs_credit("cube")
        pipe.alloc("cube")
        pipe.push("cube")
    assert not pipe.alloc_needs_credit("cube")  # t = S is not a multiple of P: no wait
    with pytest.raises(SimSlotHazard, match=r"re-binds slot 0 while vec0, vec1 has not freed entry #1"):
        pipe.alloc("cube")


@given(slot_num=st.integers(1, 64), t=st.integers(0, 1024))
def test_drain_count_is_notified_minus_waited(slot_num, t):
    period = sync_period(slot_num)
    waited = sum(1 for i in range(t) if i >= slot_num and i % period == 0)
    assert pending_drain(t, slot_num) == t // period - waited >= 0


_LOCS = st.sampled_from(["vec", "mat", "left", "right", "acc"])


@st.composite
def tile_types(draw):
    loc = draw(_LOCS)
    dtype = draw(st.sampled_from(["f16", "f32"]))
    esize = 2 if dtype == "f16" else 4
    blayout = draw(st.sampled_from(["row_major", "col_major"]))
    slayout = "none_box" if loc == "vec" else draw(st.sampled_from(["none_box", "row_major", "col_major"]))
    unit = 32 // esize
    rows = draw(st.integers(1, 16)) * (unit if blayout == "col_major" else 1)
    cols = draw(st.integers(1, 16)) * (unit if blayout == "row_major" else 1)
    v_row = draw(st.one_of(st.none(), st.integers(0, rows)))
    v_col = draw(st.one_of(st.none(), st.integers(0, cols)))
    fractal = draw(st.sampled_from([32, 512, 1024]))
    pad = draw(st.integers(0, 3))
    return f"!pto.tile_buf<{loc}, {rows}x{cols}x{dtype}" + (
        f", valid={rows if v_row is None else v_row}x{cols if v_col is None else v_col}"
    ) + f", blayout={blayout}, slayout={slayout}, fractal={fractal}, pad={pad}>"


@settings(max_examples=200, deadline=None)
@given(spelling=tile_types())
def test_tile_buf_prints_and_parses_back(spelling):
    from ptofa.api import parse_ir_type
    from ptofa.ir.dialect import TileBufType

    parsed = parse_ir_type(spelling)
    assert isinstance(parsed, TileBufType)
    printed = str(parsed)
    again = parse_ir_type(printed)
    assert again == parsed and str(again) == printed
