"""RabbitMQ's direct reply-to, one channel's side of it.

An RPC client consumes the pseudo-queue ``amq.rabbitmq.reply-to`` (no-ack, once per
channel): that creates a private reply address ``amq.rabbitmq.reply-to.<random>``, a queue
that is in no vhost's queue table, only in the broker's ``reply_queues``. A request the client
publishes with ``reply_to=amq.rabbitmq.reply-to`` carries that address instead, and a reply
published to it on the default exchange goes straight to the pseudo-queue. Cancelling the
consumer (or closing the channel) retires the address.

In a spread vhost (amqpd/model/replica.py) the address names the worker that holds it
(``amq.rabbitmq.reply-to.<worker>.<random>``, opaque to clients, as RabbitMQ's names its
node), so a reply published on another worker crosses to it (`remote_reply_queue`).
"""

from __future__ import annotations

from typing import Final

from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.replica import RemoteQueue
from amqpd.model.vhost import VirtualHost, generated_name
from amqpd.wire.errors import precondition_failed
from amqpd.wire.properties import REPLY_TO, RawProperties

REPLY_TO_QUEUE: Final = "amq.rabbitmq.reply-to"
REPLY_TO_PREFIX: Final = REPLY_TO_QUEUE + "."


class DirectReplyTo:
    """A channel's direct reply-to address, once it consumes one."""

    __slots__ = ("_reply_queues", "_vhost", "queue")

    def __init__(self, vhost: VirtualHost, reply_queues: dict[str, Queue]) -> None:
        self._vhost = vhost
        self._reply_queues = reply_queues  # the broker's live addresses
        self.queue: Queue | None = None

    def consume(self, no_ack: bool) -> Queue:
        """The pseudo-queue a basic.consume of ``amq.rabbitmq.reply-to`` subscribes to
        (RabbitMQ's rules: in no-ack mode, once per channel)."""
        if not no_ack:
            raise precondition_failed("reply consumer cannot acknowledge")
        if self.queue is not None:
            raise precondition_failed("reply consumer already set")
        replica = self._vhost.replica
        prefix = REPLY_TO_PREFIX if replica is None else f"{REPLY_TO_PREFIX}{replica.worker}."
        name = generated_name(prefix)
        queue = self._vhost.new_queue(name, False, None, False, {})
        self.queue = queue
        self._reply_queues[name] = queue
        return queue

    def rewrite(self, message: Message) -> None:
        """A request carrying reply_to=amq.rabbitmq.reply-to gets this channel's private
        address instead (412 unless the channel consumes it)."""
        props = RawProperties(message.header)
        if props.get_shortstr(REPLY_TO) != REPLY_TO_QUEUE:
            return
        if self.queue is None:
            raise precondition_failed("fast reply consumer does not exist")
        props.set_shortstr(REPLY_TO, self.queue.name)
        message.header = props.encode()

    def retire(self, queue: Queue) -> bool:
        """The consumer of ``queue`` went away: if it is the reply address, retire it."""
        if queue is not self.queue:
            return False
        self.queue = None
        queue.deleted = True
        self._reply_queues.pop(queue.name, None)
        return True


def remote_reply_queue(vhost: VirtualHost, address: str) -> list[Queue]:
    """The direct reply-to address ``address`` of another worker of a spread vhost, as a
    stub to forward the reply to (empty: not another worker's)."""
    replica = vhost.replica
    if replica is None:
        return []
    worker, dot, _token = address[len(REPLY_TO_PREFIX) :].partition(".")
    if not dot or not worker.isdigit() or int(worker) >= replica.workers:
        return []
    owner = int(worker)
    if owner == replica.worker:
        return []  # this worker's, and gone
    return [RemoteQueue(address, vhost.name, owner, False, False, False, {})]
