"""The failover state machine (interop.jms.reconnect) with fake transports: no broker."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from interop.jms import IllegalStateException, JMSException
from interop.jms.failover import FailoverPolicy
from interop.jms.reconnect import LinkState, Reconnector

WAIT = 10.0


class FakeTransport:
    def __init__(self, index: int) -> None:
        self.index = index
        self.is_open = True
        self.aborted = False
        self.closed = False

    def abort(self) -> None:
        self.aborted = True
        self.is_open = False

    def close(self) -> None:
        self.closed = True
        self.is_open = False


class Harness:
    """Scripted brokers: ``up[i]`` says whether broker i accepts connections."""

    def __init__(self, policy: FailoverPolicy, up: list[bool]) -> None:
        self.up = up
        self.attempts: list[int] = []
        self.events: list[str] = []
        self.resume_failures = 0
        self.given_up: list[JMSException] = []
        self.cond = threading.Condition()
        self.gate = threading.Event()
        self.gate.set()
        self.reconnector = Reconnector(
            policy,
            connect=self.connect,
            interrupt=lambda: self.record("interrupt"),
            resume=self.resume,
            give_up=self.give_up,
            notify=self.record,
        )

    def record(self, event: str) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def connect(self, index: int) -> Any:
        self.gate.wait(WAIT)
        self.attempts.append(index)
        if not self.up[index]:
            raise JMSException(f"broker {index} refused")
        return FakeTransport(index)

    def resume(self, transport: Any) -> None:
        if self.resume_failures:
            self.resume_failures -= 1
            raise JMSException("queue.declare refused")
        self.record(f"resume {transport.index}")

    def give_up(self, error: JMSException) -> None:
        self.given_up.append(error)
        self.record("give up")

    def wait_for(self, event: str) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: event in self.events, WAIT), self.events


def _policy(**options: Any) -> FailoverPolicy:
    return FailoverPolicy(
        uris=("amqp://a", "amqp://b"), randomize=False, initial_reconnect_delay=0.0, **options
    )


def test_first_attach_skips_a_dead_broker() -> None:
    harness = Harness(_policy(), [False, True])
    transport = harness.reconnector.attach_first()
    assert transport.index == 1 and harness.attempts == [0, 1]  # type: ignore[attr-defined]
    assert harness.reconnector.state is LinkState.CONNECTED


def test_a_failed_resume_drops_the_transport_and_tries_again() -> None:
    harness = Harness(_policy(), [True, True])
    first = harness.reconnector.attach_first()
    harness.resume_failures = 1
    assert harness.reconnector.lost(first, JMSException("lost"))  # type: ignore[arg-type]
    harness.wait_for("transport_resumed")
    # broker 1 first (0 was just lost), its resume fails: dropped, sessions interrupted
    # again, then broker 0 in the next pass
    assert harness.events == [
        "interrupt",
        "transport_interrupted",
        "interrupt",
        "resume 0",
        "transport_resumed",
    ]
    assert harness.attempts == [0, 1, 0]
    assert harness.reconnector.state is LinkState.CONNECTED
    assert harness.reconnector.index == 0
    assert not harness.reconnector.lost(first, JMSException("stale"))  # type: ignore[arg-type]


def test_gives_up_after_the_attempts_and_senders_hear_it() -> None:
    harness = Harness(_policy(max_reconnect_attempts=2), [True, True])
    first = harness.reconnector.attach_first()
    harness.up[:] = [False, False]
    harness.reconnector.lost(first, JMSException("lost"))  # type: ignore[arg-type]
    harness.wait_for("give up")
    assert "no broker reachable after 2 attempt(s)" in str(harness.given_up[0])
    assert harness.attempts[1:] == [1, 0, 1, 0]  # the lost broker last in each pass
    with pytest.raises(JMSException, match="send failed"):
        harness.reconnector.wait_connected("send")


def test_a_send_waits_up_to_the_timeout() -> None:
    harness = Harness(_policy(timeout=0.05), [True, True])
    first = harness.reconnector.attach_first()
    harness.gate.clear()  # the reconnect hangs in connect()
    harness.reconnector.lost(first, JMSException("lost"))  # type: ignore[arg-type]
    with pytest.raises(JMSException, match="Failover timeout of 50 ms reached"):
        harness.reconnector.wait_connected("send")
    harness.reconnector.close()
    harness.gate.set()
    with pytest.raises(IllegalStateException):
        harness.reconnector.wait_connected("send")
