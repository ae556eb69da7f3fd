"""One published message: assembled from basic.publish, a content header and bodies, then
routed and enqueued.

Theory of operation
-------------------
A `PendingPublish` starts with the decoded basic.publish. `PendingPublish.add_header` takes
the one content header (kept raw) and checks what RabbitMQ checks there: a frame for another
class is 505 UNEXPECTED_FRAME (a connection error, raised), a message over the size limit, a
user_id that is not the publisher's or a bad expiration are 406 (channel errors, returned).
`PendingPublish.add_body` collects body frames until ``body_size`` bytes arrived; more is 505.
When complete, `PendingPublish.message` builds the `Message`, which `route_and_enqueue`
puts into the queues it routes to (all of them or, when one refuses it, none).
"""

from __future__ import annotations

from collections.abc import Callable

from amqpd.engine.reply_to import REPLY_TO_PREFIX, remote_reply_queue
from amqpd.engine.transaction import BufferedPublish
from amqpd.model.auth import Authz
from amqpd.model.enqueue import enqueue_routed
from amqpd.model.exchange import Exchange
from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.queue_args import parse_expiration
from amqpd.model.replica import has_remote, local_noting_floods
from amqpd.model.vhost import VirtualHost
from amqpd.wire import codec, content_header
from amqpd.wire.errors import PRECONDITION_FAILED, UNEXPECTED_FRAME, AMQPError


class PendingPublish:
    """A basic.publish waiting for its content."""

    __slots__ = (
        "args",
        "exchange",
        "expiration_ms",
        "first_body",
        "header",
        "more_bodies",
        "peek",
        "received",
    )

    def __init__(self, args: codec.PublishArgs, exchange: Exchange) -> None:
        self.args = args
        self.exchange = exchange
        self.header: bytes | None = None
        self.peek: content_header.HeaderPeek | None = None
        # the usual body fits one frame: a list only for the frames after the first
        self.first_body = b""
        self.more_bodies: list[bytes] | None = None
        self.received = 0
        self.expiration_ms: int | None = None

    def add_header(self, payload: bytes, max_size: int, authz: Authz) -> AMQPError | None:
        """Take the content header; return the channel error that refuses the message.

        Raises:
            AMQPError: 505 UNEXPECTED_FRAME for a header of another class.
        """
        peek = content_header.peek_header(payload)
        if peek.class_id != codec.BASIC_CLASS:
            raise AMQPError(
                UNEXPECTED_FRAME,
                f"expected content header for class 60, got one for class {peek.class_id} instead",
                60,
                40,
            )
        if peek.body_size > max_size:
            return AMQPError(
                PRECONDITION_FAILED,
                f"message size {peek.body_size} is larger than configured max size {max_size}",
                60,
                40,
            )
        user_id_error = authz.check_user_id(payload)
        if user_id_error is not None:
            return user_id_error
        if peek.expiration is not None:
            try:
                self.expiration_ms = parse_expiration(peek.expiration)
            except ValueError as exc:
                return AMQPError(PRECONDITION_FAILED, str(exc), 60, 40)
        self.header = payload
        self.peek = peek
        return None

    @property
    def complete(self) -> bool:
        """Whether the header and every body byte arrived."""
        return self.peek is not None and self.received == self.peek.body_size

    def add_body(self, payload: bytes) -> None:
        """Take one body frame.

        Raises:
            AMQPError: 505 UNEXPECTED_FRAME if the body grows past the declared size.
        """
        assert self.peek is not None
        if not self.received:
            self.first_body = payload
        elif self.more_bodies is None:
            self.more_bodies = [payload]
        else:
            self.more_bodies.append(payload)
        self.received += len(payload)
        expected = self.peek.body_size
        if self.received > expected:
            raise AMQPError(
                UNEXPECTED_FRAME,
                f"content body of {self.received} bytes exceeds the declared {expected}",
                60,
                40,
            )

    def message(self) -> Message:
        """The published message (call once `complete`)."""
        peek = self.peek
        assert peek is not None and self.header is not None
        args = self.args
        more = self.more_bodies
        return Message(
            args.exchange,
            args.routing_key,
            args.exchange_raw,
            args.routing_key_raw,
            self.header,
            self.first_body if more is None else b"".join([self.first_body, *more]),
            peek.delivery_mode == 2,
            peek.priority,
            peek.expiration,
            peek.headers_raw,
        )


def route_and_enqueue(
    publish: BufferedPublish,
    vhost: VirtualHost,
    reply_queue: Callable[[str], list[Queue]],
    flow_queues: set[Queue],
) -> list[Queue] | None:
    """Route and enqueue (model/enqueue.py `enqueue_routed`); the queues (empty:
    unroutable), or None if a target queue refused it (x-overflow=reject-publish): then the
    message is in no queue at all, so a nack is truthful. A queue whose consumers fall far
    behind goes into ``flow_queues``: the shell pauses this publisher briefly. A message with
    a delay on an x-delayed-message exchange is held there, routed when the delay ends. In
    a spread vhost the queues may include other workers' (`RemoteQueue`): only the local
    ones are enqueued here."""
    exchange, message = publish.exchange, publish.message
    delayed = exchange.delayed
    if delayed is not None:  # x-delayed-message (amqpd/model/delayed.py)
        delay = delayed.delay(message)
        if delay is not None:
            # mandatory: returned now if nothing would take it now (it is then not held)
            if publish.mandatory and not vhost.route(exchange, message):
                return []
            return delayed.hold(message, delay)
    if exchange.is_default and message.routing_key.startswith(REPLY_TO_PREFIX):
        queues = reply_queue(message.routing_key)  # a direct reply-to address
        if not queues and vhost.replica is not None:  # another worker's (a spread vhost)
            queues = remote_reply_queue(vhost, message.routing_key)
    else:
        queues = vhost.route(exchange, message)
    if not queues:
        return queues
    if vhost.replica is not None and has_remote(queues):
        # a spread vhost (model/replica.py): the caller forwards the other workers' copies
        here = local_noting_floods(queues, flow_queues)
        if here and not enqueue_routed(
            message, here, publish.expiration_ms, publish.promised, flow_queues
        ):
            return None
        return queues
    if not enqueue_routed(message, queues, publish.expiration_ms, publish.promised, flow_queues):
        return None
    return queues
