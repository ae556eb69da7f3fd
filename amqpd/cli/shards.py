"""A stopped ``--workers N`` node's topology for offline commands.

Worker 0 keeps the access state and its vhosts' topology in the data directory's store;
worker K >= 1 keeps its vhosts' exchanges, queues and bindings (and a spread vhost's
queues it declared) in ``DATA/shard-K`` (amqpd/shell/workers/role.py). ``amqpd
definitions export`` on a stopped node reads every shard, as the running node asks every
worker (amqpd/shell/workers/definitions_merge.py). Only the SQLite layout is read here: a
PostgreSQL store's shards (schemas ``amqpd_shard_K``) are exported by the running node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amqpd.model.admin_commands import AdminError, execute
from amqpd.model.auth import AccessState
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.shell.workers import placement as placements
from amqpd.shell.workers.definitions_merge import keep_topology, take_topology
from persistence.journal import Journal
from persistence.store import Store

SHARD_PREFIX = "shard-"


def shard_indexes(data_dir: Path) -> list[int]:
    """The workers K >= 1 whose stores are in ``data_dir`` (``shard-K``)."""
    found = []
    for path in data_dir.glob(f"{SHARD_PREFIX}*"):
        index = path.name.removeprefix(SHARD_PREFIX)
        if path.is_dir() and index.isdigit() and int(index) >= 1:
            found.append(int(index))
    return sorted(found)


async def export_node(data_dir: Path, access: AccessState, mine: str) -> str:
    """The whole node's definitions: worker 0's document ``mine`` (its access sections
    and topology) with each shard's topology added."""
    indexes = shard_indexes(data_dir)
    try:
        placement = placements.load(data_dir, max(indexes) + 1)
    except placements.PlacementError as exc:
        raise AdminError(str(exc)) from None
    document: dict[str, Any] = json.loads(mine)
    keep_topology(document, 0, placement)
    for index in indexes:
        store = await Store.open(data_dir / f"{SHARD_PREFIX}{index}")
        try:
            broker = Broker(BrokerConfig(), Journal())
            broker.load_access(access)
            broker.recover(await store.load(messages=False))
            theirs = execute(broker, {"group": "definitions", "command": "export"})
        finally:
            await store.close()
        take_topology(document, json.loads(theirs.output), index, placement)
    return json.dumps(document, indent=2)
