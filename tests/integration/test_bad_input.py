"""Bad input and the messages an operator reads, the way they meet them: a taken HTTP port
names that port, a client gone mid-body is an info line (no traceback), failed logins are
logged at warning (RabbitMQ 3.10.8: ``[error] PLAIN login refused: user 'guest' - invalid
credentials``), a JSON body nested 5,000 levels deep is a 400 (RabbitMQ accepts it; a
RecursionError here was a 500), ``amqpd ctl`` away from the data directory says how to
point it at the broker, and ``management.tcp.ip`` is honoured."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest

from amqpd.model.broker import BrokerConfig
from amqpd.shell.server import ServerConfig, background_server


def _amqpd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amqpd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


@pytest.mark.parametrize(
    ("option", "what"),
    [("--management-port", "the management API"), ("--prometheus-port", "Prometheus")],
)
def test_a_taken_http_port_names_that_port(tmp_path: Path, option: str, what: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _amqpd(
            "--port", "0", "--data-dir", str(tmp_path / "d"), "--management-port", "0",
            "--prometheus-port", "0", option, str(port),
        )  # fmt: skip
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert f"cannot listen for {what} on 127.0.0.1:{port} ({option}): " in last
    assert f"Choose another port with {option}" in last


def test_disconnects_logins_and_deep_json(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    config = ServerConfig(port=0, management_port=0, data_dir=tmp_path)
    with background_server(BrokerConfig(), config) as server:
        with socket.create_connection(("127.0.0.1", server.management_port)) as sock:
            sock.sendall(
                b"POST /api/definitions HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"users":'
            )
        url = f"amqp://guest:wrong@127.0.0.1:{server.port}/%2F"
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.URLParameters(url))
        base = f"http://127.0.0.1:{server.management_port}"
        with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=60) as client:
            deep = "[" * 5000 + "]" * 5000
            answer = client.post(
                "/api/definitions", content=deep, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 400
            assert answer.json()["reason"] == "JSON nested deeper than 100 levels"
            assert client.get("/api/overview", auth=("guest", "nope")).status_code == 401
        deadline = time.monotonic() + 30  # no event to wait on: the log line is the outcome
        while not any("disconnected during" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "no log line for the client that went away"
            time.sleep(0.05)
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    gone = [m for level, m in records if "disconnected during POST /api/definitions" in m]
    assert gone, records
    ours = [r for r in caplog.records if r.name.startswith(("amqpd", "persistence", "uvicorn"))]
    assert not [r for r in ours if r.levelno >= logging.ERROR], records  # pika logs its own
    assert (
        logging.WARNING,
        f"PLAIN login refused from {_peer(records)}: user 'guest' - invalid credentials",
    ) in records
    assert any(
        level == logging.WARNING and m.startswith("HTTP access denied: user 'guest'")
        for level, m in records
    )


def _peer(records: list[tuple[int, str]]) -> str:
    for _level, message in records:
        match = re.match(r"PLAIN login refused from (\S+):", message)
        if match:
            return match.group(1)
    return "?"


def test_ctl_away_from_the_data_directory_says_how_to_point_it(tmp_path: Path) -> None:
    result = _amqpd("ctl", "status", cwd=tmp_path)
    assert result.returncode != 0
    assert "--data-dir DIR or AMQPD_DATA_DIR=DIR" in result.stderr


def test_management_tcp_ip_is_honoured(tmp_path: Path) -> None:
    conf = tmp_path / "amqpd.conf"
    conf.write_text("management.tcp.ip = 127.0.0.2\nmanagement.tcp.port = 0\n")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "amqpd", "--config", str(conf), "--port", "0",
            "--data-dir", str(tmp_path / "d"), "--no-prometheus",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            match = re.search(r"listening for http on (\S+):(\d+)", line)
            if match:
                assert match.group(1) == "127.0.0.2"
                answer = httpx.get(f"http://127.0.0.2:{match.group(2)}/api/overview",
                                   auth=("guest", "guest"), timeout=60)  # fmt: skip
                assert answer.status_code == 200
                break
        else:
            raise AssertionError(f"amqpd exited with {proc.wait()} before listening")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
