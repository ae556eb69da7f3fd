"""A look into a stopped (or running) SQLite store without opening it as a store: no lock,
no migration, read-only. ``amqpd`` asks it, before starting its workers, whether a worker's
store it would not start still holds a queue (amqpd/cli/worker_count.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from persistence.schema import DB_FILENAME


def first_queue(data_dir: Path) -> tuple[str, str] | None:
    """One queue (vhost, name) the store in ``data_dir`` holds; None if it holds none, has
    no store file, or the file cannot be read as one (the store reports that when opened)."""
    path = data_dir / DB_FILENAME
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = db.execute("SELECT vhost, name FROM queues ORDER BY id LIMIT 1").fetchone()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    return None if row is None else (str(row[0]), str(row[1]))
