"""Confirm coalescing seen on the wire: a raw client counts the ack frames it receives."""

from __future__ import annotations

from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from amqpd.shell.server import Server
from tests.integration.raw_client import RawClient


def _confirm_channel(client: RawClient, queue: str, **arguments: object) -> None:
    client.open_channel(1)
    client.rpc(
        1, commands.Queue.Declare(queue=queue, arguments=arguments), commands.Queue.DeclareOk
    )
    client.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)


def _read_confirms(
    client: RawClient, count: int
) -> tuple[list[commands.Basic.Ack | commands.Basic.Nack], dict[int, str]]:
    """Read confirm frames until every sequence number 1..count is settled; return the
    frames and each number's outcome, applying multiple=true the way a client does."""
    outcome: dict[int, str] = {}
    frames: list[commands.Basic.Ack | commands.Basic.Nack] = []
    while len(outcome) < count:
        _channel, value = client.read_frame()
        if not isinstance(value, commands.Basic.Ack | commands.Basic.Nack):
            continue
        frames.append(value)
        kind = "ack" if isinstance(value, commands.Basic.Ack) else "nack"
        if value.multiple:  # settles every tag <= delivery_tag still outstanding
            for tag in range(1, value.delivery_tag + 1):
                outcome.setdefault(tag, kind)
        else:
            assert value.delivery_tag not in outcome, f"tag {value.delivery_tag} settled twice"
            outcome[value.delivery_tag] = kind
    return frames, outcome


def test_thousand_in_flight_get_far_fewer_ack_frames(server: Server) -> None:
    with RawClient.open(server.port) as client:
        _confirm_channel(client, "coalesce")
        one = b"".join(
            frame.marshal(f, 1)
            for f in client.publish_frames(1, b"x" * 100, routing_key="coalesce")
        )
        client.send_bytes(one * 1000)
        frames, outcome = _read_confirms(client, 1000)
        assert set(outcome) == set(range(1, 1001))
        assert set(outcome.values()) == {"ack"}
        assert len(frames) < 100, f"{len(frames)} ack frames for 1000 messages"
        assert any(f.multiple for f in frames)
        assert max(f.delivery_tag for f in frames) == 1000


def test_nacks_and_acks_are_separate_and_exact(server: Server) -> None:
    with RawClient.open(server.port) as client:
        _confirm_channel(client, "limit5", **{"x-max-length": 5, "x-overflow": "reject-publish"})
        one = b"".join(
            frame.marshal(f, 1) for f in client.publish_frames(1, b"y", routing_key="limit5")
        )
        client.send_bytes(one * 8)
        _frames, outcome = _read_confirms(client, 8)
        assert outcome == {
            1: "ack",
            2: "ack",
            3: "ack",
            4: "ack",
            5: "ack",
            6: "nack",
            7: "nack",
            8: "nack",
        }
        declare = client.rpc(
            1, commands.Queue.Declare(queue="limit5", passive=True), commands.Queue.DeclareOk
        )
        assert declare.message_count == 5


def test_mandatory_return_arrives_before_its_ack(server: Server) -> None:
    with RawClient.open(server.port) as client:
        _confirm_channel(client, "exists")
        client.publish(1, b"lost", exchange="amq.direct", routing_key="nowhere", mandatory=True)
        _channel, first = client.read_frame()
        assert isinstance(first, commands.Basic.Return) and first.reply_code == 312
        client.expect(ContentHeader)
        returned_body = client.expect(ContentBody)
        assert returned_body.value == b"lost"
        ack = client.expect(commands.Basic.Ack)
        assert ack.delivery_tag == 1
