"""Topic exchange: wildcard routing through a word trie, with a result cache."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from exchanges.base import Destination
from exchanges.binding_table import Binding
from exchanges.router_base import BindingRouter
from exchanges.topic_trie import TopicTrie

__all__ = ["DEFAULT_CACHE_SIZE", "TopicRouter"]

DEFAULT_CACHE_SIZE = 4096
"""Default number of routing keys whose results a :class:`TopicRouter` remembers."""


class TopicRouter(BindingRouter):
    """Router of ``topic`` exchanges (``*`` = one word, ``#`` = zero or more words).

    Results are cached per routing key in a bounded map (oldest entry evicted
    first); the whole cache is dropped whenever a bind/unbind changes routing.
    """

    type_name: ClassVar[str] = "topic"
    uses_headers = False

    def __init__(self, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        """Create a router with no bindings.

        Args:
            cache_size: Maximum number of cached routing keys; 0 disables caching.

        Raises:
            ValueError: If ``cache_size`` is negative.
        """
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        super().__init__()
        self._trie = TopicTrie()
        self._cache: dict[str, list[Destination]] = {}
        self._cache_size = cache_size

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Return the destinations whose binding keys match ``routing_key``.

        Args:
            routing_key: The message's routing key.
            headers: Ignored.

        Returns:
            A shared list in first-bound order; callers must not mutate it.
        """
        cache = self._cache
        result = cache.get(routing_key)
        if result is not None:
            return result
        result = self._trie.match(routing_key)
        if self._cache_size:
            if len(cache) >= self._cache_size:
                del cache[next(iter(cache))]
            cache[routing_key] = result
        return result

    def _added(self, binding: Binding) -> None:
        if self._trie.add(binding.routing_key, binding.destination):
            self._cache.clear()

    def _removed(self, binding: Binding) -> None:
        if self._trie.remove(binding.routing_key, binding.destination):
            self._cache.clear()
