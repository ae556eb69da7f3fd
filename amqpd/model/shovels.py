"""Dynamic shovel definitions, as RabbitMQ 3.10's shovel plugin validates them (pure).

A dynamic shovel is the runtime parameter ``shovel`` (vhost-scoped, a JSON object):
``src-uri`` and ``dest-uri`` (a URI or a list of them), ``src-queue`` or ``src-exchange`` +
``src-exchange-key``, ``dest-queue`` or ``dest-exchange`` + ``dest-exchange-key``,
``ack-mode`` (on-confirm | on-publish | no-ack), ``src-prefetch-count`` (1000),
``src-delete-after`` (never | queue-length | N), ``reconnect-delay`` (1 s),
``add-forward-headers``, ``add-timestamp-header``, ``publish-properties``,
``src-protocol`` / ``dest-protocol`` (amqp091; RabbitMQ's amqp10 is refused here).
`validate` returns RabbitMQ's error texts (``rabbit_shovel_parameters`` and
``rabbit_parameter_validation``) and `parse` turns a valid value into a `ShovelSpec`, which
the shell's links (amqpd/shell/links/) run. Nothing here connects anywhere: the model only
stores and checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from amqpd.model.policies import erlang_term

__all__ = [
    "ACK_MODES",
    "ShovelSpec",
    "boolean_error",
    "number_error",
    "parse",
    "redact_uri",
    "uri_error",
    "validate",
]

ACK_MODES: Final = ("no-ack", "on-publish", "on-confirm")
_PROTOCOLS: Final = ("amqp10", "amqp091")
DEFAULT_PREFETCH: Final = 1000
DEFAULT_RECONNECT_DELAY: Final = 1.0

_Check = Callable[[str, Any], "str | None"]


@dataclass(slots=True, frozen=True)
class ShovelSpec:
    """A valid shovel, as the link runs it."""

    vhost: str
    name: str
    src_uris: tuple[str, ...]
    dest_uris: tuple[str, ...]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = ""
    src_queue_args: Mapping[str, Any] | None = None
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    dest_queue_args: Mapping[str, Any] | None = None
    ack_mode: str = "on-confirm"
    prefetch_count: int = DEFAULT_PREFETCH
    delete_after: str | int = "never"
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: Mapping[str, Any] | None = None  # set on every shovelled message


def _binary(key: str, value: Any) -> str | None:
    if isinstance(value, str):
        return None
    return f"{key} should be a string, actually was {erlang_term(value)}"


def number_error(key: str, value: Any) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None
    return f"{key} should be a number, actually was {erlang_term(value)}"


def boolean_error(key: str, value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    return f"{key} should be boolean, actually was {erlang_term(value)}"


def _queue_name(key: str, value: Any) -> str | None:
    if isinstance(value, str) and len(value.encode()) > 255:
        return f"{key} should be less than 255 bytes, actually was {erlang_term(value)}"
    return _binary(key, value)


def _table(key: str, value: Any) -> str | None:
    if isinstance(value, dict):
        return None
    return f"{key} not a list {erlang_term(value)}"


_PROPERTY_CHECKS: Final = {
    **{
        key: "string"
        for key in (
            "content_type",
            "content_encoding",
            "correlation_id",
            "reply_to",
            "expiration",
            "message_id",
            "type",
            "user_id",
            "app_id",
            "cluster_id",
        )
    },
    **{key: "number" for key in ("delivery_mode", "priority", "timestamp")},
}


def _publish_properties(key: str, value: Any) -> str | None:
    """RabbitMQ's validate_properties: known basic properties with the right types."""
    if not isinstance(value, dict):
        return f"{key} not a list {erlang_term(value)}"
    unknown = {name: item for name, item in value.items() if name not in _PROPERTY_CHECKS}
    if unknown:
        return f"Unrecognised terms {erlang_term(unknown)} in {key}"
    for name, item in value.items():
        check = _binary if _PROPERTY_CHECKS[name] == "string" else number_error
        refused = check(name, item)
        if refused is not None:
            return refused
    return None


def _enum(options: tuple[str, ...]) -> _Check:
    shown = erlang_term(list(options))

    def check(key: str, value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{key} should be binary, actually was {erlang_term(value)}"
        if value in options:
            return None
        return f"{key} should be one of {shown}, actually was {erlang_term(value)}"

    return check


def _delete_after(key: str, value: Any) -> str | None:
    if value in ("never", "queue-length") or (
        isinstance(value, int) and not isinstance(value, bool)
    ):
        return None
    return f'{key} should be number, "never" or "queue-length", actually was {erlang_term(value)}'


def uri_error(uri: str) -> str | None:
    """amqp_uri:parse's refusal of one URI, or None."""
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return f'"{uri}" not a valid URI: {{unable_to_parse_uri,"{uri}"}}'
    if ":" not in uri:
        return f'"{uri}" not a valid URI: {{{{unable_to_parse_uri,no_scheme}},"{uri}"}}'
    if parts.scheme not in ("amqp", "amqps"):
        scheme = f'"{parts.scheme}"' if parts.scheme else "[]"
        return f'"{uri}" not a valid URI: {{{{unexpected_uri_scheme,{scheme}}},"{uri}"}}'
    return None


def _uri(key: str, value: Any) -> str | None:
    uris = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        return None
    for uri in uris:
        refused = _binary(key, uri)
        if refused is not None:
            return refused
        refused = uri_error(uri)
        if refused is not None:
            return refused
    return None


_SHOVEL: Final[tuple[tuple[str, _Check, bool], ...]] = (
    ("reconnect-delay", number_error, False),
    ("ack-mode", _enum(ACK_MODES), False),
    ("src-protocol", _enum(_PROTOCOLS), False),
    ("dest-protocol", _enum(_PROTOCOLS), False),
)
_SRC: Final[tuple[tuple[str, _Check, bool], ...]] = (
    ("src-uri", _uri, True),
    ("src-exchange", _binary, False),
    ("src-exchange-key", _binary, False),
    ("src-queue", _binary, False),
    ("src-queue-args", _table, False),
    ("prefetch-count", number_error, False),
    ("src-prefetch-count", number_error, False),
    ("delete-after", _delete_after, False),
    ("src-delete-after", _delete_after, False),
)
_DEST: Final[tuple[tuple[str, _Check, bool], ...]] = (
    ("dest-uri", _uri, True),
    ("dest-exchange", _binary, False),
    ("dest-exchange-key", _binary, False),
    ("dest-queue", _queue_name, False),
    ("dest-queue-args", _table, False),
    ("add-forward-headers", boolean_error, False),
    ("add-timestamp-header", boolean_error, False),
    ("dest-add-forward-headers", boolean_error, False),
    ("dest-add-timestamp-header", boolean_error, False),
    ("publish-properties", _publish_properties, False),
    ("dest-publish-properties", _publish_properties, False),
)


def _both(value: Mapping[str, Any], first: str, second: str) -> int:
    return (first in value) + (second in value)


def validate(name: str, value: Any) -> list[str]:
    """RabbitMQ's refusals of a shovel definition, in its order (empty: valid)."""
    if not isinstance(value, dict):
        return [f"{name} not a list {erlang_term(value)}"]
    errors: list[str] = []
    if _both(value, "src-exchange", "src-queue") == 0:
        errors.append("Must specify 'src-exchange' or 'src-queue'")
    elif _both(value, "src-exchange", "src-queue") == 2:
        errors.append("Cannot specify 'src-exchange' and 'src-queue'")
    delete_after = value.get("src-delete-after", value.get("delete-after"))
    if (
        isinstance(delete_after, int)
        and not isinstance(delete_after, bool)
        and value.get("ack-mode") == "no-ack"
    ):
        errors.append("Cannot specify 'no-ack' and numerical 'delete-after'")
    if _both(value, "dest-exchange", "dest-queue") == 2:
        errors.append("Cannot specify 'dest-exchange' and 'dest-queue'")
    results: list[str] = []
    remainder = dict(value)
    for key, check, mandatory in (*_SHOVEL, *_SRC, *_DEST):
        if key in remainder:
            refused = check(key, remainder.pop(key))
            if refused is not None:
                results.append(refused)
        elif mandatory:
            results.append(f'Key "{key}" not found in {name}')
    results.reverse()  # rabbit_parameter_validation:proplist folds into a list
    if remainder:
        results.insert(0, f"Unrecognised terms {erlang_term(remainder)} in {name}")
    errors += results
    for key in ("src-protocol", "dest-protocol"):
        if value.get(key) == "amqp10" and not errors:
            errors.append(f"{key} amqp10 is not supported by amqpd (amqp091 only)")
    return errors


def _uris(value: Any) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else (value,)


def parse(vhost: str, name: str, value: Mapping[str, Any]) -> ShovelSpec:
    """The `ShovelSpec` of a definition `validate` accepted."""
    prefetch = value.get("src-prefetch-count", value.get("prefetch-count", DEFAULT_PREFETCH))
    forward = value.get("dest-add-forward-headers", value.get("add-forward-headers", False))
    stamp = value.get("dest-add-timestamp-header", value.get("add-timestamp-header", False))
    return ShovelSpec(
        vhost=vhost,
        name=name,
        src_uris=_uris(value["src-uri"]),
        dest_uris=_uris(value["dest-uri"]),
        src_queue=value.get("src-queue"),
        src_exchange=value.get("src-exchange"),
        src_exchange_key=value.get("src-exchange-key", ""),
        src_queue_args=value.get("src-queue-args"),
        dest_queue=value.get("dest-queue"),
        dest_exchange=value.get("dest-exchange"),
        dest_exchange_key=value.get("dest-exchange-key"),
        dest_queue_args=value.get("dest-queue-args"),
        ack_mode=value.get("ack-mode", "on-confirm"),
        prefetch_count=max(0, int(prefetch)),
        delete_after=value.get("src-delete-after", value.get("delete-after", "never")),
        reconnect_delay=float(value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
        add_forward_headers=bool(forward),
        add_timestamp_header=bool(stamp),
        publish_properties=value.get("dest-publish-properties", value.get("publish-properties")),
    )


def redact_uri(uri: str) -> str:
    """A URI without its user and password, as RabbitMQ's shovel status shows it
    (``amqp_uri:remove_credentials``)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
