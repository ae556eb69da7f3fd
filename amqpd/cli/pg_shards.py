"""A stopped ``--workers N`` node's shards in its PostgreSQL store (amqpd/cli/shards.py).

Worker 0 uses the URL's own schema; worker K >= 1 the schema ``amqpd_shard_K`` of the same
database (persistence/postgres/schema.py `shard_url`), under its own advisory lock
(persistence/postgres/election.py `lock_key`). The shards are the schemas of that name the
database has. Each is locked and opened before the command changes anything, so a shard
still held by a worker of a running node refuses the command as a whole. The node's
placement is recorded in worker 0's schema (table worker_placement), each worker's copy in
its own, as the running node keeps them (amqpd/shell/workers/node.py).
"""

from __future__ import annotations

import json

from amqpd.shell.workers.placement import Placement, PlacementError
from persistence.backend import StoreBackend, redact
from persistence.errors import StoreError
from persistence.postgres import election
from persistence.postgres.schema import SHARD_SCHEMA_PREFIX, shard_url
from persistence.postgres.store import PgStore

_SCHEMAS = "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)"


class PgShards:
    """The shards of a node whose worker 0 store, ``node``, is open: the stores ``stores``
    (worker index -> store, each holding its lock). Use `find`."""

    def __init__(self, url: str, node: PgStore, stores: dict[int, PgStore]) -> None:
        self._url = url
        self._node = node
        self._stores = stores

    @classmethod
    async def find(cls, url: str, node: PgStore) -> PgShards:
        """Every shard of the database at ``url``, locked and open.

        Raises:
            StoreError: The database cannot be read, or a shard's lock is held.
        """
        stores: dict[int, PgStore] = {}
        try:
            for index in await _shard_indexes(url):
                stores[index] = await _open_shard(url, index)
        except BaseException:
            for store in stores.values():
                await store.close()
            raise
        return cls(url, node, stores)

    @property
    def indexes(self) -> list[int]:
        return sorted(self._stores)

    async def placement(self) -> Placement:
        document = await self._node.load_placement()
        workers = max(self._stores, default=0) + 1
        if document is None:
            return Placement(workers, fresh=True)
        return _parsed(document, workers)

    async def store(self, index: int) -> StoreBackend:
        found = self._stores.get(index)
        if found is None:  # placed on a worker that never opened its shard
            found = self._stores[index] = await _open_shard(self._url, index)
        return found

    async def forget(self, vhost: str) -> None:
        workers = max(self._stores, default=0) + 1
        for store in [self._node, *self._stores.values()]:
            document = await store.load_placement()
            if document is None:
                continue
            try:
                placement = _parsed(document, workers)
            except PlacementError:
                continue  # unreadable: the node says so when it starts
            if placement.forget(vhost):
                await store.save_placement(json.dumps(placement.to_json()))

    async def close(self) -> None:
        while self._stores:
            await self._stores.popitem()[1].close()


def _parsed(document: str, workers: int) -> Placement:
    """A placement recorded in the store (amqpd/shell/workers/node.py `stored_placement`).

    Raises:
        PlacementError: Not JSON, not a placement, or it does not fit ``workers``.
    """
    try:
        data = json.loads(document)
    except ValueError:
        raise PlacementError("the placement recorded in the store is not JSON") from None
    return Placement.from_json(data, workers, shared=True)


async def open_node_store(url: str) -> PgStore:
    """Worker 0's store (a single process's), under the node's lock.

    Raises:
        StoreError: The lock is held (the active amqpd), or the store fails.
    """
    conn = await election.connect(url)
    try:
        if not await election.try_lock(conn):
            raise StoreError(
                f"{redact(url)} is held by the active amqpd: run the command on its "
                "host (where its admin socket answers)"
            )
        return await PgStore.open(url, conn)
    except BaseException:
        conn.terminate()
        raise


async def _shard_indexes(url: str) -> list[int]:
    """The workers K >= 1 whose schema ``amqpd_shard_K`` the database has."""
    conn = await election.connect(url)
    try:
        rows = await conn.fetch(_SCHEMAS, SHARD_SCHEMA_PREFIX)
    except election.CONNECTION_ERRORS as exc:
        raise StoreError(f"cannot list the schemas of {redact(url)}: {exc}") from exc
    finally:
        conn.terminate()  # read only: nothing to finish
    found = []
    for row in rows:
        index = str(row[0]).removeprefix(SHARD_SCHEMA_PREFIX)
        if index.isdigit() and int(index) >= 1:
            found.append(int(index))
    return sorted(found)


async def _open_shard(url: str, index: int) -> PgStore:
    """Worker ``index``'s store, under its lock (its schema created if missing, as the
    running worker does, amqpd/shell/store_role.py).

    Raises:
        StoreError: The lock is held (a worker of a running node), or the store fails.
    """
    key = election.lock_key(index)
    conn = await election.connect(shard_url(url, index))
    try:
        if not await election.try_lock(conn, key):
            raise StoreError(
                f"worker {index}'s schema {SHARD_SCHEMA_PREFIX}{index} of {redact(url)} is "
                "held by a worker of a running amqpd: run the command on its host (where its "
                "admin socket answers), or stop that worker"
            )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SHARD_SCHEMA_PREFIX}{index}")
        return await PgStore.open(shard_url(url, index), conn, key)
    except election.CONNECTION_ERRORS as exc:
        conn.terminate()
        raise StoreError(f"cannot open worker {index}'s store in {redact(url)}: {exc}") from exc
    except BaseException:
        conn.terminate()
        raise
