"""A connection's states and its opening handshake, from the protocol header to Open-Ok.

Theory of operation. The handshake is a fixed sequence on channel 0, each state accepting
exactly one method (`HANDSHAKE`; `Connection` rejects any other with 504)::

    AWAIT_HEADER --"AMQP0091"--> AWAIT_START_OK --start-ok--> AWAIT_TUNE_OK
        --tune-ok--> AWAIT_OPEN --open--> OPEN

`receive_protocol_header` collects the 8-byte header (a wrong one is answered with ours and
the socket closed) and sends Connection.Start with the SASL mechanisms this peer may use.
`start_ok` authenticates (a refused login closes with 403, or drops the socket for a client
without the authentication_failure_close capability) and sends Tune. `tune_ok` settles the
frame size, channel limit and heartbeat. `open` checks the vhost, the connection limits and
the user's access, and sends Open-Ok: the connection is OPEN and counted by the broker.
Closing (CLOSING, CLOSED) and the timers live in amqpd/engine/connection.py and
amqpd/engine/connection_timers.py.
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Final, Protocol

from pamqp import commands as spec

from amqpd.engine import handshake
from amqpd.model import user_limits
from amqpd.model.broker import Broker, ClientHandle
from amqpd.wire import codec
from amqpd.wire.errors import ACCESS_REFUSED, NOT_ALLOWED, AMQPError

log = logging.getLogger(__name__)


class State(enum.Enum):
    """Connection lifecycle."""

    AWAIT_HEADER = "await-header"
    AWAIT_START_OK = "await-start-ok"
    AWAIT_TUNE_OK = "await-tune-ok"
    AWAIT_OPEN = "await-open"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


# The one channel-0 method each handshake state accepts.
HANDSHAKE: Final[dict[State, int]] = {
    State.AWAIT_START_OK: spec.Connection.StartOk.index,
    State.AWAIT_TUNE_OK: spec.Connection.TuneOk.index,
    State.AWAIT_OPEN: spec.Connection.Open.index,
}


class Opening(ClientHandle, Protocol):
    """What the handshake needs of its connection (the engine's `Connection`)."""

    broker: Broker
    state: State
    peer: str
    peer_cert_user: str | None  # a verified TLS client certificate's user (EXTERNAL)
    loopback: bool
    protocol_header: bytes
    mechanisms: str
    client_properties: dict[str, Any]
    auth_mechanism: str
    channel_max: int
    frame_max: int
    heartbeat: int
    frame_reader: codec.FrameReader

    def send(self, data: bytes) -> None: ...
    def set_should_close(self) -> None: ...
    def client_capability(self, name: str) -> bool: ...
    def wake(self, when: float) -> None: ...
    def audit_label(self) -> str: ...


def receive_protocol_header(conn: Opening, data: bytes) -> bytes:
    """Take the protocol header's bytes from ``data``; once all 8 arrived and match, send
    Connection.Start. Returns what follows the header (b"": nothing, or refused)."""
    needed = 8 - len(conn.protocol_header)
    conn.protocol_header += data[:needed]
    rest = data[needed:]
    if len(conn.protocol_header) < 8:
        if not codec.PROTOCOL_HEADER.startswith(conn.protocol_header):
            _refuse_protocol(conn)
        return b""
    if conn.protocol_header != codec.PROTOCOL_HEADER:
        _refuse_protocol(conn)
        return b""
    conn.state = State.AWAIT_START_OK
    broker = conn.broker
    config = broker.config
    conn.mechanisms = handshake.offered_mechanisms(config.auth_mechanisms, conn.peer_cert_user)
    properties = handshake.server_properties(config.server_properties, broker.cluster_name)
    start = handshake.start_method(properties, conn.mechanisms)
    conn.send(codec.encode_method(0, start))
    return rest


def _refuse_protocol(conn: Opening) -> None:
    conn.send(codec.PROTOCOL_HEADER)
    conn.set_should_close()
    conn.state = State.CLOSED


def start_ok(conn: Opening, method: spec.Connection.StartOk) -> None:
    """Authenticate the client; send Tune (or refuse the login)."""
    conn.client_properties = dict(method.client_properties or {})
    mechanism = conn.auth_mechanism = method.mechanism
    user, password = handshake.credentials(
        mechanism, method.response, conn.peer_cert_user, conn.mechanisms
    )
    refusal = handshake.login_refusal(conn.broker.access, user, password, conn.loopback)
    churn = conn.broker.statistics.churn
    if refusal is None:
        churn.auth_succeeded += 1
    else:
        churn.auth_failed += 1
        log.warning("%s login refused from %s: %s", mechanism, conn.peer, refusal)
        error = AMQPError(
            ACCESS_REFUSED,
            f"Login was refused using authentication mechanism {mechanism}. "
            "For details see the broker logfile.",
            10,
            11,
        )
        if conn.client_capability("authentication_failure_close"):
            raise error
        conn.set_should_close()  # a client without the capability sees the socket go
        conn.state = State.CLOSED
        return
    conn.user = user
    conn.state = State.AWAIT_TUNE_OK
    conn.send(
        codec.encode_method(
            0,
            spec.Connection.Tune(
                channel_max=conn.channel_max,
                frame_max=conn.frame_max,
                heartbeat=conn.heartbeat,
            ),
        )
    )


def tune_ok(conn: Opening, method: spec.Connection.TuneOk) -> None:
    """Settle frame_max, channel_max and the heartbeat interval."""
    frame_max, channel_max = handshake.negotiate(method, conn.broker.config)
    conn.frame_max = frame_max
    conn.channel_max = channel_max
    conn.heartbeat = method.heartbeat
    conn.frame_reader.frame_max = frame_max
    conn.state = State.AWAIT_OPEN
    if conn.heartbeat:
        conn.wake(conn.broker.clock.now + conn.heartbeat / 2)


def open_vhost(conn: Opening, method: spec.Connection.Open) -> None:
    """Connection.Open: check the vhost, the connection limits and the user's access."""
    broker = conn.broker
    vhost = broker.vhosts.get(method.virtual_host)
    if vhost is None:
        raise AMQPError(NOT_ALLOWED, f"vhost '{method.virtual_host}' not found", 10, 40)
    refused = f"access to vhost '{vhost.name}' refused for user '{conn.user}'"
    limit_error = broker.connection_limit_error(vhost.name, refused)
    if limit_error is not None:  # rabbit_reader: node, then vhost connection limit
        raise AMQPError(NOT_ALLOWED, limit_error, 10, 40)
    users = (connection.user for connection in broker.connections)
    limit_error = user_limits.connection_refused(broker, conn.user, users)
    if limit_error is not None:  # then the user's (model/user_limits.py)
        raise AMQPError(NOT_ALLOWED, limit_error, 10, 40)
    authz = broker.access.authz(conn.user, vhost.name)
    if authz is None:
        raise AMQPError(NOT_ALLOWED, refused, 10, 40)
    conn.authz = authz
    conn.vhost = vhost
    conn.state = State.OPEN
    broker.connection_opened(conn)
    log.info(
        "connection %s: user '%s' authenticated and granted access to vhost '%s'",
        conn.audit_label(),
        conn.user,
        vhost.name,
    )
    conn.send(codec.encode_method(0, spec.Connection.OpenOk()))
