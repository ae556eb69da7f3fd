"""The ``amqpd`` command: options, environment variables, clean shutdown on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
RECOVERED = re.compile(r"recovered (\d+) durable queues and (\d+) persistent messages")
SERVING = re.compile(r"serving with \d+ workers")


def _start(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqpd", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        match = LISTENING.search(line)
        if match:
            return proc, int(match.group(1))
    proc.wait(timeout=10)
    raise AssertionError(f"amqpd exited with {proc.returncode} before listening")


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    data_dir = tmp_path / "data"
    proc, port = _start(["--port", "0", "--data-dir", str(data_dir)])
    try:
        yield proc, port, data_dir
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_help_explains_options_and_variables() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "amqpd", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for option in ("--host", "--port", "--data-dir", "--log-level"):
        assert option in out
    for variable in ("AMQPD_HOST", "AMQPD_PORT", "AMQPD_DATA_DIR", "AMQPD_LOG_LEVEL"):
        assert variable in out


def test_sigterm_closes_connections_with_320(
    broker_process: tuple[subprocess.Popen[str], int, Path],
) -> None:
    proc, port, data_dir = broker_process
    assert data_dir.is_dir()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = conn.channel()
        channel.queue_declare("cli-test")
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            conn.process_data_events(time_limit=10)
            conn.sleep(10)
        assert info.value.reply_code == 320
        assert "CONNECTION_FORCED" in info.value.reply_text
    finally:
        if conn.is_open:
            conn.close()
    assert proc.wait(timeout=10) == 0


def test_environment_variables_configure_the_broker(tmp_path: Path) -> None:
    data_dir = tmp_path / "env-data"
    proc, port = _start([], env={"AMQPD_PORT": "0", "AMQPD_DATA_DIR": str(data_dir)})
    try:
        assert port > 0
        assert data_dir.is_dir()
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        proc.stderr.close()


def test_port_in_use_exits_with_a_clear_message(
    broker_process: tuple[subprocess.Popen[str], int, Path], tmp_path: Path
) -> None:
    _proc, port, _data = broker_process
    result = subprocess.run(
        [sys.executable, "-m", "amqpd", "--port", str(port), "--data-dir", str(tmp_path / "d2")],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode != 0
    assert "--port" in result.stderr


def test_a_data_dir_that_is_not_ours_stops_startup(tmp_path: Path) -> None:
    data_dir = tmp_path / "foreign"
    data_dir.mkdir()
    store_file = data_dir / "amqpd.sqlite3"
    store_file.write_bytes(b"this is not a database" * 100)
    before = store_file.read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "cannot open the store" in result.stderr and "--data-dir" in result.stderr
    assert store_file.read_bytes() == before  # nothing overwritten


def test_startup_reports_what_it_recovered(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc, port = _start(["--port", "0", "--data-dir", str(data_dir)])
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        ch = conn.channel()
        ch.queue_declare("kept", durable=True)
        ch.confirm_delivery()
        for _ in range(7):
            ch.basic_publish("", "kept", b"x", pika.BasicProperties(delivery_mode=2))
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        shutdown_log = proc.stderr.read()
        proc.stderr.close()
    assert "writes saved" in shutdown_log
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(data_dir)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # under AMQPD_WORKERS=N (scripts/test-all's workers passes) each worker recovers its own
    # store and says so: the supervisor's "serving with N workers" follows them all
    workers = int(os.environ.get("AMQPD_WORKERS") or 1)
    try:
        recovered: list[tuple[int, int]] = []
        for line in proc.stderr:
            found = RECOVERED.search(line)
            if found:
                recovered.append((int(found.group(1)), int(found.group(2))))
            if (LISTENING if workers == 1 else SERVING).search(line):
                break
        assert len(recovered) == workers
        assert tuple(map(sum, zip(*recovered, strict=True))) == (1, 7)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        proc.stderr.close()
