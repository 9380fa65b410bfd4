"""The TPipe runtime protocol of one global-entry pipe of one block (docs/sources.md §3.5; pto-isa include/pto/npu/a2a3/TPush.hpp, TPop.hpp).

`PipeProtocol` is pure bookkeeping, independent of the executor, so that it can be
unit-tested: flag counters, producer/consumer indices, batched free credits and the
destructor drain. Cores are named "cube", "vec0", "vec1".

Flags in 1 cube : 2 vector mode: a set by the cube is seen by both AIVs (one counter
per AIV); the cube's wait needs a set from both AIVs (one counter per AIV, all
decremented together). Generally: a set by core X increments the counter X -> Y for
every peer Y, and a wait by Y needs every counter X -> Y positive.

Producer `t` waits for a free credit at talloc when `t >= S and t % P == 0`
(P = SyncPeriod = S if S <= 2 else S // 2); the consumer's global tfree sends one
credit when `u % P == 0` (u = pops so far); pop and free strictly alternate; at
function exit the producer drains `t // P - waited(t)` credits.
"""

from __future__ import annotations

from ptofa.sim.errors import SimError, SimImbalance, SimSlotHazard

VEC_CORES = ("vec0", "vec1")


def sync_period(slot_num: int) -> int:
    return slot_num if slot_num <= 2 else slot_num // 2


def waited_credits(t: int, slot_num: int) -> int:
    """Credits a producer waited for during its first `t` tallocs: #{i < t : i >= S, i % P == 0}."""
    p = sync_period(slot_num)
    if t <= slot_num:
        return 0
    return (t - 1) // p - (slot_num - 1) // p


def pending_drain(t: int, slot_num: int) -> int:
    """Credits the producer's destructor drains after `t` tallocs: notified - waited."""
    return t // sync_period(slot_num) - waited_credits(t, slot_num)


class PipeProtocol:
    """Counters of one pipe (one id, one block). `dir_mask` 1 = C2V, 2 = V2C."""

    def __init__(self, pipe_id: int, dir_mask: int, slot_num: int, slot_size: int, vec_cores: tuple[str, ...] = VEC_CORES):
        if dir_mask not in (1, 2):
            raise SimError(f"pipe {pipe_id}: dir_mask={dir_mask}; the simulator models one-way pipes (1 = C2V, 2 = V2C)")
        self.pipe_id = pipe_id
        self.dir_mask = dir_mask
        self.slot_num = slot_num
        self.slot_size = slot_size
        self.period = sync_period(slot_num)
        if dir_mask == 1:
            self.producers: tuple[str, ...] = ("cube",)
            self.consumers: tuple[str, ...] = tuple(vec_cores)
        else:
            self.producers = tuple(vec_cores)
            self.consumers = ("cube",)
        self.allocs = {c: 0 for c in self.producers}  # t
        self.pushes = {c: 0 for c in self.producers}
        self.pops = {c: 0 for c in self.consumers}  # u
        self.frees = {c: 0 for c in self.consumers}
        self.unfreed = {c: False for c in self.consumers}
        # ready[(producer, consumer)], free[(consumer, producer)]: flag counters
        self.ready = {(p, c): 0 for p in self.producers for c in self.consumers}
        self.free = {(c, p): 0 for c in self.consumers for p in self.producers}
        self.credits_sent = {c: 0 for c in self.consumers}
        self.credits_taken = {p: 0 for p in self.producers}
        self.drained = {p: 0 for p in self.producers}

    @property
    def kind(self) -> str:
        return "C2V" if self.dir_mask == 1 else "V2C"

    # producer -----------------------------------------------------------------------
    def alloc_needs_credit(self, core: str) -> bool:
        t = self.allocs[core]
        return t >= self.slot_num and t % self.period == 0

    def has_credit(self, core: str) -> bool:
        for c in self.consumers:
            if self.free[(c, core)] <= 0:
                return False
        return True

    def take_credit(self, core: str) -> None:
        for c in self.consumers:
            self.free[(c, core)] -= 1
        self.credits_taken[core] += 1

    def alloc(self, core: str) -> int:
        """Bind the next slot (credit already taken if needed); returns the producer index t.

        Raises SimSlotHazard when slot t % S still holds entry t - S unfreed by a consumer.
        """
        t = self.allocs[core]
        if t >= self.slot_num:
            behind = [c for c in self.consumers if self.frees[c] < t - self.slot_num + 1]
            if behind:
                raise SimSlotHazard(
                    f"pipe {self.pipe_id}: talloc #{t + 1} on {core} re-binds slot {t % self.slot_num} while "
                    f"{', '.join(behind)} has not freed entry #{t - self.slot_num + 1} that last used it "
                    f"(slot_num {self.slot_num} is not a multiple of the sync period {self.period}: "
                    f"TALLOC waits only when t % {self.period} == 0; {self.counts()})"
                )
        self.allocs[core] = t + 1
        return t

    def push(self, core: str) -> int:
        n = self.pushes[core]
        if n >= self.allocs[core]:
            raise SimImbalance(f"pipe {self.pipe_id}: tpush #{n + 1} on {core} without a talloc ({self.counts()})")
        self.pushes[core] = n + 1
        for c in self.consumers:
            self.ready[(core, c)] += 1
        return n

    def drain_needed(self, core: str) -> int:
        return pending_drain(self.allocs[core], self.slot_num)

    # consumer -----------------------------------------------------------------------
    def has_data(self, core: str) -> bool:
        for p in self.producers:
            if self.ready[(p, core)] <= 0:
                return False
        return True

    def check_pop(self, core: str) -> None:
        if self.unfreed[core]:
            raise SimImbalance(
                f"pipe {self.pipe_id}: second tpop on {core} before the tfree of pop #{self.pops[core]} "
                f"(global entries need strict pop/free alternation; {self.counts()})"
            )

    def pop(self, core: str) -> int:
        """Consume the ready flag (data present); returns the consumer index u."""
        self.check_pop(core)
        for p in self.producers:
            self.ready[(p, core)] -= 1
        u = self.pops[core]
        self.pops[core] = u + 1
        self.unfreed[core] = True
        return u

    def release(self, core: str) -> bool:
        """Global tfree; returns True when it sent a free credit."""
        if not self.unfreed[core]:
            raise SimImbalance(
                f"pipe {self.pipe_id}: tfree on {core} without a preceding unmatched tpop "
                f"(pops {self.pops[core]}, frees {self.frees[core]}; {self.counts()})"
            )
        self.unfreed[core] = False
        self.frees[core] += 1
        if self.pops[core] % self.period == 0:
            for p in self.producers:
                self.free[(core, p)] += 1
            self.credits_sent[core] += 1
            return True
        return False

    # reporting ----------------------------------------------------------------------
    def counts(self) -> str:
        prod = ", ".join(f"{c} talloc {self.allocs[c]} push {self.pushes[c]}" for c in self.producers)
        cons = ", ".join(f"{c} pop {self.pops[c]} free {self.frees[c]}" for c in self.consumers)
        return f"{prod}; {cons}"

    def describe(self) -> str:
        ready = ", ".join(f"{p}->{c} {n}" for (p, c), n in self.ready.items())
        free = ", ".join(f"{c}->{p} {n}" for (c, p), n in self.free.items())
        sent = ", ".join(f"{c} {n}" for c, n in self.credits_sent.items())
        taken = ", ".join(f"{p} {n}" for p, n in self.credits_taken.items())
        return (
            f"pipe {self.pipe_id} ({self.kind}, slot_num {self.slot_num}, sync period {self.period}, "
            f"slot {self.slot_size} B): {self.counts()}; ready flags pending [{ready}]; "
            f"free credits available [{free}], sent [{sent}], consumed [{taken}]"
        )

    def imbalance(self) -> str | None:
        """Why the totals do not balance at kernel exit, or None."""
        problems = []
        for p in self.producers:
            if self.allocs[p] != self.pushes[p]:
                problems.append(f"{p}: {self.allocs[p]} tallocs but {self.pushes[p]} tpushes")
        for c in self.consumers:
            if self.pops[c] != self.frees[c]:
                problems.append(f"{c}: {self.pops[c]} tpops but {self.frees[c]} tfrees")
            for p in self.producers:
                if self.pushes[p] != self.pops[c]:
                    problems.append(f"{p} pushed {self.pushes[p]} but {c} popped {self.pops[c]}")
        if not problems:
            return None
        return f"pipe {self.pipe_id} ({self.kind}): " + "; ".join(problems)
