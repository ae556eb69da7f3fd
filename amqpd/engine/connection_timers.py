"""A connection's timers: handshake timeout, heartbeats, the close handshake's timeout and
the linger after the client's Connection.Close.

Theory of operation. Nothing here reads a clock: the shell calls `Connection.tick` with the
time, at the latest at the connection's ``next_deadline``, and each tick sets the next one
(`Connection.wake`, which tells the broker's clock too, so a sleeping shell re-plans). What
each state waits for:

* before OPEN: the handshake must finish within ``handshake_timeout`` of the socket's
  accept, or the socket is closed;
* OPEN with a heartbeat: we send one when we have been silent for half the interval (as
  rabbit_heartbeat does, so a heartbeat=1 client never waits a second), and drop the peer
  after more than two intervals without a byte from it (not while we are the ones not
  reading: blocked by a resource alarm);
* CLOSING (we sent Connection.Close): the client has CLOSE_TIMEOUT to answer Close-Ok;
* CLOSED after the client's Close (`linger`): input is read and discarded until the client
  closes the socket, at most the heartbeat or CLOSING_TIMEOUT.

Input and output are noted per chunk and per write (``received``, ``sent``), not timed:
what was written since the last tick is taken to have gone out at that tick (the earlier
bound), so silence is never underestimated.
"""

from __future__ import annotations

import logging
import math
from typing import Final, Protocol

from amqpd.engine.connection_open import State
from amqpd.model.broker import Broker
from amqpd.wire import codec

log = logging.getLogger(__name__)

CLOSE_TIMEOUT: Final = 3.0
CLOSING_TIMEOUT: Final = 30.0  # rabbit_reader: the longest wait for a closed client's EOF
HEARTBEAT_MARGIN: Final = 0.01  # the dead-peer check is "more than two intervals"


class Timed(Protocol):
    """What the timers need of their connection (the engine's `Connection`)."""

    broker: Broker
    state: State
    peer: str
    created: float
    heartbeat: int
    paused: bool
    should_close: bool
    next_deadline: float

    @property
    def output_pending(self) -> bool: ...
    def send(self, data: bytes) -> None: ...
    def wake(self, when: float) -> None: ...
    def finish(self) -> None: ...
    def set_should_close(self) -> None: ...
    def connection_lost(self) -> None: ...


class ConnectionTimers:
    """The time-keeping state of one connection."""

    def __init__(self, now: float) -> None:
        self.received = False  # input arrived since the last tick
        self.sent = False  # output was taken since the last tick
        self.last_rx = now
        self.last_tx = now
        self.last_tick = now
        self.close_armed = False  # CLOSING: the Close-Ok deadline is set
        self.close_deadline = 0.0
        self.linger_until = math.inf  # after the client's Connection.Close (see linger)

    def linger(self, conn: Timed) -> None:
        """The client closed: Close-Ok is sent; like rabbit_reader (close_connection), keep
        reading and discarding what the client still sends until it closes the socket, at
        most the negotiated heartbeat or CLOSING_TIMEOUT. Closing at once while its earlier
        frames are still arriving makes the kernel reset the connection, and the client
        (amqplib, Go's amqp091) never sees the Close-Ok."""
        conn.state = State.CLOSED
        heartbeat = conn.heartbeat
        timeout = heartbeat if 0 < heartbeat < CLOSING_TIMEOUT else CLOSING_TIMEOUT
        self.linger_until = conn.broker.clock.now + timeout
        conn.wake(self.linger_until)

    def tick(self, conn: Timed, now: float) -> None:
        """Advance ``conn``'s timers to ``now`` and set its ``next_deadline``."""
        last_tick = self.last_tick
        self.last_tick = now
        if self.received:
            self.received = False
            self.last_rx = now
        if self.sent:
            self.sent = False
            self.last_tx = last_tick
        conn.next_deadline = math.inf
        wake = conn.wake
        state = conn.state
        if state is State.OPEN:
            heartbeat = conn.heartbeat
            if heartbeat:
                if conn.paused:  # we are the ones not reading (rabbit_heartbeat:pause_monitor)
                    self.last_rx = now
                if now - self.last_rx > 2 * heartbeat:
                    log.info(
                        "missed heartbeats from %s, timeout: %ds; closing", conn.peer, heartbeat
                    )
                    conn.connection_lost()
                    return
                if conn.output_pending:
                    wake(now + heartbeat / 2)  # output queued: silent from now at most
                elif now - self.last_tx >= heartbeat / 2:
                    conn.send(codec.HEARTBEAT_FRAME)
                    wake(now + heartbeat / 2)
                else:
                    wake(self.last_tx + heartbeat / 2)
                wake(self.last_rx + 2 * heartbeat + HEARTBEAT_MARGIN)
        elif state is State.CLOSING:
            if not self.close_armed:
                self.close_armed = True
                self.close_deadline = now + CLOSE_TIMEOUT
            elif now >= self.close_deadline:
                conn.finish()
                return
            wake(self.close_deadline)
        elif state is State.CLOSED:
            if not conn.should_close:
                if now >= self.linger_until:
                    conn.set_should_close()
                else:
                    wake(self.linger_until)
        else:
            deadline = conn.created + conn.broker.config.handshake_timeout
            if now >= deadline:
                log.info("handshake timeout from %s; closing", conn.peer)
                conn.finish()
            else:
                wake(deadline)
