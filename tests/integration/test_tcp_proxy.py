"""The test proxy's cut reaches both peers even when nothing is in flight: the shovel and
federation tests' "cut link" cases rely on it (a link idle at the cut, such as a shovel
waiting for its confirms, stayed up until a heartbeat before the proxy shut its sockets
down)."""

from __future__ import annotations

import socket

from tests.integration.tcp_proxy import CuttableProxy


def _sees_the_link_die(sock: socket.socket) -> bool:
    """True if the peer's end reads end-of-stream or a reset (a timeout means it did not)."""
    sock.settimeout(10)
    try:
        return sock.recv(16) == b""
    except ConnectionResetError:
        return True


def test_cut_ends_an_idle_connection_for_both_peers() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        proxy = CuttableProxy(server.getsockname()[1])
        try:
            with socket.create_connection(("127.0.0.1", proxy.port)) as client:
                accepted, _ = server.accept()
                with accepted:
                    client.sendall(b"ping")
                    assert accepted.recv(4) == b"ping"  # the pipe threads now wait in recv
                    proxy.cut()
                    assert _sees_the_link_die(client)
                    assert _sees_the_link_die(accepted)
            with socket.create_connection(("127.0.0.1", proxy.port)) as again:
                accepted, _ = server.accept()  # new connections still go through
                with accepted:
                    again.sendall(b"x")
                    assert accepted.recv(1) == b"x"
            assert proxy.accepted == 2
        finally:
            proxy.close()
