"""The federated-queue links' reconnection delays (amqpd/shell/links/backoff.py)."""

from __future__ import annotations

import pytest

from amqpd.shell.links import backoff
from amqpd.shell.links.backoff import MAX_BACKOFF, STABLE_AFTER, Backoff


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(backoff.time, "monotonic", fake)
    return fake


def test_quick_failures_double_the_delay_up_to_the_cap(clock: FakeClock) -> None:
    delays = Backoff(5.0)
    seen = []
    for _ in range(6):
        delays.started()
        clock.now += 1.0  # failed after a second
        seen.append(delays.next_delay())
    assert seen == [5.0, 10.0, 20.0, MAX_BACKOFF, MAX_BACKOFF, MAX_BACKOFF]


def test_a_run_that_lasted_starts_over_from_the_configured_delay(clock: FakeClock) -> None:
    delays = Backoff(0.5)
    for _ in range(4):
        delays.started()
        delays.next_delay()
    delays.started()
    clock.now += STABLE_AFTER
    assert delays.next_delay() == 0.5
    delays.started()
    assert delays.next_delay() == 1.0


def test_a_delay_above_the_cap_is_kept(clock: FakeClock) -> None:
    delays = Backoff(60.0)
    delays.started()
    assert [delays.next_delay(), delays.next_delay()] == [60.0, 60.0]
