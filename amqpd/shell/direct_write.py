"""Writing a connection's output straight from `Server.after_core`, without the writer hop.

The writer task of a connection sleeps on an event; waking it costs a loop iteration, a new
event, and anyio's ``SocketStream.send`` adds a checkpoint (one more iteration) per write.
On the round-trip path (basic.get / get-ok, a confirm per publish, a delivery at a low rate)
those hops are a large share of the broker's CPU per message (docs/perf-round-two.md). So
when the socket's asyncio transport holds no unsent bytes, the writer is not in a send and the
output is small (`DIRECT_MAX`: one round trip's answer, not a stream of deliveries),
`after_core` hands the bytes to ``transport.write`` itself: the transport writes them to the
socket at once (and buffers what the kernel does not take), in the same order as every other
write, because all writes go through that one transport. Anything else (TLS, a transport
with a backlog, a closing connection) falls back to waking the writer, which also waits for
a backlog this path left behind to drain before it reports the write finished.

The transport is anyio's private ``_transport`` of its asyncio ``SocketStream`` (an asyncio
or uvloop transport): looked up once per connection and checked for the three methods used,
so another backend or another anyio version just falls back to the writer.
"""

from __future__ import annotations

from typing import Protocol, cast

from amqpd.engine.connection import Connection

# Larger output (a stream of deliveries) still goes through the writer task, where the
# outputs of several chunks read meanwhile may coalesce into one write.
DIRECT_MAX = 4096


class Transport(Protocol):
    """What this module uses of an asyncio write transport (asyncio's, or uvloop's, which
    does not subclass `asyncio.WriteTransport`)."""

    def write(self, data: bytes) -> None: ...
    def get_write_buffer_size(self) -> int: ...
    def is_closing(self) -> bool: ...


def transport_of(stream: object) -> Transport | None:
    """The transport under an anyio socket stream, or None (TLS, other backends)."""
    transport = getattr(stream, "_transport", None)
    if all(callable(getattr(transport, name, None)) for name in _METHODS):
        return cast(Transport, transport)
    return None


_METHODS = ("write", "get_write_buffer_size", "is_closing")


def write_now(conn: Connection, transport: Transport) -> bool | None:
    """Write ``conn``'s output to an idle ``transport`` now.

    Returns True when done (nothing left unsent), False when the transport kept a backlog
    (the writer must wait for it to drain, then call ``write_finished``), None when the
    output is large or the transport not idle (nothing written: wake the writer)."""
    if conn.output_size > DIRECT_MAX or transport.is_closing() or transport.get_write_buffer_size():
        return None
    data = conn.data_to_send()
    if not data:
        return True
    conn.write_started(len(data))
    transport.write(data)
    if transport.get_write_buffer_size():
        return False
    conn.write_finished()
    return True
