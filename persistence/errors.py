"""Errors raised by the persistence layer.

Kept in a module of its own so that pure code (the journal, the broker core) can catch
:class:`StoreError` without importing the SQLite machinery.
"""

from __future__ import annotations

__all__ = ["StoreError"]


class StoreError(Exception):
    """The durable store failed or refused to open.

    Raised by :class:`persistence.store.Store` for every SQLite or operating-system failure
    (the failed batch's transaction is rolled back first) and when a data directory cannot
    be used safely (not SQLite, written by another program, or by a newer amqpd). The
    message always says which file is involved and what the operator can do about it.
    """
