"""Streams side by side: the same AMQP 0-9-1 conversations against RabbitMQ 3.10.8 (the
session's private node) and amqpd give the same reply codes and texts, offsets, headers
and deliveries (docs/architecture.md, "Streams", lists where amqpd answers differently on
purpose: those cases are not here)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from tests.conftest import node_under_test
from tests.integration.rabbit_node import RABBIT_REASON, rabbit_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STREAM = {"x-queue-type": "stream"}
_names = itertools.count()

Outcome = tuple[str, Any]


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if RABBIT_REASON is not None:
        pytest.fail(f"these tests need RabbitMQ: {RABBIT_REASON}")
    node = rabbit_node()
    node.wait()
    data_dir: Path = tmp_path_factory.mktemp("amqpd")
    with node_under_test(tmp_path_factory, data_dir=data_dir) as server:
        yield node.url, f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"


def _outcome(url: str, action: Callable[[Any], Any]) -> Outcome:
    """What ``action(channel)`` led to on the broker at ``url``: ("ok", value),
    ("channel", (code, text)) or ("connection", (code, text))."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return ("ok", action(connection.channel()))
    except pika.exceptions.ChannelClosedByBroker as exc:
        return ("channel", (exc.reply_code, exc.reply_text))
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return ("connection", (exc.reply_code, exc.reply_text))
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()


def _both(urls: tuple[str, str], action: Callable[[Any], Any]) -> tuple[Outcome, Outcome]:
    return _outcome(urls[0], action), _outcome(urls[1], action)


def _declare(name: str, durable: bool = True, **flags: Any) -> Callable[[Any], Any]:
    arguments = {**STREAM, **flags.pop("arguments", {})}

    def action(channel: Any) -> Any:
        ok = channel.queue_declare(name, durable=durable, arguments=arguments, **flags)
        return ok.method.queue

    return action


@pytest.mark.parametrize(
    ("durable", "flags", "arguments"),
    [
        (False, {}, {}),
        (True, {"exclusive": True}, {}),
        (True, {"auto_delete": True}, {}),
        (True, {}, {"x-max-length": 10}),
        (True, {}, {"x-message-ttl": 10}),
        (True, {}, {"x-dead-letter-exchange": "x"}),
        (True, {}, {"x-max-priority": 5}),
        (True, {}, {"x-expires": 5000}),
        (True, {}, {"x-single-active-consumer": True}),
        (True, {}, {"x-overflow": "reject-publish"}),
        (True, {}, {"x-max-age": "1 day"}),
        (True, {}, {"x-max-age": "3d"}),
        (True, {}, {"x-max-age": 5}),
        (True, {}, {"x-max-length-bytes": "x"}),
        (True, {}, {"x-max-length-bytes": -1}),
        (True, {}, {"x-stream-max-segment-size-bytes": "x"}),
        (True, {}, {"x-max-age": "7D", "x-max-length-bytes": 1000, "x-initial-cluster-size": 1}),
    ],
)
def test_declare(
    urls: tuple[str, str], durable: bool, flags: dict[str, bool], arguments: dict[str, Any]
) -> None:
    name = f"decl-{next(_names)}"
    rabbit, amqpd = _both(urls, _declare(name, durable, arguments=arguments, **flags))
    assert amqpd == rabbit
    for url in urls:
        _outcome(url, lambda channel: channel.queue_delete(name))


def test_server_named_declare_and_redeclares(urls: tuple[str, str]) -> None:
    refusal = (
        "channel",
        (406, "PRECONDITION_FAILED - Cannot declare a server-named queue for type "
         "rabbit_stream_queue"),
    )  # fmt: skip
    assert _both(urls, _declare("")) == (refusal, refusal)
    name = f"redecl-{next(_names)}"
    args = {"x-max-age": "7D", "x-max-length-bytes": 1000, "x-stream-max-segment-size-bytes": 99}
    for arguments in (
        args,
        {**args, "x-max-age": "8D"},
        {**args, "x-max-length-bytes": 5},
        {**args, "x-stream-max-segment-size-bytes": 5},
        {},
    ):
        rabbit, amqpd = _both(urls, _declare(name, arguments=arguments))
        assert amqpd == rabbit, arguments
    rabbit, amqpd = _both(urls, lambda channel: channel.queue_declare(name, durable=True).method)
    assert amqpd[0] == rabbit[0] == "channel" and amqpd[1] == rabbit[1]
    for url in urls:
        _outcome(url, lambda channel: channel.queue_delete(name))


def _publish_five(name: str) -> Callable[[Any], Any]:
    def action(channel: Any) -> Any:
        channel.queue_declare(name, durable=True, arguments=STREAM)
        channel.confirm_delivery()
        for number in range(5):
            properties = pika.BasicProperties(headers={"n": number}, message_id=f"m{number}")
            channel.basic_publish("", name, b"body-%d" % number, properties)
        return None

    return action


def _consume(
    name: str, prefetch: int | None = 10, no_ack: bool = False, **arguments: Any
) -> Callable[[Any], Any]:
    def action(channel: Any) -> Any:
        if prefetch is not None:
            channel.basic_qos(prefetch_count=prefetch)
        got: list[Any] = []

        def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
            got.append(
                (
                    properties.headers,
                    properties.message_id,
                    body,
                    method.exchange,
                    method.routing_key,
                    method.redelivered,
                )
            )

        channel.basic_consume(name, on_message, auto_ack=no_ack, arguments=arguments)
        for _ in range(30):  # RabbitMQ's replies come within a few rounds
            channel.connection.process_data_events(time_limit=0.1)
            if len(got) >= 5:
                break
        return got

    return action


@pytest.mark.parametrize(
    ("prefetch", "no_ack", "arguments"),
    [
        (None, False, {"x-stream-offset": "first"}),
        (0, False, {"x-stream-offset": "first"}),
        (10, True, {"x-stream-offset": "first"}),
        (10, False, {"x-stream-offset": "10x"}),
        (10, False, {"x-stream-offset": "first"}),
        (10, False, {"x-stream-offset": "last"}),
        (10, False, {"x-stream-offset": "next"}),
        (10, False, {}),
        (10, False, {"x-stream-offset": 2}),
        (10, False, {"x-stream-offset": -5}),
        (10, False, {"x-stream-offset": 99}),
        (10, False, {"x-stream-offset": "10m"}),
    ],
)
def test_consume(
    urls: tuple[str, str], prefetch: int | None, no_ack: bool, arguments: dict[str, Any]
) -> None:
    name = f"cons-{next(_names)}"
    for url in urls:
        assert _outcome(url, _publish_five(name)) == ("ok", None)
    rabbit, amqpd = _both(urls, _consume(name, prefetch, no_ack, **arguments))
    assert amqpd == rabbit
    for url in urls:
        _outcome(url, lambda channel: channel.queue_delete(name))


@pytest.mark.parametrize("method", ["get", "purge", "nack", "reject"])
def test_refused_methods(urls: tuple[str, str], method: str) -> None:
    name = f"refused-{next(_names)}"
    for url in urls:
        _outcome(url, _publish_five(name))

    def action(channel: Any) -> Any:
        if method == "get":
            return channel.basic_get(name)
        if method == "purge":
            return channel.queue_purge(name)
        channel.basic_qos(prefetch_count=10)
        tags: list[int] = []
        channel.basic_consume(
            name,
            lambda ch, m, p, b: tags.append(m.delivery_tag),
            arguments={"x-stream-offset": "first"},
        )
        while not tags:
            channel.connection.process_data_events(time_limit=0.1)
        if method == "nack":
            channel.basic_nack(tags[0])
        else:
            channel.basic_reject(tags[0], requeue=False)
        for _ in range(30):
            channel.connection.process_data_events(time_limit=0.1)
        return tags

    rabbit, amqpd = _both(urls, action)
    assert amqpd == rabbit
    assert rabbit[0] == "connection"
    for url in urls:
        _outcome(url, lambda channel: channel.queue_delete(name))
