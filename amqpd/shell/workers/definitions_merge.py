"""One definitions document from a ``--workers N`` node's parts (``amqpd definitions
export``, running or stopped): the access sections come from worker 0, which holds them for
the whole node; each worker adds the topology it holds.

A vhost served by one worker (placement.json) has its exchanges, queues and bindings there
only. A spread vhost (``--spread-vhosts``) has its exchanges and bindings on every worker
(replicated) and each queue on the worker that declared it; the placement names one worker
for it too. So each worker's part contributes everything of the vhosts placed on it, and
the queues of any other vhost it holds (which can only be a spread vhost's): each object
once, whether or not the caller knows which vhosts were spread (a stopped node's data
directory does not say).
"""

from __future__ import annotations

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
