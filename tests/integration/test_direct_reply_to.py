"""Direct reply-to (amq.rabbitmq.reply-to): RPC without a reply queue, with RabbitMQ 3.x's
rules and reply codes (checked against RabbitMQ 3.10), with pika and aio-pika."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aio_pika
import pika
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest
from tests.integration.ext_support import closed_by_broker, connect, next_message

REPLY_TO = "amq.rabbitmq.reply-to"


@pytest.fixture
def conn(server: Server | NodeUnderTest) -> Iterator[pika.BlockingConnection]:
    connection = connect(server.port)
    yield connection
    if connection.is_open:
        connection.close()


def _collect(ch: Any, into: list[tuple[Any, Any, bytes]]) -> str:
    return str(
        ch.basic_consume(REPLY_TO, lambda _ch, m, p, b: into.append((m, p, b)), auto_ack=True)
    )


def _wait(conn: pika.BlockingConnection, replies: list[Any], count: int) -> None:
    deadline = time.monotonic() + 5
    while len(replies) < count:
        assert time.monotonic() < deadline, f"only {len(replies)} of {count} replies arrived"
        conn.process_data_events(time_limit=0.05)


def test_rpc_replies_go_back_to_the_requesting_channel(
    server: Server | NodeUnderTest, conn: pika.BlockingConnection
) -> None:
    clients = [conn.channel(), conn.channel()]
    replies: list[list[tuple[Any, Any, bytes]]] = [[], []]
    for client, into in zip(clients, replies, strict=True):
        _collect(client, into)
    clients[0].queue_declare("rpc")
    for n, client in enumerate(clients):
        props = pika.BasicProperties(reply_to=REPLY_TO, correlation_id=f"c{n}")
        client.basic_publish("", "rpc", b"request-%d" % n, props)

    with connect(server.port) as server_conn:
        server_ch = server_conn.channel()
        addresses = []
        for _ in range(2):
            method, props, body = next_message(server_conn, "rpc")
            # the broker replaced the pseudo-queue name with this channel's private address
            assert props.reply_to.startswith(REPLY_TO + ".")
            addresses.append(props.reply_to)
            reply = pika.BasicProperties(correlation_id=props.correlation_id)
            server_ch.basic_publish("", props.reply_to, b"reply-to-" + body, reply)
        assert addresses[0] != addresses[1]

    _wait(conn, replies[0], 1)
    _wait(conn, replies[1], 1)
    for n, got in enumerate(replies):
        assert len(got) == 1
        method, props, body = got[0]
        assert (body, props.correlation_id) == (b"reply-to-request-%d" % n, f"c{n}")
        assert (method.exchange, method.routing_key) == ("", addresses[n])


def test_direct_reply_to_rules_and_reply_codes(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    code, text = closed_by_broker(lambda: ch.basic_consume(REPLY_TO, lambda *_: None))
    assert (code, text) == (406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")

    ch = conn.channel()
    props = pika.BasicProperties(reply_to=REPLY_TO)
    code, text = closed_by_broker(
        lambda: (ch.basic_publish("", "anywhere", b"x", props), ch.queue_declare("fence"))
    )
    assert (code, text) == (406, "PRECONDITION_FAILED - fast reply consumer does not exist")
    assert conn.is_open  # a channel error, not a connection one

    ch = conn.channel()
    _collect(ch, [])
    code, text = closed_by_broker(
        lambda: ch.basic_consume(REPLY_TO, lambda *_: None, auto_ack=True)
    )
    assert (code, text) == (406, "PRECONDITION_FAILED - reply consumer already set")

    ch = conn.channel()
    code, text = closed_by_broker(lambda: ch.basic_get(REPLY_TO))
    assert (code, text) == (404, f"NOT_FOUND - no queue '{REPLY_TO}' in vhost '/'")


def test_declaring_a_reply_address_tells_whether_the_client_is_still_there(
    conn: pika.BlockingConnection,
) -> None:
    client = conn.channel()
    tag = _collect(client, [])
    client.queue_declare("rpc")
    client.basic_publish("", "rpc", b"req", pika.BasicProperties(reply_to=REPLY_TO))
    _method, props, _body = next_message(conn, "rpc")
    address = props.reply_to

    ch = conn.channel()
    for name, passive in ((REPLY_TO, True), (address, True), (address, False)):
        ok = ch.queue_declare(name, passive=passive).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 1)
    code, text = closed_by_broker(lambda: ch.queue_declare(REPLY_TO + ".unknown", passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no queue '{REPLY_TO}.unknown' in vhost '/'")

    client.basic_cancel(tag)
    ch = conn.channel()
    code, _text = closed_by_broker(lambda: ch.queue_declare(address, passive=True))
    assert code == 404
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", address, b"late reply")  # dropped silently, as in RabbitMQ
    assert ch.is_open


def test_aio_pika_rpc_over_direct_reply_to(server: Server | NodeUnderTest) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"

    async def main() -> None:
        async with await aio_pika.connect(url) as connection:
            server_channel = await connection.channel()
            requests = await server_channel.declare_queue("rpc-aio")

            async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    assert message.reply_to is not None
                    await server_channel.default_exchange.publish(
                        aio_pika.Message(
                            body=message.body.upper(), correlation_id=message.correlation_id
                        ),
                        routing_key=message.reply_to,
                    )

            await requests.consume(serve)

            client_channel = await connection.channel()
            # aio-pika's get_queue is a passive declare, which RabbitMQ answers for this name
            reply_queue = await client_channel.get_queue(REPLY_TO)
            answers: dict[str, asyncio.Future[bytes]] = {}

            async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                assert message.correlation_id is not None
                answers[message.correlation_id].set_result(message.body)

            await reply_queue.consume(on_reply, no_ack=True)
            loop = asyncio.get_running_loop()
            for n in range(3):
                answers[f"id-{n}"] = loop.create_future()
                await client_channel.default_exchange.publish(
                    aio_pika.Message(b"ping-%d" % n, reply_to=REPLY_TO, correlation_id=f"id-{n}"),
                    routing_key="rpc-aio",
                )
            results = await asyncio.wait_for(asyncio.gather(*answers.values()), 5)
            assert results == [b"PING-0", b"PING-1", b"PING-2"]

    asyncio.run(main())
