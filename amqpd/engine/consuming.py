"""Consumer-side channel methods: basic.consume (and ``x-browse``), basic.cancel,
basic.get, basic.qos, channel.flow, basic.reject and basic.recover (sans-IO).

Part of a `Channel` (amqpd/engine/channel.py), which dispatches these methods here as it
dispatches exchange and queue methods to `Topology`. Deliveries themselves (the model's
consumer sink: ``has_credit`` / ``deliver``), basic.ack / basic.nack (a fast path) and
settling stay in the channel, the modes are amqpd/engine/channel_modes.py; a consumer is
registered with the channel and its queue here and removed here (cancel, channel close,
connection loss).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pamqp import commands as spec
from pamqp.base import Frame as Method

from amqpd.engine.reply_to import REPLY_TO_QUEUE, DirectReplyTo
from amqpd.engine.stream_consuming import check_stream_consume, refuse_stream_settlement
from amqpd.engine.topology import Topology
from amqpd.engine.unacked import Settlement, Unacked, UnackedStore
from amqpd.model.message import QueueEntry
from amqpd.model.queue import Consumer, ConsumerSink, Queue
from amqpd.model.replica import RemoteQueue
from amqpd.model.selective import BROWSE_ARGUMENT, browse_entries, consumer_selector
from amqpd.model.selector import Predicate
from amqpd.model.statistics import MessageStats
from amqpd.model.stream_args import not_supported
from amqpd.model.vhost import VirtualHost, generated_name
from amqpd.wire import codec
from amqpd.wire.errors import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    AMQPError,
    precondition_failed,
)
from amqpd.wire.properties import with_delivery_count

__all__ = ["ConsumerMethods", "ConsumingChannel"]


class _Output(Protocol):
    def send(self, data: bytes) -> None: ...


class ConsumingChannel(ConsumerSink, Protocol):
    """What these methods use of their `Channel` (amqpd/engine/channel.py)."""

    number: int
    consumers: dict[str, Consumer]
    unacked: UnackedStore
    stats: MessageStats

    @property
    def conn(self) -> _Output: ...
    @property
    def vhost(self) -> VirtualHost: ...
    @property
    def reply_to(self) -> DirectReplyTo: ...
    @property
    def topology(self) -> Topology: ...
    def send_method(self, method: Method) -> None: ...
    def send_if_open(self, method: Method) -> None: ...
    def send_content(self, first: bytes, header: bytes, payload: bytes) -> None: ...
    def resume_deliveries(self) -> None: ...
    def settle(self, records: list[Unacked], kind: Settlement) -> None: ...
    def hand_out(
        self, queue: Queue, entry: QueueEntry, consumer: Consumer | None, no_ack: bool
    ) -> tuple[int, bytes]: ...


class ConsumerMethods:
    """The consumer-side methods of one channel."""

    def __init__(self, channel: ConsumingChannel) -> None:
        self._channel = channel

    def handlers(self) -> dict[int, Callable[[Any], None]]:
        """Method index -> handler, merged into the channel's dispatch table."""
        return {
            spec.Basic.Consume.index: self._on_basic_consume,
            spec.Basic.Cancel.index: self._on_basic_cancel,
            spec.Basic.Get.index: self._on_basic_get,
            spec.Basic.Qos.index: self._on_basic_qos,
            spec.Channel.Flow.index: self._on_channel_flow,
            spec.Basic.Reject.index: self._on_basic_reject,
            spec.Basic.Recover.index: self._on_basic_recover,
            spec.Basic.RecoverAsync.index: self._on_basic_recover_async,
        }

    def _on_basic_reject(self, method: spec.Basic.Reject) -> None:
        channel = self._channel
        records = channel.unacked.take(method.delivery_tag or 0, False)
        refuse_stream_settlement(records, "basic.nack and basic.reject")
        channel.settle(records, Settlement.REQUEUE if method.requeue else Settlement.DISCARD)

    def _on_basic_recover_async(self, method: spec.Basic.RecoverAsync) -> None:
        if not method.requeue:
            raise AMQPError(NOT_IMPLEMENTED, "requeue=false")
        unacked = self._channel.unacked
        refuse_stream_settlement(unacked.records(), "basic.recover")
        records = unacked.take_all()
        unacked.settle(records, Settlement.REQUEUE, self._channel.vhost.clock.now)

    def _on_basic_recover(self, method: spec.Basic.Recover) -> None:
        if not method.requeue:
            raise AMQPError(NOT_IMPLEMENTED, "requeue=false")
        channel = self._channel
        unacked = channel.unacked
        refuse_stream_settlement(unacked.records(), "basic.recover")
        records = unacked.take_all()
        channel.send_method(spec.Basic.RecoverOk())
        unacked.settle(records, Settlement.REQUEUE, channel.vhost.clock.now)

    def _on_basic_consume(self, method: spec.Basic.Consume) -> None:
        channel = self._channel
        if method.queue == REPLY_TO_QUEUE:
            queue = channel.reply_to.consume(method.no_ack)
        else:
            queue = channel.topology.usable_queue(method.queue, remote=True)
        tag = method.consumer_tag or generated_name("amq.ctag-")
        if tag in channel.consumers:
            raise AMQPError(NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if isinstance(queue, RemoteQueue):
            self._consume_remote(queue, tag, method)
            return
        if queue.exclusive_consumer is not None or (method.exclusive and queue.consumers):
            raise AMQPError(
                ACCESS_REFUSED,
                f"queue '{queue.name}' in vhost '{channel.vhost.name}' in exclusive use",
            )
        arguments = dict(method.arguments or {})
        now = channel.vhost.clock.now
        check_stream_consume(
            queue, method.no_ack, channel.unacked.consumer_prefetch, arguments, now
        )
        selector = consumer_selector(arguments, queue)  # x-selector: 406 when it is bad
        if arguments.get(BROWSE_ARGUMENT):
            self._browse(queue, tag, method, selector)
            return
        consumer = Consumer(
            channel,
            tag,
            codec.encode_shortstr(tag),
            queue,
            method.no_ack,
            method.exclusive,
            channel.unacked.consumer_prefetch,
            arguments,
        )
        consumer.selector = selector
        channel.consumers[tag] = consumer
        if not method.nowait:
            channel.send_method(codec.build(spec.Basic.ConsumeOk, consumer_tag=tag))
        queue.add_consumer(consumer)

    def _consume_remote(self, stub: RemoteQueue, tag: str, method: spec.Basic.Consume) -> None:
        """A consumer of another worker's queue, served by that worker: the consume-ok
        comes when it accepted (engine/remote_consumers.py)."""
        channel = self._channel
        arguments = dict(method.arguments or {})
        assert stub.port is not None  # usable_queue returns no stub without one
        now = channel.vhost.clock.now  # a stream's rules, checked here as for one of ours
        check_stream_consume(stub, method.no_ack, channel.unacked.consumer_prefetch, arguments, now)
        if arguments.get(BROWSE_ARGUMENT):
            if not method.no_ack:
                raise precondition_failed(f"'{BROWSE_ARGUMENT}' needs no-ack")
            stub.port.browse(channel, stub, tag, arguments, bool(method.nowait))
            return
        unacked = channel.unacked
        consumer = Consumer(
            channel,
            tag,
            codec.encode_shortstr(tag),
            stub,
            method.no_ack,
            method.exclusive,
            unacked.consumer_prefetch or unacked.channel_prefetch,  # served per consumer
            arguments,
        )
        channel.consumers[tag] = consumer
        stub.port.consume(channel, consumer, bool(method.nowait))

    def _browse(
        self, queue: Queue, tag: str, method: spec.Basic.Consume, selector: Predicate | None
    ) -> None:
        """``x-browse``: copies of the matching ready messages, then a server-side cancel
        (amqpd/model/selective.py). The queue and its entries are left as they are."""
        channel = self._channel
        if not method.no_ack:
            raise precondition_failed(f"'{BROWSE_ARGUMENT}' needs no-ack")
        if not method.nowait:
            channel.send_method(spec.Basic.ConsumeOk(consumer_tag=tag))
        tag_raw = codec.encode_shortstr(tag)
        for entry in browse_entries(queue, selector):
            message = entry.message
            header = message.header
            if entry.delivery_count:
                header = with_delivery_count(header, entry.delivery_count)
            first = codec.encode_deliver(
                channel.number,
                tag_raw,
                channel.unacked.issue(queue, entry, None, False),
                entry.redelivered,
                message.exchange_raw,
                message.routing_key_raw,
            )
            channel.send_content(first, header, message.payload)
        channel.send_method(spec.Basic.Cancel(consumer_tag=tag, nowait=True))

    def _on_basic_cancel(self, method: spec.Basic.Cancel) -> None:
        channel = self._channel
        consumer = channel.consumers.pop(method.consumer_tag or "", None)
        stub = None if consumer is None else consumer.queue
        if not isinstance(stub, RemoteQueue) or stub.port is None:
            if not method.nowait:
                channel.send_method(
                    codec.build(spec.Basic.CancelOk, consumer_tag=method.consumer_tag)
                )
            if consumer is not None:
                self.remove_consumer(consumer)
            return
        assert consumer is not None
        self.remove_consumer(consumer)
        if not method.nowait:  # once the owner dropped it (a question asked after the cancel)
            ok = codec.build(spec.Basic.CancelOk, consumer_tag=method.consumer_tag)
            stub.port.ask(
                stub,
                ("count",),
                lambda _messages, _consumers: channel.send_if_open(ok),
                lambda _code, _text: channel.send_if_open(ok),  # the queue is gone: cancelled
            )

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer from its queue (an auto-delete queue may go with it)."""
        channel = self._channel
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if channel.reply_to.retire(queue):
            return
        if queue.auto_delete and queue.had_consumer and not queue.consumers:
            channel.vhost.delete_queue(queue)

    def _on_basic_get(self, method: spec.Basic.Get) -> None:
        channel = self._channel
        queue = channel.topology.usable_queue(method.queue, remote=True)
        if isinstance(queue, RemoteQueue):  # answered when its worker did
            assert queue.port is not None
            if queue.settings.queue_type == "stream":  # as a stream here refuses it
                raise not_supported("basic.get", queue.name, queue.vhost_name)
            queue.port.get(channel, queue, bool(method.no_ack))
            return
        entry = queue.take()
        if entry is None:
            queue.stats.get_empty += 1
            channel.stats.get_empty += 1
            channel.conn.send(codec.encode_get_empty(channel.number))
            return
        tag, header = channel.hand_out(queue, entry, None, method.no_ack)
        message = entry.message
        first = codec.encode_get_ok(
            channel.number,
            tag,
            entry.redelivered,
            message.exchange_raw,
            message.routing_key_raw,
            queue.message_count,
        )
        channel.send_content(first, header, message.payload)

    def _on_basic_qos(self, method: spec.Basic.Qos) -> None:
        channel = self._channel
        if method.prefetch_size:
            raise AMQPError(NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})")
        if method.global_:
            channel.unacked.channel_prefetch = method.prefetch_count
        else:
            channel.unacked.consumer_prefetch = method.prefetch_count
        channel.send_method(spec.Basic.QosOk())
        channel.resume_deliveries()

    def _on_channel_flow(self, method: spec.Channel.Flow) -> None:
        channel = self._channel
        # rabbit_channel: a client may not stop the broker's deliveries this way (it has
        # basic.qos for that); active=true is acknowledged, active=false is 540
        if not method.active:
            raise AMQPError(NOT_IMPLEMENTED, "active=false")
        channel.send_method(spec.Channel.FlowOk(active=True))
