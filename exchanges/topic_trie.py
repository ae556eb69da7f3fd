"""Word trie matching AMQP topic routing keys against binding keys.

Theory of operation
-------------------
Keys are split on ``"."`` into words, exactly like RabbitMQ: the empty key has
zero words, every other key has ``key.count(".") + 1`` words, and words may be
empty (``"a..b"`` is ``a``, ``""``, ``b``; ``"a."`` is ``a``, ``""``). In a
binding key the words ``*`` (exactly one word, possibly empty) and ``#`` (zero
or more words) are wildcards; in a routing key they are ordinary words.

Each binding key is a path from the root; edges are labelled with words, and
the node at the end of the path holds the destinations bound with that key
(reference-counted, since several bindings may share key and destination).

Matching runs the trie as an NFA over the routing key's words, iteratively,
with a *set* of active nodes (no recursion, no backtracking, so time is
O(words x active nodes) whatever the number of ``#``):

* before each step and at the end, every active node's ``#`` child is added
  (``#`` may match zero words), repeatedly, so chains like ``#.#`` collapse;
* a step on word ``w`` moves each active node to its ``w`` and ``*`` children,
  and a node reached by a ``#`` edge also stays active (``#`` eats ``w``).

The destinations of the nodes active after the last word are merged in
admission order (first bound first) with duplicates dropped. RabbitMQ's own
recursive matcher may report a destination once per matching path and leaves
deduplication to its caller; the resulting set is the same.

Nodes left without bindings or children are pruned on removal, so the trie
never grows beyond the live binding keys.
"""

from __future__ import annotations

from operator import itemgetter

from exchanges.base import Destination
from exchanges.destinations import DestinationSet

__all__ = ["TopicTrie", "split_key"]

_ONE = "*"
_ANY = "#"
_first = itemgetter(0)


def split_key(key: str) -> list[str]:
    """Split a topic routing or binding key into words, as RabbitMQ does.

    Args:
        key: The key.

    Returns:
        The words; ``[]`` for the empty key, otherwise ``key.split(".")``.
    """
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "destinations", "is_any")

    def __init__(self, is_any: bool) -> None:
        self.children: dict[str, _Node] = {}
        self.destinations: DestinationSet | None = None
        # Reached through a "#" edge: may consume any number of further words.
        self.is_any = is_any


class TopicTrie:
    """Trie of topic binding keys mapping to reference-counted destinations."""

    __slots__ = ("_root",)

    def __init__(self) -> None:
        """Create an empty trie."""
        self._root = _Node(is_any=False)

    def add(self, binding_key: str, destination: Destination) -> bool:
        """Take a reference on ``destination`` under ``binding_key``.

        Args:
            binding_key: The binding key (may contain ``*`` and ``#`` words).
            destination: The destination.

        Returns:
            True if routing changed (the destination is new under this key).
        """
        node = self._root
        for word in split_key(binding_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node(is_any=word == _ANY)
            node = child
        if node.destinations is None:
            node.destinations = DestinationSet()
        return node.destinations.add(destination)

    def remove(self, binding_key: str, destination: Destination) -> bool:
        """Drop a reference on ``destination`` under ``binding_key``.

        Args:
            binding_key: The binding key.
            destination: The destination.

        Returns:
            True if routing changed (the destination left this key).
        """
        path: list[tuple[_Node, str]] = []
        node = self._root
        for word in split_key(binding_key):
            child = node.children.get(word)
            if child is None:
                return False
            path.append((node, word))
            node = child
        if node.destinations is None or not node.destinations.release(destination):
            return False
        if not node.destinations:
            node.destinations = None
        # Prune now-useless nodes bottom-up.
        while path and node.destinations is None and not node.children:
            parent, word = path.pop()
            del parent.children[word]
            node = parent
        return True

    def match(self, routing_key: str) -> list[Destination]:
        """Find the destinations whose binding keys match ``routing_key``.

        Args:
            routing_key: The message's routing key (wildcard words are literal).

        Returns:
            Unique destinations in first-bound order. The list may be shared
            with a node's snapshot; callers must not mutate it.
        """
        active = _with_any_children([self._root])
        for word in split_key(routing_key):
            stepped: list[_Node] = []
            seen: set[_Node] = set()
            for node in active:
                if node.is_any and node not in seen:
                    seen.add(node)
                    stepped.append(node)
                children = node.children
                if children:
                    for label in (word, _ONE):
                        child = children.get(label)
                        if child is not None and child not in seen:
                            seen.add(child)
                            stepped.append(child)
            if not stepped:
                return []
            active = _with_any_children(stepped, seen)
        return _merge([node.destinations for node in active if node.destinations is not None])


def _with_any_children(nodes: list[_Node], seen: set[_Node] | None = None) -> list[_Node]:
    """Close ``nodes`` (in place) under "follow a ``#`` edge without consuming a word"."""
    if seen is None:
        seen = set(nodes)
    index = 0
    while index < len(nodes):
        child = nodes[index].children.get(_ANY)
        if child is not None and child not in seen:
            seen.add(child)
            nodes.append(child)
        index += 1
    return nodes


def _merge(sets: list[DestinationSet]) -> list[Destination]:
    if not sets:
        return []
    if len(sets) == 1:
        return sets[0].snapshot()
    stamped = sorted((pair for dests in sets for pair in dests.stamped()), key=_first)
    result: list[Destination] = []
    seen: set[Destination] = set()
    for _, destination in stamped:
        if destination not in seen:
            seen.add(destination)
            result.append(destination)
    return result
