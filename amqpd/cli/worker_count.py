"""How many worker processes a node starts (``--workers``, docs/multicore.md).

``auto``, the default, is the CPUs this process may use (amqpd/shell/resources.py, as
RabbitMQ starts a scheduler per core), but never fewer than the data directory needs: a
vhost placed on worker K (placement.json) or a queue in worker K's store (``shard-K/``, a
spread vhost's queue declared there) needs K + 1 workers, or it would not be served and
its messages would look lost. So a data directory moved to a smaller machine, or a
container granted fewer CPUs, starts with the workers its data needs. An explicit count
too small for the data is refused, one line naming what lives where (exit 2). With a
PostgreSQL store worker 0 checks once it holds the store (amqpd/shell/workers/node.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from amqpd.cli.shards import shard_indexes
from amqpd.shell import resources
from amqpd.shell.workers import placement
from persistence.sqlite_peek import first_queue

AUTO: Final = 0
"""``--workers auto`` as parsed (amqpd/cli/options.py), resolved by `resolve`."""


def resolve(requested: int, data_dir: Path | None, limit: int) -> int:
    """The worker count to start: ``requested``, or for `AUTO` the CPUs available but at
    least what ``data_dir`` (an SQLite node's; None: PostgreSQL or no store) needs.

    Raises:
        ValueError: an explicit count too small for the data (or an unreadable placement
            record), as the one line to print.
    """
    needed, reason = _needed(data_dir, limit)
    if requested == AUTO:
        return max(resources.available_cpus(), needed)
    if requested < needed:
        raise ValueError(f"{reason}: start with --workers {needed} or more")
    return requested


def _needed(data_dir: Path | None, limit: int) -> tuple[int, str]:
    """The fewest workers serving everything in ``data_dir``, and why (the highest worker
    index holding something, as text)."""
    if data_dir is None or not data_dir.is_dir():
        return 1, ""
    needed, reason = 1, ""
    record = placement.load(data_dir, limit)  # PlacementError: a ValueError
    farthest = max(record.vhosts.items(), key=lambda item: item[1], default=None)
    if farthest is not None and farthest[1] > 0:
        name, index = farthest
        needed = index + 1
        reason = f"vhost '{name}' lives on worker {index} (its data is in shard-{index}/)"
    for index in reversed(shard_indexes(data_dir)):
        if index + 1 <= needed:
            break
        found = first_queue(data_dir / f"shard-{index}")
        if found is not None:
            vhost, name = found
            reason = (
                f"queue '{name}' in vhost '{vhost}' lives on worker {index} "
                f"(its data is in shard-{index}/)"
            )
            return index + 1, reason
    return needed, reason
