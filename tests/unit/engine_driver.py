"""Drive the sans-IO engine with frames built by pamqp (no sockets, no clock).

Time is the core's: `advance` moves the client's ``now`` on and hands it to the broker's and
the connection's timers (``tick(now)``), as the shell's ticker does; chunks handed to the
engine after that happen at that time (``receive_data`` without ``now``).
"""

from __future__ import annotations

from typing import Any

from pamqp import body, commands, frame, header
from pamqp.base import Frame as Method

from amqpd.engine.connection import Connection
from amqpd.model.broker import Broker


class Client:
    """A fake peer: encodes frames with pamqp, decodes the engine's output with pamqp."""

    def __init__(
        self, broker: Broker, now: float = 0.0, capabilities: dict[str, Any] | None = None
    ) -> None:
        self.broker = broker
        self.now = now
        self.conn = Connection(broker, now, "127.0.0.1:5672")  # loopback: guest may log in
        self.capabilities = capabilities or {
            "consumer_cancel_notify": True,
            "authentication_failure_close": True,
        }

    def feed(self, data: bytes) -> None:
        """Hand the engine raw bytes (at the core's current time)."""
        self.conn.receive_data(data)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass and run the timers (queue TTL / x-expires, heartbeats)."""
        self.now += seconds
        self.broker.tick(self.now)
        self.conn.tick(self.now)

    def send(self, channel: int, *frames: Any) -> None:
        self.feed(b"".join(frame.marshal(f, channel) for f in frames))

    def publish(
        self, channel: int, routing_key: str, payload: bytes, exchange: str = "", **props: Any
    ) -> None:
        self.feed(self.encode_publish(channel, routing_key, payload, exchange, **props))

    @staticmethod
    def encode_publish(
        channel: int,
        routing_key: str,
        payload: bytes,
        exchange: str = "",
        mandatory: bool = False,
        **props: Any,
    ) -> bytes:
        return b"".join(
            (
                frame.marshal(
                    commands.Basic.Publish(
                        exchange=exchange, routing_key=routing_key, mandatory=mandatory
                    ),
                    channel,
                ),
                frame.marshal(
                    header.ContentHeader(0, len(payload), commands.Basic.Properties(**props)),
                    channel,
                ),
                frame.marshal(body.ContentBody(payload), channel) if payload else b"",
            )
        )

    def received(self) -> list[tuple[int, Any]]:
        data = self.conn.data_to_send()
        out = []
        while data:
            consumed, channel, value = frame.unmarshal(data)
            out.append((channel, value))
            data = data[consumed:]
        return out

    def methods(self) -> list[Method]:
        return [v for _c, v in self.received() if isinstance(v, Method)]

    def handshake(
        self, vhost: str = "/", user: str = "guest", password: str = "guest"
    ) -> list[Any]:
        self.feed(b"AMQP\x00\x00\x09\x01")
        self.send(
            0,
            commands.Connection.StartOk(
                client_properties={"capabilities": self.capabilities},
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
            ),
        )
        out = self.received()
        self.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
        self.send(0, commands.Connection.Open(virtual_host=vhost))
        return out + self.received()

    def open_channel(self, number: int = 1) -> None:
        self.send(number, commands.Channel.Open())
        assert isinstance(self.methods()[-1], commands.Channel.OpenOk)

    def consume_actively(self, queue: str = "q", channel: int = 1) -> None:
        """Declare ``queue`` with a consumer (tag "c", prefetch 1) that has settled one
        delivery: an *active* consumer, as flow control counts them."""
        self.send(
            channel,
            commands.Queue.Declare(queue=queue),
            commands.Basic.Qos(prefetch_count=1),
            commands.Basic.Consume(queue=queue, consumer_tag="c"),
        )
        self.publish(channel, queue, b"first")
        self.send(channel, commands.Basic.Ack(delivery_tag=1))
