"""The shell's side of streams (amqpd/model/stream.py): where their logs live, their fsync
in the group commit, and their closing at shutdown.

Streams live in ``<data dir>/streams/<vhost>/<queue>/`` (persistence/stream/log.py); a
broker without a data directory keeps them in a temporary directory removed at shutdown
(nothing of a memory-only broker survives it). With a store, the group committer calls
`StreamFiles.sync` before it writes each batch: every stream appended to since the last
batch is flushed (``os.write`` on the event loop), its files are fsynced in a worker
thread (one thread hop for all of them), then the model is told how far each log is
durable (deliveries follow). The batch's confirms are sent after that, so a confirm of
a stream message is a promise that the message is on disk. A failed fsync fails the batch
(its confirms are nacked; see persistence/group_commit.py).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from pathlib import Path

import anyio.to_thread

from amqpd.model.broker import Broker
from amqpd.model.stream import StreamLogPort
from persistence.errors import StoreError
from persistence.stream.log import StreamLog, StreamStorage, fsync_all

log = logging.getLogger(__name__)


class StreamFiles:
    """Opens stream logs for the broker and makes them durable for the group committer."""

    def __init__(self, broker: Broker, data_dir: Path | None) -> None:
        self._broker = broker
        self._root = None if data_dir is None else data_dir / "streams"
        self._temporary: Path | None = None  # a memory-only broker's, made on first use
        self._logs: list[StreamLog] = []
        # While the store is recovered, opening a log recovers it; afterwards a stream is
        # new (declared), and files left by one whose declaration never committed go.
        self.recovering = True

    @property
    def storage_root(self) -> Path | None:
        """Where the streams are (None until a memory-only broker opens its first)."""
        return self._root

    def _storage(self) -> StreamStorage:
        root = self._root
        if root is None:
            self._temporary = root = self._root = Path(tempfile.mkdtemp(prefix="amqpd-streams-"))
        return StreamStorage(root)

    def open(self, vhost: str, name: str, max_segment_bytes: int | None) -> StreamLogPort:
        """Open (recovering) or create a stream's log (the model's `StreamLogs`)."""
        self._logs = [stream_log for stream_log in self._logs if not stream_log.closed]
        storage = self._storage()
        directory = storage.directory(vhost, name)
        if not self.recovering and directory.exists():
            log.warning("removing leftover files of a stream never declared: %s", directory)
            shutil.rmtree(directory, ignore_errors=True)
        stream_log = storage.open(vhost, name, max_segment_bytes)
        self._logs.append(stream_log)
        return stream_log

    async def sync(self) -> None:
        """Flush and fsync every stream appended to since the last call, then tell the
        model (see the module docstring).

        Raises:
            StoreError: an fsync or write failed (the batch fails with it).
        """
        dirty = self._broker.dirty_streams
        if not dirty:
            return
        queues = [queue for queue in dirty if not queue.deleted]
        dirty.clear()
        targets = []
        failure: OSError | None = None
        for queue in queues:
            try:
                fds, upto = queue.log.sync_targets()
            except OSError as exc:  # a failed write: this batch's confirms are nacked
                failure = exc
                continue
            targets.append((queue, fds, upto))
        try:
            await anyio.to_thread.run_sync(fsync_all, [fd for _q, fds, _u in targets for fd in fds])
        except OSError as exc:
            raise StoreError(f"cannot write stream files: {exc}") from exc
        for queue, _fds, upto in targets:
            queue.log_synced(upto)
        if failure is not None:
            raise StoreError(f"cannot write stream files: {failure}") from failure

    def close(self) -> None:
        """Make every open stream durable and close it (shutdown)."""
        for stream_log in self._logs:
            if stream_log.closed:
                continue
            try:
                fds, _upto = stream_log.sync_targets()
                fsync_all(fds)
                stream_log.close()
            except OSError as exc:
                log.error("cannot close stream files in %s: %s", stream_log.directory, exc)
        self._logs = []
        if self._temporary is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self._temporary)
