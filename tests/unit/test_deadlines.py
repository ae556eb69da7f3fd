"""The core reports its next deadline (`Clock.wake_at`) instead of relying on a 1 s tick
(issue 21, items 9 and 11): a queue head's message TTL, a message's own expiration,
x-expires, heartbeats at half the interval. The shell sleeps until the deadline; here the
test plays the shell, ticking exactly when the core asked (`run_timers`)."""

from __future__ import annotations

import itertools
import math

from pamqp import commands
from pamqp.heartbeat import Heartbeat

from amqpd.model.broker import Broker
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import (
    Delivery,
    connect,
    declare,
    deliveries,
    publish_frames,
    rpc,
    tuned,
)

T0 = 1000.0


def run_timers(broker: Broker, *clients: Client) -> float:
    """What the shell's ticker does when woken: reset the deadline, tick everything at the
    deadline. Returns the time it ticked."""
    now = broker.clock.wake_at
    assert now != math.inf, "the core asked for no tick"
    broker.clock.wake_at = math.inf
    broker.tick(now)
    for client in clients:
        client.conn.tick(now)
    return now


def dlx_setup(client: Client, **arguments: object) -> None:
    client.send(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    client.received()
    declare(client, 1, "dlq")
    rpc(client, 1, commands.Queue.Bind(queue="dlq", exchange="dlx"), commands.Queue.BindOk)
    declare(client, 1, "work", arguments={"x-dead-letter-exchange": "dlx", **arguments})


def test_message_ttl_expires_the_head_when_it_is_due() -> None:
    broker = Broker(now=T0)
    client = connect(broker, now=T0)
    dlx_setup(client, **{"x-message-ttl": 100})
    broker.clock.wake_at = math.inf  # whatever the handshake asked for
    client.send(1, *publish_frames("work", b"first"))
    assert broker.clock.wake_at == T0 + 0.1  # the head's expiry, not the next second
    broker.clock.now = T0 + 0.05
    client.send(1, *publish_frames("work", b"second"))
    assert broker.clock.wake_at == T0 + 0.1  # a later message does not move it
    assert run_timers(broker) == T0 + 0.1
    assert [m.body for m in _get_all(client, "dlq")] == [b"first"]
    assert broker.clock.wake_at == T0 + 0.15  # re-armed for the new head only
    run_timers(broker)
    assert [m.body for m in _get_all(client, "dlq")] == [b"second"]
    assert broker.clock.wake_at == math.inf  # nothing left to time


def test_per_message_expiration_sets_the_deadline() -> None:
    broker = Broker(now=T0)
    client = connect(broker, now=T0)
    dlx_setup(client)
    broker.clock.wake_at = math.inf
    client.send(1, *publish_frames("work", b"short", expiration="50"))
    assert broker.clock.wake_at == T0 + 0.05
    run_timers(broker)
    assert [m.body for m in _get_all(client, "dlq")] == [b"short"]


def test_x_expires_deletes_an_unused_queue_when_due() -> None:
    broker = Broker(now=T0)
    client = connect(broker, now=T0)
    broker.clock.wake_at = math.inf
    declare(client, 1, "temp", arguments={"x-expires": 300})
    assert broker.clock.wake_at == T0 + 0.3
    run_timers(broker)
    assert "temp" not in broker.vhosts["/"].queues


def test_a_used_queue_moves_its_x_expires_deadline_on() -> None:
    broker = Broker(now=T0)
    client = connect(broker, now=T0)
    declare(client, 1, "temp", arguments={"x-expires": 300})
    broker.clock.now = T0 + 0.2
    declare(client, 1, "temp", passive=True)  # a use
    broker.clock.wake_at = T0 + 0.3
    run_timers(broker)
    assert "temp" in broker.vhosts["/"].queues
    assert broker.clock.wake_at == T0 + 0.5
    run_timers(broker)
    assert "temp" not in broker.vhosts["/"].queues


def test_heartbeat_1_client_never_waits_more_than_half_a_second() -> None:
    """rabbit_heartbeat sends after half the interval of silence; the core asks to be woken
    for it, so a heartbeat=1 client hears from the broker at least every 0.5 s."""
    broker = Broker(now=T0)
    client = tuned(broker, heartbeat=1, now=T0)
    assert broker.clock.wake_at <= T0 + 0.5
    sent_at = [T0]  # the Open-Ok went out at T0
    for _ in range(20):
        now = run_timers(broker, client)
        frames = client.received()
        if frames:
            assert [(c, type(f)) for c, f in frames] == [(0, Heartbeat)], frames
            sent_at.append(now)
        client.conn.receive_data(b"\x08\x00\x00\x00\x00\x00\x00\xce", now)  # we answer
    gaps = [b - a for a, b in itertools.pairwise(sent_at)]
    assert len(sent_at) >= 10 and max(gaps) <= 0.5 + 1e-9, sent_at


def test_a_silent_peer_is_dropped_at_its_deadline() -> None:
    broker = Broker(now=T0)
    client = tuned(broker, heartbeat=1, now=T0)
    for _ in range(10):
        now = run_timers(broker, client)
        client.received()
        if client.conn.should_close:
            break
    assert client.conn.should_close
    assert T0 + 2 < now <= T0 + 2.6  # dropped just after two intervals of silence


def _get_all(client: Client, queue: str) -> list[Delivery]:
    out: list[Delivery] = []
    while True:
        client.send(1, commands.Basic.Get(queue=queue, no_ack=True))
        frames = client.received()
        if isinstance(frames[0][1], commands.Basic.GetEmpty):
            return out
        out += deliveries(frames)
