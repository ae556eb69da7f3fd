"""Message TTL, x-expires and dead-lettering on expiry, driven through the sans-IO engine with
explicit times (`advance`): no sockets, no sleeps, no wall clock.

RabbitMQ 3.x semantics: the lower of the queue's x-message-ttl and the message's own
expiration wins; an expired message is dead-lettered (reason "expired") or dropped, and one
behind a head that has not expired waits until it reaches the head; delivered (unacked)
messages do not expire until they are requeued; x-expires deletes a queue unused for that
long, where consumers, gets and declares are uses; a fully automatic dead-letter cycle drops
the message.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pamqp import commands

from amqpd.model.broker import Broker
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import (
    Delivery,
    advance,
    channel_error,
    connect,
    counts,
    declare,
    deliveries,
    publish_frames,
    rpc,
    split,
)

T0 = 1000.0  # seconds; every test starts here


def started(*channels: int) -> tuple[Broker, Client]:
    broker = Broker()
    advance(broker, T0)
    return broker, connect(broker, *channels, now=T0)


def dead_letter_queue(client: Client, name: str = "dlq") -> None:
    """A fanout exchange "dlx" with queue ``name`` bound to it."""
    client.send(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    client.received()
    declare(client, 1, name)
    rpc(client, 1, commands.Queue.Bind(queue=name, exchange="dlx"), commands.Queue.BindOk)


def get(client: Client, queue: str) -> Delivery | None:
    """basic.get with no-ack: the message, or None for Get-Empty."""
    client.send(1, commands.Basic.Get(queue=queue, no_ack=True))
    messages, others = split(client.received())
    if messages:
        [message] = messages
        return message
    assert [type(v) for _c, v in others] == [commands.Basic.GetEmpty], others
    return None


def exists(client: Client, queue: str) -> bool:
    """Probe with a mandatory publish to the default exchange, which does not count as a use
    of the queue (x-expires): returned means there is no such queue."""
    client.send(1, *publish_frames(queue, b"probe", mandatory=True))
    messages = deliveries(client.received())  # the probe may reach a consumer
    return not any(isinstance(m.method, commands.Basic.Return) for m in messages)


# ---------------------------------------------------------------------------------------------
# Message TTL
# ---------------------------------------------------------------------------------------------
def test_queue_ttl_dead_letters_at_the_deadline_with_x_death() -> None:
    broker, client = started()
    dead_letter_queue(client)
    declare(client, 1, "src", arguments={"x-message-ttl": 200, "x-dead-letter-exchange": "dlx"})
    bind = commands.Queue.Bind(queue="src", exchange="amq.direct", routing_key="k")
    rpc(client, 1, bind, commands.Queue.BindOk)
    client.send(
        1,
        *publish_frames(
            "k",
            b"ttl",
            exchange="amq.direct",
            content_type="text/plain",
            headers={"app": "v"},
            priority=2,
        ),
    )
    advance(broker, T0 + 0.199)
    assert (counts(client, 1, "src"), counts(client, 1, "dlq")) == ((1, 0), (0, 0))
    advance(broker, T0 + 0.2)
    assert (counts(client, 1, "src"), counts(client, 1, "dlq")) == ((0, 0), (1, 0))
    message = get(client, "dlq")
    assert message is not None
    assert (message.body, message.method.exchange, message.method.routing_key) == (
        b"ttl",
        "dlx",
        "k",
    )
    props = message.properties
    assert (props.content_type, props.priority, props.expiration) == ("text/plain", 2, None)
    assert props.headers == {
        "app": "v",
        "x-first-death-reason": "expired",
        "x-first-death-queue": "src",
        "x-first-death-exchange": "amq.direct",
        "x-death": [
            {  # no original-expiration: the message had no expiration of its own
                "count": 1,
                "reason": "expired",
                "queue": "src",
                "time": datetime.fromtimestamp(T0, UTC),  # whole seconds of the clock
                "exchange": "amq.direct",
                "routing-keys": ["k"],
            }
        ],
    }


@pytest.mark.parametrize(
    ("queue_ttl", "expiration", "deadline"),
    [(1000, "100", 0.1), (1000, "60000", 1.0), (None, "250", 0.25)],
    ids=["own-expiration-lower", "queue-ttl-lower", "own-expiration-only"],
)
def test_the_lower_of_message_expiration_and_queue_ttl_wins(
    queue_ttl: int | None, expiration: str, deadline: float
) -> None:
    broker, client = started()
    arguments: dict[str, Any] = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    if queue_ttl is not None:
        arguments["x-message-ttl"] = queue_ttl
    declare(client, 1, "dlq")
    declare(client, 1, "src", arguments=arguments)
    client.send(1, *publish_frames("src", b"m", expiration=expiration))
    advance(broker, T0 + deadline - 0.001)
    assert counts(client, 1, "dlq") == (0, 0)
    advance(broker, T0 + deadline)
    message = get(client, "dlq")
    assert message is not None and message.properties.expiration is None
    headers: Any = message.properties.headers
    [death] = headers["x-death"]
    assert (death["reason"], death["original-expiration"]) == ("expired", expiration)


def test_expired_messages_behind_the_head_are_dropped_when_they_reach_it() -> None:
    broker, client = started()
    declare(client, 1, "plain")  # no dead-letter exchange: expired messages are dropped
    client.send(1, *publish_frames("plain", b"no-ttl"))
    client.send(1, *publish_frames("plain", b"short", expiration="200"))
    client.send(1, *publish_frames("plain", b"after"))
    advance(broker, T0 + 10)
    assert counts(client, 1, "plain") == (3, 0)  # "short" waits behind the head, as in RabbitMQ
    bodies = [get(client, "plain") for _ in range(3)]
    assert [m.body if m else None for m in bodies] == [b"no-ttl", b"after", None]


def test_an_expired_head_is_never_delivered_to_a_consumer() -> None:
    broker, client = started(1, 2)
    declare(client, 1, "q", arguments={"x-message-ttl": 100})
    client.send(1, *publish_frames("q", b"stale"), *publish_frames("q", b"stale too"))
    advance(broker, T0 + 0.05)
    client.send(1, *publish_frames("q", b"fresh"))
    advance(broker, T0 + 0.1)  # the first two expire; "fresh" is due at T0 + 0.15
    client.send(2, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    messages, _others = split(client.received())
    assert [m.body for m in messages] == [b"fresh"]


def test_messages_expire_while_consumers_have_no_credit() -> None:
    broker, client = started(1, 2)
    dead_letter_queue(client)
    declare(client, 1, "q", arguments={"x-message-ttl": 500, "x-dead-letter-exchange": "dlx"})
    rpc(client, 2, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)
    rpc(client, 2, commands.Basic.Consume(queue="q", consumer_tag="c"), commands.Basic.ConsumeOk)
    for body in (b"taken", b"waits", b"waits too"):
        client.send(1, *publish_frames("q", body))
    assert [m.body for m in deliveries(client.received())] == [b"taken"]
    advance(broker, T0 + 0.5)
    assert (counts(client, 1, "q"), counts(client, 1, "dlq")) == ((0, 1), (2, 0))
    # the delivered one did not expire: acking it is fine, and nothing else is delivered
    client.send(2, commands.Basic.Ack(delivery_tag=1))
    assert client.received() == []


def test_unacked_messages_do_not_expire_until_they_are_requeued() -> None:
    broker, client = started()
    dead_letter_queue(client)
    declare(client, 1, "q", arguments={"x-message-ttl": 100, "x-dead-letter-exchange": "dlx"})
    client.send(1, *publish_frames("q", b"held"), commands.Basic.Get(queue="q"))
    [message] = deliveries(client.received())
    advance(broker, T0 + 5)
    assert counts(client, 1, "dlq") == (0, 0)
    client.send(1, commands.Basic.Nack(delivery_tag=message.method.delivery_tag, requeue=True))
    advance(broker, T0 + 5)
    assert (counts(client, 1, "q"), counts(client, 1, "dlq")) == ((0, 0), (1, 0))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("-1", "{value_negative,-1}"),
        ("abc", "no_integer"),
        ("1.5", '{leftover_string,".5"}'),
        (" 10", "no_integer"),
        ("315360000001", "{value_too_large,315360000001}"),
    ],
)
def test_an_invalid_expiration_property_closes_the_channel(value: str, problem: str) -> None:
    _broker, client = started()
    declare(client, 1, "q")
    client.send(1, *publish_frames("q", b"x", expiration=value))
    assert channel_error(client, 1) == (
        406,
        f"PRECONDITION_FAILED - invalid expiration '{value}': {problem}",
        60,
        40,
    )
    assert counts(client, 1, "q") == (0, 0)


def test_an_expiration_with_a_plus_sign_parses_as_erlang_does() -> None:
    broker, client = started()
    declare(client, 1, "q")
    client.send(1, *publish_frames("q", b"plus", expiration="+60000"))
    advance(broker, T0 + 59.999)
    assert counts(client, 1, "q") == (1, 0)
    advance(broker, T0 + 60)
    assert counts(client, 1, "q") == (0, 0)


def test_a_fully_automatic_dead_letter_cycle_drops_the_message() -> None:
    broker, client = started()
    for name, target in (("a", "b"), ("b", "a")):
        arguments = {
            "x-message-ttl": 100,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": target,
        }
        declare(client, 1, name, arguments=arguments)
    client.send(1, *publish_frames("a", b"cycle"))
    advance(broker, T0 + 0.1)
    assert (counts(client, 1, "a"), counts(client, 1, "b")) == ((0, 0), (1, 0))
    advance(broker, T0 + 0.2)  # back to "a", where it already expired: dropped
    assert (counts(client, 1, "a"), counts(client, 1, "b")) == ((0, 0), (0, 0))


# ---------------------------------------------------------------------------------------------
# Queue TTL (x-expires); leases in binary fractions of a second, so that "unused for
# exactly x-expires" is exact in floating point
# ---------------------------------------------------------------------------------------------
def test_x_expires_deletes_an_unused_queue_and_messages_do_not_keep_it() -> None:
    broker, client = started()
    declare(client, 1, "temp", arguments={"x-expires": 250})
    client.send(1, *publish_frames("temp", b"does not keep it alive"))
    advance(broker, T0 + 0.249)
    assert exists(client, "temp")
    advance(broker, T0 + 0.25)
    assert not exists(client, "temp")
    client.send(1, commands.Queue.Declare(queue="temp", passive=True))
    assert channel_error(client, 1)[:2] == (404, "NOT_FOUND - no queue 'temp' in vhost '/'")


def test_x_expires_waits_while_a_consumer_is_attached() -> None:
    broker, client = started()
    declare(client, 1, "leased", arguments={"x-expires": 250})
    consume = commands.Basic.Consume(queue="leased", consumer_tag="c")
    rpc(client, 1, consume, commands.Basic.ConsumeOk)
    advance(broker, T0 + 60)
    assert exists(client, "leased")
    cancel = commands.Basic.Cancel(consumer_tag="c")
    advance(broker, T0 + 60)
    rpc(client, 1, cancel, commands.Basic.CancelOk)  # the lease starts again here
    advance(broker, T0 + 60.249)
    assert exists(client, "leased")
    advance(broker, T0 + 60.25)
    assert not exists(client, "leased")


@pytest.mark.parametrize("use", ["passive-declare", "declare", "get"])
def test_x_expires_lease_is_renewed_by_each_use(use: str) -> None:
    broker, client = started()
    arguments = {"x-expires": 250}
    declare(client, 1, "leased", arguments=arguments)
    for step in range(1, 9):  # a use every 0.125 s keeps it for a second
        advance(broker, T0 + step * 0.125)
        if use == "get":
            assert get(client, "leased") is None
        else:
            passive = use == "passive-declare"
            declare(client, 1, "leased", passive=passive, arguments=None if passive else arguments)
    advance(broker, T0 + 1.249)
    assert exists(client, "leased")
    advance(broker, T0 + 1.25)
    assert not exists(client, "leased")


@pytest.mark.parametrize("where", ["expiration-property", "x-message-ttl"])
def test_a_message_with_ttl_zero_goes_to_a_waiting_consumer(where: str) -> None:
    _broker, client = started(1, 2)
    declare(client, 1, "q", arguments={"x-message-ttl": 0} if where == "x-message-ttl" else None)
    consume = commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True)
    rpc(client, 2, consume, commands.Basic.ConsumeOk)
    if where == "x-message-ttl":
        client.send(1, *publish_frames("q", b"now or never"))
    else:
        client.send(1, *publish_frames("q", b"now or never", expiration="0"))
    assert [m.body for m in deliveries(client.received())] == [b"now or never"]


def test_a_message_with_ttl_zero_and_no_consumer_is_dropped_at_once() -> None:
    _broker, client = started()
    declare(client, 1, "q")
    client.send(1, *publish_frames("q", b"never", expiration="0"))
    assert counts(client, 1, "q") == (0, 0)
