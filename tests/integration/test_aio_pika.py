"""aio-pika (aiormq / pamqp) against a real amqpd server.

pytest-asyncio is not used: each test is a plain function running its coroutine with
``asyncio.run`` under an overall timeout (see `run`).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import aio_pika
import aio_pika.exceptions
import aiormq
import pika
import pytest

TIMEOUT = 10.0


def run(test: Callable[[str], Awaitable[None]], url: str, timeout: float = TIMEOUT) -> None:
    """Run ``test(url)`` in a fresh event loop, failing if it takes over ``timeout`` s."""

    async def main() -> None:
        async with asyncio.timeout(timeout):
            await test(url)

    asyncio.run(main())


async def next_message(
    queue: aio_pika.abc.AbstractQueue, timeout: float = 5.0
) -> aio_pika.abc.AbstractIncomingMessage:
    """Basic.Get with a deadline: poll-free wait via a one-shot consumer."""
    got: asyncio.Future[aio_pika.abc.AbstractIncomingMessage] = (
        asyncio.get_running_loop().create_future()
    )

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        if not got.done():
            got.set_result(message)
        else:
            await message.nack(requeue=True)

    tag = await queue.consume(on_message)
    try:
        return await asyncio.wait_for(got, timeout)
    finally:
        await queue.cancel(tag)


# ----------------------------------------------------------------------------------------
# Publish / consume / ack
# ----------------------------------------------------------------------------------------
def test_hello_world(amqp_url: str) -> None:
    async def test(url: str) -> None:
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("hello")
            confirmation = await channel.default_exchange.publish(
                aio_pika.Message(body=b"Hello World!"), routing_key="hello"
            )
            assert isinstance(confirmation, aiormq.spec.Basic.Ack)

            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        assert message.body == b"Hello World!"
                        assert message.routing_key == "hello"
                        assert message.exchange == ""
                        assert message.redelivered is False
                    break
            declared = await channel.declare_queue("hello", passive=True)
            assert declared.declaration_result.message_count == 0

    run(test, amqp_url)


def test_work_queue_prefetch_and_manual_ack(amqp_url: str) -> None:
    """Two workers with prefetch 1: the one holding an unacked task gets nothing more."""

    async def test(url: str) -> None:
        received: dict[str, list[bytes]] = {"slow": [], "fast": []}
        release_slow = asyncio.Event()
        all_done = asyncio.Event()
        total = 20

        def check_done() -> None:
            if sum(map(len, received.values())) == total:
                all_done.set()

        async def slow(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received["slow"].append(message.body)
            check_done()
            await release_slow.wait()
            await message.ack()

        async def fast(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received["fast"].append(message.body)
            check_done()
            await message.ack()

        async with (
            await aio_pika.connect(url) as slow_conn,
            await aio_pika.connect(url) as fast_conn,
            await aio_pika.connect(url) as producer,
        ):
            for conn, callback in ((slow_conn, slow), (fast_conn, fast)):
                channel = await conn.channel()
                await channel.set_qos(prefetch_count=1)
                queue = await channel.declare_queue("task_queue", durable=True)
                await queue.consume(callback)

            channel = await producer.channel()
            for i in range(total):
                await channel.default_exchange.publish(
                    aio_pika.Message(
                        f"task {i}".encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                    ),
                    routing_key="task_queue",
                )
            await asyncio.wait_for(all_done.wait(), 5)
            assert received["slow"] == [b"task 0"]
            assert received["fast"] == [f"task {i}".encode() for i in range(1, total)]
            release_slow.set()

            # once the slow worker's ack has arrived it has credit again: with the fast
            # worker gone, the next message goes to it
            await fast_conn.close()
            all_done.clear()
            total += 1
            await channel.default_exchange.publish(aio_pika.Message(b"last"), "task_queue")
            await asyncio.wait_for(all_done.wait(), 5)
            assert received["slow"] == [b"task 0", b"last"]

    run(test, amqp_url)


def test_nack_requeue_redelivers(amqp_url: str) -> None:
    async def test(url: str) -> None:
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("", exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"again"), queue.name)
            first = await queue.get(timeout=5)
            assert first.redelivered is False
            await first.nack(requeue=True)
            second = await queue.get(timeout=5)
            assert second.body == b"again"
            assert second.redelivered is True
            await second.ack()
            assert await queue.get(fail=False) is None

    run(test, amqp_url)


# ----------------------------------------------------------------------------------------
# Publisher confirms
# ----------------------------------------------------------------------------------------
def test_many_publishes_in_flight_all_confirmed(amqp_url: str) -> None:
    async def test(url: str) -> None:
        count = 500
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()  # publisher_confirms=True by default
            queue = await channel.declare_queue("confirmed", durable=True)
            results = await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(
                            str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                        ),
                        routing_key="confirmed",
                    )
                    for i in range(count)
                )
            )
            assert len(results) == count
            assert all(isinstance(r, aiormq.spec.Basic.Ack) for r in results)

            declared = await channel.declare_queue("confirmed", passive=True)
            assert declared.declaration_result.message_count == count

            bodies = []
            for _ in range(count):
                message = await queue.get(no_ack=True, timeout=5)
                bodies.append(int(message.body))
            assert sorted(bodies) == list(range(count))
            assert await queue.get(fail=False) is None

    run(test, amqp_url)


def test_unroutable_mandatory_is_returned_before_confirm(amqp_url: str) -> None:
    async def test(url: str) -> None:
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel(on_return_raises=True)
            exchange = await channel.declare_exchange("nowhere", aio_pika.ExchangeType.DIRECT)
            with pytest.raises(aio_pika.exceptions.PublishError):
                await exchange.publish(aio_pika.Message(b"lost"), "no-such-key", mandatory=True)
            # without mandatory it is confirmed (and dropped)
            ok = await exchange.publish(aio_pika.Message(b"lost"), "no-such-key", mandatory=False)
            assert isinstance(ok, aiormq.spec.Basic.Ack)

    run(test, amqp_url)


# ----------------------------------------------------------------------------------------
# Exchanges
# ----------------------------------------------------------------------------------------
def test_topic_exchange_round_trip(amqp_url: str) -> None:
    async def test(url: str) -> None:
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange("topic_logs", aio_pika.ExchangeType.TOPIC)
            kern = await channel.declare_queue("", exclusive=True)
            critical = await channel.declare_queue("", exclusive=True)
            await kern.bind(exchange, routing_key="kern.*")
            await critical.bind(exchange, routing_key="#.critical")

            for key in ("kern.critical", "kern.info", "app.db.critical", "kern.disk.warning"):
                await exchange.publish(aio_pika.Message(key.encode()), routing_key=key)

            async def drain(queue: aio_pika.abc.AbstractQueue) -> list[tuple[str, bytes]]:
                out = []
                while (message := await queue.get(no_ack=True, fail=False)) is not None:
                    assert message.exchange == "topic_logs"
                    out.append((message.routing_key, message.body))
                return out

            assert await drain(kern) == [
                ("kern.critical", b"kern.critical"),
                ("kern.info", b"kern.info"),
            ]
            assert await drain(critical) == [
                ("kern.critical", b"kern.critical"),
                ("app.db.critical", b"app.db.critical"),
            ]

            # consumer delivery too (Basic.Deliver rather than Get-Ok)
            await exchange.publish(aio_pika.Message(b"x"), routing_key="kern.boot")
            message = await next_message(kern)
            await message.ack()
            assert (message.routing_key, message.body) == ("kern.boot", b"x")

    run(test, amqp_url)


# ----------------------------------------------------------------------------------------
# Field tables and properties
# ----------------------------------------------------------------------------------------
HEADERS: dict[str, Any] = {
    "kind": "full",
    "bool_true": True,
    "bool_false": False,
    "int_small": -5,
    "int_short": -30000,
    "int_ushort": 40000,
    "int_long": -2_000_000_000,
    "int_ulong": 4_000_000_000,
    "int_longlong": -(2**62),
    "float": 1.5,
    "float_negative": -0.25,
    "decimal": Decimal("3.14"),
    "decimal_negative": Decimal("-12345.678"),
    "timestamp": datetime.datetime(2024, 2, 29, 12, 34, 56, tzinfo=datetime.UTC),
    "bytes": bytearray(b"\x00\x01\xfe\xff"),
    "string": "héllo wörld " + "x" * 300,
    "empty_string": "",
    "void": None,
    "array": [1, "two", 3.5, True, None, [4, [5]], {"k": "v"}, Decimal("0.5")],
    "empty_array": [],
    "nested": {
        "level": 1,
        "inner": {"level": 2, "deep": {"level": 3, "values": [False, 2**40]}},
        "when": datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC),
    },
    "empty_table": {},
}


def test_field_table_and_properties_round_trip(amqp_url: str) -> None:
    """Every field-table value type reaches the consumer unchanged, including through a
    headers exchange (which makes the broker decode the table to route on it)."""

    async def test(url: str) -> None:
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange("hdrs", aio_pika.ExchangeType.HEADERS)
            matched = await channel.declare_queue("", exclusive=True)
            unmatched = await channel.declare_queue("", exclusive=True)
            await matched.bind(
                exchange,
                arguments={"x-match": "all", "kind": "full", "bool_true": True, "float": 1.5},
            )
            await unmatched.bind(exchange, arguments={"x-match": "all", "kind": "other"})
            direct = await channel.declare_queue("", exclusive=True)

            timestamp = datetime.datetime(2023, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
            properties: dict[str, Any] = {
                "headers": HEADERS,
                "content_type": "application/json",
                "content_encoding": "utf-8",
                "delivery_mode": aio_pika.DeliveryMode.PERSISTENT,
                "priority": 7,
                "correlation_id": "corr-1",
                "reply_to": "replies",
                "expiration": 60,
                "message_id": "msg-1",
                "timestamp": timestamp,
                "type": "test.event",
                "user_id": "guest",
                "app_id": "amqpd-tests",
            }
            body = bytes(range(256)) * 4
            await exchange.publish(aio_pika.Message(body, **properties), routing_key="")
            await channel.default_exchange.publish(
                aio_pika.Message(body, **properties), routing_key=direct.name
            )

            assert await unmatched.get(fail=False) is None
            for queue in (matched, direct):
                message = await queue.get(no_ack=True, timeout=5)
                assert message.body == body
                assert message.headers == HEADERS
                # same types, not only equal values (True == 1, 1.5 == Decimal("1.5"))
                assert _types(message.headers) == _types(HEADERS)
                assert message.content_type == "application/json"
                assert message.content_encoding == "utf-8"
                assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
                assert message.priority == 7
                assert message.correlation_id == "corr-1"
                assert message.reply_to == "replies"
                assert message.expiration == 60
                assert message.message_id == "msg-1"
                assert message.timestamp == timestamp
                assert message.type == "test.event"
                assert message.user_id == "guest"
                assert message.app_id == "amqpd-tests"

    run(test, amqp_url)


def _types(value: Any) -> Any:
    """The shape of a decoded value with every leaf replaced by its type."""
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value)


def test_headers_exchange_matches_values_across_clients(amqp_url: str) -> None:
    """pika binds (ints as 32/64-bit), aio-pika publishes (ints as 8/16-bit, floats as
    32-bit): RabbitMQ 3.x compares header values with Erlang ``==``, ignoring field types."""
    params = pika.URLParameters(amqp_url)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.exchange_declare("hx", "headers")
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "hx", arguments={"x-match": "all", "n": 5, "big": 70000, "s": "v"})

        async def test(url: str) -> None:
            async with await aio_pika.connect(url) as connection:
                channel = await connection.channel()
                exchange = await channel.get_exchange("hx")
                for name, headers in [
                    ("ints", {"n": 5, "big": 70000, "s": "v"}),
                    ("floats", {"n": 5.0, "big": 70000.0, "s": "v", "extra": 1.25}),
                    ("wrong", {"n": 6, "big": 70000, "s": "v"}),
                    ("bool", {"n": True, "big": 70000, "s": "v"}),
                    ("missing", {"n": 5, "s": "v"}),
                ]:
                    await exchange.publish(aio_pika.Message(name.encode(), headers=headers), "")

        run(test, amqp_url)
        bodies = []
        while (got := ch.basic_get(q, auto_ack=True))[0] is not None:
            bodies.append(got[2])
        assert bodies == [b"ints", b"floats"]
