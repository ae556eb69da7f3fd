"""Message TTL, queue TTL (x-expires), dead-lettering and delivery counting, checked with pika
against RabbitMQ 3.x's behaviour and exact header shapes (verified against RabbitMQ 3.10).

The broker ticks every 0.1 s here, so TTL timers fire quickly; every wait is for an event (a
dead-lettered message arriving) under a deadline, except x-expires, which has no event: there
the test probes with mandatory publishes (which do not count as using the queue)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
from pamqp import commands
from pamqp.body import ContentBody

from tests.conftest import node_under_test
from tests.integration.ext_support import (
    closed_by_broker,
    connect,
    header_field_types,
    next_message,
    wait_until_unroutable,
)
from tests.integration.raw_client import RawClient

TICK = 0.1


@pytest.fixture
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with node_under_test(tmp_path_factory, tick_interval=TICK) as server:
        yield server.port


@pytest.fixture
def conn(port: int) -> Iterator[pika.BlockingConnection]:
    connection = connect(port)
    yield connection
    if connection.is_open:
        connection.close()


def _age(timestamp: datetime.datetime) -> float:
    return abs(time.time() - timestamp.timestamp())


def _declare_dlq(ch: pika.adapters.blocking_connection.BlockingChannel, name: str = "dlq") -> None:
    ch.exchange_declare("dlx", "fanout")
    ch.queue_declare(name)
    ch.queue_bind(name, "dlx")


# -- message TTL ----------------------------------------------------------------------------
def test_queue_ttl_dead_letters_expired_messages_with_x_death(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    _declare_dlq(ch)
    ch.queue_declare("src", arguments={"x-message-ttl": 200, "x-dead-letter-exchange": "dlx"})
    ch.queue_bind("src", "amq.direct", "k")
    props = pika.BasicProperties(content_type="text/plain", headers={"app": "v"}, priority=2)
    started = time.monotonic()
    ch.basic_publish("amq.direct", "k", b"ttl", props)

    method, got, body = next_message(conn, "dlq")
    assert time.monotonic() - started >= 0.2
    assert (body, method.exchange, method.routing_key) == (b"ttl", "dlx", "k")
    assert (got.content_type, got.priority, got.expiration) == ("text/plain", 2, None)
    headers = got.headers
    deaths = headers.pop("x-death")
    assert headers == {
        "app": "v",
        "x-first-death-reason": "expired",
        "x-first-death-queue": "src",
        "x-first-death-exchange": "amq.direct",
    }
    assert len(deaths) == 1
    death = deaths[0]
    assert _age(death.pop("time")) < 10
    assert death == {  # no original-expiration: the message had no expiration of its own
        "count": 1,
        "reason": "expired",
        "queue": "src",
        "exchange": "amq.direct",
        "routing-keys": ["k"],
    }
    assert ch.queue_declare("src", passive=True).method.message_count == 0


def test_the_lower_of_message_expiration_and_queue_ttl_wins(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.queue_declare("dlq")
    ch.queue_declare(
        "src",
        arguments={
            "x-message-ttl": 1000,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dlq",
        },
    )
    started = time.monotonic()
    ch.basic_publish("", "src", b"own-ttl-lower", pika.BasicProperties(expiration="100"))
    ch.basic_publish("", "src", b"queue-ttl-lower", pika.BasicProperties(expiration="60000"))

    _method, first, body = next_message(conn, "dlq")
    first_at = time.monotonic() - started
    assert body == b"own-ttl-lower"
    assert 0.1 <= first_at < 0.9  # its own 100 ms, well before the queue's 1000 ms
    assert first.expiration is None
    assert first.headers["x-death"][0]["original-expiration"] == "100"

    _method, second, body = next_message(conn, "dlq")
    second_at = time.monotonic() - started
    assert body == b"queue-ttl-lower"
    assert 1.0 <= second_at < 5.0  # the queue's 1000 ms, not its own 60 s
    assert second.expiration is None
    assert second.headers["x-death"][0]["original-expiration"] == "60000"
    assert second.headers["x-death"][0]["reason"] == "expired"


def test_expired_messages_are_dropped_and_never_delivered(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.exchange_declare("fan", "fanout")
    _declare_dlq(ch)
    ch.queue_declare("plain")  # no dead-letter exchange: expired messages are dropped
    ch.queue_declare("watched", arguments={"x-dead-letter-exchange": "dlx"})
    ch.queue_bind("plain", "fan")
    ch.queue_bind("watched", "fan")
    ch.basic_publish("", "plain", b"no-ttl")
    ch.basic_publish("fan", "", b"short", pika.BasicProperties(expiration="200"))
    ch.basic_publish("", "plain", b"after")

    # both copies got the same deadline; the watched one's dead-lettering is the event
    assert next_message(conn, "dlq")[2] == b"short"
    taken = [ch.basic_get("plain", auto_ack=True)[2] for _ in range(2)]
    assert taken == [b"no-ttl", b"after"]  # "short" expired behind the head, then dropped
    assert ch.basic_get("plain")[0] is None
    assert ch.queue_declare("watched", passive=True).method.message_count == 0


def test_invalid_expiration_property_closes_the_channel(conn: pika.BlockingConnection) -> None:
    cases = {
        "-1": "{value_negative,-1}",
        "abc": "no_integer",
        "1.5": '{leftover_string,".5"}',
        " 10": "no_integer",
        "": "no_integer",
        "315360000001": "{value_too_large,315360000001}",
    }
    for value, problem in cases.items():
        ch = conn.channel()
        ch.queue_declare("q")

        def publish(ch: Any = ch, value: str = value) -> None:
            ch.basic_publish("", "q", b"x", pika.BasicProperties(expiration=value))
            ch.queue_declare("q", passive=True)

        code, text = closed_by_broker(publish)
        assert (code, text) == (
            406,
            f"PRECONDITION_FAILED - invalid expiration '{value}': {problem}",
        )
    ch = conn.channel()
    ch.basic_publish("", "q", b"plus", pika.BasicProperties(expiration="+60000"))  # Erlang parse
    assert ch.basic_get("q", auto_ack=True)[2] == b"plus"


# -- queue TTL (x-expires) ------------------------------------------------------------------
def test_x_expires_deletes_an_unused_queue(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("temp", arguments={"x-expires": 300})
    ch.basic_publish("", "temp", b"messages do not keep it alive")
    assert wait_until_unroutable(conn, "temp", deadline_s=5.0) >= 0.25
    code, text = closed_by_broker(lambda: ch.queue_declare("temp", passive=True))
    assert (code, text) == (404, "NOT_FOUND - no queue 'temp' in vhost '/'")


def test_x_expires_lease_is_renewed_by_consumers_gets_and_declares(
    conn: pika.BlockingConnection,
) -> None:
    """The lease is long enough that a loaded machine cannot miss a renewal by accident (the
    exact boundaries are tested without sockets in tests/unit/test_protocol_ttl.py)."""
    lease = 1.0
    ch = conn.channel()
    ch.queue_declare("leased", arguments={"x-expires": int(lease * 1000)})
    tag = ch.basic_consume("leased", lambda *_: None)
    conn.sleep(1.5 * lease)  # longer than the lease with a consumer attached
    ch.basic_cancel(tag)
    deadline = time.monotonic() + 1.5 * lease
    while time.monotonic() < deadline:  # each use renews the lease (RabbitMQ 3.10 behaviour)
        ch.queue_declare("leased", passive=True)
        conn.sleep(0.1)
        assert ch.basic_get("leased")[0] is None
        conn.sleep(0.1)
    assert ch.queue_declare("leased", passive=True).method.consumer_count == 0
    assert wait_until_unroutable(conn, "leased", deadline_s=10.0) < 10.0


def test_rejected_message_is_dead_lettered_with_rabbitmq_headers(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    _declare_dlq(ch)
    ch.queue_declare("src", arguments={"x-dead-letter-exchange": "dlx"})
    ch.queue_bind("src", "amq.direct", "k")
    ch.queue_bind("src", "amq.direct", "cc-key")
    headers = {"CC": ["cc-key"], "BCC": ["bcc-key"], "keep": 1}
    props = pika.BasicProperties(expiration="60000", headers=headers, message_id="m1")
    ch.basic_publish("amq.direct", "k", b"body", props)

    method, _props, _body = ch.basic_get("src")
    ch.basic_reject(method.delivery_tag, requeue=False)
    method, got, body = next_message(conn, "dlq")
    assert (body, method.exchange, method.routing_key, method.redelivered) == (
        b"body",
        "dlx",
        "k",
        False,
    )
    assert (got.expiration, got.message_id) == (None, "m1")
    got_headers = dict(got.headers)
    deaths = got_headers.pop("x-death")
    assert got_headers == {
        "CC": ["cc-key"],  # CC stays, BCC was removed at publish
        "keep": 1,
        "x-first-death-reason": "rejected",
        "x-first-death-queue": "src",
        "x-first-death-exchange": "amq.direct",
    }
    assert [{k: v for k, v in d.items() if k != "time"} for d in deaths] == [
        {
            "count": 1,
            "reason": "rejected",
            "queue": "src",
            "exchange": "amq.direct",
            "routing-keys": ["k", "cc-key"],
            "original-expiration": "60000",
        }
    ]
    assert _age(deaths[0]["time"]) < 10
    assert ch.queue_declare("src", passive=True).method.message_count == 0

    # basic.nack (requeue=false) dead-letters the same way
    ch.basic_publish("", "src", b"nacked")
    method, _props, _body = ch.basic_get("src")
    ch.basic_nack(method.delivery_tag, requeue=False)
    _method, got, body = next_message(conn, "dlq")
    assert body == b"nacked"
    assert got.headers["x-death"][0]["reason"] == "rejected"
    assert got.headers["x-death"][0]["exchange"] == ""


def test_x_death_counts_per_queue_and_reason_newest_first(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("final")
    ch.queue_declare(
        "a", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"}
    )
    ch.queue_declare(
        "b",
        arguments={
            "x-message-ttl": 100,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "final",
        },
    )

    def reject_from_a() -> None:
        method, _props, _body = ch.basic_get("a")
        ch.basic_reject(method.delivery_tag, requeue=False)  # a -> b, then expires b -> final

    ch.basic_publish("", "a", b"m", pika.BasicProperties(expiration="60000"))
    reject_from_a()
    _method, first, _body = next_message(conn, "final")
    deaths = first.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        ("b", "expired", 1),
        ("a", "rejected", 1),
    ]
    assert "original-expiration" not in deaths[0]  # the expiration was gone after the 1st death
    assert deaths[1]["original-expiration"] == "60000"
    first_rejection_time = deaths[1]["time"]

    ch.basic_publish("", "a", b"m", first)  # round two, with the history it carries
    reject_from_a()
    _method, second, _body = next_message(conn, "final")
    deaths = second.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        ("b", "expired", 2),
        ("a", "rejected", 2),
    ]
    assert deaths[1]["time"] == first_rejection_time  # an entry keeps its first time
    assert deaths[1]["routing-keys"] == ["a"]
    assert (
        second.headers["x-first-death-reason"],
        second.headers["x-first-death-queue"],
        second.headers["x-first-death-exchange"],
    ) == ("rejected", "a", "")


def test_dead_letter_routing_key_replaces_the_keys_and_drops_cc(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.exchange_declare("dx", "direct")
    ch.queue_declare("dq")
    ch.queue_declare("by-cc")
    ch.queue_bind("dq", "dx", "dead")
    ch.queue_bind("by-cc", "dx", "cc-key")
    ch.queue_bind("by-cc", "dx", "src")
    ch.queue_declare(
        "src", arguments={"x-dead-letter-exchange": "dx", "x-dead-letter-routing-key": "dead"}
    )
    ch.basic_publish("", "src", b"m", pika.BasicProperties(headers={"CC": ["cc-key"], "x": "y"}))
    method, _props, _body = ch.basic_get("src")
    ch.basic_reject(method.delivery_tag, requeue=False)

    method, got, _body = next_message(conn, "dq")
    assert (method.exchange, method.routing_key) == ("dx", "dead")
    assert "CC" not in got.headers
    assert got.headers["x"] == "y"
    assert got.headers["x-death"][0]["routing-keys"] == ["src", "cc-key"]
    assert ch.queue_declare("by-cc", passive=True).method.message_count == 0


def test_missing_dead_letter_exchange_drops_the_message(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("src", arguments={"x-dead-letter-exchange": "not-declared"})
    ch.basic_publish("", "src", b"m")
    method, _props, _body = ch.basic_get("src")
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert ch.queue_declare("src", passive=True).method.message_count == 0
    assert ch.is_open


def test_max_length_drop_head_dead_letters_with_reason_maxlen(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    _declare_dlq(ch)
    ch.queue_declare("short", arguments={"x-max-length": 2, "x-dead-letter-exchange": "dlx"})
    for body in (b"1", b"2", b"3"):
        ch.basic_publish("", "short", body)
    _method, got, body = next_message(conn, "dlq")
    assert body == b"1"
    death = got.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("maxlen", "short", 1)
    assert got.headers["x-first-death-reason"] == "maxlen"
    assert [ch.basic_get("short", auto_ack=True)[2] for _ in range(2)] == [b"2", b"3"]


def test_reject_publish_dlx_nacks_and_dead_letters_the_refused_message(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    _declare_dlq(ch)
    for name, overflow in (("full-dlx", "reject-publish-dlx"), ("full", "reject-publish")):
        ch.queue_declare(
            name,
            arguments={"x-max-length": 1, "x-overflow": overflow, "x-dead-letter-exchange": "dlx"},
        )
    ch.confirm_delivery()
    ch.basic_publish("", "full-dlx", b"kept")
    ch.basic_publish("", "full", b"kept")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", "full-dlx", b"refused")
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", "full", b"refused-not-dead-lettered")

    _method, got, body = next_message(conn, "dlq")
    assert body == b"refused"
    death = got.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["routing-keys"]) == (
        "maxlen",
        "full-dlx",
        ["full-dlx"],
    )
    assert ch.queue_declare("dlq", passive=True).method.message_count == 0
    for name in ("full-dlx", "full"):
        assert ch.queue_declare(name, passive=True).method.message_count == 1


# -- cycles ---------------------------------------------------------------------------------
def test_fully_automatic_dead_letter_cycle_drops_the_message(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.exchange_declare("cyc", "fanout")
    ch.queue_declare("loop", arguments={"x-message-ttl": 100, "x-dead-letter-exchange": "cyc"})
    ch.queue_declare("observer")
    ch.queue_bind("loop", "cyc")
    ch.queue_bind("observer", "cyc")
    ch.basic_publish("", "loop", b"m")

    _method, got, _body = next_message(conn, "observer")
    assert got.headers["x-death"][0]["reason"] == "expired"
    # the copy routed back to "loop" closed an automatic cycle and was dropped (same step)
    assert ch.queue_declare("loop", passive=True).method.message_count == 0


def test_cycle_through_a_rejection_is_kept_until_an_automatic_death_repeats(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.exchange_declare("back", "fanout")
    ch.queue_declare("self", arguments={"x-message-ttl": 200, "x-dead-letter-exchange": "back"})
    ch.queue_declare("observer")
    ch.queue_bind("self", "back")
    ch.queue_bind("observer", "back")
    ch.basic_publish("", "self", b"m")
    method, _props, _body = ch.basic_get("self")
    ch.basic_reject(method.delivery_tag, requeue=False)

    _method, first, _body = next_message(conn, "observer")
    assert [(d["queue"], d["reason"]) for d in first.headers["x-death"]] == [("self", "rejected")]
    # the copy back in "self" (allowed: the client rejected it) expires there in turn
    _method, second, _body = next_message(conn, "observer")
    assert [(d["queue"], d["reason"]) for d in second.headers["x-death"]] == [
        ("self", "expired"),
        ("self", "rejected"),
    ]
    # ...and that death was automatic since its last visit: "self" does not get it again
    assert ch.queue_declare("self", passive=True).method.message_count == 0
    assert ch.queue_declare("observer", passive=True).method.message_count == 0


# -- delivery counting and limits -----------------------------------------------------------
def test_every_redelivery_carries_x_delivery_count(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("work")
    ch.basic_publish("", "work", b"m", pika.BasicProperties(headers={"mine": "kept"}))
    method, props, _body = ch.basic_get("work")
    assert (method.redelivered, props.headers) == (False, {"mine": "kept"})
    ch.basic_nack(method.delivery_tag, requeue=True)

    method, props, _body = ch.basic_get("work")
    assert (method.redelivered, props.headers) == (True, {"mine": "kept", "x-delivery-count": 1})
    ch.basic_reject(method.delivery_tag, requeue=True)

    consumer_ch = conn.channel()
    consumer_ch.basic_qos(prefetch_count=1)
    for method, props, _body in consumer_ch.consume("work", inactivity_timeout=5):
        assert method is not None
        assert props.headers["x-delivery-count"] == 2
        break
    consumer_ch.close()  # unacked: requeued by the close

    method, props, _body = next_message(conn, "work")
    assert (method.redelivered, props.headers["x-delivery-count"]) == (True, 3)


def test_delivery_limit_dead_letters_with_reason_delivery_limit(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    _declare_dlq(ch)
    ch.queue_declare("limited", arguments={"x-delivery-limit": 1, "x-dead-letter-exchange": "dlx"})
    ch.basic_publish("", "limited", b"poison", pika.BasicProperties(headers={"h": 1}))
    counts = []
    for _ in range(2):  # x-delivery-limit=1: the first delivery and one redelivery
        method, props, _body = ch.basic_get("limited")
        counts.append((props.headers or {}).get("x-delivery-count"))
        ch.basic_nack(method.delivery_tag, requeue=True)
    assert counts == [None, 1]

    _method, got, body = next_message(conn, "dlq")
    assert body == b"poison"
    assert "x-delivery-count" not in got.headers
    death = got.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", "limited", 1)
    assert got.headers["x-first-death-reason"] == "delivery_limit"
    assert ch.queue_declare("limited", passive=True).method.message_count == 0


def test_broker_made_headers_have_rabbitmq_field_types(port: int) -> None:
    """What pika hides: RabbitMQ writes x-death's count and x-delivery-count as 64-bit 'l'
    (Java clients cast them to Long), time as a timestamp, strings as longstr."""
    with connect(port) as conn:
        ch = conn.channel()
        ch.queue_declare("dlq")
        ch.queue_declare(
            "src", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
        )
        ch.basic_publish("", "src", b"m", pika.BasicProperties(expiration="60000"))
        method, _props, _body = ch.basic_get("src")
        ch.basic_reject(method.delivery_tag, requeue=False)
        ch.queue_declare("dlq", passive=True)  # fence
    with RawClient.open(port) as client:
        client.open_channel(1)
        client.send_method(1, commands.Basic.Get(queue="dlq"))
        client.expect(commands.Basic.GetOk, channel=1)
        frame_type, _channel, payload = client.read_raw_frame()
        assert frame_type == 2
        client.expect(ContentBody, channel=1)
        client.send_method(1, commands.Basic.Nack(delivery_tag=1, requeue=True))
        client.send_method(1, commands.Basic.Get(queue="dlq"))
        client.expect(commands.Basic.GetOk, channel=1)
        _type, _channel, redelivered_payload = client.read_raw_frame()
        client.expect(ContentBody, channel=1)
    types = header_field_types(payload)
    (death_kind, deaths) = types["x-death"]
    assert death_kind == "A" and len(deaths) == 1 and deaths[0][0] == "F"
    entry = {key: kind for key, (kind, _value) in deaths[0][1].items()}
    assert entry == {
        "count": "l",
        "reason": "S",
        "queue": "S",
        "time": "T",
        "exchange": "S",
        "routing-keys": "A",
        "original-expiration": "S",
    }
    assert deaths[0][1]["routing-keys"][1] == [("S", b"src")]
    for key in ("x-first-death-reason", "x-first-death-queue", "x-first-death-exchange"):
        assert types[key][0] == "S"
    assert header_field_types(redelivered_payload)["x-delivery-count"] == ("l", 1)
