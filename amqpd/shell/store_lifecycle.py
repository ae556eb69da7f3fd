"""The store on a running server: open and recover it, commit the journal's batches, watch
free disk space, save the access tables and close it.

Theory of operation. `StoreLifecycle.open` opens the backend through the `StoreRole`
(PostgreSQL: once this node is the active one), loads the access tables (a new data
directory gets its first user), recovers the durable queues and their messages into the
broker and starts a `GroupCommitter` over the broker's journal. From then on the committer
reports each batch: `batch_committed` tells the broker (its confirms go out) and, after every
DISK_CHECK_BYTES written, measures the free space for the disk alarm; `batch_failed` tells
the broker (the store-failing alarm, nacks) and measures at once. Both end with the server's
``after_core`` (wake the writers). `close` drains the committer (unless the node lost its
lock: another node owns the store now) and closes the backend. A memory-only broker has no
store: `open` returns None and `committer` stays None.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from amqpd.model import bounded_json
from amqpd.model.alarms import DISK_CHECK_BYTES
from amqpd.model.auth import DEFAULT_HASHING, AccessState, Permission, User, hash_password
from amqpd.model.broker import Broker
from amqpd.model.definitions import DefinitionsError, import_definitions
from amqpd.model.delayed import STORE_PREFIX
from amqpd.model.global_parameters import ensure_cluster_id
from amqpd.model.queue import HOT_WINDOW
from amqpd.shell.store_io import CountingBodyReader, CountingStore
from amqpd.shell.store_role import StoreRole
from amqpd.shell.streams import StreamFiles
from persistence.backend import BodyReaderPort, StoreBackend
from persistence.errors import StoreError
from persistence.group_commit import GroupCommitter
from persistence.journal import Journal
from persistence.records import Batch

log = logging.getLogger(__name__)


class StoreLifecycle:
    """The server's store: its backend, body reader and group committer, once open."""

    def __init__(
        self,
        broker: Broker,
        journal: Journal | None,
        role: StoreRole,
        streams: StreamFiles,
        data_dir: Path | None,
        default_user: tuple[str, str] | None,
        disk_probe: Callable[[Path], int],
        after_core: Callable[[], None],
    ) -> None:
        self.broker = broker
        self.journal = journal
        self.committer: GroupCommitter | None = None
        self.store: StoreBackend | None = None
        self.body_reader: BodyReaderPort | None = None
        self._role = role
        self._streams = streams
        self._data_dir = data_dir
        self._default_user = default_user
        self._disk_probe = disk_probe
        self._after_core = after_core
        self._unmeasured = 0  # bytes the store wrote since free disk space was measured
        self._last_waiter: object | None = None  # the lone waiter of the last batch (_lone_batch)
        # read what else the store holds before the broker loads it (--workers N: the
        # placement, when the store is PostgreSQL; amqpd/shell/workers/node.py)
        self.before_load: Callable[[StoreBackend], Awaitable[object]] | None = None

    async def open(self) -> StoreBackend | None:
        """Open the store and recover the broker from it (None: memory only)."""
        journal = self.journal
        if journal is None or (self._data_dir is None and not self._role.shared):
            return None
        store = await self._role.open()  # PostgreSQL: once this node is the active one
        started = time.perf_counter()
        try:
            io = self.broker.statistics.store_io  # counted: amqpd/shell/store_io.py
            self.body_reader = CountingBodyReader(store.body_reader(), io)
            self.broker.set_body_loader(self.body_reader)
            if self.before_load is not None:
                await self.before_load(store)
            access_state = await store.load_access()
            if ensure_cluster_id(access_state):  # RabbitMQ makes it at the first boot
                await store.save_access(access_state)
            if store.created and self._default_user is not None:
                access_state = await self._first_user(store, access_state)
            self.broker.load_access(access_state)
            state = await store.load(body_window=HOT_WINDOW, keys_only=STORE_PREFIX)
            queues, messages = self.broker.recover(state)
            del state
        except BaseException:
            await store.close()
            raise
        log.info(
            "recovered %d durable queues and %d persistent messages from %s in %.2f s",
            queues,
            messages,
            store.description,
            time.perf_counter() - started,
        )
        self.committer = GroupCommitter(
            CountingStore(store, self.broker.statistics.store_io),
            journal,
            self._batch_committed,
            self._batch_failed,
            idle=store.reclaim,
            before_apply=self._streams.sync,
            lone=self._lone_batch,
        )
        self.store = store
        return store

    def _lone_batch(self, batch: Batch) -> bool:
        """Whether ``batch`` is a lone round trip's: one channel waits for one confirm or
        tx.commit-ok in it, the same channel as for the batch before. Such a client sends
        nothing until it has its answer, so the store writes the batch without a thread hop
        (persistence/store.py, `INLINE_MAX_ROWS`). Several clients in turn, or one with more
        in flight, gain more from a writer thread: the loop reads on while it writes."""
        waiter = self.broker.batch_waits.lone_waiter(batch.id)
        lone = waiter is not None and waiter is self._last_waiter
        self._last_waiter = waiter
        return lone

    async def _first_user(self, store: StoreBackend, state: AccessState) -> AccessState:
        """A new data directory: RabbitMQ's default_user / default_pass replace guest."""
        assert self._default_user is not None
        name, password = self._default_user
        state.users.pop("guest", None)
        state.permissions.pop(("guest", "/"), None)
        state.users[name] = User(name, hash_password(password), DEFAULT_HASHING, ("administrator",))
        state.permissions[(name, "/")] = Permission()
        await store.save_access(state)
        log.info("created the data directory's first user %r (default_user)", name)
        return state

    def _batch_committed(self, batch: Batch) -> None:
        self.broker.batch_committed(batch.id)
        self._unmeasured += batch.size
        if self._unmeasured >= DISK_CHECK_BYTES:  # the free-space check keeps pace with writes
            self.check_disk()
        self._after_core()

    def _batch_failed(self, batch: Batch, error: StoreError) -> None:
        self.broker.batch_failed(batch.id, error, batch.inserted_queues())
        self.check_disk()  # a full disk: the alarm says so at once
        self._after_core()

    def check_disk(self) -> None:
        """Measure the data directory's free space for the disk alarm (a statvfs call)."""
        self._unmeasured = 0
        data_dir = self._data_dir
        if self.broker.alarms.disk_free_limit is None or data_dir is None:
            return
        try:
            self.broker.disk_free(self._disk_probe(data_dir))
        except OSError as exc:
            log.warning("cannot measure free disk space: %s", exc)

    async def save_access(self) -> None:
        """Persist the broker's definitions tables after everything journaled so far has been
        committed (see `Server.save_access`); memory only: nothing to save.

        Raises:
            StoreError: the store failed (the change stays in effect until a restart).
        """
        store, committer = self.store, self.committer
        if store is None or committer is None:
            return
        broker = self.broker
        await committer.commit_then(lambda: store.save_access(broker.access.state))

    async def import_definitions(
        self,
        path: Path | None,
        store: StoreBackend | None,
        split: Callable[[Any], Any] | None = None,
    ) -> None:
        """Import the definitions file (``--definitions``) and persist its access part
        (``split``: worker 0 of several keeps the part for its own vhosts)."""
        if path is None:
            return
        try:
            data: Any = bounded_json.loads(await anyio.Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise DefinitionsError(f"cannot read definitions file {path}: {exc}") from exc
        if split is not None:
            data = split(data)
        problems: list[str] = []
        counts = import_definitions(self.broker, data, problems)
        for problem in problems:
            log.error("definitions file %s: not applied: %s", path, problem)
        if store is not None:
            await store.save_access(self.broker.access.state)
            if self.committer is not None:
                await self.committer.drain()  # the durable exchanges, queues, bindings
        log.info(
            "imported definitions from %s: %s",
            path,
            ", ".join(f"{count} {section}" for section, count in counts.items()),
        )

    async def close(self, store: StoreBackend, *, lost: bool) -> None:
        """Commit what is journaled (unless ``lost``: another node owns the store now), then
        close the body reader and the store."""
        committer = self.committer
        journal = self.journal
        try:
            if committer is not None and not lost:
                await committer.drain()
        finally:
            if self.body_reader is not None:
                self.body_reader.close()
            await store.close()
        if journal is not None:
            stats = journal.stats
            log.info(
                "store closed: %d batches, %d inserts, %d deletes, %d writes saved by acks "
                "that arrived before their insert was committed",
                stats.batches,
                stats.inserts,
                stats.deletes,
                stats.saved_writes,
            )
