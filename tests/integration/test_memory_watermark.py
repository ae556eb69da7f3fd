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


def _node(pid: int) -> list[int]:
    """The broker's processes: ``pid`` and its children (a --workers node's workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *map(int, children)]


def _resident(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
def test_memory_stays_under_twice_the_watermark_while_publishers_push_eight_times_it(
    tmp_path: Path,
) -> None:
    """Under AMQPD_WORKERS=N (scripts/test-all's workers passes) the node's memory is its
    processes' together, which alone use more than the watermark: the node starts with the
    default watermark and ``amqpd ctl set-vm-memory-high-watermark`` then sets it to what
    they use plus WATERMARK, and the node's peak is the sum of its processes' peaks."""
    data = tmp_path / "data"
    workers = int(os.environ.get("AMQPD_WORKERS") or 1)
    watermark = WATERMARK if workers == 1 else 0  # 0: the default (a fraction), for now
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(data)),
            *(("--vm-memory-high-watermark", str(watermark)) if watermark else ()),
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
        node = _node(proc.pid)
        assert len(node) == (workers + 1 if workers > 1 else 1), node
        if workers > 1:
            watermark = sum(map(_resident, node)) + WATERMARK
            set_it = ("ctl", "set-vm-memory-high-watermark", "absolute", str(watermark))
            command = [sys.executable, "-m", "amqpd", *set_it, "--data-dir", str(data)]
            subprocess.run(command, check=True, capture_output=True, timeout=60)
        alarm = threading.Event()

        def read_log() -> None:
            for line in proc.stderr or ():
                log.append(line)
                if "memory resource limit alarm set" in line:
                    alarm.set()

        reader = threading.Thread(target=read_log, daemon=True)
        reader.start()
        _run_load(port, alarm)
        peak = sum(map(_peak_rss, node))
        assert peak < 2 * watermark, f"peak RSS {peak / MIB:.0f} MiB of {watermark / MIB:.0f}"
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
