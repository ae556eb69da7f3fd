"""JMS ``QueueBrowser``: look at a queue's messages without consuming them.

Theory of operation
-------------------
Each enumeration (``iter(browser)`` / ``browser.get_enumeration()``) opens its own channel,
so browsing never mixes with the session's acknowledgements, and closes it at the end.

- **amqpd** (capability ``queue_browsing``): ``basic.consume`` with ``x-browse=true``
  (no-ack, and ``x-selector`` when the browser has a selector): the broker sends a copy of
  every ready message that matches, in queue order, then cancels the subscription, which
  ends the enumeration. Nothing changes on the broker: no message is taken, flagged
  redelivered or counted as delivered, and consumers go on receiving meanwhile.
- **Other brokers** (RabbitMQ): AMQP 0-9-1 has no browse. The client takes the queue's
  ready messages with ``basic.get`` (no ack) up to the depth reported by a passive declare,
  then closes the channel, which puts them all back in their original positions: as honest
  as the protocol allows, but consumers cannot get those messages while the browse holds
  them, and the broker flags them redelivered afterwards. A selector is evaluated by the
  client here.

The messages are snapshots: ``acknowledge()`` on them does nothing.
"""

from __future__ import annotations

import queue as queues
from collections.abc import Iterator
from typing import Any, Final

from interop.jms import codec
from interop.jms.channel import ChannelLink, open_channel
from interop.jms.constants import QUEUE_SELECTOR_ARGUMENT
from interop.jms.destinations import Queue
from interop.jms.errors import IllegalStateException, JMSException
from interop.jms.messages import Message
from interop.jms.ports import SessionConnection
from interop.jms.selector import Predicate, compile_selector
from interop.jms.transport import REQUEST_TIMEOUT

__all__ = ["QueueBrowser"]

BROWSE_ARGUMENT: Final = "x-browse"
NOT_FOUND: Final = 404
_END: Final = object()


class _NoAck:
    """A browsed message's handle: there is nothing to acknowledge."""

    def acknowledge(self) -> None:
        return None

    def processing_failed(self) -> None:
        return None


class QueueBrowser:
    """Enumerates a queue's messages without consuming them (JMS ``QueueBrowser``).

    Create it with `Session.create_browser`. Iterating it (or ``get_enumeration()``) takes a
    fresh snapshot each time; it is a context manager.
    """

    def __init__(
        self,
        connection: SessionConnection,
        destination: Queue,
        selector: str | None,
        prefetch: int,
    ) -> None:
        self.queue = destination
        self.message_selector = selector if selector and selector.strip() else None
        self._predicate: Predicate | None = (
            compile_selector(self.message_selector) if self.message_selector else None
        )
        self._connection = connection
        self._prefetch = max(1, prefetch)
        self._closed = False

    def __enter__(self) -> QueueBrowser:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the browser (enumerations already taken stay usable)."""
        self._closed = True

    def __iter__(self) -> Iterator[Message]:
        return iter(self.get_enumeration())

    def get_enumeration(self) -> list[Message]:
        """A snapshot of the queue's messages (that match the selector), in queue order.

        Raises:
            IllegalStateException: the browser is closed.
            JMSException: the broker refused the browse.
        """
        if self._closed:
            raise IllegalStateException("The QueueBrowser is closed")
        transport = self._connection.transport
        link = open_channel(transport)
        try:
            if transport.has_capability("queue_browsing"):
                return self._browse(link)
            return [m for m in self._get_all(link) if self._matches(m)]
        finally:
            link.close()

    # -- amqpd: a browse subscription ---------------------------------------------------------
    def _browse(self, link: ChannelLink) -> list[Message]:
        arrived: queues.SimpleQueue[object] = queues.SimpleQueue()
        tag = "jms-browse"
        link.on_consumer_cancelled = lambda _tag: arrived.put(_END)
        link.on_close = lambda error: arrived.put(error)
        arguments: dict[str, Any] = {BROWSE_ARGUMENT: True}
        if self.message_selector is not None:
            arguments[QUEUE_SELECTOR_ARGUMENT] = self.message_selector
        try:
            link.consume(
                self.queue.name,
                lambda _ch, method, properties, body: arrived.put(
                    self._message(method, properties, body)
                ),
                consumer_tag=tag,
                prefetch=self._prefetch,
                arguments=arguments,
                auto_ack=True,
            )
        except JMSException as exc:
            if exc.reply_code == NOT_FOUND:
                return []  # no such queue: nothing to browse, as in ActiveMQ
            raise
        found: list[Message] = []
        while True:
            try:
                item = arrived.get(timeout=REQUEST_TIMEOUT)
            except queues.Empty:
                raise JMSException(f"browse of {self.queue.name!r} did not finish") from None
            if item is _END:
                return found
            if isinstance(item, JMSException):
                raise item
            assert isinstance(item, Message)
            found.append(item)

    # -- other brokers: basic.get, then give everything back ---------------------------------
    def _get_all(self, link: ChannelLink) -> list[Message]:
        try:
            depth = int(link.queue_declare(self.queue.name, passive=True).message_count)
        except JMSException as exc:
            if exc.reply_code == NOT_FOUND:
                return []
            raise
        found: list[Message] = []
        for _ in range(depth):
            message = link.get(
                self.queue.name,
                lambda method, properties, body: self._message(method, properties, body),
            )
            if message is None:
                break
            found.append(message)
        return found  # closing the channel requeues them, in their original positions

    def _message(self, method: Any, properties: Any, body: bytes) -> Message:
        message = codec.decode(
            method.exchange,
            method.routing_key,
            properties,
            body,
            self._connection.options.topic_exchange,
        )
        redelivered = bool(method.redelivered)
        counter = codec.delivery_counter(properties.headers, redelivered)
        message._set_delivery(_NoAck(), redelivered or counter > 0, counter + 1)
        return message

    def _matches(self, message: Message) -> bool:
        return self._predicate is None or self._predicate(message.get_property)
