"""Tests for publisher-confirm coalescing and tracking (confirms package)."""

from __future__ import annotations

import itertools
import random
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from confirms import ConfirmFrame, ConfirmTracker, coalesce


def ack(tag: int, multiple: bool = False) -> ConfirmFrame:
    return ConfirmFrame(True, tag, multiple)


def nack(tag: int, multiple: bool = False) -> ConfirmFrame:
    return ConfirmFrame(False, tag, multiple)


# --------------------------------------------------------------------------- client models


class SetClient:
    """A client that keeps outstanding tags in a set (Java client, pika)."""

    def __init__(self) -> None:
        self.outstanding: set[int] = set()
        self.result: dict[int, bool] = {}

    def publish(self, tag: int) -> None:
        self.outstanding.add(tag)

    def apply(self, frame: ConfirmFrame) -> dict[int, bool]:
        """Apply one frame; return what it settled. Fails on a frame for a stale tag."""
        tag = frame.delivery_tag
        assert tag in self.outstanding, f"{frame} refers to a tag not outstanding"
        settled = [t for t in self.outstanding if t <= tag] if frame.multiple else [tag]
        out: dict[int, bool] = {}
        for t in settled:
            assert t not in self.result, f"{t} settled twice"
            self.outstanding.discard(t)
            self.result[t] = frame.ack
            out[t] = frame.ack
        return out


class GoClient:
    """The resequencing confirm logic of rabbitmq/amqp091-go (confirms.go), re-expressed.

    ``Multiple(T)`` labels every tag from ``expecting`` to ``T`` with the frame's kind,
    including tags already received out of order as single frames.
    """

    def __init__(self) -> None:
        self.published = 0
        self.expecting = 1
        self.sequencer: dict[int, bool] = {}
        self.emitted: dict[int, bool] = {}

    def publish(self) -> None:
        self.published += 1

    def _confirm(self, ack: bool) -> None:
        tag = self.expecting
        self.sequencer.pop(tag, None)
        assert tag not in self.emitted, f"go client emitted {tag} twice"
        self.emitted[tag] = ack
        self.expecting += 1

    def _resequence(self) -> None:
        while self.expecting <= self.published and self.expecting in self.sequencer:
            self._confirm(self.sequencer[self.expecting])

    def apply(self, frame: ConfirmFrame) -> None:
        tag = frame.delivery_tag
        if frame.multiple:
            while self.expecting <= tag:
                self._confirm(frame.ack)
        else:
            assert tag >= self.expecting, f"single frame for already confirmed {tag}"
            if tag == self.expecting:
                self._confirm(frame.ack)
            else:
                self.sequencer[tag] = frame.ack
        self._resequence()

    def view(self) -> dict[int, bool]:
        """Everything received so far: emitted, or held for resequencing."""
        return {**self.sequencer, **self.emitted}


def apply_to_clients(
    frames: list[ConfirmFrame], n: int
) -> tuple[SetClient, GoClient, dict[int, bool]]:
    """Publish 1..n on both client models, apply ``frames``; return (set, go, settled)."""
    sc, gc = SetClient(), GoClient()
    for tag in range(1, n + 1):
        sc.publish(tag)
        gc.publish()
    settled: dict[int, bool] = {}
    for frame in frames:
        settled.update(sc.apply(frame))
        gc.apply(frame)
    return sc, gc, settled


def assert_ascending(frames: list[ConfirmFrame]) -> None:
    tags = [f.delivery_tag for f in frames]
    assert tags == sorted(set(tags)), f"frames not strictly ascending: {frames}"


# --------------------------------------------------------------------------- coalesce: examples


def test_coalesce_nothing() -> None:
    assert coalesce([], [], None) == []
    assert coalesce([], [], 7) == []


def test_coalesce_thousand_acks_at_once_is_one_frame() -> None:
    assert coalesce(range(1, 1001), [], None) == [ack(1000, True)]


def test_coalesce_gap_at_unconfirmed() -> None:
    assert coalesce([1, 2, 3, 5], [], 4) == [ack(3, True), ack(5)]


def test_coalesce_single_ack_is_not_multiple() -> None:
    assert coalesce([1], [], None) == [ack(1)]
    assert coalesce([4], [], 5) == [ack(4)]


def test_coalesce_everything_above_cutoff_is_single() -> None:
    assert coalesce([9, 7, 8], [], 2) == [ack(7), ack(8), ack(9)]


def test_coalesce_unordered_input_and_generators() -> None:
    assert coalesce((s for s in [5, 1, 3, 2, 4]), iter(()), None) == [ack(5, True)]


def test_coalesce_duplicates_count_once() -> None:
    assert coalesce([2, 2], [], None) == [ack(2)]
    assert coalesce([6, 6, 1], [], 3) == [ack(1), ack(6)]
    assert coalesce([1, 1], [2, 2], None) == [ack(1), nack(2)]


def test_coalesce_nacks_only() -> None:
    assert coalesce([], range(1, 11), None) == [nack(10, True)]
    assert coalesce([], [1, 2, 5], 3) == [nack(2, True), nack(5)]


def test_coalesce_mixed_runs_ascending() -> None:
    frames = coalesce([1, 2, 4, 5], [3], None)
    assert frames == [ack(2, True), nack(3), ack(5, True)]


def test_coalesce_mixed_with_cutoff() -> None:
    frames = coalesce([1, 2, 6, 8], [3, 4, 7], 5)
    assert frames == [ack(2, True), nack(4, True), ack(6), nack(7), ack(8)]


def test_coalesce_never_reaches_over_other_kind() -> None:
    # nack(2) + ack(3, multiple) would be one frame shorter, but amqp091-go would
    # then report 2 as acked.
    assert coalesce([1, 3], [2], None) == [ack(1), nack(2), ack(3)]


def test_coalesce_rejects_overlap() -> None:
    with pytest.raises(ValueError, match="both acked and nacked"):
        coalesce([1, 2], [2], None)
    with pytest.raises(ValueError, match="unconfirmed"):
        coalesce([1, 2], [], 2)
    with pytest.raises(ValueError, match="unconfirmed"):
        coalesce([1], [2], 2)


def test_confirm_frame_is_frozen_and_slotted() -> None:
    frame = ack(1)
    with pytest.raises(AttributeError):
        frame.ack = False  # type: ignore[misc]
    assert not hasattr(frame, "__dict__")


# --------------------------------------------------------------------------- coalesce: properties


@st.composite
def flushes(draw: st.DrawFn) -> tuple[int, dict[int, str]]:
    """Labels over 1..n: 'A' acked now, 'N' nacked now, 'U' unsettled, 'R' reported before."""
    n = draw(st.integers(1, 60))
    labels = draw(st.lists(st.sampled_from("AANUR"), min_size=n, max_size=n))
    return n, dict(enumerate(labels, start=1))


@given(flushes())
def test_coalesce_settles_exactly_the_flush(case: tuple[int, dict[int, str]]) -> None:
    n, labels = case
    acked = [t for t, lab in labels.items() if lab == "A"]
    nacked = [t for t, lab in labels.items() if lab == "N"]
    unsettled = [t for t, lab in labels.items() if lab == "U"]
    smallest = min(unsettled, default=None)
    random.Random(n).shuffle(acked)
    frames = coalesce(acked, nacked, smallest)
    assert_ascending(frames)

    sc = SetClient()
    for t, lab in labels.items():
        if lab != "R":
            sc.publish(t)
    settled: dict[int, bool] = {}
    for frame in frames:
        settled.update(sc.apply(frame))
    assert settled == {t: lab == "A" for t, lab in labels.items() if lab in "AN"}
    assert sc.outstanding == set(unsettled)
    assert len(frames) <= len(acked) + len(nacked)
    if not nacked and acked and (smallest is None or max(acked) < smallest):
        assert len(frames) == 1


# (set-client outstanding, go expecting, go sequencer items, go emitted)
_BfsState = tuple[frozenset[int], int, frozenset[tuple[int, bool]], frozenset[int]]


def _min_go_safe_frames(labels: str) -> int:
    """Fewest frames valid for both client models, by breadth-first search.

    ``labels[i]`` is the label of tag ``i + 1``: 'A' ack, 'N' nack, 'U' unsettled.
    """
    n = len(labels)
    want = {i + 1: lab == "A" for i, lab in enumerate(labels) if lab != "U"}
    start: _BfsState = (frozenset(range(1, n + 1)), 1, frozenset(), frozenset())
    candidates = [ConfirmFrame(a, t, m) for t in want for a in (True, False) for m in (True, False)]

    def step(state: _BfsState, frame: ConfirmFrame) -> _BfsState | None:
        outstanding, expecting, seq_items, emitted = state
        tag = frame.delivery_tag
        if tag not in outstanding:
            return None
        hit = [t for t in outstanding if t <= tag] if frame.multiple else [tag]
        if any(want.get(t) is not frame.ack for t in hit):
            return None
        sequencer = dict(seq_items)
        done = set(emitted)

        def confirm(kind: bool) -> bool:
            nonlocal expecting
            if want.get(expecting) is not kind:
                return False
            sequencer.pop(expecting, None)
            done.add(expecting)
            expecting += 1
            return True

        if frame.multiple:
            while expecting <= tag:
                if not confirm(frame.ack):
                    return None
        elif tag == expecting:
            if not confirm(frame.ack):
                return None
        else:
            sequencer[tag] = frame.ack
        while expecting <= n and expecting in sequencer:
            if not confirm(sequencer[expecting]):
                return None
        return (outstanding - set(hit), expecting, frozenset(sequencer.items()), frozenset(done))

    goal = frozenset(t for t in range(1, n + 1) if t not in want)
    seen = {start}
    queue = deque([(start, 0)])
    while queue:
        state, depth = queue.popleft()
        if state[0] == goal:
            return depth
        for frame in candidates:
            nxt = step(state, frame)
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, depth + 1))
    raise AssertionError(f"no valid frame sequence for {labels}")


def test_coalesce_is_minimal_among_go_safe_sequences() -> None:
    for n in range(1, 7):
        for combo in itertools.product("ANU", repeat=n):
            labels = "".join(combo)
            acked = [i + 1 for i, lab in enumerate(labels) if lab == "A"]
            nacked = [i + 1 for i, lab in enumerate(labels) if lab == "N"]
            smallest = labels.find("U") + 1 or None
            frames = coalesce(acked, nacked, smallest)
            sc, gc, settled = apply_to_clients(frames, n)
            assert sc.outstanding == {i + 1 for i, lab in enumerate(labels) if lab == "U"}
            assert settled == {t: True for t in acked} | {t: False for t in nacked}, labels
            assert gc.view() == settled, labels
            assert len(frames) == _min_go_safe_frames(labels), labels


# --------------------------------------------------------------------------- tracker: examples


def test_track_not_waiting_acks_at_once() -> None:
    t = ConfirmTracker()
    t.track(1)
    assert t.smallest_unconfirmed() is None
    assert t.take_frames() == [ack(1)]
    assert t.take_frames() == []


def test_track_requires_consecutive_numbers() -> None:
    t = ConfirmTracker()
    with pytest.raises(ValueError, match="expected sequence number 1"):
        t.track(2, waiting=True)
    t.track(1, waiting=True)
    with pytest.raises(ValueError):
        t.track(1, waiting=True)
    with pytest.raises(ValueError):
        t.track(3, waiting=True)


def test_waits_until_acked() -> None:
    t = ConfirmTracker()
    t.track(1, waiting=True)
    assert t.take_frames() == []
    assert t.smallest_unconfirmed() == 1
    t.ack([1])
    assert t.smallest_unconfirmed() is None
    assert t.take_frames() == [ack(1)]
    t.ack([1])  # repeated: ignored
    assert t.take_frames() == []


def test_unknown_seq_is_ignored() -> None:
    t = ConfirmTracker()
    t.track(1, waiting=True)
    t.ack([99])
    t.reject(99)
    t.ack([5, 6])
    assert t.smallest_unconfirmed() == 1
    assert t.take_frames() == []


def test_reject_wins_and_is_exclusive() -> None:
    t = ConfirmTracker()
    t.track(1, waiting=True)
    t.track(2, waiting=True)
    t.reject(1)
    t.ack([1])  # after reject: ignored
    t.reject(1)  # twice: ignored
    t.ack([2])
    t.reject(2)  # already acked: ignored
    assert t.smallest_unconfirmed() is None
    assert t.take_frames() == [nack(1), ack(2)]
    assert t.take_frames() == []


def test_smallest_unconfirmed_moves_up() -> None:
    t = ConfirmTracker()
    assert t.smallest_unconfirmed() is None
    for seq in range(1, 6):
        t.track(seq, waiting=True)
    assert t.smallest_unconfirmed() == 1
    t.ack([2])
    t.ack([1])
    assert t.smallest_unconfirmed() == 3
    t.reject(3)
    t.ack([5])
    assert t.smallest_unconfirmed() == 4
    t.ack([4])
    assert t.smallest_unconfirmed() is None
    t.track(6, waiting=True)
    assert t.smallest_unconfirmed() == 6


def test_flush_with_gap() -> None:
    t = ConfirmTracker()
    for seq in range(1, 6):
        t.track(seq, waiting=True)
    t.ack([1, 2, 3, 5])
    assert t.take_frames() == [ack(3, True), ack(5)]
    t.ack([4])
    assert t.take_frames() == [ack(4)]


def test_ack_bulk() -> None:
    t = ConfirmTracker()
    for seq in range(1, 1001):
        t.track(seq, waiting=True)
    t.ack(range(1, 1001))
    assert t.take_frames() == [ack(1000, True)]


def test_mixed_flush() -> None:
    t = ConfirmTracker()
    for seq in range(1, 7):
        t.track(seq, waiting=True)
    t.ack([1, 2, 5, 6])
    t.reject(3)
    t.reject(4)
    assert t.take_frames() == [ack(2, True), nack(4, True), ack(6, True)]


def test_loose_nack_is_not_relabelled_by_a_later_multiple_ack() -> None:
    # RabbitMQ would send nack(2) and later ack(3, multiple): amqp091-go would then
    # report 2 as acked.
    t = ConfirmTracker()
    t.track(1, waiting=True)
    t.track(2, waiting=True)
    t.reject(2)
    assert t.take_frames() == [nack(2)]
    t.track(3, waiting=True)
    t.ack([3])
    t.ack([1])
    frames = t.take_frames()
    assert frames == [ack(1), ack(3)]
    _, gc, _ = apply_to_clients([nack(2), *frames], 3)
    assert gc.emitted == {1: True, 2: False, 3: True}


def test_loose_ack_is_not_relabelled_by_a_later_multiple_nack() -> None:
    t = ConfirmTracker()
    t.track(1, waiting=True)
    t.track(2, waiting=True)
    t.ack([2])
    assert t.take_frames() == [ack(2)]
    t.track(3, waiting=True)
    t.reject(1)
    t.reject(3)
    assert t.take_frames() == [nack(1), nack(3)]


def test_loose_tag_of_same_kind_does_not_split() -> None:
    t = ConfirmTracker()
    for seq in range(1, 6):
        t.track(seq, waiting=True)
    t.ack([2, 3])
    t.reject(4)
    assert t.take_frames() == [ack(2), ack(3), nack(4)]
    t.ack([1])
    t.ack([5])
    # 2 and 3 are loose acks of the same kind as 1, but the loose nack 4 sits
    # between 1 and 5, so they cannot share one ack(5, multiple).
    assert t.take_frames() == [ack(1), ack(5)]


def test_thousand_in_flight_settled_in_five_batches_is_five_frames() -> None:
    t = ConfirmTracker()
    for seq in range(1, 1001):
        t.track(seq, waiting=True)
    rng = random.Random(7)
    frames: list[ConfirmFrame] = []
    for start in range(1, 1001, 200):
        batch = list(range(start, start + 200))
        rng.shuffle(batch)
        for seq in batch:
            t.ack([seq])
        got = t.take_frames()
        assert got == [ack(start + 199, True)]
        frames.extend(got)
    assert len(frames) == 5
    assert t.smallest_unconfirmed() is None


def test_many_messages_front_settlement_is_linear() -> None:
    # Settles from the front while publishing at the back: the pattern that makes
    # next(iter(dict)) degrade. 200k messages finish well inside the test timeout.
    t = ConfirmTracker()
    in_flight = 1000
    total = 200_000
    frames = 0
    for seq in range(1, total + 1):
        t.track(seq, waiting=True)
        if seq > in_flight:
            t.ack([seq - in_flight])
            if seq % 100 == 0:
                frames += len(t.take_frames())
                assert t.smallest_unconfirmed() == seq - in_flight + 1
    t.ack(range(total - in_flight + 1, total + 1))
    frames += len(t.take_frames())
    assert t.smallest_unconfirmed() is None
    assert frames == (total - in_flight) // 100 + 1


# --------------------------------------------------------------------------- tracker: properties


@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), nack=st.booleans())
def test_consecutive_batch_with_nothing_outstanding_is_one_frame(
    n: int, seed: int, nack: bool
) -> None:
    t = ConfirmTracker()
    for seq in range(1, n + 1):
        t.track(seq, waiting=True)
    order = list(range(1, n + 1))
    random.Random(seed).shuffle(order)
    for seq in order:
        if nack:
            t.reject(seq)
        else:
            t.ack([seq])
    assert t.take_frames() == [ConfirmFrame(not nack, n, n > 1)]


class TrackerMachine(RuleBasedStateMachine):
    """Random interleavings of the tracker API, checked against a model and two clients."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker = ConfirmTracker()
        self.next_seq = 1
        self.waiting: set[int] = set()  # model: unsettled seqs
        self.outcome: dict[int, bool] = {}  # model: settled seq -> ack?
        self.set_client = SetClient()
        self.go_client = GoClient()

    @initialize()
    def start(self) -> None:
        pass

    def _settle(self, seq: int, kind: bool) -> None:
        if seq in self.waiting:
            self.waiting.discard(seq)
            self.outcome[seq] = kind

    @rule(waiting=st.booleans(), repeat=st.integers(1, 4))
    def track(self, waiting: bool, repeat: int) -> None:
        for _ in range(repeat):
            seq = self.next_seq
            self.next_seq += 1
            self.tracker.track(seq, waiting)
            self.set_client.publish(seq)
            self.go_client.publish()
            if waiting:
                self.waiting.add(seq)
            else:
                self.outcome[seq] = True

    @precondition(lambda self: self.next_seq > 1)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        seqs = data.draw(st.lists(st.integers(1, self.next_seq), max_size=8))  # may be unknown
        self.tracker.ack(seqs)
        for seq in seqs:
            self._settle(seq, True)

    @precondition(lambda self: self.next_seq > 1)
    @rule(data=st.data(), dice=st.integers(0, 2))
    def reject(self, data: st.DataObject, dice: int) -> None:
        if dice:  # keep it rarer so that long runs of acks also happen
            return
        seq = data.draw(st.integers(1, self.next_seq))
        self.tracker.reject(seq)
        self._settle(seq, False)

    @rule()
    def take_frames(self) -> None:
        self.flush()

    def flush(self) -> None:
        new = {s: k for s, k in self.outcome.items() if s in self.set_client.outstanding}
        before = set(self.set_client.outstanding)
        frames = self.tracker.take_frames()
        assert_ascending(frames)
        settled: dict[int, bool] = {}
        for frame in frames:
            settled.update(self.set_client.apply(frame))
            self.go_client.apply(frame)
        # Exactly what was settled since the last flush, with the right kind: never
        # something still waiting, never anything twice.
        assert settled == new
        assert self.set_client.outstanding == self.waiting
        for seq, kind in self.go_client.view().items():
            assert self.outcome[seq] is kind, f"go client got {seq} wrong"
        if new:
            lo, hi = min(new), max(new)
            same_kind = len(set(new.values())) == 1
            if same_kind and hi - lo + 1 == len(new) and before == set(new):
                assert len(frames) == 1, (new, frames)
        else:
            assert frames == []
        assert len(frames) <= len(new)

    @invariant()
    def smallest_matches(self) -> None:
        assert self.tracker.smallest_unconfirmed() == min(self.waiting, default=None)

    def teardown(self) -> None:
        for seq in sorted(self.waiting):
            self.tracker.ack([seq])
            self._settle(seq, True)
        self.flush()
        published = set(range(1, self.next_seq))
        assert self.set_client.result == self.outcome
        assert set(self.outcome) == published
        assert self.go_client.emitted == self.outcome
        assert self.tracker.take_frames() == []


TrackerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60)
test_tracker_machine = TrackerMachine.TestCase
