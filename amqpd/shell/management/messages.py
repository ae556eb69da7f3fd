"""Messages in the management API's JSON: the body of ``POST .../publish`` turned into a
content header and payload, and a message taken by ``POST .../get`` turned into RabbitMQ's
item ``{payload_bytes, redelivered, exchange, routing_key, message_count, properties,
payload, payload_encoding}``.

Properties use RabbitMQ's JSON names (``type`` for the AMQP ``type`` property,
``timestamp`` in seconds); a message without properties shows ``"properties": []``, as
RabbitMQ renders an empty Erlang list.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import math
from collections.abc import Mapping
from typing import Any, Final

from pamqp import commands as spec
from pamqp.header import ContentHeader

from amqpd.engine.operations import Got
from amqpd.shell.management.errors import bad_request

# RabbitMQ's JSON name -> pamqp's Basic.Properties argument, in RabbitMQ's order
PROPERTY_NAMES: Final = {
    "content_type": "content_type",
    "content_encoding": "content_encoding",
    "headers": "headers",
    "delivery_mode": "delivery_mode",
    "priority": "priority",
    "correlation_id": "correlation_id",
    "reply_to": "reply_to",
    "expiration": "expiration",
    "message_id": "message_id",
    "timestamp": "timestamp",
    "type": "message_type",
    "user_id": "user_id",
    "app_id": "app_id",
    "cluster_id": "cluster_id",
}
_INTEGER_PROPERTIES: Final = frozenset({"delivery_mode", "priority", "timestamp"})


def payload_bytes(payload: Any, encoding: Any) -> bytes:
    """The body a publish request carries (``string``: UTF-8; ``base64``)."""
    if not isinstance(payload, str):
        raise bad_request(["not_string", payload])
    if encoding == "string":
        return payload.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise bad_request(["not_base64", payload]) from exc
    raise bad_request(["unsupported_encoding", encoding])


def content_header(properties: Any, body_size: int) -> bytes:
    """A raw basic content header for RabbitMQ's JSON ``properties``."""
    if isinstance(properties, list) and not properties:
        properties = {}  # what /get shows for "no properties" is accepted back
    if not isinstance(properties, Mapping):
        raise bad_request("properties must be an object")
    arguments: dict[str, Any] = {}
    for name, value in properties.items():
        target = PROPERTY_NAMES.get(name)
        if target is None:
            raise bad_request(["invalid_property", name])
        if value is None:
            continue
        if name in _INTEGER_PROPERTIES:
            try:
                number = int(value)
            except (TypeError, ValueError) as exc:
                raise bad_request(["invalid_property", name, value]) from exc
            value = (
                datetime.datetime.fromtimestamp(number, datetime.UTC)
                if name == "timestamp"
                else number
            )
        elif name == "headers":
            if not isinstance(value, Mapping):
                raise bad_request(["invalid_property", name, value])
            value = dict(value)
        elif not isinstance(value, str):
            value = str(value)
        arguments[target] = value
    try:
        header = ContentHeader(0, body_size, spec.Basic.Properties(**arguments))
        return bytes(header.marshal())
    except Exception as exc:  # pamqp's encoders raise TypeError, ValueError, struct.error
        raise bad_request(["invalid_properties", str(exc)]) from exc


def _json_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def properties_json(header: bytes) -> dict[str, Any] | list[Any]:
    """The properties of a raw content header in RabbitMQ's JSON ([] when there are none)."""
    content = ContentHeader()
    content.unmarshal(header)
    props = content.properties
    out: dict[str, Any] = {}
    for name, attribute in PROPERTY_NAMES.items():
        value = getattr(props, attribute, None)
        if value is None or (name == "cluster_id" and not value):
            continue
        out[name] = _json_value(value)
    return out if out else []


def got_json(got: Got, encoding: str, truncate: int | None) -> dict[str, Any]:
    """One /get item. ``encoding`` auto: text if the (truncated) body is UTF-8, else base64."""
    message = got.message
    body = message.payload
    shown = body[:truncate] if truncate is not None else body
    payload: str | None = None
    if encoding == "auto":
        try:
            payload, kind = shown.decode("utf-8"), "string"
        except UnicodeDecodeError:
            payload = None
    if payload is None:
        payload, kind = base64.b64encode(shown).decode("ascii"), "base64"
    return {
        "payload_bytes": len(body),
        "redelivered": got.redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": got.message_count,
        "properties": properties_json(message.header),
        "payload": payload,
        "payload_encoding": kind,
    }
