"""A JMS message producer.

``send`` sets the JMS headers (destination, delivery mode, priority, message id, timestamp,
expiration) and publishes on the session's channel: to the default exchange for queues (the
queue is declared first, with its dead-letter arguments), to the topic exchange for topics.
Outside a transaction a persistent send waits for the publisher confirm; non-persistent
sends do not wait; asynchronous sends (`interop.jms.completion`) return at once. In a
transacted session nothing is visible before ``commit()``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from interop.jms.completion import CompletionListener, ProducerWindow, as_completion_listener
from interop.jms.constants import DEFAULT_PRIORITY, DeliveryMode
from interop.jms.destinations import Destination
from interop.jms.errors import (
    IllegalStateException,
    InvalidDestinationException,
    MessageFormatException,
)
from interop.jms.messages import BytesMessage, MapMessage, Message, TextMessage
from interop.jms.ports import ProducerSession
from interop.jms.transport import REQUEST_TIMEOUT

__all__ = ["MessageProducer"]

log = logging.getLogger(__name__)


def as_message(body: Message | str | bytes | Mapping[str, Any]) -> Message:
    """A message for ``body``: str -> TextMessage, bytes -> BytesMessage, mapping ->
    MapMessage; a Message is returned as it is."""
    if isinstance(body, Message):
        return body
    if isinstance(body, str):
        return TextMessage(body)
    if isinstance(body, bytes | bytearray | memoryview):
        return BytesMessage(bytes(body))
    if isinstance(body, Mapping):
        return MapMessage(body)
    raise MessageFormatException(f"cannot send a {type(body).__name__}")


def _report(listener: CompletionListener | None, message: Message, done: Future[None]) -> None:
    """Completion thread: tell the listener how the asynchronous send ended."""
    error = done.exception()
    if listener is None:
        if error is not None:
            log.error(
                "asynchronous send of %s failed: %s (give send() a completion_listener to "
                "handle this)",
                message.message_id,
                error,
            )
    elif error is None:
        listener.on_completion(message)
    else:
        listener.on_exception(message, error if isinstance(error, Exception) else Exception(error))


class MessageProducer:
    """Sends messages (JMS ``MessageProducer``); create it with `Session.create_producer`.

    Attributes:
        destination: Default destination, or None (give one to each ``send``).
        delivery_mode: Default PERSISTENT.
        priority: Default 4.
        time_to_live: Seconds; 0 = never expires.
        disable_message_id: Do not generate ``message_id``.
        disable_message_timestamp: Do not set ``timestamp``.
    """

    def __init__(self, session: ProducerSession, destination: Destination | None) -> None:
        self._session = session
        self.destination = destination
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.priority = DEFAULT_PRIORITY
        self.time_to_live = 0.0
        self.disable_message_id = False
        self.disable_message_timestamp = False
        self._closed = False
        self._window = ProducerWindow(session._options.producer_window_size)

    def __enter__(self) -> MessageProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the producer (nothing is buffered, so nothing is lost; the outcome of
        asynchronous sends still reaches their completion listeners). As in JMS 2.0, waits
        until the broker confirmed (or refused) every asynchronous send of this producer."""
        self._closed = True
        if not self._window.wait_empty(REQUEST_TIMEOUT):
            log.warning(
                "producer closed with %d bytes still unconfirmed after %s s",
                self._window.outstanding,
                REQUEST_TIMEOUT,
            )

    def send(
        self,
        message: Message | str | bytes | Mapping[str, Any],
        *,
        destination: Destination | None = None,
        delivery_mode: DeliveryMode | int | None = None,
        priority: int | None = None,
        time_to_live: float | None = None,
        properties: Mapping[str, Any] | None = None,
        completion_listener: CompletionListener | None = None,
    ) -> Message:
        """Send a message (or a str / bytes / mapping body).

        Outside a transaction a persistent send waits for the broker's confirm, unless the
        connection has ``use_async_send`` or a ``completion_listener`` is given (JMS 2.0
        asynchronous send): then it returns at once and the listener's
        ``on_completion(message)`` or ``on_exception(message, exception)`` runs later on the
        session's completion thread, in send order.

        Args:
            message: The message or its body.
            destination: Required when the producer has no destination; refused otherwise.
            delivery_mode: Overrides the producer's default.
            priority: 0-9; overrides the producer's default.
            time_to_live: Seconds (0 = never); overrides the producer's default.
            properties: Added to the message's properties.
            completion_listener: Makes the send asynchronous (see above).

        Returns:
            The sent message, with its JMS headers set.

        Raises:
            InvalidDestinationException: no destination, two destinations, or a wildcard topic.
            MessageFormatException: a value AMQP cannot carry.
            JMSException: the broker refused the message (nack) or the session failed.
        """
        if self._closed:
            raise IllegalStateException("The producer is closed")
        listener = None
        if completion_listener is not None:
            listener = as_completion_listener(completion_listener)
        target = self._target(destination)
        msg = as_message(message)
        mode = DeliveryMode(delivery_mode if delivery_mode is not None else self.delivery_mode)
        level = self.priority if priority is None else priority
        if not 0 <= level <= 9:
            raise MessageFormatException(f"priority must be within 0..9, not {level}")
        ttl = self.time_to_live if time_to_live is None else time_to_live
        now = time.time()
        if properties:
            msg.properties.update(properties)
        msg.destination = target
        msg.delivery_mode = mode
        msg.priority = level
        msg.message_id = None if self.disable_message_id else f"ID:{uuid.uuid4()}"
        msg.timestamp = None if self.disable_message_timestamp else now
        msg.expiration = now + ttl if ttl > 0 else None
        session = self._session
        asynchronous = listener is not None or (
            session._options.use_async_send
            and mode is DeliveryMode.PERSISTENT
            and not session.transacted
        )
        future = session._send(msg, target, ttl, asynchronous=asynchronous, window=self._window)
        if future is not None:
            session._complete(future, lambda: _report(listener, msg, future))
        return msg

    def _target(self, destination: Destination | None) -> Destination:
        if destination is None:
            if self.destination is None:
                raise InvalidDestinationException("no destination: give send() a destination")
            return self.destination
        if self.destination is not None and destination != self.destination:
            raise InvalidDestinationException(
                f"this producer sends to {self.destination}; create an anonymous producer "
                "(create_producer()) to choose the destination per send"
            )
        return destination
