"""JMS messages <-> AMQP properties and bodies (interop.jms.codec), without a broker."""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest

from interop.jms import (
    BytesMessage,
    DeliveryMode,
    MapMessage,
    Message,
    MessageFormatException,
    Queue,
    TextMessage,
    Topic,
)
from interop.jms.codec import decode, delivery_counter, encode
from interop.jms.producer import as_message


def wire_roundtrip(properties: Any) -> Any:
    """Encode and decode the properties as they travel in a content header frame."""
    decoded = pika.spec.BasicProperties()
    decoded.decode(b"".join(properties.encode()))
    return decoded


def test_text_message_roundtrip_with_headers() -> None:
    message = TextMessage(
        "héllo",
        properties={"n": 1, "big": 2**40, "f": 2.5, "b": False, "s": "x", "raw": b"\x00"},
        correlation_id="c-1",
        reply_to=Topic("replies.a"),
        type="greeting",
    )
    message.message_id = "ID:42"
    message.timestamp = 1_700_000_000.0
    message.expiration = 1_700_000_060.5
    message.priority = 8
    message.delivery_mode = DeliveryMode.NON_PERSISTENT
    out = encode(message, "", "orders", connection_id="conn-1", time_to_live=60.5)
    props = out.properties
    assert (out.exchange, out.routing_key, out.body) == ("", "orders", "héllo".encode())
    assert (props.content_type, props.content_encoding) == ("text/plain", "utf-8")
    assert (props.delivery_mode, props.priority, props.expiration) == (1, 8, "60500")
    assert (props.reply_to, props.type, props.timestamp) == (
        "topic://replies.a",
        "greeting",
        1_700_000_000,
    )
    back = decode("", "orders", wire_roundtrip(props), out.body, "amq.topic")
    assert isinstance(back, TextMessage) and back.body == "héllo"
    assert back.properties == {"n": 1, "big": 2**40, "f": 2.5, "b": False, "s": "x", "raw": b"\x00"}
    assert (back.message_id, back.correlation_id, back.type) == ("ID:42", "c-1", "greeting")
    assert back.reply_to == Topic("replies.a")
    assert back.destination == Queue("orders")
    assert (back.priority, back.delivery_mode) == (8, DeliveryMode.NON_PERSISTENT)
    assert back.expiration == pytest.approx(1_700_000_060.5)
    assert back.timestamp == 1_700_000_000.0


def test_map_and_bytes_messages() -> None:
    out = encode(MapMessage({"a": 1, "b": [True, None]}), "amq.topic", "t.x")
    back = decode("amq.topic", "t.x", wire_roundtrip(out.properties), out.body, "amq.topic")
    assert isinstance(back, MapMessage) and back.body == {"a": 1, "b": [True, None]}
    assert back.destination == Topic("t.x")
    raw = encode(BytesMessage(b"\xff\x00"), "", "q")
    assert raw.properties.content_type == "application/octet-stream"
    assert isinstance(decode("", "q", raw.properties, raw.body, "amq.topic"), BytesMessage)


def test_plain_amqp_messages_decode() -> None:
    bare = pika.BasicProperties()
    assert isinstance(decode("other", "k", bare, b"\x01", "amq.topic"), BytesMessage)
    text = decode("", "q", pika.BasicProperties(content_type="text/csv"), b"a,b", "amq.topic")
    assert isinstance(text, TextMessage) and text.body == "a,b"
    latin = pika.BasicProperties(content_type="text/plain", content_encoding="latin-1")
    assert decode("", "q", latin, "é".encode("latin-1"), "amq.topic").body == "é"
    broken = decode("", "q", pika.BasicProperties(content_type="text/plain"), b"\xff", "x")
    assert isinstance(broken, BytesMessage)
    message = decode("", "q", bare, b"", "amq.topic")
    assert (message.priority, message.delivery_mode, message.expiration) == (
        4,
        DeliveryMode.NON_PERSISTENT,
        None,
    )


def test_internal_headers_are_not_properties() -> None:
    headers = {"x-delivery-count": 2, "x-jms-connection-id": "c", "x-jms-expiration": 5, "k": 1}
    message = decode("", "q", pika.BasicProperties(headers=headers), b"", "amq.topic")
    assert message.properties == {"k": 1}


def test_delivery_counter_from_broker() -> None:
    assert delivery_counter(None, False) == 0
    assert delivery_counter(None, True) == 1  # RabbitMQ classic queue: only the flag
    assert delivery_counter({"x-delivery-count": 3}, True) == 3  # amqpd / quorum queues
    assert delivery_counter({"x-delivery-count": 0}, False) == 0
    assert delivery_counter({"x-delivery-count": 0}, True) == 1
    assert delivery_counter({"x-delivery-count": "3"}, False) == 0


@pytest.mark.parametrize(
    ("properties", "match"),
    [
        ({"f": 1e300}, "does not fit an AMQP decimal"),
        ({"f": float("nan")}, "not finite"),
        ({"o": object()}, "not allowed"),
        ({"l": [1]}, "not allowed"),
    ],
)
def test_values_amqp_cannot_carry(properties: dict[str, Any], match: str) -> None:
    with pytest.raises(MessageFormatException, match=match):
        encode(TextMessage("x", properties=properties), "", "q")


def test_map_body_must_be_json() -> None:
    with pytest.raises(MessageFormatException, match="MapMessage body"):
        encode(MapMessage({"when": time}), "", "q")


def test_bodies_become_messages() -> None:
    assert isinstance(as_message("t"), TextMessage)
    assert isinstance(as_message(b"b"), BytesMessage)
    assert isinstance(as_message({"k": 1}), MapMessage)
    plain = Message()
    assert as_message(plain) is plain
    with pytest.raises(MessageFormatException):
        as_message(3)  # type: ignore[arg-type]


def test_unreceived_message_acknowledge_and_context_manager_are_no_ops() -> None:
    message = TextMessage("x")
    message.acknowledge()
    with message as same:
        assert same is message
    assert (message.redelivered, message.delivery_count) == (False, 1)
    assert "TextMessage" in repr(message)
