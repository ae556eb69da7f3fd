"""Helpers for protocol tests driven through the sans-IO engine (built on engine_driver.Client).

Everything goes through the wire: frames built with pamqp in, frames decoded with pamqp out.
Time is handled in one place, `advance`, so that tests never touch the broker's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pamqp import body, commands, header
from pamqp.base import Frame as Method

from amqpd.model.broker import Broker
from amqpd.wire.codec import PROTOCOL_HEADER
from tests.unit.engine_driver import Client


def advance(broker: Broker, now: float, *clients: Client) -> None:
    """Time is ``now`` (seconds): input handed to the core from here on happens at ``now``,
    and the broker's timers (message TTL, x-expires) and the given connections' timers
    (heartbeats, handshake and close timeouts) run. The one place tests handle time."""
    broker.tick(now)
    for client in clients:
        client.conn.tick(now)


def connect(broker: Broker, *channels: int, now: float = 0.0, **login: Any) -> Client:
    """A client that completed the handshake (``login``: vhost, user, password) and opened
    ``channels`` (default: channel 1); nothing left unread."""
    client = Client(broker, now=now)
    client.handshake(**login)
    for number in channels or (1,):
        client.open_channel(number)
    assert client.received() == []
    return client


def tuned(
    broker: Broker,
    *,
    channel_max: int = 2047,
    frame_max: int = 131072,
    heartbeat: int = 0,
    now: float = 0.0,
) -> Client:
    """A client that opened the connection with these Tune-Ok values (no channel open)."""
    client = Client(broker, now=now)
    client.conn.receive_data(PROTOCOL_HEADER)
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={"capabilities": client.capabilities},
            mechanism="PLAIN",
            response="\0guest\0guest",
        ),
    )
    tune = client.methods()[-1]
    assert isinstance(tune, commands.Connection.Tune), tune
    client.send(
        0,
        commands.Connection.TuneOk(
            channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
        ),
        commands.Connection.Open(virtual_host="/"),
    )
    assert [type(m) for m in client.methods()] == [commands.Connection.OpenOk]
    return client


def publish_frames(
    routing_key: str,
    payload: bytes,
    exchange: str = "",
    mandatory: bool = False,
    immediate: bool = False,
    **properties: Any,
) -> tuple[Any, ...]:
    """basic.publish, its content header and (for a non-empty body) one body frame."""
    publish = commands.Basic.Publish(
        exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
    )
    content = header.ContentHeader(0, len(payload), commands.Basic.Properties(**properties))
    return (publish, content, body.ContentBody(payload)) if payload else (publish, content)


def assert_serves(broker: Broker) -> None:
    """Another connection can still declare, publish and get: the broker is fine."""
    client = connect(broker)
    name = declare(client, 1, "", exclusive=True).queue
    client.send(
        1, *publish_frames(name, b"still alive"), commands.Basic.Get(queue=name, no_ack=True)
    )
    [message] = deliveries(client.received())
    assert message.body == b"still alive"


def rpc(client: Client, channel: int, method: Method, reply: type[Method]) -> Any:
    """Send ``method`` and return its one reply, which must be a ``reply`` on ``channel``."""
    client.send(channel, method)
    frames = client.received()
    assert len(frames) == 1 and isinstance(frames[0][1], reply), frames
    assert frames[0][0] == channel, frames
    return frames[0][1]


def declare(client: Client, channel: int, queue: str, **options: Any) -> Any:
    """queue.declare; returns the Declare-Ok."""
    return rpc(
        client, channel, commands.Queue.Declare(queue=queue, **options), commands.Queue.DeclareOk
    )


def counts(client: Client, channel: int, queue: str) -> tuple[int, int]:
    """(message_count, consumer_count) of ``queue`` as a passive declare reports them."""
    ok = declare(client, channel, queue, passive=True)
    return ok.message_count, ok.consumer_count


def close_args(close: Any) -> tuple[int, str, int, int]:
    """(reply_code, reply_text, class_id, method_id) of a Channel.Close / Connection.Close."""
    return close.reply_code, close.reply_text, close.class_id, close.method_id


def channel_error(client: Client, channel: int) -> tuple[int, str, int, int]:
    """The broker's reply must be exactly one Channel.Close on ``channel``: answer it, check
    the channel number is usable again (and the connection alive), return ``close_args``."""
    frames = client.received()
    assert len(frames) == 1, frames
    number, close = frames[0]
    assert number == channel and isinstance(close, commands.Channel.Close), frames
    client.send(channel, commands.Channel.CloseOk())
    client.open_channel(channel)
    rpc(client, channel, commands.Basic.Qos(prefetch_count=1), commands.Basic.QosOk)
    return close_args(close)


def connection_error(client: Client, answer: bool = True) -> tuple[int, str, int, int]:
    """The broker's reply must end with a Connection.Close on channel 0 (nothing after it);
    with ``answer``, send Close-Ok and check the connection is done. Returns ``close_args``."""
    frames = client.received()
    assert frames, "no reply"
    number, close = frames[-1]
    assert number == 0 and isinstance(close, commands.Connection.Close), frames
    assert not any(isinstance(v, commands.Connection.Close) for _c, v in frames[:-1]), frames
    if answer:
        client.send(0, commands.Connection.CloseOk())
        assert client.received() == []
        assert client.conn.should_close
    return close_args(close)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message the broker sent: Basic.Deliver / Get-Ok / Return, properties, body."""

    channel: int
    method: Any
    properties: commands.Basic.Properties
    body: bytes


def deliveries(frames: list[tuple[int, Any]]) -> list[Delivery]:
    """Group content-bearing methods with their header and body frames; any other frame
    in ``frames`` is a test failure (use `split` when methods are mixed in)."""
    messages, others = split(frames)
    assert others == [], others
    return messages


def split(frames: list[tuple[int, Any]]) -> tuple[list[Delivery], list[tuple[int, Any]]]:
    """(messages, other frames) of ``frames``, in order."""
    messages: list[Delivery] = []
    others: list[tuple[int, Any]] = []
    index = 0
    while index < len(frames):
        channel, value = frames[index]
        if isinstance(value, (commands.Basic.Deliver, commands.Basic.GetOk, commands.Basic.Return)):
            _c, content = frames[index + 1]
            assert isinstance(content, header.ContentHeader), frames[index + 1]
            index += 2
            payload = b""
            while len(payload) < content.body_size:
                _c, chunk = frames[index]
                assert isinstance(chunk, body.ContentBody), chunk
                payload += chunk.value
                index += 1
            messages.append(Delivery(channel, value, content.properties, payload))
        else:
            others.append((channel, value))
            index += 1
    return messages, others


def bodies(messages: list[Delivery]) -> list[bytes]:
    """The bodies of ``messages``, in order."""
    return [message.body for message in messages]
