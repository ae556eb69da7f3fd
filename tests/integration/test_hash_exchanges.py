"""x-consistent-hash and x-modulus-hash through the real broker with pika: the plugin's reply
codes and texts (measured on RabbitMQ 3.10.8), routing, a restart, the management API."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest, node_under_test

QUEUES = ("h1", "h2", "h3", "h4")


@pytest.fixture
def server(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> Iterator[Server | NodeUnderTest]:
    with node_under_test(tmp_path_factory, http=True, data_dir=tmp_path / "data") as running:
        yield running


def _connect(server: Server | NodeUnderTest) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("abc", 'The binding key must be an integer: <<"abc">>'),
        ("1.5", 'The binding key must be an integer: <<"1.5">>'),
        (" 2", 'The binding key must be an integer: <<" 2">>'),
        ("0", "The binding key must be greater than 0"),
        ("-1", "The binding key must be greater than 0"),
    ],
)
def test_bad_weights_close_the_channel_with_406(
    server: Server | NodeUnderTest, key: str, text: str
) -> None:
    conn = _connect(server)
    ch = conn.channel()
    ch.exchange_declare("chx", "x-consistent-hash")
    ch.queue_declare("q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        ch.queue_bind("q", "chx", key)
    assert (caught.value.reply_code, caught.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - {text}",
    )
    ch = conn.channel()  # the connection and the broker go on
    ch.queue_bind("q", "chx", "1")
    conn.close()


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"hash-header": "h", "hash-property": "message_id"},
            "hash-header and hash-property are mutually exclusive",
        ),
        ({"hash-property": "foo"}, "Unsupported property: foo"),
        ({"hash-header": 7}, "Invalid argument 'hash-header': must be a string"),
    ],
)
def test_bad_arguments_refuse_the_declaration_with_406(
    server: Server | NodeUnderTest, arguments: dict[str, object], text: str
) -> None:
    conn = _connect(server)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
        ch.exchange_declare("chx", "x-consistent-hash", arguments=arguments)
    assert (caught.value.reply_code, caught.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - {text}",
    )
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        ch.exchange_declare("chx", passive=True)
    assert missing.value.reply_code == 404
    conn.close()


def _counts(ch: pika.adapters.blocking_connection.BlockingChannel) -> Counter[str]:
    return Counter(
        {name: ch.queue_declare(name, passive=True).method.message_count for name in QUEUES}
    )


def _owner(
    ch: pika.adapters.blocking_connection.BlockingChannel,
    key: str,
    exchange: str = "chx",
    message_id: str | None = None,
) -> str:
    """Publish one message and find the queue it went to (and take it out)."""
    props = pika.BasicProperties(message_id=message_id)
    ch.basic_publish(exchange, key, b"m", props, mandatory=True)
    for name in QUEUES:
        method, _props, _body = ch.basic_get(name, auto_ack=True)
        if method is not None:
            return name
    raise AssertionError("message not routed")


def test_routing_spread_stability_restart_and_api(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, http=True, data_dir=data) as server:
        owners = _first_run(server)
    with node_under_test(tmp_path_factory, http=True, data_dir=data) as server:
        conn = _connect(server)
        ch = conn.channel()
        # durable exchange, queues and bindings came back: the same keys, the same queues
        assert {key: _owner(ch, key) for key in owners} == owners
        conn.close()


def _first_run(server: Server | NodeUnderTest) -> dict[str, str]:
    conn = _connect(server)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("chx", "x-consistent-hash", durable=True)
    ch.exchange_declare("by-id", "x-consistent-hash", arguments={"hash-property": "message_id"})
    ch.exchange_declare("mod", "x-modulus-hash", durable=True)
    for name in QUEUES:
        ch.queue_declare(name, durable=True)
        ch.queue_bind(name, "chx", "1")
        ch.queue_bind(name, "by-id", "1")
        ch.queue_bind(name, "mod", "")
    ch.queue_bind("h1", "chx", "5")  # ignored: h1 keeps weight 1
    for i in range(2000):
        ch.basic_publish("chx", f"key-{i}", b"m")
    counts = _counts(ch)
    assert sum(counts.values()) == 2000
    assert all(375 <= count <= 625 for count in counts.values()), counts
    for name in QUEUES:
        ch.queue_purge(name)
    owners = {key: _owner(ch, key) for key in ("a", "b", "c", "d", "e", "f")}
    assert owners == {key: _owner(ch, key) for key in owners}
    # hash-property message_id: the routing key does not matter, the message id does
    by_id = {f"id-{i}": _owner(ch, "same-key", "by-id", f"id-{i}") for i in range(40)}
    assert len(set(by_id.values())) > 1
    assert {mid: _owner(ch, f"other-{mid}", "by-id", mid) for mid in by_id} == by_id
    ch.basic_publish("mod", "k", b"m")
    assert sum(_counts(ch).values()) == 1
    for name in QUEUES:
        ch.queue_purge(name)

    api = httpx.Client(
        base_url=f"http://127.0.0.1:{server.management_port}", auth=("guest", "guest")
    )
    types = {t["name"] for t in api.get("/api/overview").json()["exchange_types"]}
    assert {"x-consistent-hash", "x-modulus-hash"} <= types
    exported = api.get("/api/definitions").json()["exchanges"]
    assert {(x["name"], x["type"]) for x in exported} >= {
        ("chx", "x-consistent-hash"),
        ("mod", "x-modulus-hash"),
    }
    put = api.put("/api/exchanges/%2F/api-chx", json={"type": "x-consistent-hash"})
    assert put.status_code == 201
    api.close()
    conn.close()
    return owners
