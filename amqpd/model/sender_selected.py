"""Sender-selected distribution (RabbitMQ): routing keys in a message's ``CC`` and ``BCC``
headers are routed too, ``BCC`` is removed before delivery, and a CC or BCC that is not an
array is refused at publish. The vhost's routing (model/vhost.py) and dead-lettering
(model/deadletter.py) read the keys; the channel checks the header at publish."""

from __future__ import annotations

from amqpd.model.message import Message
from amqpd.model.queue_args import amqp_type_name
from amqpd.wire.content_header import peek_header
from amqpd.wire.errors import PRECONDITION_FAILED, AMQPError
from amqpd.wire.properties import RawProperties


def has_sender_selected_headers(headers_raw: bytes | None) -> bool:
    """Whether a raw headers table may hold CC or BCC (a cheap byte test, before decoding)."""
    return headers_raw is not None and (b"\x02CC" in headers_raw or b"\x03BCC" in headers_raw)


def sender_selected_error(message: Message) -> AMQPError | None:
    """The 406 RabbitMQ gives at publish for a CC or BCC header that is not an array."""
    headers = message.headers or {}
    for name in ("CC", "BCC"):
        if name in headers and not isinstance(headers[name], list):
            type_name = amqp_type_name(headers[name])
            return AMQPError(
                PRECONDITION_FAILED,
                f'invalid message: {{unacceptable_type_in_header,"{name}",{type_name}}}',
                60,
                40,
            )
    return None


def sender_selected_keys(message: Message, bcc: bool = True) -> list[str]:
    """Routing keys from the CC (and BCC) headers; removes BCC from the message's header."""
    headers = message.headers or {}
    keys: list[str] = []
    for name in ("CC", "BCC") if bcc else ("CC",):
        value = headers.get(name)
        if isinstance(value, list):
            # RabbitMQ routes on the longstr items only (pamqp: str, or bytes if not UTF-8)
            keys += [
                v if isinstance(v, str) else v.decode(errors="replace")
                for v in value
                if isinstance(v, str) or type(v) is bytes
            ]
    if bcc and "BCC" in headers:
        props = RawProperties(message.header)
        props.edit_headers(remove=("BCC",))
        message.header = props.encode()
        message.headers_raw = peek_header(message.header).headers_raw
        message.reset_headers()
    return keys
