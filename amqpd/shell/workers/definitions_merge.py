"""One definitions document from a ``--workers N`` node's parts (``amqpd definitions
export``, running or stopped): the access sections come from worker 0, which holds them for
the whole node; each worker adds the topology it holds. And the other way (`split_topology`,
an import): each vhost's exchanges, queues and bindings go to its worker.

A vhost served by one worker (placement.json) has its exchanges, queues and bindings there
only. A spread vhost (``--spread-vhosts``) has its exchanges and bindings on every worker
(replicated) and each queue on the worker that declared it; the placement names one worker
for it too. So each worker's part contributes everything of the vhosts placed on it, and
the queues of any other vhost it holds (which can only be a spread vhost's): each object
once, whether or not the caller knows which vhosts were spread (a stopped node's data
directory does not say).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from amqpd.shell.workers.placement import Placement

TOPOLOGY = ("exchanges", "queues", "bindings")


def keep_topology(document: dict[str, Any], index: int, placement: Placement) -> None:
    """Keep only what worker ``index``'s part contributes to the node's document."""
    for section in TOPOLOGY:
        items = document.get(section) or []
        document[section] = [
            item
            for item in items
            if section == "queues" or placement.owner(item.get("vhost", "/")) == index
        ]


def take_topology(
    document: dict[str, Any], theirs: dict[str, Any], index: int, placement: Placement
) -> None:
    """Add what worker ``index``'s part ``theirs`` contributes to ``document``."""
    keep_topology(theirs, index, placement)
    for section in TOPOLOGY:
        document.setdefault(section, [])
        document[section] = [*document[section], *theirs[section]]


def split_topology(
    data: dict[str, Any], owner: Callable[[str], int]
) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """A definitions document to import: the part for worker 0 (every access section and
    its vhosts' topology), and each other worker's exchanges, queues and bindings (by
    ``owner`` of their vhost)."""
    mine = dict(data)
    theirs: dict[int, dict[str, Any]] = {}
    for section in TOPOLOGY:
        items = data.get(section)
        if not isinstance(items, list):
            continue
        mine[section] = []
        for item in items:
            vhost = item.get("vhost", "/") if isinstance(item, dict) else "/"
            index = owner(str(vhost))
            if index == 0:
                mine[section].append(item)
            else:
                theirs.setdefault(index, {}).setdefault(section, []).append(item)
    return mine, theirs


def summed_imports(outputs: list[str]) -> str:
    """The line each worker's part of an import printed ("Imported 1 users, 0 vhosts,
    ..."), as one line for the whole document: the counts summed."""
    totals: dict[str, int] = {}
    for text in outputs:
        for count, section in re.findall(r"(\d+) (\w+)", text):
            totals[section] = totals.get(section, 0) + int(count)
    return "Imported " + ", ".join(f"{count} {name}" for name, count in totals.items()) + "."
