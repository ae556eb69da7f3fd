"""x-delayed-message exchanges over real sockets with pika (issue 27, part 1): the plugin's
reply codes, delays firing in due order, mandatory and alternate exchanges, the
``messages_delayed`` count in the management API and Prometheus, and confirmed persistent
delayed messages surviving a clean restart and a kill -9."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest, node_under_test
from tests.integration.broker_process import BrokerProcess

DELAYED = "x-delayed-message"
WAIT = 60.0  # seconds a test waits for a delivery before it fails (a busy machine)


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server | NodeUnderTest]:
    with node_under_test(tmp_path_factory, http=True) as server:
        yield server


def _connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))


def _delayed_exchange(ch: Any, name: str = "dx", inner: str = "direct", **args: Any) -> None:
    ch.exchange_declare(name, DELAYED, durable=True, arguments={"x-delayed-type": inner, **args})


def _props(delay: object, persistent: bool = True) -> pika.BasicProperties:
    return pika.BasicProperties(delivery_mode=2 if persistent else 1, headers={"x-delay": delay})


def _receive(ch: Any, queue: str, count: int) -> list[tuple[float, bytes, Any]]:
    """``count`` deliveries from ``queue`` as (arrival time, body, headers), waiting for
    each at most WAIT seconds."""
    got: list[tuple[float, bytes, Any]] = []
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=WAIT):
        assert method is not None, f"only {len(got)} of {count} messages arrived"
        got.append((time.time(), body, props.headers))
        if len(got) == count:
            break
    ch.cancel()
    return got


def test_declaration_errors_have_the_plugins_codes_and_texts(
    broker: Server | NodeUnderTest,
) -> None:
    conn = _connect(broker.port)
    for arguments, text in (
        ({}, "Invalid argument, 'x-delayed-type' must be an existing exchange type"),
        (
            {"x-delayed-type": DELAYED},
            "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'",
        ),
    ):
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            ch.exchange_declare("dx", DELAYED, arguments=arguments)
        assert (closed.value.reply_code, closed.value.reply_text) == (
            406,
            f"PRECONDITION_FAILED - {text}",
        )
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as gone:
        ch.exchange_declare("dx", DELAYED, arguments={"x-delayed-type": "x-nope"})
    assert (gone.value.reply_code, gone.value.reply_text) == (
        503,
        "COMMAND_INVALID - unknown exchange type 'x-nope'",
    )
    conn = _connect(broker.port)  # the broker serves on
    _delayed_exchange(conn.channel(), inner="topic")
    conn.close()


def test_delays_fire_in_due_order_never_early(broker: Server | NodeUnderTest) -> None:
    conn = _connect(broker.port)
    ch = conn.channel()
    _delayed_exchange(ch, inner="topic")
    ch.queue_declare("q")
    ch.queue_bind("q", "dx", "orders.*")
    ch.confirm_delivery()
    delays: list[object] = [900, 300, "600", 0, 150, -5]
    sent: dict[bytes, float] = {}
    for index, delay in enumerate(delays):
        body = b"m%d" % index
        sent[body] = time.time()
        ch.basic_publish("dx", "orders.new", body, _props(delay))
    got = _receive(ch, "q", len(delays))
    assert [body for _at, body, _h in got] == [b"m3", b"m5", b"m4", b"m1", b"m2", b"m0"]
    for at, body, headers in got:
        delay = delays[int(body[1:])]
        due = sent[body] + max(int(delay), 0) / 1000  # type: ignore[call-overload]
        assert at >= due  # never before its time
        if int(delay) > 0:  # type: ignore[call-overload]
            assert headers == {"x-delay": -int(delay)}  # type: ignore[call-overload]
    conn.close()


def test_mandatory_and_alternate_exchange(broker: Server | NodeUnderTest) -> None:
    conn = _connect(broker.port)
    ch = conn.channel()
    ch.exchange_declare("ae", "fanout")
    ch.queue_declare("unrouted")
    ch.queue_bind("unrouted", "ae")
    _delayed_exchange(ch, "plain")
    _delayed_exchange(ch, "with-ae", **{"alternate-exchange": "ae"})
    ch.confirm_delivery()
    # mandatory, nothing bound now: returned at once and not held (the plugin returns a
    # mandatory delayed message even when it is bound; amqpd checks the bindings now)
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("plain", "k", b"nobody", _props(100), mandatory=True)
    ch.queue_declare("q")
    ch.queue_bind("q", "plain", "k")
    ch.basic_publish("plain", "k", b"bound", _props(100), mandatory=True)  # not returned
    assert [body for _at, body, _h in _receive(ch, "q", 1)] == [b"bound"]
    # alternate exchange: what is unroutable when the delay ends goes there, not at publish
    ch.basic_publish("with-ae", "k", b"to-ae", _props(100))
    assert ch.queue_declare("unrouted", passive=True).method.message_count == 0
    assert [body for _at, body, _h in _receive(ch, "unrouted", 1)] == [b"to-ae"]
    conn.close()


def test_messages_delayed_in_management_api_and_prometheus(broker: Server | NodeUnderTest) -> None:
    conn = _connect(broker.port)
    ch = conn.channel()
    _delayed_exchange(ch)
    ch.confirm_delivery()
    for n in range(3):
        ch.basic_publish("dx", "k", b"%d" % n, _props(600_000))
    ch.basic_publish("dx", "k", b"now", _props(0))  # not delayed: not counted
    base = f"http://127.0.0.1:{broker.management_port}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=60) as api:
        item = api.get("/api/exchanges/%2F/dx").json()
        assert (item["type"], item["messages_delayed"]) == (DELAYED, 3)
        assert "messages_delayed" not in api.get("/api/exchanges/%2F/amq.direct").json()
        types = [t["name"] for t in api.get("/api/overview").json()["exchange_types"]]
    assert DELAYED in types
    metrics = f"http://127.0.0.1:{broker.prometheus_port}"
    text = httpx.get(f"{metrics}/metrics", timeout=60).text
    assert "\nrabbitmq_exchange_messages_delayed 3.0\n" in text
    text = httpx.get(f"{metrics}/metrics/per-object", timeout=60).text
    assert 'rabbitmq_exchange_messages_delayed{exchange="dx",vhost="/"} 3.0' in text
    conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("crash", [False, True])
def test_confirmed_delayed_messages_fire_after_restart(tmp_path: Path, crash: bool) -> None:
    broker = BrokerProcess(tmp_path)
    try:
        conn = _connect(broker.port)
        ch = conn.channel()
        _delayed_exchange(ch)
        ch.queue_declare("q", durable=True)
        ch.queue_bind("q", "dx", "k")
        ch.confirm_delivery()
        delays = [1500, 200, 1200, 50, 800, 2500, 400]  # some are late after the restart
        for index, delay in enumerate(delays):
            ch.basic_publish("dx", "k", b"%d" % index, _props(delay))  # each one confirmed
        if crash:
            broker.kill()  # right after the confirms: the plugin loses some here
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                conn.close()  # (its socket is dead; this releases it)
        else:
            conn.close()
            broker.stop()
        broker.restart()
        conn = _connect(broker.port)
        ch = conn.channel()
        got = [body for _at, body, _h in _receive(ch, "q", len(delays))]
        assert got == [b"%d" % i for i in sorted(range(len(delays)), key=delays.__getitem__)]
        conn.close()
    finally:
        broker.stop()
