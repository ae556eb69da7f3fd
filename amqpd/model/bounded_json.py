"""JSON documents with a bounded nesting depth (pure).

RabbitMQ accepts JSON of any depth. amqpd's parser and everything that walks a decoded
value (validation, copies, the store's encoding) recurse, so a document nested a thousand
levels deep would end in a RecursionError far from where it came in. Every JSON that comes
from outside (a management API body, a definitions file, an admin request) is read with
`loads`, which refuses more than `MAX_DEPTH` levels with a `ValueError` saying so.
"""

from __future__ import annotations

import json
from typing import Any, Final

MAX_DEPTH: Final = 100  # levels; a definitions file needs fewer than 10
TOO_DEEP: Final = f"JSON nested deeper than {MAX_DEPTH} levels"


def _depth_ok(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def loads(text: str | bytes) -> Any:
    """``json.loads`` with the depth bounded.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``), or nested deeper than `MAX_DEPTH`.
    """
    try:
        value = json.loads(text)
    except RecursionError as exc:  # the C parser's own bound (about 1,000 levels)
        raise ValueError(TOO_DEEP) from exc
    if isinstance(value, dict | list) and not _depth_ok(value):
        raise ValueError(TOO_DEEP)
    return value
