"""Delivery semantics with pika against a real amqpd server: ordering, requeue, large
bodies, prefetch, basic.get, recover, purge, queue lifetimes, broker-sent cancels and
exchange routing features.

Absence checks ("nothing more was delivered") use a fence instead of a sleep: the broker
handles a channel's frames in order and dispatches synchronously, so every delivery caused
by an earlier frame is on the wire before the reply to a later synchronous method (here a
passive Queue.Declare, whose message_count is itself the main oracle).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pika.frame
import pytest

from amqpd.shell.server import Server
from tests.integration.pika_support import params, pump_until


def ready_count(ch: Any, queue: str) -> int:
    """Ready messages in ``queue`` (a passive declare; also a fence, see module doc)."""
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def fence(conn: pika.BlockingConnection, ch: Any, queue: str) -> int:
    """Round trip on ``ch`` then run the callbacks of everything received before it."""
    count = ready_count(ch, queue)
    conn.process_data_events(time_limit=0)
    return count


def publish_many(ch: Any, queue: str, bodies: list[bytes]) -> None:
    for body in bodies:
        ch.basic_publish("", queue, body)


def get_body(ch: Any, queue: str) -> tuple[bytes, bool]:
    method, _props, body = ch.basic_get(queue, auto_ack=True)
    assert method is not None, f"queue {queue!r} is empty"
    return body, method.redelivered


def declare_anon(ch: Any) -> str:
    return str(ch.queue_declare("", exclusive=True).method.queue)


# ----------------------------------------------------------------------------------------
# Ordering and requeue
# ----------------------------------------------------------------------------------------
def test_per_queue_fifo(connection: pika.BlockingConnection, channel: Any) -> None:
    channel.queue_declare("fifo")
    bodies = [f"m{i}".encode() for i in range(200)]
    publish_many(channel, "fifo", bodies)
    received: list[bytes] = []
    channel.basic_consume("fifo", lambda ch, m, p, b: received.append(b), auto_ack=True)
    pump_until(connection, lambda: len(received) == len(bodies))
    assert received == bodies


def test_fifo_per_queue_across_exchange_fanout(channel: Any) -> None:
    """Interleaved publishes to two queues keep each queue's own order."""
    channel.exchange_declare("fan", "fanout")
    q1, q2 = declare_anon(channel), declare_anon(channel)
    channel.queue_bind(q1, "fan")
    channel.queue_bind(q2, "fan")
    for i in range(20):
        channel.basic_publish("fan", "", f"f{i}".encode())
        channel.basic_publish("", q2, f"d{i}".encode())
    assert [get_body(channel, q1)[0] for _ in range(20)] == [f"f{i}".encode() for i in range(20)]
    expected_q2 = [item for i in range(20) for item in (f"f{i}".encode(), f"d{i}".encode())]
    assert [get_body(channel, q2)[0] for _ in range(40)] == expected_q2


def test_requeue_returns_to_original_position(channel: Any) -> None:
    q = declare_anon(channel)
    publish_many(channel, q, [b"m0", b"m1", b"m2", b"m3", b"m4"])
    tags = {}
    for expected in (b"m0", b"m1", b"m2"):
        method, _props, body = channel.basic_get(q)
        assert body == expected
        assert method.redelivered is False
        tags[body] = method.delivery_tag
    assert ready_count(channel, q) == 2

    channel.basic_reject(tags[b"m1"], requeue=True)
    channel.basic_nack(tags[b"m0"], requeue=True)
    assert ready_count(channel, q) == 4
    assert [get_body(channel, q) for _ in range(4)] == [
        (b"m0", True),
        (b"m1", True),
        (b"m3", False),
        (b"m4", False),
    ]
    # m2 is still unacked; requeueing it puts it back alone
    channel.basic_nack(tags[b"m2"], requeue=True)
    assert get_body(channel, q) == (b"m2", True)
    assert channel.basic_get(q)[0] is None


def test_nack_multiple_requeue_keeps_order(channel: Any) -> None:
    q = declare_anon(channel)
    publish_many(channel, q, [f"m{i}".encode() for i in range(6)])
    last_tag = 0
    for _ in range(4):
        method, _props, _body = channel.basic_get(q)
        last_tag = method.delivery_tag
    channel.basic_nack(last_tag, multiple=True, requeue=True)
    assert [get_body(channel, q) for _ in range(6)] == [
        (b"m0", True),
        (b"m1", True),
        (b"m2", True),
        (b"m3", True),
        (b"m4", False),
        (b"m5", False),
    ]


def test_reject_and_nack_without_requeue_drop(channel: Any) -> None:
    q = declare_anon(channel)
    publish_many(channel, q, [b"a", b"b", b"c"])
    first = channel.basic_get(q)[0]
    second = channel.basic_get(q)[0]
    channel.basic_reject(first.delivery_tag, requeue=False)
    channel.basic_nack(second.delivery_tag, requeue=False)
    assert get_body(channel, q) == (b"c", False)
    assert channel.basic_get(q)[0] is None


def test_requeue_to_consumer_marks_redelivered(
    connection: pika.BlockingConnection, channel: Any
) -> None:
    q = declare_anon(channel)
    channel.basic_qos(prefetch_count=1)
    seen: list[tuple[bytes, bool]] = []

    def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
        seen.append((body, method.redelivered))
        if method.redelivered:
            ch.basic_ack(method.delivery_tag)
        else:
            ch.basic_nack(method.delivery_tag, requeue=True)

    channel.basic_consume(q, on_message)
    publish_many(channel, q, [b"x", b"y"])
    pump_until(connection, lambda: len(seen) == 4)
    assert seen == [(b"x", False), (b"x", True), (b"y", False), (b"y", True)]


# ----------------------------------------------------------------------------------------
# Large bodies
# ----------------------------------------------------------------------------------------
@pytest.fixture
def body_fragments(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the content body frames pika receives (recorded by wrapping its decoder)."""
    fragments: list[int] = []
    decode_frame = pika.frame.decode_frame

    def recording_decode_frame(data: bytes) -> Any:
        consumed, frame = decode_frame(data)
        if isinstance(frame, pika.frame.Body):
            fragments.append(len(frame.fragment))
        return consumed, frame

    monkeypatch.setattr(pika.frame, "decode_frame", recording_decode_frame)
    return fragments


def test_16_mib_body_round_trip(
    connection: pika.BlockingConnection, channel: Any, body_fragments: list[int]
) -> None:
    """16 MiB crosses frame_max (128 KiB) many times, both when published and delivered."""
    size = 16 * 1024 * 1024
    body = os.urandom(size)
    q = declare_anon(channel)
    channel.confirm_delivery()
    channel.basic_publish("", q, body)
    channel.basic_publish("", q, body[::-1])

    method, _props, got = channel.basic_get(q, auto_ack=True)
    assert method.message_count == 1
    assert len(got) == size
    assert got == body
    chunk = 131072 - 8  # RabbitMQ's default frame_max minus the frame overhead
    assert body_fragments == [chunk] * (size // chunk) + [size % chunk]

    received: list[bytes] = []
    channel.basic_consume(q, lambda ch, m, p, b: received.append(b), auto_ack=True)
    pump_until(connection, lambda: bool(received), timeout=15)
    assert len(received[0]) == size
    assert received[0] == body[::-1]


def test_body_split_by_negotiated_frame_max(server: Server, body_fragments: list[int]) -> None:
    """A client asking for the minimum frame_max (4096) gets body frames of that size."""
    size = 1024 * 1024 + 123
    body = os.urandom(size)
    with pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", server.port, frame_max=4096)
    ) as conn:
        ch = conn.channel()
        q = declare_anon(ch)
        ch.basic_publish("", q, body)
        ch.basic_publish("", q, b"")  # an empty body: header frame only
        method, _props, got = ch.basic_get(q, auto_ack=True)
        assert (method.message_count, got) == (1, body)
        # 4096 minus 8 bytes of frame overhead per body frame
        assert body_fragments == [4088] * (size // 4088) + [size % 4088]
        received: list[bytes] = []
        ch.basic_consume(q, lambda c, m, p, b: received.append(b), auto_ack=True)
        pump_until(conn, lambda: bool(received))
        assert received == [b""]


# ----------------------------------------------------------------------------------------
# Prefetch
# ----------------------------------------------------------------------------------------
def test_prefetch_per_consumer_and_global_together(
    connection: pika.BlockingConnection, channel: Any
) -> None:
    """qos(2, global=False) limits each consumer, qos(3, global=True) the whole channel."""
    q1, q2 = declare_anon(channel), declare_anon(channel)
    publish_many(channel, q1, [f"a{i}".encode() for i in range(6)])
    publish_many(channel, q2, [f"b{i}".encode() for i in range(6)])
    channel.basic_qos(prefetch_count=2, global_qos=False)
    channel.basic_qos(prefetch_count=3, global_qos=True)
    got: dict[str, list[Any]] = {q1: [], q2: []}

    def on_message(queue: str) -> Callable[..., None]:
        return lambda ch, method, props, body: got[queue].append((method.delivery_tag, body))

    channel.basic_consume(q1, on_message(q1))
    assert fence(connection, channel, q1) == 4  # per-consumer limit 2
    q2_tag = channel.basic_consume(q2, on_message(q2))
    assert fence(connection, channel, q2) == 5  # channel limit 3 leaves room for one
    assert [len(got[q1]), len(got[q2])] == [2, 1]

    # acking q2's message frees one channel slot; only q2's consumer is below its own limit
    channel.basic_ack(got[q2][0][0])
    assert fence(connection, channel, q2) == 4
    assert ready_count(channel, q1) == 4
    assert [len(got[q1]), len(got[q2])] == [2, 2]

    # with q2's consumer gone and its message acked the channel has room again, but q1's
    # consumer is at its own limit
    channel.basic_cancel(q2_tag)
    channel.basic_ack(got[q2][1][0])
    assert fence(connection, channel, q1) == 4
    assert len(got[q1]) == 2

    # one ack on q1 lets its consumer take exactly one more
    channel.basic_ack(got[q1][0][0])
    assert fence(connection, channel, q1) == 3
    assert [body for _tag, body in got[q1]] == [b"a0", b"a1", b"a2"]
    assert ready_count(channel, q2) == 4


def test_prefetch_zero_is_unlimited(connection: pika.BlockingConnection, channel: Any) -> None:
    q = declare_anon(channel)
    publish_many(channel, q, [str(i).encode() for i in range(300)])
    channel.basic_qos(prefetch_count=5)
    channel.basic_qos(prefetch_count=0)  # back to unlimited before consuming
    received: list[int] = []
    channel.basic_consume(q, lambda ch, m, p, b: received.append(m.delivery_tag))
    pump_until(connection, lambda: len(received) == 300)
    assert ready_count(channel, q) == 0
    channel.basic_ack(received[-1], multiple=True)


def test_prefetch_applies_to_consumers_started_after(
    connection: pika.BlockingConnection, channel: Any
) -> None:
    """Per-consumer qos is fixed when the consumer starts (RabbitMQ semantics)."""
    q1, q2 = declare_anon(channel), declare_anon(channel)
    publish_many(channel, q1, [b"x"] * 5)
    publish_many(channel, q2, [b"y"] * 5)
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume(q1, lambda *a: None)
    channel.basic_qos(prefetch_count=3)
    channel.basic_consume(q2, lambda *a: None)
    assert fence(connection, channel, q1) == 4
    assert ready_count(channel, q2) == 2


# ----------------------------------------------------------------------------------------
# basic.get, recover, purge, declare-ok
# ----------------------------------------------------------------------------------------
def test_basic_get_message_count_and_get_empty(channel: Any) -> None:
    q = declare_anon(channel)
    assert channel.basic_get(q) == (None, None, None)  # Get-Empty
    publish_many(channel, q, [b"1", b"2", b"3"])
    counts = []
    for expected in (b"1", b"2", b"3"):
        method, _props, body = channel.basic_get(q, auto_ack=True)
        assert body == expected
        assert method.routing_key == q
        assert method.exchange == ""
        counts.append(method.message_count)
    assert counts == [2, 1, 0]
    assert channel.basic_get(q) == (None, None, None)


def test_recover_requeue_redelivers_unacked(
    connection: pika.BlockingConnection, channel: Any
) -> None:
    q = declare_anon(channel)
    publish_many(channel, q, [b"a", b"b", b"c"])
    channel.basic_get(q)
    channel.basic_get(q)
    assert ready_count(channel, q) == 1
    channel.basic_recover(requeue=True)
    assert ready_count(channel, q) == 3
    assert [get_body(channel, q) for _ in range(3)] == [(b"a", True), (b"b", True), (b"c", False)]

    # with a consumer: unacked deliveries come back to it, marked redelivered
    publish_many(channel, q, [b"d", b"e"])
    seen: list[tuple[bytes, bool]] = []
    channel.basic_consume(q, lambda ch, m, p, b: seen.append((b, m.redelivered)))
    pump_until(connection, lambda: len(seen) == 2)
    channel.basic_recover(requeue=True)
    pump_until(connection, lambda: len(seen) == 4)
    assert seen == [(b"d", False), (b"e", False), (b"d", True), (b"e", True)]


def test_purge_returns_count(channel: Any) -> None:
    q = declare_anon(channel)
    publish_many(channel, q, [b"x"] * 7)
    held = channel.basic_get(q)[0]
    ok = channel.queue_purge(q)
    assert ok.method.message_count == 6  # the unacked message is not purged
    assert ready_count(channel, q) == 0
    channel.basic_nack(held.delivery_tag, requeue=True)
    assert ready_count(channel, q) == 1
    assert channel.queue_purge(q).method.message_count == 1
    assert channel.queue_purge(q).method.message_count == 0


def test_declare_ok_counts(server: Server, channel: Any) -> None:
    ok = channel.queue_declare("counted")
    assert (ok.method.message_count, ok.method.consumer_count) == (0, 0)
    publish_many(channel, "counted", [b"1", b"2", b"3"])
    ok = channel.queue_declare("counted")
    assert (ok.method.message_count, ok.method.consumer_count) == (3, 0)

    with pika.BlockingConnection(params(server)) as other:
        ch = other.channel()
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume("counted", lambda *a: None)
        ch.basic_consume("counted", lambda *a: None)
        ok = ch.queue_declare("counted", passive=True)  # fence for the deliveries
        assert (ok.method.message_count, ok.method.consumer_count) == (1, 2)
        ok = channel.queue_declare("counted")
        assert (ok.method.message_count, ok.method.consumer_count) == (1, 2)
    # the consumers' connection closed: unacked messages back, no consumers
    ok = channel.queue_declare("counted")
    assert (ok.method.message_count, ok.method.consumer_count) == (3, 0)


# ----------------------------------------------------------------------------------------
# Queue lifetimes
# ----------------------------------------------------------------------------------------
def test_auto_delete_queue_deleted_after_last_consumer_cancels(
    server: Server, channel: Any
) -> None:
    channel.queue_declare("ad", auto_delete=True)
    # never consumed: not deleted
    assert ready_count(channel, "ad") == 0
    with pika.BlockingConnection(params(server)) as other:
        ch = other.channel()
        tag1 = ch.basic_consume("ad", lambda *a: None)
        tag2 = ch.basic_consume("ad", lambda *a: None)
        ch.basic_cancel(tag1)
        assert channel.queue_declare("ad", passive=True).method.consumer_count == 1
        ch.basic_cancel(tag2)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare("ad", passive=True)
        assert info.value.reply_code == 404


def test_auto_delete_queue_deleted_when_consumer_channel_closes(server: Server) -> None:
    with pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        ch.queue_declare("ad2", auto_delete=True)
        consumer_ch = conn.channel()
        consumer_ch.basic_consume("ad2", lambda *a: None)
        assert ch.queue_declare("ad2", passive=True).method.consumer_count == 1
        consumer_ch.close()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("ad2", passive=True)
        assert info.value.reply_code == 404


def test_exclusive_queue_deleted_when_connection_closes(server: Server, channel: Any) -> None:
    with pika.BlockingConnection(params(server)) as owner:
        ch = owner.channel()
        ch.queue_declare("mine", exclusive=True)
        ch.basic_publish("", "mine", b"x")
        assert ready_count(ch, "mine") == 1
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare("mine", passive=True)
        assert info.value.reply_code == 405
    ch2 = channel.connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch2.queue_declare("mine", passive=True)
    assert info.value.reply_code == 404
    # the name is free again for anyone
    assert channel.connection.channel().queue_declare("mine", exclusive=True).method.queue == "mine"


def test_server_cancel_when_consumed_queue_deleted(server: Server) -> None:
    cancelled: list[Any] = []
    with (
        pika.BlockingConnection(params(server)) as conn,
        pika.BlockingConnection(params(server)) as admin,
    ):
        ch = conn.channel()
        ch.queue_declare("doomed")
        ch.basic_publish("", "doomed", b"held")
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
        held: list[int] = []
        tag = ch.basic_consume("doomed", lambda c, m, p, b: held.append(m.delivery_tag))
        pump_until(conn, lambda: bool(held))
        admin_ch = admin.channel()
        assert admin_ch.queue_declare("doomed", passive=True).method.consumer_count == 1
        assert admin_ch.queue_delete("doomed").method.message_count == 0  # held is unacked
        pump_until(conn, lambda: bool(cancelled))
        assert cancelled[0].consumer_tag == tag
        assert ch.consumer_tags == []
        # acking a message of the deleted queue is fine, and the channel stays usable
        ch.basic_ack(held[0])
        assert ch.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")
        assert ch.is_open


# ----------------------------------------------------------------------------------------
# Exchange features
# ----------------------------------------------------------------------------------------
def test_exchange_to_exchange_cycle_delivers_once_per_queue(channel: Any) -> None:
    channel.exchange_declare("x1", "fanout")
    channel.exchange_declare("x2", "fanout")
    channel.exchange_declare("x3", "topic")
    channel.exchange_bind(destination="x2", source="x1")
    channel.exchange_bind(destination="x1", source="x2")  # cycle x1 <-> x2
    channel.exchange_bind(destination="x3", source="x2")
    channel.exchange_bind(destination="x1", source="x3", routing_key="#")  # x1->x2->x3->x1
    q1, q2, q3, both = (declare_anon(channel) for _ in range(4))
    channel.queue_bind(q1, "x1")
    channel.queue_bind(q2, "x2")
    channel.queue_bind(q3, "x3", routing_key="k.*")
    channel.queue_bind(both, "x1")
    channel.queue_bind(both, "x2")
    channel.queue_bind(both, "x3", routing_key="#")

    channel.basic_publish("x1", "k.a", b"one")
    channel.basic_publish("x3", "k.b", b"two")
    channel.basic_publish("x2", "zzz", b"three")
    counts = [ready_count(channel, q) for q in (q1, q2, q3, both)]
    assert counts == [3, 3, 2, 3]
    assert [get_body(channel, both)[0] for _ in range(3)] == [b"one", b"two", b"three"]
    assert [get_body(channel, q3)[0] for _ in range(2)] == [b"one", b"two"]

    channel.exchange_unbind(destination="x2", source="x1")
    channel.basic_publish("x1", "k.c", b"four")  # x1 -> q1, both only
    assert [ready_count(channel, q) for q in (q1, q2, q3, both)] == [4, 3, 0, 1]


def test_alternate_exchange(channel: Any) -> None:
    channel.exchange_declare("ae", "fanout")
    channel.exchange_declare("main", "direct", arguments={"alternate-exchange": "ae"})
    routed, unrouted = declare_anon(channel), declare_anon(channel)
    channel.queue_bind(routed, "main", routing_key="known")
    channel.queue_bind(unrouted, "ae")
    channel.confirm_delivery()

    channel.basic_publish("main", "known", b"r", mandatory=True)
    channel.basic_publish("main", "unknown", b"u", mandatory=True)  # AE routes: no return
    assert get_body(channel, routed)[0] == b"r"
    method, _props, body = channel.basic_get(unrouted, auto_ack=True)
    assert body == b"u"
    assert (method.exchange, method.routing_key) == ("main", "unknown")
    assert channel.basic_get(routed)[0] is None

    # if the alternate exchange routes nowhere either, a mandatory message is returned
    channel.queue_unbind(unrouted, "ae")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("main", "unknown", b"lost", mandatory=True)


def test_alternate_exchange_missing_is_ignored(channel: Any) -> None:
    channel.exchange_declare("main2", "direct", arguments={"alternate-exchange": "nope"})
    q = declare_anon(channel)
    channel.queue_bind(q, "main2", routing_key="k")
    channel.confirm_delivery()
    channel.basic_publish("main2", "k", b"ok")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("main2", "other", b"lost", mandatory=True)
    assert get_body(channel, q)[0] == b"ok"


def test_headers_exchange_x_match_all_and_any(channel: Any) -> None:
    channel.exchange_declare("hx", "headers")
    q_all, q_any, q_presence = (declare_anon(channel) for _ in range(3))
    channel.queue_bind(q_all, "hx", arguments={"x-match": "all", "format": "pdf", "type": "report"})
    channel.queue_bind(q_any, "hx", arguments={"x-match": "any", "format": "zip", "priority": 5})
    channel.queue_bind(q_presence, "amq.headers", arguments={"x-match": "all", "flag": None})

    def send(name: str, headers: dict[str, Any] | None) -> None:
        channel.basic_publish("hx", "ignored", name.encode(), pika.BasicProperties(headers=headers))

    send("pdf-report", {"format": "pdf", "type": "report"})
    send("pdf-report-extra", {"format": "pdf", "type": "report", "x": 1})
    send("pdf-only", {"format": "pdf"})
    send("zip", {"format": "zip", "type": "log"})
    send("prio5", {"priority": 5})
    send("prio6", {"priority": 6})
    send("prio-str", {"priority": "5"})
    send("none", None)
    channel.basic_publish(
        "amq.headers", "", b"flagged", pika.BasicProperties(headers={"flag": "anything"})
    )
    channel.basic_publish("amq.headers", "", b"unflagged", pika.BasicProperties(headers={}))

    def drain(q: str) -> list[bytes]:
        out = []
        while (got := channel.basic_get(q, auto_ack=True))[0] is not None:
            out.append(got[2])
        return out

    assert drain(q_all) == [b"pdf-report", b"pdf-report-extra"]
    assert drain(q_any) == [b"zip", b"prio5"]
    assert drain(q_presence) == [b"flagged"]
