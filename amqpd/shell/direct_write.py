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

The transport is anyio's private ``_transport`` of its asyncio ``SocketStream``: looked up
once per connection and checked to be an `asyncio.WriteTransport`, so another backend or
another anyio version just falls back to the writer.
"""

from __future__ import annotations

import asyncio

from amqpd.engine.connection import Connection

# Larger output (a stream of deliveries) still goes through the writer task, where the
# outputs of several chunks read meanwhile coalesce into one write (W1 measured ~5 % slower
# with every output written directly).
DIRECT_MAX = 4096


def transport_of(stream: object) -> asyncio.WriteTransport | None:
    """The asyncio transport under an anyio socket stream, or None (TLS, other backends)."""
    transport = getattr(stream, "_transport", None)
    return transport if isinstance(transport, asyncio.WriteTransport) else None


def write_now(conn: Connection, transport: asyncio.WriteTransport) -> bool | None:
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
