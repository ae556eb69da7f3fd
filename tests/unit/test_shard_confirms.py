"""Confirms that wait for other workers (confirms/shards.py): an ack once every copy is
settled, a nack as soon as one copy is refused, and each publish decided exactly once."""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confirms import ConfirmTracker
from confirms.shards import ShardConfirms


def test_a_publish_with_copies_on_two_workers_is_acked_once_both_settled() -> None:
    joins = ShardConfirms()
    joins.expect(1, 3)  # its own batch, worker 1, worker 2
    joins.forwarded(1, 10, 1)
    joins.forwarded(2, 4, 1)
    assert joins.local_done(1, True) == []
    assert joins.settled(2, 4) == []
    assert joins.settled(1, 10) == [(1, True)]
    assert joins.waiting() == 0


def test_one_refused_copy_nacks_at_once_and_the_later_answers_are_ignored() -> None:
    joins = ShardConfirms()
    joins.expect("a", 2)
    joins.forwarded(1, 1, "a")
    joins.forwarded(2, 1, "a")
    assert joins.settled(1, 1, refused=[1]) == [("a", False)]
    assert joins.settled(2, 1) == []  # decided: reported once
    assert joins.local_done("a", True) == []
    assert joins.waiting() == 0


def test_one_answer_settles_a_whole_batch_in_order() -> None:
    joins = ShardConfirms()
    for seq in range(1, 6):
        joins.expect(seq, 1)
        joins.forwarded(7, seq * 2, seq)
    assert joins.settled(7, 7, refused=[4]) == [(1, True), (2, False), (3, True)]
    assert joins.settled(7, 5) == []  # nothing left at or below 5
    assert joins.settled(7, 100) == [(4, True), (5, True)]


def test_a_sole_copy_needs_no_count_and_is_decided_by_its_answer() -> None:
    joins = ShardConfirms()
    joins.forwarded(3, 1, "only", sole=True)
    joins.forwarded(3, 2, "refused", sole=True)
    joins.forwarded(3, 3, "lost", sole=True)
    assert joins.waiting() == 3
    assert joins.settled(3, 2, refused=[2]) == [("only", True), ("refused", False)]
    assert joins.lost(3) == [("lost", False)]
    assert joins.waiting() == 0


def test_a_lost_worker_refuses_what_waited_on_it_only() -> None:
    joins = ShardConfirms()
    joins.expect(1, 1)
    joins.forwarded(1, 1, 1)
    joins.expect(2, 1)
    joins.forwarded(2, 1, 2)
    assert joins.lost(1) == [(1, False)]
    assert joins.lost(1) == []
    assert joins.settled(2, 1) == [(2, True)]


def test_misuse_is_refused() -> None:
    joins = ShardConfirms()
    with pytest.raises(ValueError, match="at least one"):
        joins.expect(1, 0)
    joins.expect(1, 2)
    with pytest.raises(ValueError, match="waiting already"):
        joins.expect(1, 1)
    joins.forwarded(1, 5, 1)
    with pytest.raises(ValueError, match="after 5"):
        joins.forwarded(1, 5, 1)


# Each publish: a local copy or not, and the links (0..2) it was forwarded over.
PUBLISHES = st.lists(
    st.tuples(st.booleans(), st.sets(st.integers(0, 2), max_size=3)).filter(lambda p: p[0] or p[1]),
    min_size=1,
    max_size=30,
)


@settings(deadline=None, max_examples=150)
@given(PUBLISHES, st.data())
def test_every_publish_is_decided_once_and_acked_only_if_no_copy_was_refused(
    publishes: list[tuple[bool, set[int]]], data: st.DataObject
) -> None:
    joins = ShardConfirms()
    tracker = ConfirmTracker()
    next_id = {0: 1, 1: 1, 2: 1}
    ids: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}  # link -> (id, seq)
    refused_parts: set[int] = set()
    for seq, (local, links) in enumerate(publishes, 1):
        tracker.track(seq, waiting=True)
        sole = not local and len(links) == 1
        if not sole:
            joins.expect(seq, int(local) + len(links))
        for link in sorted(links):
            joins.forwarded(link, next_id[link], seq, sole)
            ids[link].append((next_id[link], seq))
            next_id[link] += data.draw(st.integers(1, 3))  # ids ascend, not always by one
    decided: list[tuple[Hashable, bool]] = []
    for seq, (local, _links) in enumerate(publishes, 1):
        if local:
            ok = data.draw(st.booleans())
            if not ok:
                refused_parts.add(seq)
            decided += joins.local_done(seq, ok)
    for link, sent in ids.items():
        if not sent:
            continue
        if data.draw(st.booleans()):
            refused_ids = [i for i, _ in sent if data.draw(st.booleans())]
            refused_parts.update(seq for i, seq in sent if i in refused_ids)
            middle = sent[len(sent) // 2][0]
            decided += joins.settled(link, middle, refused_ids)
            decided += joins.settled(link, sent[-1][0], refused_ids)
        else:
            refused_parts.update(seq for _, seq in sent)
            decided += joins.lost(link)
    keys = [key for key, _ in decided if isinstance(key, int)]
    assert sorted(keys) == list(range(1, len(publishes) + 1))  # each exactly once
    for key, ok in decided:
        assert isinstance(key, int)
        assert ok is (key not in refused_parts)
        if ok:
            tracker.ack([key])
        else:
            tracker.reject(key)
    assert joins.waiting() == 0
    assert tracker.unconfirmed() == 0
