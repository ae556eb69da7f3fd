"""What a header-reading router sees of a message.

Routers (exchanges/) get a message's routing key and, when ``uses_headers`` is set, a
mapping of its headers. An ``x-consistent-hash`` exchange declared with ``hash-property``
hashes a basic property instead (``message_id``, ``correlation_id``, ``timestamp``); its
router says which in ``hash_property``, and gets a one-entry mapping with that property's
value (the timestamp as its decimal digits, as the plugin hashes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from amqpd.model.message import Message
from amqpd.wire.properties import RawProperties
from exchanges.base import Router

__all__ = ["router_headers"]

_PROPERTY_BITS: Final = {"correlation_id": 10, "message_id": 7, "timestamp": 6}


def router_headers(router: Router, message: Message) -> Mapping[str, object] | None:
    """The ``headers`` argument of ``router.route`` for ``message``."""
    name = getattr(router, "hash_property", None)
    if name is None:
        return message.headers
    bit = _PROPERTY_BITS.get(name)
    if bit is None:
        return None
    raw = RawProperties(message.header).fields.get(bit)
    if raw is None:
        return None
    if name == "timestamp":
        return {name: str(int.from_bytes(raw, "big"))}
    return {name: raw[1:]}
