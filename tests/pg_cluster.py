"""A private PostgreSQL cluster for tests, from Debian's ``postgresql`` package.

``initdb`` in a temporary directory (owned by the ``postgres`` system user when the tests run
as root: PostgreSQL refuses to run as root), ``postgres`` on a free port of 127.0.0.1 with
its unix socket in the same directory, trust authentication for the ``postgres`` role.
:meth:`PgCluster.stop` shuts it down (fast mode) and removes the directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.ports import spare_port

_DEADLINE = 120.0


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError(
            "PostgreSQL is not installed: apt-get install postgresql (scripts/test-all does)"
        )
    return Path(found[-1]).parent


class PgCluster:
    """One running PostgreSQL server; ``url(db)`` names a database on it."""

    def __init__(self, fsync: bool = False) -> None:
        self.bin = _bin_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="amqpd-pg-"))
        self._user: dict[str, Any] = {}
        self._databases = 0
        if os.getuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        self.data = self.dir / "data"
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        for _ in range(5):  # a port can be taken between picking and binding it
            self.port = spare_port()
            if self._start(fsync):
                return
        self.stop()
        raise RuntimeError(f"PostgreSQL did not start; see {self.dir / 'postgres.log'}")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.dir,
            **self._user,
        )

    def _start(self, fsync: bool) -> bool:
        log = (self.dir / "postgres.log").open("ab")
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-k",
                str(self.dir),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"fsync={'on' if fsync else 'off'}",
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=log,
            cwd=self.dir,
            **self._user,
        )
        log.close()
        deadline = time.monotonic() + _DEADLINE
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                check=False,
            )
            if ready.returncode == 0:
                return True
            time.sleep(0.1)
        return False

    def new_name(self) -> str:
        """A database name not used yet in this cluster."""
        self._databases += 1
        return f"amqpd_test_{self._databases}"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its URL."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return self.url(name)

    def psql(self, database: str, sql: str) -> str:
        """Run ``sql`` with psql; returns its unaligned output."""
        done = subprocess.run(
            [
                str(self.bin / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-c",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout.strip()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: disconnects clients
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)
