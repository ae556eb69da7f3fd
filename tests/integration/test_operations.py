"""Running amqpd as a service: bad settings, signals, log files and formats (subprocesses)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
DEADLINE = 60.0


def _amqpd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amqpd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--port", "99999"], {}, "--port 99999"),
        ([], {"AMQPD_PORT": "abc"}, "AMQPD_PORT=abc"),
        ([], {"AMQPD_LOG_LEVEL": "VERBOSE"}, "AMQPD_LOG_LEVEL=VERBOSE"),
        ([], {"AMQPD_SYNC": "off"}, "AMQPD_SYNC=off"),
        ([], {"AMQPD_TLS_VERIFY_PEER": "maybe"}, "AMQPD_TLS_VERIFY_PEER=maybe"),
        (["--heartbeat", "-1"], {}, "--heartbeat -1"),
        (["--heartbeat", "70000"], {}, "--heartbeat 70000"),
        (["--max-message-size", "-5"], {}, "--max-message-size -5"),
        (["--connection-max", "-3"], {}, "--connection-max -3"),
        (
            ["--tls-cert", "/nonexistent/server.pem", "--tls-key", "/k"],
            {},
            "/nonexistent/server.pem",
        ),
    ],
)
def test_bad_setting_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    result = _amqpd("--data-dir", str(tmp_path / "data"), *args, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_certificate_that_is_not_pem_is_named(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    key = tmp_path / "key.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    result = _amqpd(
        "--data-dir", str(tmp_path / "d"), "--tls-cert", str(cert), "--tls-key", str(key)
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(cert) in result.stderr and str(key) in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_store_owned_by_another_user_is_refused_at_startup(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = data / "amqpd.sqlite3"
    store.write_bytes(b"")
    os.chown(store, 65534, 65534)
    result = _amqpd("--data-dir", str(data), "--port", "0")
    assert result.returncode == 2
    assert "belongs to uid 65534" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


class Broker:
    """An amqpd subprocess that logs to a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "amqpd.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amqpd",
                "--port",
                "0",
                "--data-dir",
                str(tmp_path / "data"),
                "--log-file",
                str(self.log),
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        match = self.wait_for(LISTENING)
        self.port = int(match.group(1))

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, pattern: re.Pattern[str], path: Path | None = None) -> re.Match[str]:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            text = (path or self.log).read_text() if (path or self.log).exists() else ""
            match = pattern.search(text)
            if match:
                return match
            if self.proc.poll() is not None:
                assert self.proc.stderr is not None
                raise AssertionError(f"amqpd exited: {self.proc.stderr.read()}")
            time.sleep(0.05)
        raise AssertionError(f"{pattern.pattern!r} never appeared in {path or self.log}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    running = Broker(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_sighup_reopens_the_log_file(broker: Broker, tmp_path: Path) -> None:
    rotated = tmp_path / "amqpd.log.1"
    broker.log.rename(rotated)
    broker.proc.send_signal(signal.SIGHUP)
    broker.wait_for(re.compile("reopened the log file"))
    assert broker.proc.poll() is None
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    conn.close()
    broker.wait_for(re.compile("accepting AMQP connection"))
    assert "accepting AMQP connection" not in rotated.read_text()


def test_sighup_without_log_file_is_ignored_and_logged_once(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(tmp_path / "d")],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        port = 0
        for line in proc.stderr:
            match = LISTENING.search(line)
            if match:
                port = int(match.group(1))
                break
        assert port
        for _ in range(3):
            proc.send_signal(signal.SIGHUP)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        conn.close()  # still serving after three SIGHUPs
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) == 0
        assert rest.count("SIGHUP") == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_json_log_format(tmp_path: Path) -> None:
    broker = Broker(tmp_path, "--log-format", "json")
    try:
        lines = [json.loads(line) for line in broker.text().splitlines()]
        assert any("listening on" in item["msg"] for item in lines)
        assert all({"ts", "level", "logger", "msg"} <= item.keys() for item in lines)
    finally:
        assert broker.stop() == 0


def test_default_user_replaces_guest_in_a_new_data_directory(tmp_path: Path) -> None:
    conf = tmp_path / "amqpd.conf"
    conf.write_text("default_user = admin\ndefault_pass = s3cret\nloopback_users = none\n")
    broker = Broker(tmp_path, "--config", str(conf))
    try:
        params = pika.ConnectionParameters(
            "127.0.0.1", broker.port, credentials=pika.PlainCredentials("admin", "s3cret")
        )
        pika.BlockingConnection(params).close()
        guest = pika.ConnectionParameters("127.0.0.1", broker.port)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(guest)
        broker.wait_for(re.compile("user 'admin' authenticated and granted access to vhost '/'"))
    finally:
        assert broker.stop() == 0


def test_client_chosen_names_cannot_forge_or_flood_log_lines(broker: Broker) -> None:
    forged = 'mallory\nts=2026-01-01T00:00:00.000Z level=info logger=amqpd msg="admin ok"'
    for user in (forged, "u" * 3000):  # a Start-Ok must fit frame_min_size (4096) bytes
        params = pika.ConnectionParameters(
            "127.0.0.1",
            broker.port,
            credentials=pika.PlainCredentials(user, "pw"),
            connection_attempts=1,
        )
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(params)
    broker.wait_for(re.compile("uuuu"))
    lines = broker.text().splitlines()
    assert all(line.startswith("ts=") for line in lines)  # no forged line starts mid-way
    assert not any('msg="admin ok"' in line for line in lines)
    assert any("mallory\\nts=" in line for line in lines)
    assert max(len(line) for line in lines) < 1200
    named = pika.ConnectionParameters(
        "127.0.0.1", broker.port, client_properties={"connection_name": "billing\r\nworker"}
    )
    conn = pika.BlockingConnection(named)
    conn.close()
    audit = broker.wait_for(re.compile(r"closing AMQP connection \([^\n]*billing[^\n]*"))
    assert "billing\\r\\nworker, vhost: '/', user: 'guest'): client closed the connection" in (
        audit.group(0)
    )


def test_debug_shows_amqpd_events_not_sqlite_internals(tmp_path: Path) -> None:
    broker = Broker(tmp_path, "--log-level", "debug")
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare("dbg", durable=True)
        channel.basic_publish("", "dbg", b"x", pika.BasicProperties(delivery_mode=2))
        conn.close()
        broker.wait_for(re.compile("closing AMQP connection"))
        loggers = set(re.findall(r"logger=(\S+)", broker.text()))
        assert not any(name.startswith(("aiosqlite", "asyncio")) for name in loggers)
        assert all(name.startswith(("amqpd", "persistence")) for name in loggers), loggers
    finally:
        assert broker.stop() == 0
