"""Handing a connection to the worker that owns its vhost: finding Connection.Open in the
opening bytes, and the message that carries the socket across.

Theory of operation. Worker 0 runs every connection's opening handshake (protocol header,
Start/Start-Ok, Tune/Tune-Ok) itself. It keeps the bytes the client sent (``replay``) and
looks for Connection.Open in them before feeding them to the engine (`find_open`): the
vhost is known only then. If the vhost lives on worker K, worker 0 feeds the bytes before
Open, never Open itself, and sends worker K one SOCK_SEQPACKET message: the socket's file
descriptor (SCM_RIGHTS) and `Arrival` (who the peer is, and ``replay``). Worker K runs the
same handshake on a fresh engine from ``replay`` up to Open with its output thrown away
(the client already has Start and Tune, byte for byte the same: every worker announces the
same server properties), then feeds Open and everything after: the client receives Open-Ok
from worker K and never knows. Authentication runs again on worker K against the same
(replicated) users. A TLS connection cannot move (its session keys live in worker 0's
``ssl`` object), so worker 0 keeps the TLS socket, sends one end of a socket pair instead
and relays the decrypted bytes (`Arrival.tls` tells worker K to report the connection as
TLS with the peer's certificate identity).
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import asdict, dataclass

PROTOCOL_HEADER_SIZE = 8
_FRAME_HEAD = struct.Struct(">BHI")
_METHOD = struct.Struct(">HH")
_OPEN = (10, 40)  # connection.open
_LENGTH = struct.Struct(">I")
MAX_MESSAGE = 1 << 20  # a hand-over message: Arrival and the bytes read before Open


@dataclass(frozen=True, slots=True)
class Arrival:
    """A connection handed over: its peer, and the client's bytes so far (``open_at``: where
    Connection.Open starts in ``replay``)."""

    peer: str  # "host:port" of the client
    local_host: str
    local_port: int
    tls: bool
    cert_user: str | None
    open_at: int
    replay: bytes
    moves: int = 0  # how often the connection moved between workers already (a spread vhost)

    def encode(self) -> bytes:
        fields = asdict(self)
        del fields["replay"]
        head = json.dumps(fields).encode()
        return _LENGTH.pack(len(head)) + head + self.replay

    @classmethod
    def decode(cls, data: bytes) -> Arrival:
        (size,) = _LENGTH.unpack_from(data)
        fields = json.loads(data[4 : 4 + size])
        return cls(replay=data[4 + size :], **fields)


def find_open(replay: bytes | bytearray) -> tuple[int, str] | None:
    """(offset, vhost) of a complete Connection.Open frame in the client's opening bytes,
    or None (not yet there, or bytes the engine will refuse anyway)."""
    at = PROTOCOL_HEADER_SIZE
    size = len(replay)
    while at + 7 <= size:
        kind, _channel, length = _FRAME_HEAD.unpack_from(replay, at)
        end = at + 7 + length
        if end >= size:
            return None
        if kind == 1 and length >= 5 and _METHOD.unpack_from(replay, at + 7) == _OPEN:
            name_length = replay[at + 11]
            if at + 12 + name_length > end:
                return None
            try:
                return at, bytes(replay[at + 12 : at + 12 + name_length]).decode()
            except UnicodeDecodeError:
                return None
        at = end + 1
    return None


def send_connection(link: socket.socket, fd: int, arrival: Arrival) -> None:
    """One hand-over message on ``link`` (a connected SOCK_SEQPACKET socket).

    Raises:
        OSError: the link is down (the worker is restarting) or full.
    """
    socket.send_fds(link, [arrival.encode()], [fd])


def receive_connection(link: socket.socket) -> tuple[Arrival, int] | None:
    """One hand-over message from ``link``: the arrival and its descriptor (None: the link
    closed). Raises BlockingIOError when nothing is there yet."""
    data, fds, _flags, _address = socket.recv_fds(link, MAX_MESSAGE, 1)
    if not data:
        for fd in fds:
            socket.close(fd)
        return None
    if len(fds) != 1:
        for fd in fds:
            socket.close(fd)
        raise OSError("a hand-over message without exactly one socket")
    return Arrival.decode(data), fds[0]
