"""amqpd/shell/workers/runtime_dir.py: a killed node's runtime directory is removed by the
next supervisor; a running node's, a new one and other files are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqpd.shell.workers import runtime_dir


@pytest.fixture
def running_amqpd() -> Iterator[int]:
    """A process whose command line names amqpd, as a node's processes' do."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "amqpd"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _runtime(base: Path, name: str, pids: dict[str, int], age: float = 3600.0) -> Path:
    path = base / f"{runtime_dir.PREFIX}{name}"
    path.mkdir()
    (path / "w1.forward").write_bytes(b"")  # stands for a socket
    for file_name, pid in pids.items():
        (path / file_name).write_text(str(pid))
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_only_directories_of_nodes_that_are_gone_are_removed(
    tmp_path: Path, running_amqpd: int
) -> None:
    gone = _gone_pid()
    killed = _runtime(tmp_path, "killed", {"supervisor.pid": gone, "w0.pid": gone})
    older_version = _runtime(tmp_path, "older", {"w0.pid": gone})  # no supervisor.pid
    running = _runtime(tmp_path, "running", {"supervisor.pid": running_amqpd, "w0.pid": gone})
    worker_left = _runtime(tmp_path, "worker", {"supervisor.pid": gone, "w1.pid": running_amqpd})
    starting = _runtime(tmp_path, "starting", {}, age=0.0)  # its pid not written yet
    other = tmp_path / "amqpd-notes.txt"
    other.write_text("not a directory")
    another_prefix = tmp_path / "pytest-x"
    another_prefix.mkdir()
    os.utime(another_prefix, (0, 0))

    assert runtime_dir.remove_stale(tmp_path) == 2
    assert not killed.exists() and not older_version.exists()
    assert running.is_dir() and worker_left.is_dir() and starting.is_dir()
    assert other.is_file() and another_prefix.is_dir()


def test_create_writes_the_supervisors_pid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    stale = _runtime(tmp_path, "stale", {"supervisor.pid": _gone_pid()})
    made = runtime_dir.create()
    assert made.parent == tmp_path and made.name.startswith(runtime_dir.PREFIX)
    assert (made / runtime_dir.SUPERVISOR_PID).read_text() == str(os.getpid())
    assert not stale.exists()
