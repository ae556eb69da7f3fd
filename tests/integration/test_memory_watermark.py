"""The memory high-watermark with the real measurement (RSS) in a broker subprocess.

Publishers push eight times the watermark through one queue; a consumer starts only once the
broker has blocked them, then drains everything while they keep publishing. The broker's peak
resident set (``VmHWM``) must stay under about twice the watermark, and every message must
arrive.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pika
import pytest

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
MIB = 1024 * 1024
WATERMARK = 96 * MIB
BODY = 64 * 1024
TOTAL = 8 * WATERMARK
PUBLISHERS = 2


def _peak_rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    assert match is not None
    return int(match.group(1)) * 1024


@pytest.mark.slow
def test_memory_stays_under_twice_the_watermark_while_publishers_push_eight_times_it(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "amqpd",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
            "--vm-memory-high-watermark",
            str(WATERMARK),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    assert proc.stderr is not None
    log: list[str] = []
    try:
        port = 0
        for line in proc.stderr:
            log.append(line)
            match = LISTENING.search(line)
            if match:
                port = int(match.group(1))
                break
        assert port, "".join(log)
        alarm = threading.Event()

        def read_log() -> None:
            for line in proc.stderr or ():
                log.append(line)
                if "memory resource limit alarm set" in line:
                    alarm.set()

        reader = threading.Thread(target=read_log, daemon=True)
        reader.start()
        _run_load(port, alarm)
        peak = _peak_rss(proc.pid)
        assert peak < 2 * WATERMARK, f"peak RSS {peak / MIB:.0f} MiB"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stderr is not None:
            proc.stderr.close()


def _run_load(port: int, alarm: threading.Event) -> None:
    params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)
    setup = pika.BlockingConnection(params)
    setup.channel().queue_declare("flood")
    setup.close()
    per_publisher = TOTAL // BODY // PUBLISHERS
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            conn = pika.BlockingConnection(params)
            channel = conn.channel()
            body = b"m" * BODY
            for _ in range(per_publisher):
                channel.basic_publish("", "flood", body)
            conn.close()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=publish, daemon=True) for _ in range(PUBLISHERS)]
    for thread in threads:
        thread.start()
    try:
        assert alarm.wait(timeout=60), "the memory alarm never went off"
        expected = per_publisher * PUBLISHERS
        consumer = pika.BlockingConnection(params)
        try:
            channel = consumer.channel()
            deadline = time.monotonic() + 240
            deliveries = channel.consume("flood", auto_ack=True, inactivity_timeout=30)
            for received, (method, _props, _body) in enumerate(deliveries, 1):
                assert method is not None, f"stalled after {received - 1} of {expected}"
                if received == expected:
                    break
                assert time.monotonic() < deadline
            channel.cancel()
        finally:
            consumer.close()
    finally:
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
