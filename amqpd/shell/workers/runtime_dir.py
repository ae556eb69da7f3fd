"""The node's runtime directory: a private temporary directory for the Unix sockets
between the workers, the workers' pid files and the alarm limits changed at run time
(amqpd/shell/workers/role.py). The supervisor makes it at start and removes it when it
stops; a node killed with kill -9 cannot, so each supervisor starting also removes the
directories that killed nodes of the same user left behind: those whose supervisor
(``supervisor.pid``) and workers (``wK.pid``) are all gone, and that are older than
STALE_AFTER (a node starting at this moment has not written its pid yet).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Final

PREFIX: Final = "amqpd-"
SUPERVISOR_PID: Final = "supervisor.pid"
STALE_AFTER: Final = 60.0  # seconds

log = logging.getLogger(__name__)


def create() -> Path:
    """A new runtime directory for this supervisor (stale ones removed first)."""
    remove_stale(Path(tempfile.gettempdir()))
    runtime = Path(tempfile.mkdtemp(prefix=PREFIX))
    (runtime / SUPERVISOR_PID).write_text(str(os.getpid()))
    return runtime


def remove_stale(base: Path) -> int:
    """Remove the runtime directories in ``base`` that no running process of a node uses;
    how many were removed."""
    removed = 0
    now = time.time()
    uid = os.getuid()
    try:
        candidates = [path for path in base.iterdir() if path.name.startswith(PREFIX)]
    except OSError:
        return 0
    for path in candidates:
        try:
            found = path.lstat()  # a link is not followed
            old = now - found.st_mtime >= STALE_AFTER
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != uid or not old:
                continue
            if any(_running(pid_file) for pid_file in path.glob("*.pid")):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    if removed:
        log.info("removed %d runtime directories of nodes that were killed", removed)
    return removed


def _running(pid_file: Path) -> bool:
    """Whether the amqpd process that wrote ``pid_file`` still runs."""
    try:
        pid = int(pid_file.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"amqpd" in command
