"""Map JMS messages onto AMQP 0-9-1 properties and bodies, and back.

============================  ==============================================================
JMS                           AMQP
============================  ==============================================================
JMSMessageID                  ``message_id``
JMSCorrelationID              ``correlation_id``
JMSReplyTo                    ``reply_to`` (queue name, or ``topic://name``)
JMSPriority                   ``priority``
JMSDeliveryMode               ``delivery_mode`` (1 non-persistent, 2 persistent)
JMSTimestamp                  ``timestamp`` (whole seconds)
JMSExpiration                 ``expiration`` (TTL in ms, enforced by the broker) and header
                              ``x-jms-expiration`` (absolute, ms; checked by the consumer)
JMSType                       ``type``
JMSRedelivered                ``redelivered`` flag, or a delivery count above 0
JMSXDeliveryCount             header ``x-delivery-count`` + 1 (amqpd, RabbitMQ quorum queues)
properties                    ``headers`` (floats travel as AMQP decimals)
TextMessage                   ``content_type`` ``text/plain``, ``content_encoding`` ``utf-8``
MapMessage                    ``content_type`` ``application/x-jms-map``, JSON body
BytesMessage                  any other content type
============================  ==============================================================

Plain AMQP peers interoperate: a text message is just UTF-8 text, and any delivery decodes
(unknown content types become a BytesMessage).
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pika

from interop.jms.constants import DEFAULT_PRIORITY, DeliveryMode
from interop.jms.destinations import Destination, Queue, Topic, destination_from_address
from interop.jms.errors import MessageFormatException
from interop.jms.messages import BytesMessage, MapMessage, Message, TextMessage

__all__ = [
    "CONNECTION_ID_HEADER",
    "DELIVERY_COUNT_HEADER",
    "EXPIRATION_HEADER",
    "Outgoing",
    "decode",
    "delivery_counter",
    "encode",
]

DELIVERY_COUNT_HEADER: Final = "x-delivery-count"
EXPIRATION_HEADER: Final = "x-jms-expiration"
CONNECTION_ID_HEADER: Final = "x-jms-connection-id"
_INTERNAL: Final = frozenset({DELIVERY_COUNT_HEADER, EXPIRATION_HEADER, CONNECTION_ID_HEADER})
TEXT_TYPE: Final = "text/plain"
MAP_TYPE: Final = "application/x-jms-map"
BYTES_TYPE: Final = "application/octet-stream"
_INT32: Final = 2**31


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One publish: where it goes, the AMQP properties and the body."""

    exchange: str
    routing_key: str
    properties: Any  # pika.BasicProperties
    body: bytes


def _header_value(name: str, value: Any) -> Any:
    if isinstance(value, float):
        try:
            exact = decimal.Decimal(repr(value)).normalize()
        except decimal.InvalidOperation:
            exact = None
        exponent = exact.as_tuple().exponent if exact is not None else None
        if exact is None or not isinstance(exponent, int):
            raise MessageFormatException(f"property {name!r}: {value!r} is not finite")
        digits = -exponent if exponent < 0 else 0
        if digits > 255 or abs(int(exact.scaleb(digits))) >= _INT32:
            raise MessageFormatException(
                f"property {name!r}: {value!r} does not fit an AMQP decimal "
                "(32-bit digits); send it as a string"
            )
        return exact
    if value is None or isinstance(value, str | bytes | bool | int | decimal.Decimal):
        return value
    raise MessageFormatException(
        f"property {name!r}: {type(value).__name__} values are not allowed "
        "(use str, int, float, bool, bytes or None)"
    )


def _body(message: Message) -> tuple[bytes, str, str | None]:
    if isinstance(message, TextMessage):
        return (message.body or "").encode(), TEXT_TYPE, "utf-8"
    if isinstance(message, MapMessage):
        try:
            data = json.dumps(message.body, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise MessageFormatException(f"MapMessage body: {exc}") from None
        return data.encode(), MAP_TYPE, "utf-8"
    if isinstance(message, BytesMessage):
        return message.body, BYTES_TYPE, None
    return b"", BYTES_TYPE, None


def encode(
    message: Message,
    exchange: str,
    routing_key: str,
    *,
    connection_id: str | None = None,
    time_to_live: float = 0.0,
) -> Outgoing:
    """The AMQP publish for ``message`` (its JMS headers must already be set by ``send``).

    Args:
        message: The message; ``expiration`` and ``timestamp`` are read from it.
        exchange: Target exchange ("" for queues).
        routing_key: Queue name or topic name.
        connection_id: Stamped into a header so noLocal subscribers can drop their own.
        time_to_live: Seconds; sets AMQP ``expiration`` so the broker expires it too.

    Raises:
        MessageFormatException: a property or the body cannot be carried.
    """
    headers = {name: _header_value(name, value) for name, value in message.properties.items()}
    if message.expiration is not None:
        headers[EXPIRATION_HEADER] = int(message.expiration * 1000)
    if connection_id is not None:
        headers[CONNECTION_ID_HEADER] = connection_id
    body, content_type, encoding = _body(message)
    properties = pika.BasicProperties(
        content_type=content_type,
        content_encoding=encoding,
        headers=headers or None,
        delivery_mode=int(message.delivery_mode),
        priority=message.priority,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to.address() if message.reply_to is not None else None,
        expiration=str(max(1, round(time_to_live * 1000))) if time_to_live > 0 else None,
        message_id=message.message_id,
        timestamp=int(message.timestamp) if message.timestamp is not None else None,
        type=message.type,
    )
    return Outgoing(exchange, routing_key, properties, body)


def delivery_counter(headers: Mapping[str, Any] | None, redelivered: bool) -> int:
    """Earlier deliveries of a message as the broker reports them.

    ``x-delivery-count`` when present (amqpd on every redelivery, RabbitMQ quorum queues);
    otherwise 1 when the ``redelivered`` flag is set (RabbitMQ classic queues), else 0.
    """
    count = headers.get(DELIVERY_COUNT_HEADER) if headers else None
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return max(count, 1 if redelivered else 0)
    return 1 if redelivered else 0


def _property_value(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _text_of(properties: Any) -> bool:
    content_type = properties.content_type or ""
    return bool(content_type.startswith("text/"))


def decode(
    exchange: str, routing_key: str, properties: Any, body: bytes, topic_exchange: str
) -> Message:
    """Build the JMS message for an AMQP delivery (delivery state is set by the session).

    Args:
        exchange: The exchange the message was published to.
        routing_key: Its routing key.
        properties: ``pika.BasicProperties`` of the delivery.
        body: The body.
        topic_exchange: The exchange JMS topics use (its messages get a Topic destination).
    """
    message: Message
    encoding = properties.content_encoding or "utf-8"
    if properties.content_type == MAP_TYPE:
        try:
            mapping = json.loads(body.decode(encoding))
        except (UnicodeDecodeError, LookupError, ValueError):
            mapping = None
        message = MapMessage(mapping) if isinstance(mapping, dict) else BytesMessage(body)
    elif _text_of(properties):
        try:
            message = TextMessage(body.decode(encoding))
        except (UnicodeDecodeError, LookupError):
            message = BytesMessage(body)
    else:
        message = BytesMessage(body)
    headers = dict(properties.headers or {})
    message.properties = {
        (k.decode() if isinstance(k, bytes) else str(k)): _property_value(v)
        for k, v in headers.items()
        if k not in _INTERNAL
    }
    message.message_id = properties.message_id
    message.correlation_id = properties.correlation_id
    reply_to = properties.reply_to
    message.reply_to = destination_from_address(reply_to) if reply_to else None
    message.destination = _destination(exchange, routing_key, topic_exchange)
    message.delivery_mode = (
        DeliveryMode.PERSISTENT if properties.delivery_mode == 2 else DeliveryMode.NON_PERSISTENT
    )
    message.priority = properties.priority if properties.priority is not None else DEFAULT_PRIORITY
    expiry = headers.get(EXPIRATION_HEADER)
    message.expiration = expiry / 1000 if isinstance(expiry, int) and expiry > 0 else None
    message.timestamp = float(properties.timestamp) if properties.timestamp is not None else None
    message.type = properties.type
    return message


def _destination(exchange: str, routing_key: str, topic_exchange: str) -> Destination | None:
    if exchange == "":
        return Queue(routing_key)
    if exchange == topic_exchange:
        return Topic(routing_key)
    return None
