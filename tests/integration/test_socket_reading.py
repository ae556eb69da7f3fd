"""Plain TCP connections are read by amqpd/shell/socket_protocol.py (the protocol under the
transport, no reader task), and a bug while feeding one connection drops that one only.
These look into a broker's own objects, so the broker runs in this process even in the
``--workers`` passes (a node's connections are in its workers)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pamqp import commands

from amqpd.shell.server import Server
from amqpd.shell.socket_protocol import FeedProtocol
from tests.conftest import running_server
from tests.integration.raw_client import RawClient


@pytest.fixture
def server() -> Iterator[Server]:
    """A broker in this process (its sockets are looked at)."""
    with running_server() as srv:
        yield srv


def test_plain_tcp_connections_are_read_by_the_feed_protocol(server: Server) -> None:
    with RawClient.open(server.port) as client:
        client.open_channel(1)
        peers = list(server.sockets.by_conn.values())
        assert len(peers) == 1 and isinstance(peers[0].reader, FeedProtocol)
        client.rpc(1, commands.Queue.Declare(queue="q"), commands.Queue.DeclareOk)


def test_a_bug_while_feeding_one_connection_drops_it_and_no_other(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    real = server.sockets._after_core
    armed: list[bool] = []

    def after_core() -> None:  # the bug: raises once, when armed
        if armed:
            armed.clear()
            raise RuntimeError("a bug in the core")
        real()

    server.sockets._after_core = after_core  # connections accepted from now on
    with (
        caplog.at_level(logging.ERROR, logger="amqpd.shell.peers"),
        RawClient.open(server.port) as other,
        RawClient.open(server.port) as victim,
    ):
        armed.append(True)
        victim.send_method(1, commands.Channel.Open())
        assert victim.recv_until_closed() == b""  # dropped without an answer
        other.open_channel(1)  # still served
        other.rpc(1, commands.Queue.Declare(queue="q"), commands.Queue.DeclareOk)
    assert "failed; dropping it" in caplog.text
