"""The per-connection protocol engine (sans-IO).

Theory of operation
-------------------
Bytes go in through ``receive_data(data, now)``; frames to send accumulate and come out
through ``data_to_send``; time comes in with the data and through ``tick(now)`` (unix
seconds, the one time base of the core). Nothing here awaits, touches a socket or calls the
shell: a connection whose output buffer goes from empty to non-empty, or that must be
closed, notes itself in the shared `Outbox`; the shell services what the outbox lists after
each chunk, tick or storage batch (one write per connection per chunk). Whether to read the
next chunk now is the engine's decision too (``read_delay``): a connection blocked by a
resource alarm waits until the outbox lists it under ``resume``; a publisher flooding queues
that are far behind their consumers waits up to FLOW_MAX_PAUSE per chunk.

States (the opening handshake's are in amqpd/engine/connection_open.py)::

    AWAIT_HEADER --"AMQP0091"--> AWAIT_START_OK --start-ok--> AWAIT_TUNE_OK
        --tune-ok--> AWAIT_OPEN --open--> OPEN --close/close-ok--> CLOSED
    any state --hard error--> CLOSING (we sent Connection.Close) --close-ok / 3 s--> CLOSED

After the client's Connection.Close we answer Close-Ok and stay CLOSED but readable (input
discarded) until the client closes the socket or up to 30 s pass, as RabbitMQ does.
The handshake timeout, heartbeats and close timeouts are amqpd/engine/connection_timers.py;
each tick announces the connection's next deadline on the broker's clock, so the shell
wakes in time for it (`Clock.wake`). Hard errors (5xx, 320) close the connection, soft ones
only the channel (see amqpd/errors.py).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Final

from pamqp import commands as spec

from amqpd.engine import connection_open, handshake
from amqpd.engine.channel import Channel, ChannelState
from amqpd.engine.connection_open import HANDSHAKE, State
from amqpd.engine.connection_timers import ConnectionTimers
from amqpd.engine.moving import MAX_MOVES, record, replayable, stop_for_move
from amqpd.engine.outbox import Outbox
from amqpd.engine.topology import MoveConnection
from amqpd.model import user_limits
from amqpd.model.auth import Authz, Permission, is_loopback_peer
from amqpd.model.enqueue import FLOW_BACKLOG
from amqpd.model.statistics import IOStats
from amqpd.wire import codec
from amqpd.wire.errors import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    FRAME_ERROR,
    INTERNAL_ERROR,
    NOT_ALLOWED,
    UNEXPECTED_FRAME,
    AMQPError,
    shortstr_text,
)

if TYPE_CHECKING:
    from amqpd.model.broker import Broker
    from amqpd.model.queue import Queue
    from amqpd.model.vhost import VirtualHost

log = logging.getLogger(__name__)

FLOW_MAX_PAUSE: Final = 0.05  # seconds a flooding publisher may be left unread per chunk
FLOW_POLL: Final = 0.001  # seconds between checks whether its queues caught up


# Placeholder permissions until connection.open grants real ones (no channel exists before).
_NO_ACCESS: Final = Authz("", "", Permission("", "", ""))


class Connection:
    """One client connection's protocol state (a `ClientHandle` of the broker)."""

    def __init__(
        self,
        broker: Broker,
        now: float,
        peer: str = "",
        outbox: Outbox[Connection] | None = None,
    ) -> None:
        config = broker.config
        self.broker = broker
        self.peer = peer
        self.outbox: Outbox[Connection] = outbox if outbox is not None else Outbox()
        self._pending_output = self.outbox.output
        self._clock = broker.clock
        self.state = State.AWAIT_HEADER
        self.created = now
        self.flow_queues: set[Queue] = set()  # queues this connection is flooding
        self._flow_until: float | None = None  # end of the current flow pause
        self.channels: dict[int, Channel] = {}
        self.exclusive_queues: list[Queue] = []
        self.channel_max = config.channel_max
        self.frame_max = config.frame_max
        self.heartbeat = config.heartbeat
        self.user = ""
        self.vhost: VirtualHost = broker.default_vhost
        self.client_properties: dict[str, Any] = {}
        self.auth_mechanism = ""
        self.close_reason: str | None = None  # for the audit log line (None: TCP dropped)
        self.stats = IOStats()  # octets and reads/writes for the management API
        self.should_close = False  # the shell closes the socket once output is flushed
        # rabbit_reader: frame_min_size until Tune-Ok, so an unauthenticated peer cannot make
        # the broker buffer more than that per frame
        self.frame_reader = codec.FrameReader(handshake.FRAME_MIN_SIZE)
        self.protocol_header = b""  # its bytes received so far (engine/connection_open.py)
        self._out: list[bytes] = []
        self.timers = ConnectionTimers(now)  # engine/connection_timers.py
        self.next_deadline = math.inf  # when tick() next has something to do
        self.wake(now + config.handshake_timeout)
        self._desynchronised = False
        self._confirm_channels: dict[Channel, None] = {}
        self._released = False
        # Access control and limits (amqpd/auth.py, amqpd/alarms.py). The shell sets
        # peer_cert_user for a TLS connection with a verified client certificate.
        self.loopback = is_loopback_peer(peer)
        self.peer_cert_user: str | None = None
        self.mechanisms = ""  # the SASL mechanisms Connection.Start offered
        self.authz = _NO_ACCESS
        self.paused = False  # blocked by a resource alarm: the shell stops reading
        self._published = False  # a content frame arrived in the current chunk
        self._blocked_sent = False
        self.output_full = False  # unflushed output over the write-ahead limit
        self._write_ahead_limit = config.write_ahead_limit
        self._out_size = 0  # bytes queued in _out
        self._unflushed = 0  # bytes the shell took and is still writing
        # Moving to another worker (a spread vhost, amqpd/model/replica.py): every byte
        # received, while all it did can be done again there (`REPLAYABLE`; None once not);
        # the shell moves the socket and these bytes when `move_to` is set (moves.py).
        self.recording: bytearray | None = bytearray()
        self.can_move = True  # False where the shell cannot move the socket (TLS here)
        self.replaying = False  # being replayed after a move: replies are thrown away
        self.held_replies = 0  # topology replies held until the other workers applied
        self.moves = 0  # how often it moved already (at most MAX_MOVES: no ping-pong)
        self.move_to: int | None = None
        self.move_at = 0  # where in `recording` the frame that moves it starts

    # ------------------------------------------------------------------------------------
    # Output
    # ------------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Queue bytes for the peer."""
        out = self._out
        out.append(data)
        size = self._out_size + len(data)
        self._out_size = size
        if size + self._unflushed > self._write_ahead_limit:
            self.output_full = True
        if len(out) == 1:
            self._pending_output[self] = None

    def send_parts(self, parts: list[bytes]) -> None:
        """Queue several byte strings for the peer."""
        out = self._out
        was_empty = not out
        out += parts
        size = self._out_size
        for part in parts:
            size += len(part)
        self._out_size = size
        if size + self._unflushed > self._write_ahead_limit:
            self.output_full = True
        if was_empty:
            self._pending_output[self] = None

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, as one byte string."""
        out = self._out
        if not out:
            return b""
        self.timers.sent = True
        data = b"".join(out)
        stats = self.stats
        stats.send_oct += len(data)
        stats.send_cnt += 1
        out.clear()
        self._out_size = 0
        return data

    def write_started(self, size: int) -> None:
        """The shell is writing ``size`` bytes taken with `data_to_send` (write-ahead)."""
        self._unflushed += size

    def write_finished(self) -> None:
        """The shell's writes completed: deliveries paused by the write-ahead limit resume
        (the slow-consumer bound: at most about ``write_ahead_limit`` bytes of deliveries
        wait in the broker's buffers for a client that does not read)."""
        self._unflushed = 0
        if self.output_full and self._out_size <= self._write_ahead_limit:
            self.output_full = False
            for channel in list(self.channels.values()):
                channel.resume_deliveries()

    @property
    def output_size(self) -> int:
        """Bytes of output waiting to be taken."""
        return self._out_size

    @property
    def input_buffered(self) -> int:
        """Bytes received and not yet parsed (engine/memory.py)."""
        return self.frame_reader.buffered

    @property
    def output_pending(self) -> bool:
        """True while output waits to be taken."""
        return bool(self._out)

    # ------------------------------------------------------------------------------------
    # Input
    # ------------------------------------------------------------------------------------
    def receive_data(self, data: bytes, now: float | None = None) -> None:
        """Process a chunk of bytes from the peer, received at ``now`` (unix seconds; the
        shell always passes it; None keeps the core's time of the last input or tick)."""
        if self.state is State.CLOSED or self.should_close:
            return
        if self.recording is not None:
            record(self, data)
        if now is not None:
            self._clock.now = now
        self.timers.received = True
        stats = self.stats
        stats.recv_oct += len(data)
        stats.recv_cnt += 1
        if self._desynchronised:
            return  # after a framing error nothing more can be parsed; wait for the close
        if self.state is State.AWAIT_HEADER:
            data = connection_open.receive_protocol_header(self, data)
            if not data:
                return
        reader = self.frame_reader
        reader.feed(data)
        payload: bytes | None = None
        try:
            while not self.should_close:
                payload = reader.next_payload()  # no (type, channel, payload) tuple per frame
                if payload is None:
                    break
                self._handle_frame(reader.frame_type, reader.channel, payload)
        except MoveConnection as move:
            assert payload is not None
            stop_for_move(self, move.worker, len(payload))
        except AMQPError as exc:
            if exc.reply_code == FRAME_ERROR:
                self._desynchronised = True
                reader.discard()
            self._connection_error(exc)
        except Exception:
            log.exception("internal error on connection %s", self.peer)
            self._connection_error(AMQPError(INTERNAL_ERROR, "internal error"))
        reader.compact()
        self.flush_confirms()
        if self._published:
            self._published = False
            if self.broker.alarms.active and self.state is State.OPEN:
                self._block()

    def _handle_frame(self, frame_type: int, number: int, payload: bytes) -> None:
        if frame_type == codec.FRAME_METHOD:
            index = codec.method_index(payload)
            if number == 0:
                self._handle_method0(index, payload)
                return
            if self.state is not State.OPEN:
                if self.state is State.CLOSING:
                    return
                raise AMQPError(  # rabbit_reader: unexpected_frame before "running"
                    UNEXPECTED_FRAME, f"method frame on channel {number} before connection.open"
                )
            channel = self.channels.get(number)
            if channel is None:
                self._open_channel(number, index)
            else:
                channel.handle_method(index, payload)
            if self.recording is not None and (
                self.vhost.replica is None or not replayable(index, payload)
            ):
                self.recording = None  # it could not be done twice: it stays here
        elif frame_type == codec.FRAME_HEADER or frame_type == codec.FRAME_BODY:
            if self.state is State.CLOSING:
                return
            if number == 0:
                raise AMQPError(UNEXPECTED_FRAME, "content frame on channel 0")
            channel = self.channels.get(number)
            if channel is None:
                raise AMQPError(UNEXPECTED_FRAME, f"content frame on unopened channel {number}")
            self._published = True
            if frame_type == codec.FRAME_HEADER:
                channel.handle_header(payload)
            else:
                channel.handle_body(payload)
        elif frame_type == codec.FRAME_HEARTBEAT:
            if number != 0:
                raise AMQPError(UNEXPECTED_FRAME, f"heartbeat frame on channel {number}")
        else:
            raise AMQPError(FRAME_ERROR, f"unknown frame type {frame_type}")

    def _check_user_channels(self) -> None:
        """The user's max-channels limit over all its connections (model/user_limits.py)."""
        count = sum(
            len(connection.channels)
            for connection in self.broker.connections
            if isinstance(connection, Connection) and connection.user == self.user
        )
        other_workers = self.broker.other_workers
        if other_workers is not None:  # --workers N: the limit holds for the node
            count += other_workers.elsewhere(self.user)
        refused = user_limits.channel_refused(self.broker, self.user, count)
        if refused is not None:
            raise AMQPError(NOT_ALLOWED, refused)

    def _open_channel(self, number: int, index: int) -> None:
        # rabbit_reader:create_channel: channel_max bounds how many channels are open at
        # once (closing ones included), not their numbers; checked before the method
        count = len(self.channels)
        if self.channel_max and count >= self.channel_max:
            raise AMQPError(
                NOT_ALLOWED,
                f"number of channels opened ({count}) has reached the negotiated "
                f"channel_max ({self.channel_max})",
            )
        if user_limits.has_channel_limit(self.broker, self.user):
            self._check_user_channels()
        if index != spec.Channel.Open.index:
            raise AMQPError(
                CHANNEL_ERROR,
                f"expected 'channel.open' on channel {number}",
                index >> 16,
                index & 0xFFFF,
            )
        self.channels[number] = Channel(self, number)
        self.broker.statistics.churn.channels_opened += 1
        self._tell_other_workers()
        self.send(codec.encode_method(number, codec.CHANNEL_OPEN_OK))

    def _tell_other_workers(self) -> None:
        """This user's channels changed (``--workers N``: the others count them too)."""
        other_workers = self.broker.other_workers
        if other_workers is not None:
            other_workers.changed(self.user)

    def channel_closed(self, channel: Channel) -> None:
        """Forget a channel whose close handshake finished (its number is free again)."""
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]
            self.broker.statistics.churn.channels_closed += 1
            self._tell_other_workers()
        self._confirm_channels.pop(channel, None)

    # ------------------------------------------------------------------------------------
    # Channel 0
    # ------------------------------------------------------------------------------------
    def _handle_method0(self, index: int, payload: bytes) -> None:
        state = self.state
        if state is State.CLOSING:
            if index == spec.Connection.CloseOk.index:
                self.finish()
            elif index == spec.Connection.Close.index:
                self.send(codec.encode_method(0, spec.Connection.CloseOk()))
            return
        expected = HANDSHAKE.get(state)
        if index != expected and (expected is not None or index in HANDSHAKE.values()):
            # rabbit_reader: 504 "unexpected method in connection state ~w"; a handshake
            # method on an open connection must not re-run the handshake
            got = getattr(spec.INDEX_MAPPING.get(index), "name", f"{index >> 16}.{index & 0xFFFF}")
            raise AMQPError(
                CHANNEL_ERROR,
                f"unexpected method {got.lower()} in connection state {state.value}",
                index >> 16,
                index & 0xFFFF,
            )
        method = codec.decode_method(index, payload)
        if method is None:
            raise AMQPError(COMMAND_INVALID, f"unknown method {index >> 16}.{index & 0xFFFF}")
        if isinstance(method, spec.Connection.StartOk):
            connection_open.start_ok(self, method)
        elif isinstance(method, spec.Connection.TuneOk):
            connection_open.tune_ok(self, method)
        elif isinstance(method, spec.Connection.Open):
            connection_open.open_vhost(self, method)
        elif isinstance(method, spec.Connection.Close):
            self.close_reason = "client closed the connection"
            self.release()
            self.send(codec.encode_method(0, spec.Connection.CloseOk()))
            self.timers.linger(self)
        elif isinstance(method, spec.Connection.CloseOk):
            self.finish()
        elif isinstance(method, spec.Connection.UpdateSecret):
            self.send(codec.encode_method(0, spec.Connection.UpdateSecretOk()))
        elif isinstance(method, spec.Connection.Blocked | spec.Connection.Unblocked):
            pass  # client-sent blocked notifications carry no meaning for a broker
        else:
            if index >> 16 != 10:
                raise AMQPError(
                    CHANNEL_ERROR,
                    f"{method.name.lower()} is not allowed on channel 0",
                    index >> 16,
                    index & 0xFFFF,
                )
            raise AMQPError(
                COMMAND_INVALID, f"unexpected {method.name.lower()}", index >> 16, index & 0xFFFF
            )

    def notify_blocked(self, reason: str | None) -> None:
        """Connection.Blocked / Unblocked, for clients with the connection.blocked capability."""
        if self.state is not State.OPEN or not self.client_capability("connection.blocked"):
            return
        if reason is None:
            self.send(codec.encode_method(0, spec.Connection.Unblocked()))
        else:
            self.send(codec.encode_method(0, spec.Connection.Blocked(reason=reason)))

    def _block(self) -> None:
        """A publish arrived while a resource alarm is on: stop being read (rabbit_reader
        maybe_block) and say so once."""
        self.paused = True
        if not self._blocked_sent:
            self._blocked_sent = True
            self.notify_blocked(self.broker.alarms.reason)

    def resources_available(self) -> None:
        """Every resource alarm cleared: be read again (and say so if we said blocked)."""
        if self._blocked_sent:
            self._blocked_sent = False
            self.notify_blocked(None)
        if self.paused:
            self.paused = False
            self.timers.received = True  # the heartbeat clock restarts now, not at the block
            self.outbox.resume[self] = None

    def read_delay(self, now: float) -> float | None:
        """Whether the shell should read the next chunk now (None) or first wait: math.inf
        while blocked by a resource alarm (until the outbox lists this connection under
        ``resume``); otherwise seconds to wait before asking again, while queues this
        connection publishes to are far behind active consumers (FLOW_BACKLOG; at most
        FLOW_MAX_PAUSE per chunk, so a stuck consumer cannot freeze the publisher)."""
        if self.paused:
            return math.inf
        queues = self.flow_queues
        if not queues:
            return None
        self._clock.now = now
        until = self._flow_until
        if until is None:
            until = self._flow_until = now + FLOW_MAX_PAUSE
        if now < until:
            for queue in list(queues):
                if queue.deleted or not queue.behind(FLOW_BACKLOG // 2):
                    queues.discard(queue)
            if queues:
                return FLOW_POLL
        queues.clear()
        self._flow_until = None
        return None

    def audit_label(self) -> str:
        """``(peer -> local - client-provided name)``, as RabbitMQ's connection log lines."""
        name = self.client_properties.get("connection_name")
        if isinstance(name, bytes | bytearray):
            name = bytes(name).decode("utf-8", "replace")
        suffix = f" - {name[:256]}" if isinstance(name, str) and name else ""
        return f"({self.peer} -> {self.stats.host}:{self.stats.port}{suffix})"

    def client_capability(self, name: str) -> bool:
        """Whether the client announced a capability in its Start-Ok properties."""
        capabilities = self.client_properties.get("capabilities")
        return isinstance(capabilities, dict) and bool(capabilities.get(name))

    # ------------------------------------------------------------------------------------
    # Closing
    # ------------------------------------------------------------------------------------
    def _connection_error(self, error: AMQPError) -> None:
        log.info("closing connection %s: %s", self.peer, error)
        self.close(error.reply_code, error.reply_text, error.class_id, error.method_id)

    def close(
        self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        """Start the close handshake from the broker's side (sends Connection.Close)."""
        if self.state in (State.CLOSING, State.CLOSED) or self.should_close:
            return
        self.close_reason = f"{reply_code} {reply_text}"
        if self.state is State.AWAIT_HEADER:
            self.finish()
            return
        self.release()
        self.state = State.CLOSING
        self.send(
            codec.encode_method(
                0,
                codec.build(
                    spec.Connection.Close,
                    reply_code=reply_code,
                    reply_text=shortstr_text(reply_text),
                    class_id=class_id,
                    method_id=method_id,
                ),
            )
        )

    def close_forced(self, reason: str) -> None:
        """Broker shutdown: Connection.Close 320 CONNECTION_FORCED."""
        self.close(
            CONNECTION_FORCED,
            f"CONNECTION_FORCED - broker forced connection closure with reason '{reason}'",
        )

    def finish(self) -> None:
        """Close now: release everything; the socket goes once the output is flushed."""
        self.release()
        self.state = State.CLOSED
        self.set_should_close()

    def set_should_close(self) -> None:
        """Ask the shell to close the socket once the output is flushed."""
        self.should_close = True
        self._pending_output[self] = None

    def release(self) -> None:
        """Release channels and exclusive queues (idempotent; also on connection loss)."""
        if self._released:
            return
        self._released = True
        for channel in list(self.channels.values()):
            channel.release()
            channel.state = ChannelState.CLOSED
        self.broker.statistics.churn.channels_closed += len(self.channels)
        had_channels = bool(self.channels)
        self.channels.clear()
        self._confirm_channels.clear()
        if had_channels:
            self._tell_other_workers()
        self.broker.connection_released(self)

    def connection_lost(self) -> None:
        """The socket is gone: clean up without sending anything."""
        self.release()
        self.state = State.CLOSED
        self.set_should_close()

    # ------------------------------------------------------------------------------------
    # Moving to another worker (a spread vhost)
    # ------------------------------------------------------------------------------------
    @property
    def movable(self) -> bool:
        """Whether this connection may continue on another worker: everything it did can
        be done again there from its bytes, and no reply of it waits for other workers."""
        return (
            self.recording is not None
            and self.can_move
            and not self.held_replies
            and not self.replaying
            and self.moves < MAX_MOVES
        )

    # ------------------------------------------------------------------------------------
    # Time
    # ------------------------------------------------------------------------------------
    def wake(self, when: float) -> None:
        """This connection's timers want a tick at ``when`` (`next_deadline`; also told to
        the clock, so a sleeping shell re-plans)."""
        if when < self.next_deadline:
            self.next_deadline = when
            self._clock.wake(when)

    def tick(self, now: float) -> None:
        """Advance timers: handshake timeout, heartbeats, close handshake timeout; then
        set ``next_deadline``, when this connection next wants a tick (connection_timers)."""
        self.timers.tick(self, now)

    # ------------------------------------------------------------------------------------
    # Confirms
    # ------------------------------------------------------------------------------------
    def confirms_pending(self, channel: Channel) -> None:
        """A channel has settled confirms to send at the end of this chunk."""
        self._confirm_channels[channel] = None

    def confirms_released(self, channel: Channel) -> None:
        """A channel in confirm mode is closing: drop its pending confirms."""
        self._confirm_channels.pop(channel, None)

    def flush_confirms(self) -> None:
        """Send the coalesced confirms of every channel that has some (once per chunk)."""
        if not self._confirm_channels:
            return
        channels = list(self._confirm_channels)
        self._confirm_channels.clear()
        parts: list[bytes] = []
        for channel in channels:
            parts += channel.take_confirm_frames()
        if parts:
            self.send_parts(parts)
