"""A stopped ``--workers N`` node's topology for offline commands.

Worker 0 keeps the access state and its vhosts' topology in the data directory's store;
worker K >= 1 keeps its vhosts' exchanges, queues and bindings (and a spread vhost's
queues it declared) in ``DATA/shard-K`` (amqpd/shell/workers/role.py). ``amqpd
definitions export`` on a stopped node reads every shard, as the running node asks every
worker (amqpd/shell/workers/definitions_merge.py); ``amqpd definitions import`` writes
each vhost's exchanges, queues and bindings into its worker's shard (worker 0 would only
keep them, unserved); ``amqpd vhosts delete`` deletes the vhost's exchanges, queues and
messages in every shard as well and forgets its placement, as the running node does (else
the vhost, added again, would find its old queues). Only the SQLite layout is handled
here: a PostgreSQL node's shards (schemas ``amqpd_shard_K``) are changed through the
running node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


async def _on_shard(shard: Path, access: AccessState, request: dict[str, Any]) -> Outcome:
    """Carry ``request`` out on one shard's store (its topology, with ``access`` as the
    node's access state); what changed is written back."""
    store = await Store.open(shard)
    try:
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
    finally:
        await store.close()


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
        shard = data_dir / f"{SHARD_PREFIX}{index}"
        theirs = await _on_shard(shard, access, {"group": "definitions", "command": "export"})
        take_topology(document, json.loads(theirs.output), index, placement)
    return json.dumps(document, indent=2)


def removes_topology(request: dict[str, Any]) -> bool:
    """Whether ``request`` deletes what the shards hold too (a vhost and everything in it)."""
    return (request.get("group"), request.get("command")) == ("vhosts", "delete")


async def delete_in_shards(data_dir: Path, before: AccessState, request: dict[str, Any]) -> None:
    """Carry ``request`` (see `removes_topology`) out on every shard's store too, with the
    access state as it was (``before``), and drop the deleted vhost from the placement
    records (DATA/placement.json and each shard's copy). Nothing without shards."""
    indexes = shard_indexes(data_dir)
    if not indexes:
        return
    shards = [data_dir / f"{SHARD_PREFIX}{index}" for index in indexes]
    for shard in shards:
        await _on_shard(shard, before, request)
    deleted = str(request.get("name"))
    for directory in [data_dir, *shards]:
        try:
            placement = placements.load(directory, max(indexes) + 1)
        except placements.PlacementError:
            continue  # unreadable: the node says so when it starts
        if placement.keep_only({name for name in placement.vhosts if name != deleted}):
            placements.save(directory, placement)


def split_import(
    data_dir: Path, request: dict[str, Any]
) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """``amqpd definitions import`` on a stopped --workers node: the request for worker 0's
    store (the access sections, its vhosts' topology and that of vhosts not placed yet,
    which a node starting finds there and keeps on worker 0) and each shard's part."""
    document = request.get("definitions")
    indexes = shard_indexes(data_dir)
    if request.get("group") != "definitions" or not isinstance(document, dict) or not indexes:
        return request, {}
    try:
        placement = placements.load(data_dir, max(indexes) + 1)
    except placements.PlacementError as exc:
        raise AdminError(str(exc)) from None
    mine, theirs = split_topology(document, placement.owner)
    return {**request, "definitions": mine}, theirs


async def import_in_shards(
    data_dir: Path, access: AccessState, parts: dict[int, dict[str, Any]], outcome: Outcome
) -> Outcome:
    """Import each shard's part (`split_import`) into its store, the vhosts' access state
    being ``access`` (worker 0's, after its part); the outcome of the whole import."""
    outputs, problems = [outcome.output], list(outcome.problems)
    for index, part in sorted(parts.items()):
        shard = data_dir / f"{SHARD_PREFIX}{index}"
        request = {"group": "definitions", "command": "import", "definitions": part}
        done = await _on_shard(shard, access, request)
        outputs.append(done.output)
        problems += done.problems
    return Outcome(summed_imports(outputs), changed=True, problems=tuple(problems))
