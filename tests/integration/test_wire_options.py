"""``amqpd --server-properties`` and ``--auth-mechanisms``: what Connection.Start announces,
and a bad value is one clear line and exit status 2."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pamqp import commands

from tests.integration.raw_client import RawClient

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


def start_of(
    tmp_path: Path, args: list[str], env: dict[str, str] | None = None
) -> commands.Connection.Start:
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(tmp_path), *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            match = LISTENING.search(line)
            if match:
                break
        else:
            raise AssertionError(f"amqpd exited with {proc.wait(timeout=10)} before listening")
        with RawClient.connect(int(match.group(1))) as client:
            client.send_bytes(b"AMQP\x00\x00\x09\x01")
            start: commands.Connection.Start = client.expect(commands.Connection.Start, channel=0)
        return start
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        proc.stderr.close()


def test_server_properties_and_mechanisms_are_settings(tmp_path: Path) -> None:
    start = start_of(
        tmp_path,
        [
            "--server-properties",
            "product=amqpd;version=0.1.0",
            "--auth-mechanisms",
            "plain",
        ],
    )
    assert start.server_properties["product"] == "amqpd"
    assert start.server_properties["version"] == "0.1.0"
    assert start.server_properties["capabilities"]["consumer_priorities"] is True
    assert start.mechanisms == "PLAIN"
    start = start_of(
        tmp_path, [], env={"AMQPD_SERVER_PROPERTIES": "cluster_name=eu;information=hi"}
    )
    assert start.server_properties["cluster_name"] == "eu"
    assert start.server_properties["information"] == "hi"
    assert start.server_properties["product"] == "RabbitMQ"
    assert start.mechanisms == "AMQPLAIN PLAIN"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--auth-mechanisms", "PLAIN,CRAM-MD5"], ["--auth-mechanisms", "CRAM-MD5"]),
        (["--server-properties", "novalue"], ["--server-properties", "KEY=VALUE"]),
        (["--server-properties", "capabilities=x"], ["capabilities"]),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0]
