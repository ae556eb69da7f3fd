"""Fields of a request body as RabbitMQ's management API reads them (rabbit_mgmt_util):
booleans may be JSON booleans or the strings "true" / "false" (rabbitmqadmin sends
strings), integers may be strings, ``arguments`` is an object (an empty list is accepted),
and a missing required key is 400 ``[{key_missing,NAME}]``.

Every JSON body is parsed by `parse_json`, which bounds its nesting (model/bounded_json.py):
a deeper document (RabbitMQ accepts any depth) is a 400 with a clear text rather than a
RecursionError in the parser or in whatever walks the value later."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from amqpd.model import bounded_json
from amqpd.model.bounded_json import TOO_DEEP
from amqpd.shell.management.errors import bad_request

SHORTSTR_MAX: Final = 255


def parse_json(raw: bytes, reason: str) -> Any:
    """The JSON value of a request body; 400 ``reason`` if it is not JSON, 400 ``JSON
    nested deeper than 100 levels`` past `bounded_json.MAX_DEPTH`."""
    try:
        return bounded_json.loads(raw)
    except UnicodeDecodeError as exc:
        raise bad_request(reason) from exc
    except ValueError as exc:
        raise bad_request(TOO_DEEP if str(exc) == TOO_DEEP else reason) from exc


def require(body: Mapping[str, Any], *keys: str) -> None:
    """400 naming every missing key, as RabbitMQ does."""
    missing = [key for key in keys if key not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{key}}}" for key in missing) + "]")


def boolean(body: Mapping[str, Any], key: str, default: bool) -> bool:
    """A boolean field (400 ``["not_boolean", value]`` otherwise)."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise bad_request(["not_boolean", value])


def integer(body: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    """An integer field (400 ``["not_integer", value]`` otherwise)."""
    value = body.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise bad_request(["not_integer", value])
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise bad_request(["not_integer", value]) from exc


def text(body: Mapping[str, Any], key: str, default: str = "") -> str:
    """A string field (numbers are taken as their text)."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise bad_request(["not_string", value])


def shortstr(value: str, what: str) -> str:
    """A name or routing key that AMQP can carry (a shortstr: at most 255 UTF-8 bytes)."""
    if len(value.encode("utf-8")) > SHORTSTR_MAX:
        raise bad_request(f"{what} is longer than {SHORTSTR_MAX} bytes")
    return value


def arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``arguments`` field table."""
    value = body.get("arguments")
    if value is None or value == [] or value == "":
        return {}
    if not isinstance(value, Mapping):
        raise bad_request(["not_a_table", value])
    return {str(key): item for key, item in value.items()}
