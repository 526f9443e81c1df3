"""consumer_held.SortedKeys alone: a dict's keys in order among entries left behind, against a
sort of the dict's keys after every change (tests/engine/test_consumer_plans.py checks it
inside a consumer, after every step of its random runs)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetspark.engine import consumer_held
from jetspark.engine.consumer_held import SortedKeys


def _answers(keys: SortedKeys, d: dict, x: int) -> None:
    """Every query answers what a sort of the dict's keys answers."""
    ref = sorted(d)
    keys.check(d)
    assert keys.upto(d, x) == [q for q in ref if q <= x]
    assert keys.above(d, x) == [q for q in ref if q > x]
    skip = set(ref[1::2])
    assert keys.first_above(d, x) == next((q for q in ref if q > x), None)
    assert keys.first_above(d, x, skip) == next((q for q in ref if q > x and q not in skip), None)


# A fetch's keys (ascending, past every key: add_many), keys in any order (add), removals.
OPS = st.one_of(
    st.tuples(st.just("fetch"), st.integers(1, 6)),
    st.tuples(st.just("add"), st.integers(1, 60)),
    st.tuples(st.just("add_many"), st.lists(st.integers(1, 60), max_size=5)),
    st.tuples(st.just("remove"), st.integers(0, 30)),
    st.tuples(st.just("remove_first"), st.integers(1, 8)),
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(OPS, max_size=40), slack=st.sampled_from([0, 2, 1024]), x=st.integers(0, 70))
def test_the_keys_answer_as_a_sort_of_the_dict(ops, slack, x):
    old = consumer_held._SLACK
    consumer_held._SLACK = slack
    try:
        d: dict[int, None] = {}
        keys = SortedKeys()
        top = 0
        for op, arg in ops:
            if op == "fetch":
                new = list(range(top + 1, top + arg + 1))
                d.update(dict.fromkeys(new))
                keys.add_many(new)
            elif op == "add":
                d[arg] = None
                keys.add(arg)
            elif op == "add_many":
                d.update(dict.fromkeys(arg))
                keys.add_many(arg)
            elif op == "remove" and d:
                d.pop(sorted(d)[arg % len(d)])
            elif op == "remove_first":
                for q in sorted(d)[:arg]:
                    del d[q]
            top = max([top, *d])
            keys.settle(d)
            _answers(keys, d, x)
            for probe in (0, top // 2, top):
                _answers(keys, d, probe)
            assert keys.copy().upto(d, top) == sorted(d)
    finally:
        consumer_held._SLACK = old


def test_entries_left_behind_are_dropped_once_they_outnumber_those_that_count():
    old = consumer_held._SLACK
    consumer_held._SLACK = 4
    try:
        d = dict.fromkeys(range(1, 101))
        keys = SortedKeys(d)
        for q in range(2, 101, 2):  # every other one leaves: 50 left behind in the middle
            del d[q]
            keys.settle(d)
        assert len(keys.keys) - keys.lo <= 2 * len(d) + 4
        keys.check(d)
        for q in range(1, 90, 2):  # those at the front go: skipped, then dropped
            del d[q]
            keys.settle(d)
        assert len(keys.keys) <= 2 * len(d) + 4 and keys.upto(d, 100) == sorted(d)
        d.clear()
        keys.settle(d)
        assert (keys.keys, keys.lo) == ([], 0)
    finally:
        consumer_held._SLACK = old


def test_a_key_added_again_while_left_behind_counts_once():
    d = dict.fromkeys([1, 2, 3])
    keys = SortedKeys(d)
    del d[2]
    keys.settle(d)
    d[2] = None
    keys.add(2)
    keys.add_many([3, 2])
    assert keys.keys == [1, 2, 3] and keys.upto(d, 3) == [1, 2, 3]
    keys.add(0)
    d[0] = None
    assert keys.upto(d, 5) == [0, 1, 2, 3]
