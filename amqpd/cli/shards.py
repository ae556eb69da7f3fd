"""A stopped ``--workers N`` node's topology for offline commands.

Worker 0 keeps the access state and its vhosts' topology in the node's own store; worker
K >= 1 keeps its vhosts' exchanges, queues and bindings (and a spread vhost's queues it
declared) in its shard (amqpd/shell/workers/role.py): with the SQLite store the directory
``DATA/shard-K`` (`SqliteShards`), with a PostgreSQL store the schema ``amqpd_shard_K`` of
the same database, under its own advisory lock (amqpd/cli/pg_shards.py). ``amqpd
definitions export`` on a stopped node reads every shard, as the running node asks every
worker (amqpd/shell/workers/definitions_merge.py); ``amqpd definitions import`` writes
each vhost's exchanges, queues and bindings into its worker's shard (worker 0 would only
keep them, unserved); ``amqpd vhosts delete`` deletes the vhost's exchanges, queues and
messages in every shard as well and forgets its placement, in the node's record and in
each worker's copy (SQLite: placement.json in each directory; PostgreSQL: the table
worker_placement in each schema), as the running node does (else the vhost, added again,
would find its old queues).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from amqpd.model.admin_commands import AdminError, Outcome, execute
from amqpd.model.auth import AccessState
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.shell.workers import placement as placements
from amqpd.shell.workers.definitions_merge import (
    keep_topology,
    split_topology,
    summed_imports,
    take_topology,
)
from amqpd.shell.workers.placement import Placement
from persistence.backend import StoreBackend
from persistence.journal import Journal
from persistence.store import Store

SHARD_PREFIX = "shard-"


class NodeShards(Protocol):
    """The stores of a stopped node's workers K >= 1 (none: a node of one process). A
    store, once asked for, stays open (and locked) until `close`."""

    @property
    def indexes(self) -> list[int]:
        """The workers K >= 1 that have a store, ascending."""
        ...

    async def placement(self) -> Placement:
        """The node's placement record (worker 0's), for ``max(indexes) + 1`` workers.

        Raises:
            PlacementError: It is unreadable or does not fit those workers.
        """
        ...

    async def store(self, index: int) -> StoreBackend:
        """Worker ``index``'s store, open.

        Raises:
            StoreError: It cannot be opened (its lock is held: the node runs elsewhere).
        """
        ...

    async def forget(self, vhost: str) -> None:
        """Drop ``vhost`` from the node's placement record and each worker's copy (an
        unreadable one is left for the node to report when it starts)."""
        ...

    async def close(self) -> None:
        """Close the stores opened."""
        ...


def shard_indexes(data_dir: Path) -> list[int]:
    """The workers K >= 1 whose stores are in ``data_dir`` (``shard-K``)."""
    found = []
    for path in data_dir.glob(f"{SHARD_PREFIX}*"):
        index = path.name.removeprefix(SHARD_PREFIX)
        if path.is_dir() and index.isdigit() and int(index) >= 1:
            found.append(int(index))
    return sorted(found)


class SqliteShards:
    """The SQLite layout: worker K's store in ``DATA/shard-K``, the placement in each
    directory's placement.json (worker 0's: the node's)."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._indexes = shard_indexes(data_dir)
        self._stores: dict[int, Store] = {}

    @property
    def indexes(self) -> list[int]:
        return self._indexes

    async def placement(self) -> Placement:
        return placements.load(self._data_dir, max(self._indexes, default=0) + 1)

    async def store(self, index: int) -> StoreBackend:
        found = self._stores.get(index)
        if found is None:
            shard = self._data_dir / f"{SHARD_PREFIX}{index}"
            found = self._stores[index] = await Store.open(shard)
        return found

    async def forget(self, vhost: str) -> None:
        workers = max(self._indexes, default=0) + 1
        shards = [self._data_dir / f"{SHARD_PREFIX}{index}" for index in self._indexes]
        for directory in [self._data_dir, *shards]:
            try:
                placement = placements.load(directory, workers)
            except placements.PlacementError:
                continue  # unreadable: the node says so when it starts
            if placement.forget(vhost):
                placements.save(directory, placement)

    async def close(self) -> None:
        while self._stores:
            await self._stores.popitem()[1].close()


def uses_shards(request: dict[str, Any]) -> bool:
    """Whether ``request`` reads or changes the shards of a --workers node."""
    group, command = request.get("group"), request.get("command")
    return (group == "definitions" and command in ("export", "import")) or removes_topology(request)


def removes_topology(request: dict[str, Any]) -> bool:
    """Whether ``request`` deletes what the shards hold too (a vhost and everything in it)."""
    return (request.get("group"), request.get("command")) == ("vhosts", "delete")


async def _on_shard(store: StoreBackend, access: AccessState, request: dict[str, Any]) -> Outcome:
    """Carry ``request`` out on one shard's store (its topology, with ``access`` as the
    node's access state); what changed is written back."""
    journal = Journal()
    broker = Broker(BrokerConfig(), journal)
    broker.load_access(access)
    broker.recover(await store.load(messages=False))
    outcome = execute(broker, request)
    if outcome.changed:
        batch = journal.take_batch()
        if batch is not None:
            await store.apply(batch)
        await store.save_access(broker.access.state)
    return outcome


async def _placement(shards: NodeShards) -> Placement:
    try:
        return await shards.placement()
    except placements.PlacementError as exc:
        raise AdminError(str(exc)) from None


async def export_node(shards: NodeShards, access: AccessState, mine: str) -> str:
    """The whole node's definitions: worker 0's document ``mine`` (its access sections
    and topology) with each shard's topology added."""
    placement = await _placement(shards)
    document: dict[str, Any] = json.loads(mine)
    keep_topology(document, 0, placement)
    for index in shards.indexes:
        request = {"group": "definitions", "command": "export"}
        theirs = await _on_shard(await shards.store(index), access, request)
        take_topology(document, json.loads(theirs.output), index, placement)
    return json.dumps(document, indent=2)


async def delete_in_shards(
    shards: NodeShards, before: AccessState, request: dict[str, Any]
) -> None:
    """Carry ``request`` (see `removes_topology`) out on every shard's store too, with the
    access state as it was (``before``), and drop the deleted vhost from the placement
    records. Nothing without shards."""
    if not shards.indexes:
        return
    for index in shards.indexes:
        await _on_shard(await shards.store(index), before, request)
    await shards.forget(str(request.get("name")))


async def split_import(
    shards: NodeShards, request: dict[str, Any]
) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """``amqpd definitions import`` on a stopped --workers node: the request for worker 0's
    store (the access sections, its vhosts' topology and that of vhosts not placed yet,
    which a node starting finds there and keeps on worker 0) and each shard's part."""
    document = request.get("definitions")
    if (
        request.get("group") != "definitions"
        or request.get("command") != "import"
        or not isinstance(document, dict)
        or not shards.indexes
    ):
        return request, {}
    placement = await _placement(shards)
    mine, theirs = split_topology(document, placement.owner)
    return {**request, "definitions": mine}, theirs


async def import_in_shards(
    shards: NodeShards, access: AccessState, parts: dict[int, dict[str, Any]], outcome: Outcome
) -> Outcome:
    """Import each shard's part (`split_import`) into its store, the vhosts' access state
    being ``access`` (worker 0's, after its part); the outcome of the whole import."""
    outputs, problems = [outcome.output], list(outcome.problems)
    for index, part in sorted(parts.items()):
        request = {"group": "definitions", "command": "import", "definitions": part}
        done = await _on_shard(await shards.store(index), access, request)
        outputs.append(done.output)
        problems += done.problems
    return Outcome(summed_imports(outputs), changed=True, problems=tuple(problems))
