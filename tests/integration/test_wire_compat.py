"""Issue 21: wire differences from RabbitMQ 3.10 that broke real clients, each checked with
the client that exposed it (aiormq, pika) or with raw frames where the client is not
installable here (rabbitpy's frame_max-sized body frames).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

import aiormq
import amqp
import amqp.exceptions
import pika
import pika.exceptions
import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from amqpd.shell.server import Server
from tests.conftest import node_under_test
from tests.integration.raw_client import PeerClosed, RawClient

TIMEOUT = 20.0
ODD_NAMES = ["café", "orders!", "a*b", "q?x", "日本語", "ü" * 126]


# ---------------------------------------------------------------------------------------------
# 2. Names: any UTF-8 shortstr, in every reply, also after a restart (durable queue)
# ---------------------------------------------------------------------------------------------
def test_pika_declares_consumes_and_gets_returns_for_names_outside_pamqps_pattern(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    for round_ in range(2):  # the second round redeclares the recovered durable queues
        with node_under_test(tmp_path_factory, data_dir=tmp_path / "data") as server:
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                for name in ODD_NAMES:
                    ok = ch.queue_declare(name, durable=True)
                    assert ok.method.queue == name
                    assert ok.method.message_count == round_
                    ch.exchange_declare(name, "fanout", durable=True)
                    ch.queue_bind(name, name)
                    ch.basic_publish(name, "", name.encode(), pika.BasicProperties(delivery_mode=2))
                    tag = ch.basic_consume(name, lambda *_: None, consumer_tag=name)
                    assert tag == name
                    ch.basic_cancel(tag)
                    # unroutable through an unbound exchange of that name: Basic.Return
                    ch.exchange_declare(name + "-x", "direct", auto_delete=True)
                    with pytest.raises(pika.exceptions.UnroutableError) as info:
                        ch.basic_publish(name + "-x", "nowhere", b"r", mandatory=True)
                    [message] = info.value.messages
                    assert message.method.exchange == name + "-x"
            finally:
                conn.close()


# ---------------------------------------------------------------------------------------------
# 4. channel_max counts open channels: aiormq opens channel 65535 with channel_max 2047
# ---------------------------------------------------------------------------------------------
def test_aiormq_uses_channel_65535(amqp_url: str) -> None:
    async def main() -> None:
        connection = await aiormq.connect(amqp_url)
        try:
            assert connection.connection_tune.channel_max == 2047
            channel = await connection.channel(channel_number=65535)
            declared = await channel.queue_declare("high-channel", exclusive=True)
            await channel.basic_publish(b"over 2047", routing_key=declared.queue)
            got = await channel.basic_get(declared.queue, no_ack=True)
            assert got.body == b"over 2047"
            assert channel.number == 65535
        finally:
            await connection.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# ---------------------------------------------------------------------------------------------
# 3. FRAME_SIZE_FUDGE: a body frame with frame_max payload bytes (rabbitpy) is accepted
# ---------------------------------------------------------------------------------------------
def test_body_frames_of_frame_max_payload_bytes_are_accepted(server: Server) -> None:
    with RawClient.open(server.port, frame_max=8192) as client:
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(queue="fudge"), commands.Queue.DeclareOk)
        body = bytes(range(256)) * 64  # 16 KiB in two body frames of frame_max bytes each
        client.send(
            1,
            commands.Basic.Publish(exchange="", routing_key="fudge"),
            ContentHeader(0, len(body), commands.Basic.Properties()),
            ContentBody(body[:8192]),
            ContentBody(body[8192:]),
        )
        client.send_method(1, commands.Basic.Get(queue="fudge", no_ack=True))
        client.expect(commands.Basic.GetOk, channel=1)
        client.expect(ContentHeader, channel=1)
        received = b""
        while len(received) < len(body):
            _ftype, _channel, payload = client.read_raw_frame()
            assert len(payload) <= 8192 - 8  # outgoing frames stay within frame_max
            received += payload
        assert received == body


# ---------------------------------------------------------------------------------------------
# 5. Before Tune-Ok, frames are limited to frame_min_size (4096)
# ---------------------------------------------------------------------------------------------
def test_a_10_kb_start_ok_is_a_frame_error(server: Server) -> None:
    with RawClient.connect(server.port) as client:
        client.send_bytes(b"AMQP\x00\x00\x09\x01")
        client.expect(commands.Connection.Start, channel=0)
        start_ok = commands.Connection.StartOk(
            client_properties={"padding": "x" * 10_000},
            mechanism="PLAIN",
            response="\0guest\0guest",
        )
        client.send_method(0, start_ok)
        close = client.expect_connection_close(501, answer=False)
        assert "frame_too_large" in close.reply_text and ",4088}" in close.reply_text
        with pytest.raises(PeerClosed):  # and never a Tune
            for _ in range(10):
                client.read_frame(timeout=10)


def test_header_frame_before_tuning_is_checked_from_its_header(server: Server) -> None:
    """The broker refuses an oversized frame from its 7-byte header alone: an
    unauthenticated peer cannot make it buffer more than 4 KiB."""
    with RawClient.connect(server.port) as client:
        client.send_bytes(b"AMQP\x00\x00\x09\x01")
        client.expect(commands.Connection.Start, channel=0)
        client.send_bytes(struct.pack(">BHI", 1, 0, 128 * 1024))
        close = client.expect_connection_close(501, answer=False)
        assert "{frame_too_large,131072,4088}" in close.reply_text


# ---------------------------------------------------------------------------------------------
# 6. After the client's Connection.Close the broker reads on until the client closes
# ---------------------------------------------------------------------------------------------
def test_close_followed_by_more_frames_gets_close_ok_without_a_reset(server: Server) -> None:
    """amqplib writes Connection.Close and then flushes the publishes it had queued; closing
    the socket right after Close-Ok made the kernel reset it (the client lost its close
    callback). Like RabbitMQ, amqpd discards what follows and waits for the client's EOF."""
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(queue="late"), commands.Queue.DeclareOk)
        close = commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        late = client.publish_frames(1, b"x" * 60_000, routing_key="late")
        data = pamqp_frame.marshal(close, 0) + b"".join(
            pamqp_frame.marshal(f, 1) for f in late * 40
        )  # ~2.4 MB after the Close
        client.send_bytes(data)
        client.expect(commands.Connection.CloseOk, channel=0)
        client.sock.shutdown(socket.SHUT_WR)  # now we close our side: so does the broker
        assert client.recv_until_closed(timeout=TIMEOUT) == b""
    with RawClient.open(server.port) as other:  # nothing after the Close was published
        other.open_channel(1)
        ok = other.rpc(
            1, commands.Queue.Declare(queue="late", passive=True), commands.Queue.DeclareOk
        )
        assert ok.message_count == 0


# ---------------------------------------------------------------------------------------------
# 7. queue.delete with the deleting channel's own consumer: Delete-Ok before Basic.Cancel
# ---------------------------------------------------------------------------------------------
def test_py_amqp_deletes_a_queue_it_consumes_from(server: Server) -> None:
    conn = amqp.Connection(f"127.0.0.1:{server.port}", userid="guest", password="guest")
    conn.connect()
    try:
        channel = conn.channel()
        channel.queue_declare("consumed-and-deleted")
        channel.basic_publish(amqp.Message("m"), routing_key="consumed-and-deleted")
        channel.basic_consume("consumed-and-deleted", callback=lambda message: None)
        # py-amqp raised ConsumerCancelled out of queue_delete when Cancel came first
        assert channel.queue_delete("consumed-and-deleted") == 0
        with pytest.raises(amqp.exceptions.ConsumerCancelled):
            conn.drain_events(timeout=5)  # the Basic.Cancel comes after the Delete-Ok
    finally:
        conn.close()
