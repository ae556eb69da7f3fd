"""Finding Connection.Open in a client's opening bytes, and the hand-over message."""

from __future__ import annotations

import socket

from pamqp import commands, frame

from amqpd.shell.workers.handover import Arrival, find_open, receive_connection, send_connection

HEADER = b"AMQP\x00\x00\x09\x01"


def _frames(*methods: object) -> bytes:
    return b"".join(bytes(frame.marshal(m, 0)) for m in methods)  # type: ignore[arg-type]


START_OK = commands.Connection.StartOk({"product": "t"}, "PLAIN", "\x00guest\x00guest", "en_US")
TUNE_OK = commands.Connection.TuneOk(2047, 131072, 60)
OPEN = commands.Connection.Open("v1")


def test_open_is_found_after_the_handshake_frames_with_its_offset_and_vhost() -> None:
    before = HEADER + _frames(START_OK, TUNE_OK)
    data = before + _frames(OPEN) + _frames(commands.Channel.Open())
    assert find_open(data) == (len(before), "v1")


def test_nothing_is_found_before_open_is_complete_or_without_open() -> None:
    data = HEADER + _frames(START_OK, TUNE_OK) + _frames(OPEN)
    for cut in range(len(data)):
        assert find_open(data[:cut]) is None
    assert find_open(HEADER + _frames(START_OK, TUNE_OK)) is None


def test_a_vhost_that_is_not_utf8_is_left_to_the_engine() -> None:
    data = bytearray(HEADER + _frames(commands.Connection.Open("ab")))
    data[8 + 7 + 5] = 0xFF
    assert find_open(data) is None


def test_an_arrival_crosses_a_seqpacket_link_with_its_socket() -> None:
    here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    client, server = socket.socketpair()
    arrival = Arrival("10.0.0.1:5555", "127.0.0.1", 5672, True, "CN=x", 3, b"\x00abc\xff")
    try:
        send_connection(here, server.fileno(), arrival)
        received = receive_connection(there)
        assert received is not None
        got, fd = received
        assert got == arrival
        moved = socket.socket(fileno=fd)
        moved.sendall(b"ping")  # the same connection: the client reads it
        assert client.recv(4) == b"ping"
        moved.close()
        here.close()
        assert receive_connection(there) is None  # the link closed
    finally:
        for sock in (there, client, server):
            sock.close()
