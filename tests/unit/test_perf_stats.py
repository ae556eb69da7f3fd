"""amqpd/perf statistics: histograms, percentiles, confirm bookkeeping, profile summaries."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from interop.perf.confirms import ConfirmTracker
from interop.perf.profiles import format_table, top_functions
from interop.perf.stats import Histogram, bucket_bounds, bucket_of


@given(st.integers(0, 2**40))
def test_bucket_contains_value_within_two_percent(value: int) -> None:
    low, high = bucket_bounds(bucket_of(value))
    assert low <= value <= high
    assert high - low <= max(value, 1) / 32


@given(st.integers(0, 2**30), st.integers(0, 2**30))
def test_buckets_are_monotonic(a: int, b: int) -> None:
    if a <= b:
        assert bucket_of(a) <= bucket_of(b)


def test_percentiles_of_uniform_values() -> None:
    h = Histogram()
    for v in range(1, 1001):
        h.record(v)
    s = h.summary()
    assert (s.count, s.low, s.high) == (1000, 1, 1000)
    assert s.mean == 500.5
    assert abs(s.percentiles[50.0] - 500) <= 500 / 32
    assert abs(s.percentiles[99.0] - 990) <= 990 / 32
    assert h.percentile(100) == 1000
    assert h.percentile(0) == 1


@given(st.lists(st.tuples(st.integers(0, 10**7), st.integers(1, 50)), min_size=1, max_size=40))
def test_weighted_percentile_close_to_exact(samples: list[tuple[int, int]]) -> None:
    h = Histogram()
    values: list[int] = []
    for value, weight in samples:
        h.record(value, weight)
        values += [value] * weight
    values.sort()
    for pct in (50.0, 99.0, 99.9):
        exact = values[max(math.ceil(len(values) * pct / 100), 1) - 1]
        assert abs(h.percentile(pct) - exact) <= max(exact / 32, 1)


def test_merge_equals_recording_everything() -> None:
    a, b, both = Histogram(), Histogram(), Histogram()
    for v in (5, 70, 900):
        a.record(v)
        both.record(v)
    for v in (3, 12_000):
        b.record(v, 2)
        both.record(v, 2)
    a.merge(b)
    assert a == both
    empty = Histogram()
    empty.merge(Histogram())
    assert empty.summary().count == 0


def test_negative_latency_counts_as_zero() -> None:
    h = Histogram()
    h.record(-5)
    assert (h.low, h.high, h.count) == (0, 0, 1)


def test_confirm_multiple_settles_across_batches() -> None:
    t = ConfirmTracker()
    t.publish(3, stamp=100)  # 1-3
    t.publish(2, stamp=200)  # 4-5
    assert t.confirm(4, multiple=True) == [(100, 3), (200, 1)]
    assert t.outstanding == 1
    assert t.confirm(5, multiple=True) == [(200, 1)]
    assert t.outstanding == 0
    assert t.confirm(5, multiple=True) == []


def test_confirm_singles_are_not_counted_twice() -> None:
    t = ConfirmTracker()
    t.publish(5, stamp=7)
    assert t.confirm(3, multiple=False) == [(7, 1)]
    assert t.confirm(3, multiple=False) == []
    assert t.confirm(1, multiple=False) == [(7, 1)]
    assert t.confirm(5, multiple=True) == [(7, 3)]  # 2, 4, 5
    assert (t.settled, t.outstanding) == (5, 0)


@given(st.lists(st.integers(1, 20), min_size=1, max_size=10), st.data())
def test_confirm_settles_each_message_once(batches: list[int], data: st.DataObject) -> None:
    t = ConfirmTracker()
    for n, size in enumerate(batches):
        t.publish(size, stamp=n)
    total = sum(batches)
    settled = 0
    for _ in range(30):
        tag = data.draw(st.integers(1, total))
        multiple = data.draw(st.booleans())
        settled += sum(count for _stamp, count in t.confirm(tag, multiple))
    settled += sum(count for _stamp, count in t.confirm(total, multiple=True))
    assert settled == total == t.settled
    assert t.outstanding == 0


STACK = "<module> (amqpd/__main__.py:143);run (anyio/_core/_eventloop.py:83);read (amqpd/server.py:"
RAW = "\n".join(
    [
        f"{STACK}212);next_frame (/x/amqpd/codec.py:99) 6",
        f"{STACK}212);next_frame (/x/amqpd/codec.py:101) 2",
        f"{STACK}215) 2",
    ]
)


def test_profile_summary_own_and_total() -> None:
    profile = top_functions(RAW)
    assert (profile.samples, profile.idle) == (10, 0)
    top = profile.functions[0]
    assert (top.name, top.own, top.total) == ("next_frame (amqpd/codec.py)", 8, 8)
    read = next(f for f in profile.functions if f.name.startswith("read"))
    assert (read.own, read.total) == (2, 10)
    table = format_table(profile)
    assert "| 80.0 | 80.0 | `next_frame (amqpd/codec.py)` |" in table


WORKER = "Thread._bootstrap (threading.py:1002);_connection_worker_thread (aiosqlite/core.py:"
THREADS = "\n".join(
    [
        f"thread (11): MainThread;{STACK}212);next_frame (/x/amqpd/codec.py:99) 6",
        f"thread (12): Thread-1 (_connection_worker_thread);{WORKER}63) 3",
        f"thread (13): Thread-2 (_connection_worker_thread);{WORKER}63) 1",
        f"thread (13): Thread-2 (_connection_worker_thread);{WORKER}59) 90",
    ]
)


def test_profile_threads_and_idle_waits() -> None:
    profile = top_functions(THREADS)
    assert (profile.samples, profile.idle) == (10, 90)
    assert profile.threads == {"MainThread": 6, "Thread (_connection_worker_thread)": 4}
    assert [f.name for f in profile.functions] == [
        "next_frame (amqpd/codec.py)",
        "_connection_worker_thread (aiosqlite/core.py)",
    ]
    assert "MainThread 60 %" in format_table(profile)
