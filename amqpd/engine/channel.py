"""One AMQP channel: content assembly, publishing, consuming, acknowledgements, modes.

Theory of operation
-------------------
State: OPEN until the broker reports a soft error (it then sends Channel.Close and enters
CLOSING, ignoring everything but Close / Close-Ok) or the client closes it.

Publishing is a three-step assembly: Basic.Publish (decoded on the fast path) -> one content
header (kept raw) -> body frames until ``body_size`` bytes arrived; any other frame in between
is 505 UNEXPECTED_FRAME. The finished `Message` is routed by the vhost and enqueued.

Mode is one of plain / confirm / tx, switched once: confirm numbers every publish from 1 and
hands the confirmation to a `ConfirmTracker` (settled at the end of the received chunk, or
once the storage batch holding a persistent message is durable: `BatchWaits` records which).
tx buffers publishes and settlements in a `Transaction` until tx.commit applies them in one
synchronous step, so no consumer can observe half a commit (amqpd/engine/channel_modes.py
handles the mode switches and the tx methods).

Deliveries (basic.deliver and basic.get-ok share `hand_out`) get channel-wide delivery tags
from the `UnackedStore`, which keeps unacked ones in tag order until ack / nack / reject /
recover / close, and owns the qos credit: a consumer may receive while both its own prefetch
(qos global=false) and the channel's (global=true) allow, as in RabbitMQ. Exchange and queue
methods are handled by `Topology`; consume / cancel / get / qos / flow / reject / recover by
`ConsumerMethods` (amqpd/engine/consuming.py).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Any, Protocol

from pamqp import commands as spec
from pamqp.base import Frame as Method

from amqpd.engine.channel_batches import confirm_written, refuse_unwritten
from amqpd.engine.channel_modes import Mode, ModeMethods, RemoteCommit
from amqpd.engine.consuming import ConsumerMethods
from amqpd.engine.content import PendingPublish, route_and_enqueue
from amqpd.engine.permissions import check_method
from amqpd.engine.reply_to import DirectReplyTo
from amqpd.engine.spread_publish import forward_confirmed, publish_destination
from amqpd.engine.stream_consuming import refuse_stream_settlement
from amqpd.engine.topology import HeldReply, MoveConnection, Topology, TopologyOwner
from amqpd.engine.transaction import BufferedPublish, Transaction
from amqpd.engine.unacked import UNLIMITED, Settlement, Unacked, UnackedStore
from amqpd.model.auth import Authz
from amqpd.model.broker import Broker
from amqpd.model.enqueue import storage_batch
from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.model.replica import Decision, has_remote
from amqpd.model.sender_selected import has_sender_selected_headers, sender_selected_error
from amqpd.model.statistics import MessageStats
from amqpd.model.stream_delivery import StreamRun
from amqpd.model.vhost import VirtualHost
from amqpd.wire import codec, content_header
from amqpd.wire.errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    NO_ROUTE,
    NOT_IMPLEMENTED,
    UNEXPECTED_FRAME,
    AMQPError,
)
from amqpd.wire.properties import with_delivery_count
from confirms.tracker import ConfirmTracker

log = logging.getLogger(__name__)


class ChannelState(enum.Enum):
    """Lifecycle of a channel."""

    OPEN = "open"
    CLOSING = "closing"  # we sent Channel.Close; waiting for Close-Ok
    CLOSED = "closed"


_OPEN = ChannelState.OPEN


class ChannelHost(TopologyOwner, Protocol):
    """What a channel needs of its connection (the engine's `Connection`): the broker, the
    login's access, the frame size, the output buffer, and the per-chunk confirm flush."""

    broker: Broker
    vhost: VirtualHost
    authz: Authz
    frame_max: int
    output_full: bool
    flow_queues: set[Queue]

    def send(self, data: bytes) -> None: ...
    def send_parts(self, parts: list[bytes]) -> None: ...
    def client_capability(self, name: str) -> bool: ...
    def channel_closed(self, channel: Channel) -> None: ...
    def confirms_pending(self, channel: Channel) -> None: ...
    def confirms_released(self, channel: Channel) -> None: ...
    def flush_confirms(self) -> None: ...
    def close(self, reply_code: int, reply_text: str, class_id: int, method_id: int) -> None: ...


class Channel:
    """Channel state machine. Frames come in from the `Connection`; output goes back to it."""

    def __init__(self, connection: ChannelHost, number: int) -> None:
        self.conn = connection
        self.number = number
        self.vhost = connection.vhost
        self.state = ChannelState.OPEN
        self.mode = Mode.PLAIN
        self.consumers: dict[str, Consumer] = {}
        self.unacked = UnackedStore()
        self.flow_active = True  # always: RabbitMQ lets no client pause its channel (540)
        self._pending: PendingPublish | None = None
        self.confirm: ConfirmTracker | None = None
        self.publish_seq = 0
        self.tx: Transaction | None = None  # the open transaction (tx mode)
        self.stats = MessageStats()  # counters for the management API
        reply_queues = connection.broker.reply_queues
        self.reply_to = DirectReplyTo(self.vhost, reply_queues)
        self.topology = Topology(
            self.vhost,
            connection,
            reply_queues,
            self.send_method,
            self.send_if_open,
            self.fail_later,
        )
        self.consuming = ConsumerMethods(self)
        self._handlers: dict[int, Callable[[Any], None]] = {
            **self.consuming.handlers(),
            spec.Channel.FlowOk.index: self._ignore,
            spec.Basic.CancelOk.index: self._ignore,
            **ModeMethods(self).handlers(),  # confirm.select, tx.* (engine/channel_modes.py)
            **self.topology.handlers(),
            spec.Queue.Delete.index: self._on_queue_delete,
        }
        self._held_cancels: list[Method] | None = None  # see _on_queue_delete
        # confirms that also wait for other workers' copies (a spread vhost): seq -> the
        # decision their join reaches, for those whose local copy waits for a storage batch
        self.joined: dict[int, Decision] = {}

    # ------------------------------------------------------------------------------------
    # Frame entry points (called by Connection)
    # ------------------------------------------------------------------------------------
    def handle_method(self, index: int, payload: bytes) -> None:
        """Dispatch one method frame. Soft errors close this channel; hard ones propagate."""
        if self.state is not ChannelState.OPEN:
            self._handle_while_closing(index)
            return
        try:
            if self._pending is not None:
                # rabbit_command_assembler's texts for a method inside a content sequence
                expected = (
                    "content body, got non content body frame instead"
                    if self._pending.header is not None
                    else f"content header for class 60, got method frame "
                    f"{index >> 16}.{index & 0xFFFF} instead"
                )
                raise AMQPError(
                    UNEXPECTED_FRAME, f"expected {expected}", index >> 16, index & 0xFFFF
                )
            if index == codec.BASIC_PUBLISH:
                self._on_basic_publish(payload)
                return
            if index == codec.BASIC_ACK or index == codec.BASIC_NACK:  # no access check
                tag, bits = codec.decode_ack(index, payload)
                records = self.unacked.take(tag, bool(bits & 1))
                if index == codec.BASIC_ACK:
                    self.settle(records, Settlement.ACK)
                else:
                    refuse_stream_settlement(records, "basic.nack and basic.reject")
                    self.settle(records, Settlement.REQUEUE if bits & 2 else Settlement.DISCARD)
                return
            if index == spec.Channel.Close.index:
                self._on_channel_close()
                return
            handler = self._handlers.get(index)
            if handler is None:
                self._unknown_method(index)
                return
            method = codec.decode_method(index, payload)
            authz = self.conn.authz
            if not authz.full:
                check_method(self.topology, authz, index, method)  # access control
            handler(method)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = index >> 16, index & 0xFFFF
            if exc.closes_connection:
                raise
            self.close_with_error(exc)

    def handle_header(self, payload: bytes) -> None:
        """A content header frame."""
        if self.state is not ChannelState.OPEN:
            return
        pending = self._pending
        if pending is None or pending.header is not None:
            raise AMQPError(UNEXPECTED_FRAME, "unexpected content header frame", 60, 40)
        max_size = self.conn.broker.config.max_message_size
        error = pending.add_header(payload, max_size, self.conn.authz)
        if error is not None:
            self._pending = None
            self.close_with_error(error)
        elif pending.complete:
            self._pending = None
            self._publish_complete(pending)

    def handle_body(self, payload: bytes) -> None:
        """A content body frame."""
        if self.state is not ChannelState.OPEN:
            return
        pending = self._pending
        if pending is None or pending.peek is None:
            raise AMQPError(UNEXPECTED_FRAME, "unexpected content body frame", 60, 40)
        pending.add_body(payload)
        if pending.complete:
            self._pending = None
            self._publish_complete(pending)

    def _handle_while_closing(self, index: int) -> None:
        if index == spec.Channel.CloseOk.index:
            self.state = ChannelState.CLOSED
            self.conn.channel_closed(self)
        elif index == spec.Channel.Close.index:
            self.send_method(spec.Channel.CloseOk())
        # everything else is ignored, as the spec requires

    def _unknown_method(self, index: int) -> None:
        if index >> 16 in (10,):
            raise AMQPError(CHANNEL_ERROR, "connection method on a non-zero channel")
        if index == spec.Channel.Open.index:
            raise AMQPError(CHANNEL_ERROR, "second 'channel.open' seen")
        name = codec.method_name(index)
        if name is not None:
            raise AMQPError(COMMAND_INVALID, f"unexpected method {name}")
        raise AMQPError(COMMAND_INVALID, f"unknown method {index >> 16}.{index & 0xFFFF}")

    @staticmethod
    def _ignore(_method: Method) -> None:
        return None

    def send_method(self, method: Method) -> None:
        self.conn.send(codec.encode_method(self.number, method))

    def send_if_open(self, method: Method) -> None:
        """A reply held for other workers (a spread vhost): dropped if the channel closed."""
        if self.state is ChannelState.OPEN:
            self.send_method(method)

    def send_content(self, first: bytes, header: bytes, payload: bytes) -> None:
        """Send a content-carrying method (encoded: ``first``) with its header and body."""
        parts = [first]
        parts += codec.encode_content(self.number, header, payload, self.conn.frame_max)
        self.conn.send_parts(parts)

    # ------------------------------------------------------------------------------------
    # Closing
    # ------------------------------------------------------------------------------------
    def close_with_error(self, error: AMQPError) -> None:
        """Send Channel.Close for a soft error and release everything the channel holds."""
        if self.state is not ChannelState.OPEN:
            return
        log.debug("channel %d closed by broker: %s", self.number, error)
        self.state = ChannelState.CLOSING
        self._pending = None
        self.release()
        self.send_method(
            codec.build(
                spec.Channel.Close,
                reply_code=error.reply_code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            )
        )

    def fail_later(self, error: AMQPError) -> None:
        """An error found after its method was handled (another worker refused it): close
        what raising it in `handle_method` would have closed (a hard one: the connection)."""
        if self.state is ChannelState.OPEN and error.closes_connection:
            self.conn.close(error.reply_code, error.reply_text, error.class_id, error.method_id)
        else:
            self.close_with_error(error)

    def _on_channel_close(self) -> None:
        self.release()
        self.state = ChannelState.CLOSED
        self.send_method(spec.Channel.CloseOk())
        self.conn.channel_closed(self)

    def release(self) -> None:
        """Cancel consumers and requeue unacked messages (channel close or connection loss)."""
        for consumer in list(self.consumers.values()):
            self.consuming.remove_consumer(consumer)
        self.consumers.clear()
        if self.tx is not None:
            self.unacked.restore(self.tx.rollback())
            self.tx = None
        self.unacked.requeue_all()
        self.conn.broker.statistics.closed.add(self.stats)  # node totals outlive the channel
        self.stats = MessageStats()  # (release may run twice: closing, then connection close)
        if self.confirm is not None:
            self.conn.confirms_released(self)
        self.joined.clear()

    # ------------------------------------------------------------------------------------
    # Publishing
    # ------------------------------------------------------------------------------------
    def _on_basic_publish(self, payload: bytes) -> None:
        args = codec.decode_publish(payload)
        if args.immediate:
            raise AMQPError(NOT_IMPLEMENTED, "immediate=true", 60, 40)
        self.conn.authz.write("exchange", args.exchange)
        exchange = self.vhost.get_exchange(args.exchange)
        if exchange.internal:
            raise AMQPError(
                ACCESS_REFUSED,
                f"cannot publish to internal exchange '{exchange.name}' in vhost "
                f"'{self.vhost.name}'",
            )
        if self.vhost.remote and self.conn.movable:  # a spread vhost (engine/spread_publish)
            worker = publish_destination(self.vhost, exchange, args)
            if worker is not None:
                raise MoveConnection(worker)
        self._pending = PendingPublish(args, exchange)

    def _publish_complete(self, pending: PendingPublish) -> None:
        message = pending.message()
        if has_sender_selected_headers(message.headers_raw):
            header_error = sender_selected_error(message)
            if header_error is not None:
                self.close_with_error(header_error)
                return
        assert pending.peek is not None
        if pending.peek.flags & content_header.FLAG_REPLY_TO:
            try:
                self.reply_to.rewrite(message)
            except AMQPError as exc:  # a channel error in RabbitMQ, not a connection one
                exc.class_id, exc.method_id = 60, 40
                self.close_with_error(exc)
                return
        mandatory = pending.args.mandatory
        publish = BufferedPublish(
            pending.exchange, message, mandatory, pending.expiration_ms, self.mode is not Mode.PLAIN
        )
        if self.mode is Mode.TX:
            assert self.tx is not None
            self.tx.publishes.append(publish)
            return
        queues = self.route_publish(publish)
        if self.mode is Mode.CONFIRM:
            confirm = self.confirm
            assert confirm is not None
            self.publish_seq = seq = self.publish_seq + 1
            self.stats.confirm += 1
            journal = self.conn.broker.journal
            batch = None if queues is None else storage_batch(journal, message, queues)
            if queues and self.vhost.replica is not None and has_remote(queues):
                joined = forward_confirmed(self, publish, queues, seq, batch)
                if joined is not None:
                    self.joined[seq] = joined
                return
            confirm.track(seq, waiting=batch is not None or queues is None)
            if queues is None:
                confirm.reject(seq)
            elif batch is not None:
                self.conn.broker.batch_waits.confirm(batch, self, seq)
            self.conn.confirms_pending(self)

    def remote_decided(self, seq: int, ok: bool) -> None:
        """Every copy of publish ``seq`` is settled (``ok``), or one was refused."""
        confirm = self.confirm
        if self.state is ChannelState.OPEN and confirm is not None:
            if ok:
                confirm.ack((seq,))
            else:
                confirm.reject(seq)
            self.conn.confirms_pending(self)
            self.conn.flush_confirms()

    def route_publish(
        self, publish: BufferedPublish, commit: RemoteCommit | None = None
    ) -> list[Queue] | None:
        """Route and enqueue (see `route_and_enqueue`); return an unroutable mandatory one.
        Outside confirm mode, copies for other workers' queues are forwarded here (a
        tx.commit's ``commit`` waits for them)."""
        conn = self.conn
        queues = route_and_enqueue(publish, self.vhost, conn.broker.reply_queue, conn.flow_queues)
        stats, exchange_stats = self.stats, publish.exchange.stats
        stats.publish += 1
        exchange_stats.publish_in += 1
        if queues:
            exchange_stats.publish_out += len(queues)
            vhost = self.vhost
            replica = vhost.replica
            if replica is not None and self.mode is not Mode.CONFIRM and has_remote(queues):
                replica.forward(
                    vhost.name,
                    publish.message,
                    publish.expiration_ms,
                    publish.promised,
                    queues,
                    None if commit is None else commit.copy(),
                    False,
                )
        elif queues == [] and publish.mandatory:
            stats.return_unroutable += 1
            self._send_return(publish.message, NO_ROUTE, "NO_ROUTE")
        elif queues == []:
            stats.drop_unroutable += 1
        return queues

    def _send_return(self, message: Message, code: int, text: str) -> None:
        method = codec.build(
            spec.Basic.Return,
            reply_code=code,
            reply_text=text,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        first = codec.encode_method(self.number, method)
        self.send_content(first, message.header, message.payload)

    # ------------------------------------------------------------------------------------
    # Storage batches (the model's BatchWaiter)
    # ------------------------------------------------------------------------------------
    def batch_committed(self, batch: int, confirms: list[int], commit_oks: int) -> None:
        """The storage batch ``batch`` is durable (engine/channel_batches.py)."""
        if self.state is ChannelState.OPEN:
            confirm_written(self, confirms, commit_oks)

    def batch_failed(
        self, batch: int, confirms: list[int], commit_oks: int, error: Exception
    ) -> None:
        """The storage batch ``batch`` could not be written (engine/channel_batches.py)."""
        if self.state is ChannelState.OPEN:
            refuse_unwritten(self, confirms, commit_oks, error)

    # ------------------------------------------------------------------------------------
    # Delivery (the model's consumer sink, called by queues)
    # ------------------------------------------------------------------------------------
    def has_credit(self, consumer: Consumer) -> bool:
        """Whether ``consumer`` may receive one more message now."""
        if self.conn.output_full:  # write-ahead limit: the client is not reading fast enough
            return False
        if self.state is not _OPEN:  # module constant: Enum lookups
            return False  # cost ~250 ns on 3.11 and this runs on every enqueue
        return consumer.no_ack or self.unacked.has_credit(consumer)

    def credit(self, consumer: Consumer) -> int:
        """How many messages ``consumer`` may receive now (a stream's `StreamSink`)."""
        if self.conn.output_full or self.state is not _OPEN:
            return 0
        return UNLIMITED if consumer.no_ack else self.unacked.credit(consumer)

    def deliver_run(self, consumer: Consumer, queue: Queue, run: StreamRun) -> None:
        """Send a run of a stream's messages to an acking consumer of this channel."""
        count = len(run)
        first_tag = self.unacked.issue_run(queue, run.entries(), consumer)
        queue.stats.deliver += count
        self.stats.deliver += count
        conn = self.conn
        conn.send_parts(run.frames(self.number, consumer.tag_raw, first_tag, conn.frame_max))

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry) -> None:
        """Send one message to a consumer of this channel."""
        tag, header = self.hand_out(queue, entry, consumer, consumer.no_ack)
        message = entry.message
        conn = self.conn
        conn.send_parts(
            codec.encode_delivery(
                self.number,
                consumer.tag_raw,
                tag,
                entry.redelivered,
                message.exchange_raw,
                message.routing_key_raw,
                header,
                message.payload,
                conn.frame_max,
            )
        )

    def hand_out(
        self, queue: Queue, entry: QueueEntry, consumer: Consumer | None, no_ack: bool
    ) -> tuple[int, bytes]:
        """What basic.deliver and basic.get-ok share: the next delivery tag, the queue told,
        the delivery unacked or (no-ack) settled. Returns the tag and the content header."""
        tag = self.unacked.issue(queue, entry, consumer, not no_ack)
        header = entry.message.header
        queue_stats, stats = queue.stats, self.stats
        if consumer is None:
            if no_ack:
                queue_stats.get_no_ack += 1
                stats.get_no_ack += 1
            else:
                queue_stats.get += 1
                stats.get += 1
        elif no_ack:
            queue_stats.deliver_no_ack += 1
            stats.deliver_no_ack += 1
        else:
            queue_stats.deliver += 1
            stats.deliver += 1
        if entry.redelivered:
            queue_stats.redeliver += 1
            stats.redeliver += 1
        if entry.delivery_count:  # a redelivery says how many deliveries came before
            header = with_delivery_count(header, entry.delivery_count)
        queue.delivered(entry)
        if no_ack:
            queue.settled(entry)
            if consumer is not None:
                queue.consumer_progress_at = queue.clock.now
        return tag, header

    def cancel_by_broker(self, consumer: Consumer) -> None:
        """The consumer's queue went away: forget it and tell the client if it listens."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.state is ChannelState.OPEN and self.conn.client_capability(
            "consumer_cancel_notify"
        ):
            cancel = codec.build(spec.Basic.Cancel, consumer_tag=consumer.tag, nowait=True)
            if self._held_cancels is not None:
                self._held_cancels.append(cancel)
            else:
                self.send_method(cancel)

    def _on_queue_delete(self, method: spec.Queue.Delete) -> None:
        """queue.delete, as RabbitMQ orders it: Delete-Ok first, then the Basic.Cancel of
        this channel's own consumers on the queue (py-amqp/kombu raise ConsumerCancelled
        out of ``delete()`` when the Cancel comes first)."""
        held: list[Method] = []
        self._held_cancels = held
        try:
            self.topology.queue_delete(method)
        finally:
            self._held_cancels = None
        replica = self.vhost.replica
        for cancel in held:
            if replica is None or self.conn.replaying:
                self.send_method(cancel)
            else:  # after the held Delete-Ok (engine/topology.py `_answer`)
                self.conn.held_replies += 1
                replica.hold(HeldReply(self.send_if_open, cancel, self.conn))

    def resume_deliveries(self) -> None:
        """Let the queues this channel consumes from deliver again (credit came back)."""
        seen: set[Queue] = set()
        for consumer in list(self.consumers.values()):
            queue = consumer.queue
            if queue not in seen:
                seen.add(queue)
                queue.dispatch()

    # ------------------------------------------------------------------------------------
    # Acknowledgements (basic.reject and basic.recover: amqpd/engine/consuming.py)
    # ------------------------------------------------------------------------------------
    def settle(self, records: list[Unacked], kind: Settlement) -> None:
        """Ack, requeue or discard taken deliveries (buffered in tx mode)."""
        if not records:
            return
        if kind is Settlement.ACK:
            self.stats.ack += len(records)
        if self.tx is not None:
            self.tx.settlements.append((records, kind))
            return
        self.unacked.settle(records, kind, self.conn.broker.clock.now)
        self.resume_deliveries()

    # ------------------------------------------------------------------------------------
    # Confirm mode (its switch and tx: amqpd/engine/channel_modes.py)
    # ------------------------------------------------------------------------------------
    def take_confirm_frames(self) -> list[bytes]:
        """Encoded basic.ack / basic.nack frames for everything settled since the last call."""
        if self.confirm is None or self.state is not ChannelState.OPEN:
            return []
        out = []
        for item in self.confirm.take_frames():
            if item.ack:
                out.append(codec.encode_ack(self.number, item.delivery_tag, item.multiple))
            else:
                out.append(codec.encode_nack(self.number, item.delivery_tag, item.multiple))
        return out
