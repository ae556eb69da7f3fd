"""Exactly once, end to end: the ``amqp`` sink writes into a stream (deterministic message
ids), a streaming query reads the stream into Parquet, the query's process is SIGKILLed in the
middle of a micro-batch and restarted on its checkpoint: every message id is in the Parquet
output exactly once.

Each Spark application runs in its own process (``spark_pipeline_child.py``) so that it can
be killed. The broker kill in the middle of the write is a step of the same test, enabled
where the broker deduplicates the sink's republished messages
(``StreamBroker.can_crash_mid_write``: amqpd once it has streams; not RabbitMQ 3.10).

The Parquet output is read the way Spark reads a file sink's output: only the files its
``_spark_metadata`` log lists (files a killed batch left behind are not part of the output).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")
import pyarrow.parquet as pq

from interop.spark.stream_client import StreamClient
from tests.integration.stream_support import (
    STREAM_BROKERS,
    StreamBroker,
    stream_broker_fixture,
    wait_for_path,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CHILD = Path(__file__).with_name("spark_pipeline_child.py")
ROWS = 20_000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=STREAM_BROKERS)
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StreamBroker]:
    yield from stream_broker_fixture(request, tmp_path_factory.mktemp("broker"))


def _child(*args: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,  # its own process group: the JVM and workers die with it
        )


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 400) -> None:
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = -9
    assert code == 0, f"child exited {code}: {log.read_text(errors='replace')[-3000:]}"


def _stream_end(url: str, stream: str) -> int:
    client = StreamClient(url, 10.0, "test-probe").open()
    try:
        last = client.probe(stream, "last", 2000, 0.5)
    finally:
        client.close()
    return 0 if last is None else last + 1


def _parquet_rows(out: Path) -> list[dict[str, object]]:
    """Rows of the files the sink's metadata log lists (what ``spark.read.parquet`` sees)."""
    listed: set[str] = set()
    for entry in (out / "_spark_metadata").iterdir():
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:  # after the "v1" version line
            listed.add(json.loads(line)["path"])
    rows: list[dict[str, object]] = []
    for path in sorted(listed):
        table = pq.read_table(path.removeprefix("file:"), columns=["message_id", "value"])
        rows.extend(table.to_pylist())
    return rows


def test_kill_the_query_mid_batch_and_restart_every_id_once(
    broker: StreamBroker, tmp_path: Path
) -> None:
    stream = "eo-pipeline"
    broker.declare(stream, **broker.dedup_arguments)
    log = tmp_path / "children.log"

    # 1. the sink writes ROWS rows into the stream (optionally surviving a broker crash)
    writer = _child("write", broker.url, stream, str(ROWS), log=log)
    if broker.can_crash_mid_write:
        deadline_rows = ROWS // 3
        while _stream_end(broker.url, stream) < deadline_rows:
            assert writer.poll() is None, log.read_text(errors="replace")[-3000:]
        broker.crash_and_restart()
    _finish(writer, log)

    # 2. the query reads it into Parquet and is killed in the middle of batch 2
    out, checkpoint, marker = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "marker"
    args = (broker.url, stream, str(out), str(checkpoint), str(marker))
    reader = _child("read", *args, "hang", log=log)
    try:
        wait_for_path(marker, "micro-batch 2 to be running", reader)
        assert (checkpoint / "offsets" / "2").exists()
        assert not (checkpoint / "commits" / "2").exists()  # batch 2: planned, uncommitted
    finally:
        os.killpg(reader.pid, signal.SIGKILL)
        reader.wait()

    # 3. restarted on its checkpoint, it finishes what is there (Trigger.AvailableNow)
    _finish(_child("read", *args, "finish", log=log), log)
    assert (checkpoint / "commits" / "2").exists()

    rows = _parquet_rows(out)
    ids = [row["message_id"] for row in rows]
    assert len(ids) == ROWS and len(set(ids)) == ROWS  # each message id exactly once
    numbers = sorted(json.loads(row["value"])["n"] for row in rows)  # type: ignore[arg-type]
    assert numbers == list(range(ROWS))
