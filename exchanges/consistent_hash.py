"""``x-consistent-hash`` exchange: RabbitMQ's rabbitmq_consistent_hash_exchange plugin.

Each message goes to exactly one bound destination, chosen by hashing its routing key (or
the header named by the exchange argument ``hash-header``, or the property named by
``hash-property``: ``message_id``, ``correlation_id`` or ``timestamp``) onto a hash ring
(`exchanges.hash_ring`). The binding key is the destination's weight, a positive integer
in decimal: a queue bound with ``"2"`` gets about twice the share of one bound with ``"1"``.
The same key always reaches the same destination while the bindings stay the same, and a
binding added or removed moves only its own share of the keys.

As in the plugin, a destination's share comes from its first binding: a second binding of
the same destination (another weight, or other arguments) is kept and listed but does not
change the ring; if the first one is removed, the remaining one takes over with its weight.
A message without the hashed header or property is hashed as an empty key (all such
messages go to one destination, as the plugin's hash of ``undefined`` does).

Declaration checks (`argument_problem`) and binding checks (`validate_binding`) give the
plugin's 406 texts (measured on RabbitMQ 3.10.8); a non-string ``hash-header`` or
``hash-property``, which crashes the plugin with 541, is refused with 406 here.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Hashable, Mapping
from typing import ClassVar, Final

from exchanges.base import Arguments, Destination, InvalidBinding
from exchanges.binding_table import Binding
from exchanges.hash_ring import HashRing, key_hash
from exchanges.router_base import BindingRouter

__all__ = [
    "HASH_HEADER",
    "HASH_PROPERTIES",
    "HASH_PROPERTY",
    "ConsistentHashRouter",
    "argument_problem",
    "destination_label",
    "erlang_binary",
    "hash_input",
]

HASH_HEADER: Final = "hash-header"
HASH_PROPERTY: Final = "hash-property"
HASH_PROPERTIES: Final = ("correlation_id", "message_id", "timestamp")
_INTEGER: Final = re.compile(r"[+-]?[0-9]+\Z")  # Erlang's list_to_integer/1
_CACHE_LIMIT: Final = 4096  # routing keys remembered (cleared when full or on a change)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def argument_problem(arguments: Arguments | None) -> str | None:
    """The plugin's refusal of an exchange's arguments (a 406 text), or None."""
    args = arguments or {}
    header = args.get(HASH_HEADER)
    prop = args.get(HASH_PROPERTY)
    if header is not None and _text(header) is None:
        return f"Invalid argument '{HASH_HEADER}': must be a string"
    if prop is not None and _text(prop) is None:
        return f"Invalid argument '{HASH_PROPERTY}': must be a string"
    if header is not None and prop is not None:
        return "hash-header and hash-property are mutually exclusive"
    name = _text(prop)
    if name is not None and name not in HASH_PROPERTIES:
        return f"Unsupported property: {name}"
    return None


def erlang_binary(data: bytes) -> str:
    """How Erlang's ``~p`` prints a binary: ``<<"abc">>`` when printable, else bytes."""
    if not data:
        return "<<>>"
    out = []
    for byte in data:
        if byte == 0x22:
            out.append('\\"')
        elif byte == 0x5C:
            out.append("\\\\")
        elif byte in _ESCAPES:
            out.append(_ESCAPES[byte])
        elif 32 <= byte <= 126 or 160 <= byte <= 255:
            out.append(chr(byte))
        else:
            return "<<" + ",".join(str(b) for b in data) + ">>"
    return '<<"' + "".join(out) + '">>'


_ESCAPES: Final = {8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 27: "\\e"}


def parse_weight(routing_key: str) -> int:
    """The weight a binding key stands for.

    Raises:
        InvalidBinding: the plugin's 406 texts for a non-integer or non-positive key.
    """
    if not _INTEGER.match(routing_key):
        shown = erlang_binary(routing_key.encode())
        raise InvalidBinding(f"The binding key must be an integer: {shown}")
    weight = int(routing_key)
    if weight < 1:
        raise InvalidBinding("The binding key must be greater than 0")
    return weight


def destination_label(destination: Destination) -> str:
    """A name for ring points that stays the same across restarts (kind and name)."""
    name = getattr(destination, "name", None)
    if isinstance(name, str):
        return f"{type(destination).__name__}:{name}"
    return repr(destination)


def hash_input(value: object) -> bytes:
    """The bytes hashed for a header or property value (absent: empty)."""
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()


class ConsistentHashRouter(BindingRouter):
    """Router of ``x-consistent-hash`` exchanges (see the module comment).

    ``hash_on`` names the header or property to hash (None: the routing key);
    ``hash_property`` is set when it is a property, which the broker then passes in the
    ``headers`` mapping of `route` under the property's name.
    """

    type_name: ClassVar[str] = "x-consistent-hash"
    uses_headers = False

    def __init__(self, arguments: Arguments | None = None) -> None:
        """Create a router with no bindings, hashing what the exchange's arguments say."""
        super().__init__()
        args = arguments or {}
        header = _text(args.get(HASH_HEADER))
        prop = _text(args.get(HASH_PROPERTY))
        self.hash_property: str | None = prop if header is None else None
        self.hash_on: str | None = header if header is not None else prop
        self.uses_headers = self.hash_on is not None
        self._ring = HashRing()
        self._active: dict[Hashable, Binding] = {}  # destination -> the binding on the ring
        self._targets: dict[Hashable, list[Destination]] = {}  # destination -> [destination]
        self._cache: dict[bytes, list[Destination]] = {}
        # The ring flattened for routing: point positions, and per point its destination as a
        # shared one-element list, plus the first one again (a key after the last point).
        self._positions: list[int] = []
        self._slots: list[list[Destination]] = []

    def validate_binding(self, routing_key: str, arguments: Arguments) -> None:
        """The binding key must be a positive integer (the plugin's checks and texts)."""
        del arguments
        parse_weight(routing_key)

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """The one destination owning the message's key on the ring ([] without bindings).

        Args:
            routing_key: The message's routing key.
            headers: The message headers (or, with ``hash-property``, the property).

        Returns:
            A shared one-element list (or an empty one); callers must not mutate it.
        """
        hash_on = self.hash_on
        if hash_on is None:
            key = routing_key.encode()
        else:
            key = hash_input(headers.get(hash_on) if headers else None)
        cache = self._cache
        found = cache.get(key)
        if found is not None:
            return found
        slots = self._slots
        if not slots:
            return []
        found = slots[bisect_left(self._positions, key_hash(key))]
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = found
        return found

    def _added(self, binding: Binding) -> None:
        destination = binding.destination
        if destination in self._active:
            return  # a second binding of the same destination: ignored, as in the plugin
        self._active[destination] = binding
        self._targets[destination] = [destination]
        label = destination_label(destination)
        self._ring.add(destination, label, parse_weight(binding.routing_key))
        self._changed()

    def _changed(self) -> None:
        ring = self._ring
        targets = self._targets
        slots = [targets[owner] for owner in ring.owners]
        self._positions = ring.positions
        self._slots = [*slots, slots[0]] if slots else []
        self._cache.clear()

    def _removed(self, binding: Binding) -> None:
        destination = binding.destination
        if self._active.get(destination) is not binding:
            return
        del self._active[destination]
        self._ring.remove(destination)
        self._changed()
        del self._targets[destination]
        for other in self._table:  # another binding of it left: it takes over
            if other.destination == destination:
                self._added(other)
                break
