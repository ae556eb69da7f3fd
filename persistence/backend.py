"""The store interface the shell uses, and the one place that picks a backend.

Two backends implement :class:`StoreBackend`:

* ``persistence.store.Store``: an SQLite file in the data directory (the default);
* ``persistence.postgres.store.PgStore``: a PostgreSQL database named by a
  ``postgresql://`` URL (``--store``), shared by an active broker and its standbys.

The shell's ``amqpd/shell/store_role.py`` picks one from the ``--store`` setting
(:func:`is_postgres_url`, :func:`parse_store_url`); the server sees only this interface. A
PostgreSQL store is opened only once this node holds the database's lock (see
``persistence/postgres/election.py``).
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

from persistence.access import AccessState
from persistence.errors import StoreError
from persistence.records import Batch, RecoveredState

__all__ = ["BodyReaderPort", "StoreBackend", "is_postgres_url", "parse_store_url"]

POSTGRES_SCHEMES = ("postgresql", "postgres")


class BodyReaderPort(Protocol):
    """Synchronous reads of committed message bodies (the model's ``BodyLoader``) + close."""

    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]: ...

    def read_messages(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, str, str, bytes, bytes]]: ...

    def close(self) -> None: ...


class StoreBackend(Protocol):
    """What the shell and the group committer need of a durable store."""

    @property
    def description(self) -> str:
        """Where the data lives, for logs (a path, or a URL without its password)."""
        ...

    @property
    def created(self) -> bool:
        """Whether opening it created the store (a new data directory or empty database)."""
        ...

    async def reclaim(self) -> bool:
        """One step of idle work giving free space back; True while more remains."""
        ...

    async def apply(self, batch: Batch, *, inline: bool = False) -> None:
        """Write ``batch`` in one transaction, committed before this returns; raise
        :class:`StoreError` if it was not (nothing of it was written)."""
        ...

    async def load(
        self, body_window: int | None = None, messages: bool = True, keys_only: str = ""
    ) -> RecoveredState:
        """Everything stored, from one snapshot (bodies only for the first ``body_window``
        messages of each queue; only the keys of queues named ``keys_only``…)."""
        ...

    async def load_access(self) -> AccessState: ...

    async def save_access(self, state: AccessState) -> None: ...

    def body_reader(self) -> BodyReaderPort:
        """A new synchronous reader of committed bodies, for paging (closed by the caller)."""
        ...

    async def close(self) -> None: ...


def is_postgres_url(setting: str | None) -> bool:
    """Whether ``setting`` (``--store``) names a PostgreSQL database."""
    return bool(setting) and urlsplit(str(setting)).scheme in POSTGRES_SCHEMES


def parse_store_url(setting: str) -> str:
    """Check a ``--store`` value; returns it unchanged if it is a usable PostgreSQL URL.

    Raises:
        StoreError: It is not ``postgresql://[user[:password]@]host[:port]/database``.
    """
    try:
        parts = urlsplit(setting)
        bad_port = parts.port == 0  # .port raises ValueError on a port that is not a number
    except ValueError as exc:
        raise StoreError(f"bad --store URL {redact(setting)!r}: {exc}") from None
    if parts.scheme not in POSTGRES_SCHEMES:
        raise StoreError(
            f"bad --store {redact(setting)!r}: expected postgresql://user@host:port/database "
            "(or leave it unset for the SQLite store in --data-dir)"
        )
    if not parts.hostname and "host=" not in parts.query:
        raise StoreError(f"bad --store URL {redact(setting)!r}: it names no host")
    if not parts.path.strip("/"):
        raise StoreError(f"bad --store URL {redact(setting)!r}: it names no database")
    if bad_port:
        raise StoreError(f"bad --store URL {redact(setting)!r}: port 0")
    return setting


def redact(url: str) -> str:
    """``url`` without its password (for logs and error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
