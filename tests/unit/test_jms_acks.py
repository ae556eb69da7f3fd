"""The pure acknowledgement logic of interop.jms: thresholds, batches, safe acks, window."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from interop.jms.acks import AckBatcher, WindowTracker, consumer_helpers, plan_acks, threshold
from interop.jms.constants import DUPS_OK_BATCH_PERCENT, OPTIMIZE_ACK_PERCENT, AckMode


def test_thresholds_match_activemq() -> None:
    optimize = [threshold(n, OPTIMIZE_ACK_PERCENT) for n in (10, 100, 1000, 1, 3)]
    assert optimize == [7, 65, 650, 1, 2]  # 0.65 x 100 is exactly 65, not 66
    dups = [threshold(n, DUPS_OK_BATCH_PERCENT) for n in (10, 11, 1, 32767)]
    assert dups == [5, 6, 1, 16384]
    assert threshold(0, OPTIMIZE_ACK_PERCENT) == 1


def test_optimize_batch_of_7_for_prefetch_10() -> None:
    batcher = AckBatcher(threshold(10, OPTIMIZE_ACK_PERCENT), timeout=0, now=0.0)
    released = [batcher.consumed(tag, now=0.0) for tag in range(1, 15)]
    assert released[:6] == [[]] * 6
    assert released[6] == [1, 2, 3, 4, 5, 6, 7]
    assert released[13] == list(range(8, 15))


def test_timeout_is_checked_only_when_a_message_is_consumed() -> None:
    batcher = AckBatcher(limit=100, timeout=0.3, now=10.0)
    assert batcher.consumed(1, now=10.1) == []
    assert batcher.pending == [1]  # time passing alone releases nothing
    assert batcher.consumed(2, now=10.5) == [1, 2]  # consumed at >= last ack + timeout
    assert batcher.consumed(3, now=10.6) == []
    assert batcher.consumed(4, now=10.8) == [3, 4]


def test_first_message_after_the_timeout_since_creation_is_acked_at_once() -> None:
    batcher = AckBatcher(limit=100, timeout=0.3, now=0.0)
    assert batcher.consumed(1, now=0.31) == [1]


def test_zero_timeout_disables_the_time_rule_and_take_all_flushes() -> None:
    batcher = AckBatcher(limit=5, timeout=0, now=0.0)
    assert batcher.consumed(1, now=1e9) == []
    assert batcher.consumed(2, now=2e9) == []
    batcher.discard(1)
    assert batcher.take_all() == [2]
    assert batcher.take_all() == []


def test_plan_acks_uses_multiple_only_over_a_contiguous_prefix() -> None:
    assert plan_acks([1, 2, 3], [1, 2, 3, 4]) == [(3, True)]
    assert plan_acks([3, 1, 2], [1, 2, 3]) == [(3, True)]
    assert plan_acks([2, 3], [1, 2, 3]) == [(2, False), (3, False)]  # 1 is someone else's
    assert plan_acks([1, 2, 4, 5], [1, 2, 3, 4, 5]) == [(2, True), (4, False), (5, False)]
    assert plan_acks([7], [7, 8]) == [(7, False)]
    assert plan_acks([], [1]) == []


@given(
    outstanding=st.lists(st.integers(1, 60), unique=True, min_size=1).map(sorted),
    data=st.data(),
)
def test_plan_acks_settles_exactly_the_requested_tags(
    outstanding: list[int], data: st.DataObject
) -> None:
    wanted = data.draw(st.lists(st.sampled_from(outstanding), unique=True))
    plan = plan_acks(wanted, outstanding)
    settled: set[int] = set()
    for tag, multiple in plan:
        settled |= {t for t in outstanding if t <= tag} if multiple else {tag}
    assert settled == set(wanted)
    assert sum(multiple for _tag, multiple in plan) <= 1


def test_window_rotates_after_half_the_prefetch_of_the_current_tag() -> None:
    window = WindowTracker(step=threshold(10, 50), consumer_tag="c.0")
    assert [window.consumed(tag, "c.0") for tag in range(1, 6)] == [False] * 4 + [True]
    assert window.start_rotation("c.1") == "c.0"
    assert window.consumed(6, "c.0") is False  # old tag's deliveries no longer count
    assert [window.consumed(tag, "c.1") for tag in range(11, 16)] == [False] * 5  # rotating
    window.rotation_done()
    assert window.consumed(16, "c.1") is True
    for tag in range(11, 17):
        window.settled(tag)
    # nothing is held any more: a full step of new messages is needed again
    assert [window.consumed(tag, "c.1") for tag in range(17, 22)] == [False] * 4 + [True]


def test_window_counts_a_redelivered_tag_once() -> None:
    window = WindowTracker(step=2, consumer_tag="c.0")
    assert window.consumed(1, "c.0") is False
    assert window.consumed(1, "c.0") is False  # consumed again after recover()
    assert window.consumed(2, "c.0") is True


def helpers(mode: AckMode, **overrides: object) -> tuple[object, object]:
    settings: dict[str, object] = {
        "prefetch": 10,
        "is_topic": False,
        "optimize_acknowledge": False,
        "optimize_acknowledge_timeout": 0.3,
        "single_active_consumer": False,
        "consumer_tag": "c.0",
        "now": 0.0,
    }
    settings.update(overrides)
    return consumer_helpers(mode, **settings)  # type: ignore[arg-type]


def test_which_consumers_batch_and_which_track_the_window() -> None:
    batcher, window = helpers(AckMode.AUTO_ACKNOWLEDGE, optimize_acknowledge=True)
    assert isinstance(batcher, AckBatcher) and (batcher.limit, batcher.timeout) == (7, 0.3)
    assert window is None
    assert helpers(AckMode.AUTO_ACKNOWLEDGE) == (None, None)
    dups, _ = helpers(AckMode.DUPS_OK_ACKNOWLEDGE, is_topic=True)
    assert isinstance(dups, AckBatcher) and (dups.limit, dups.timeout) == (5, 0.0)
    assert helpers(AckMode.DUPS_OK_ACKNOWLEDGE, is_topic=False) == (None, None)
    # DUPS_OK on a queue is AUTO: optimizeAcknowledge batches it at 65 % too (ActiveMQ)
    queue_dups, _ = helpers(AckMode.DUPS_OK_ACKNOWLEDGE, optimize_acknowledge=True)
    assert isinstance(queue_dups, AckBatcher) and queue_dups.limit == 7
    topic_dups, _ = helpers(AckMode.DUPS_OK_ACKNOWLEDGE, is_topic=True, optimize_acknowledge=True)
    assert isinstance(topic_dups, AckBatcher) and topic_dups.limit == 5
    for mode in (
        AckMode.CLIENT_ACKNOWLEDGE,
        AckMode.INDIVIDUAL_ACKNOWLEDGE,
        AckMode.SESSION_TRANSACTED,
    ):
        batcher, window = helpers(mode, optimize_acknowledge=True)
        assert batcher is None
        assert isinstance(window, WindowTracker) and window.step == 5
        assert helpers(mode, single_active_consumer=True) == (None, None)
    assert helpers(AckMode.AUTO_ACKNOWLEDGE, prefetch=0, optimize_acknowledge=True) == (
        None,
        None,
    )
