"""The keys of one of a consumer's dicts (its pending deliveries, or its delivery counts) in
stream order, so a planner finds those up to a sequence, or the first one past it, at the
cost of what it finds, not of every key (consumer.py ``plan_ack`` under ack policy all,
``plan_advance_floor``, ``plan_purged``; the ack floor's next pending delivery).

``ConsumerState.apply`` keeps it, as it keeps consumer_due.py's index: a key is added when a
record adds it to the dict (a fetch's new deliveries come in stream order, after every key
held so far, so almost always at the end), and nothing is searched for and removed.  An
entry counts while its key is still in the dict; those left behind at the front are skipped
after each record, the others dropped all at once when they outnumber those that count.

The index reads the dict and never changes it (tests/engine/test_consumer_plans.py checks
``check`` after every step of its random runs; tests/engine/test_consumer_held.py checks it
alone).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Collection, Iterable, Optional

__all__ = ["SortedKeys"]

# Entries left behind are dropped all at once past twice those that count and this.
_SLACK = 1024


class SortedKeys:
    """Every key of a dict, ascending, among entries left behind (see the module docstring)."""

    __slots__ = ("keys", "lo")

    def __init__(self, keys: Iterable[int] = ()) -> None:
        self.keys: list[int] = sorted(keys)
        self.lo = 0  # the entries before it are all left behind

    def copy(self) -> SortedKeys:
        out = SortedKeys.__new__(SortedKeys)
        out.keys, out.lo = self.keys[self.lo :], 0
        return out

    # ------------------------------------------------------------------ kept by ConsumerState.apply

    def add(self, q: int) -> None:
        """``q`` is a key of the dict (again, perhaps)."""
        keys = self.keys
        if not keys or q > keys[-1]:
            keys.append(q)
            return
        i = bisect_left(keys, q, self.lo)
        if i == len(keys) or keys[i] != q:
            keys.insert(i, q)

    def add_many(self, qs: list[int]) -> None:
        """Keys of the dict, ascending: a fetch's new deliveries, all past those held so far."""
        keys = self.keys
        if qs and (not keys or qs[0] > keys[-1]) and all(a < b for a, b in zip(qs, qs[1:])):
            keys.extend(qs)
            return
        for q in qs:
            self.add(q)

    def settle(self, d: Collection[int]) -> None:
        """After a record: skip the entries left behind at the front, and drop them all when
        they outnumber those that count."""
        keys, lo = self.keys, self.lo
        n = len(keys)
        if not d:
            self.keys, self.lo = [], 0
            return
        if n - lo > 2 * len(d) + _SLACK:
            self.keys, self.lo = [q for q in keys[lo:] if q in d], 0
            return
        while lo < n and keys[lo] not in d:
            lo += 1
        if lo > _SLACK and 2 * lo > n:
            del keys[:lo]
            lo = 0
        self.lo = lo

    # ------------------------------------------------------------------ read by the planners

    def upto(self, d: Collection[int], x: int) -> list[int]:
        """The dict's keys up to ``x``, ascending."""
        keys = self.keys
        return [q for q in keys[self.lo : bisect_right(keys, x, self.lo)] if q in d]

    def above(self, d: Collection[int], x: int) -> list[int]:
        """The dict's keys past ``x``, ascending."""
        keys = self.keys
        return [q for q in keys[bisect_right(keys, x, self.lo) :] if q in d]

    def first_above(self, d: Collection[int], x: int, skip: Collection[int] = ()) -> Optional[int]:
        """The dict's first key past ``x`` outside ``skip`` (None: none)."""
        keys = self.keys
        for i in range(bisect_right(keys, x, self.lo), len(keys)):  # (islice would walk from the list's start)
            q = keys[i]
            if q in d and q not in skip:
                return q
        return None

    def check(self, d: Collection[int]) -> None:
        """AssertionError unless the entries from ``lo`` on ascend, one per key, and every key
        of the dict is among them (for the tests)."""
        live = self.keys[self.lo :]
        assert all(a < b for a, b in zip(live, live[1:])), f"entries out of order: {live}"
        missing = set(d) - set(live)
        assert not missing, f"keys not in the index: {sorted(missing)}"
