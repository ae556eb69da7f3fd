"""JMS messages: ``TextMessage``, ``BytesMessage`` and ``MapMessage``.

A message carries JMS headers as attributes (``message_id``, ``correlation_id``,
``reply_to``, ``priority``, ``expiration``, ``delivery_mode``, ``timestamp``, ``type``,
``redelivered``, ``delivery_count``) and user properties in ``properties``. A received
message is bound to its session: ``acknowledge()`` follows the session's acknowledgement
mode, and ``with message:`` acknowledges on a normal exit (a no-op outside CLIENT and
INDIVIDUAL modes) and, in INDIVIDUAL mode, hands the message back for redelivery when the
block raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol, Self

from interop.jms.constants import DEFAULT_PRIORITY, DeliveryMode
from interop.jms.destinations import Destination

__all__ = ["BytesMessage", "MapMessage", "Message", "TextMessage"]


class AckHandle(Protocol):
    """What a received message needs from its session."""

    def acknowledge(self) -> None:
        """Acknowledge as the session's mode says."""
        ...

    def processing_failed(self) -> None:
        """The ``with`` block raised: redeliver where the mode says so."""
        ...


class Message:
    """A JMS message without a body (base class of the typed messages).

    Attributes:
        properties: User properties (AMQP headers): str, int, float, bool, bytes or None.
        message_id: ``ID:…`` set by ``send`` (None if the producer disables ids).
        correlation_id: Free-form correlation id (request/reply).
        reply_to: Where replies go (a queue or a topic).
        destination: Where the message was sent; set by ``send`` and on receipt.
        delivery_mode: PERSISTENT (default) or NON_PERSISTENT; set by ``send``.
        priority: 0-9, default 4; set by ``send``.
        expiration: Absolute expiry time in epoch seconds, or None (never); set by ``send``.
        timestamp: Send time in epoch seconds (AMQP carries whole seconds).
        type: JMSType (AMQP ``type`` property).
    """

    body: Any = None

    def __init__(
        self,
        *,
        properties: Mapping[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: Destination | None = None,
        type: str | None = None,
    ) -> None:
        self.properties: dict[str, Any] = dict(properties or {})
        self.message_id: str | None = None
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.destination: Destination | None = None
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.priority = DEFAULT_PRIORITY
        self.expiration: float | None = None
        self.timestamp: float | None = None
        self.type = type
        self._redelivered = False
        self._delivery_count = 1
        self._handle: AckHandle | None = None

    # -- delivery state ----------------------------------------------------------------------
    @property
    def redelivered(self) -> bool:
        """JMSRedelivered: the message was delivered before (here or elsewhere)."""
        return self._redelivered

    @property
    def delivery_count(self) -> int:
        """JMSXDeliveryCount: 1 on the first delivery, then one more per redelivery."""
        return self._delivery_count

    def _set_delivery(self, handle: AckHandle, redelivered: bool, delivery_count: int) -> None:
        self._handle = handle
        self._redelivered = redelivered
        self._delivery_count = delivery_count

    # -- acknowledgement -----------------------------------------------------------------------
    def acknowledge(self) -> None:
        """Acknowledge: in CLIENT mode every message the session delivered so far, in
        INDIVIDUAL mode this message only; a no-op in the other modes and for messages that
        were not received.

        Raises:
            IllegalStateException: the session is closed.
        """
        if self._handle is not None:
            self._handle.acknowledge()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is None:
            return
        if exc_type is None:
            self._handle.acknowledge()
        else:
            self._handle.processing_failed()

    # -- properties ----------------------------------------------------------------------------
    def get_property(self, name: str) -> Any:
        """A property or JMS header by its JMS name (as selectors see it), or None."""
        header = _HEADER_LOOKUP.get(name)
        if header is not None:
            return header(self)
        return self.properties.get(name)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} id={self.message_id!r} destination={self.destination!s} "
            f"delivery_count={self.delivery_count} body={self.body!r:.60}>"
        )


def _delivery_mode_name(message: Message) -> str:
    return "PERSISTENT" if message.delivery_mode == DeliveryMode.PERSISTENT else "NON_PERSISTENT"


def _timestamp_ms(message: Message) -> int | None:
    return int(message.timestamp * 1000) if message.timestamp is not None else None


_HEADER_LOOKUP: dict[str, Any] = {
    "JMSDeliveryMode": _delivery_mode_name,
    "JMSPriority": lambda m: m.priority,
    "JMSMessageID": lambda m: m.message_id,
    "JMSTimestamp": _timestamp_ms,
    "JMSCorrelationID": lambda m: m.correlation_id,
    "JMSType": lambda m: m.type,
    "JMSRedelivered": lambda m: m.redelivered,
    "JMSXDeliveryCount": lambda m: m.delivery_count,
}


class TextMessage(Message):
    """A message whose body is text (AMQP ``content_type`` ``text/plain``, UTF-8)."""

    def __init__(self, text: str | None = None, **headers: Any) -> None:
        """Create a text message.

        Args:
            text: The body.
            **headers: ``properties``, ``correlation_id``, ``reply_to``, ``type``.
        """
        super().__init__(**headers)
        self.body: str | None = text

    @property
    def text(self) -> str | None:
        """The body (alias of ``body``)."""
        return self.body

    @text.setter
    def text(self, value: str | None) -> None:
        self.body = value


class BytesMessage(Message):
    """A message whose body is opaque bytes (``application/octet-stream``)."""

    def __init__(self, data: bytes = b"", **headers: Any) -> None:
        """Create a bytes message.

        Args:
            data: The body.
            **headers: ``properties``, ``correlation_id``, ``reply_to``, ``type``.
        """
        super().__init__(**headers)
        self.body: bytes = bytes(data)


class MapMessage(Message):
    """A message whose body is a mapping of names to str, int, float, bool or None (JSON)."""

    def __init__(self, mapping: Mapping[str, Any] | None = None, **headers: Any) -> None:
        """Create a map message.

        Args:
            mapping: The body.
            **headers: ``properties``, ``correlation_id``, ``reply_to``, ``type``.
        """
        super().__init__(**headers)
        self.body: dict[str, Any] = dict(mapping or {})
