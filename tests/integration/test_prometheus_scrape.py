"""A real Prometheus (Debian's ``prometheus``) scrapes the broker's /metrics and
/metrics/per-object every second; its query API then answers with RabbitMQ's series."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest
from tests.ports import spare_port

pytestmark = pytest.mark.timeout(600)  # several waits, each with its own deadline

PROMETHEUS = "/usr/bin/prometheus"
DEADLINE = 120.0  # seconds: a busy machine, a first scrape, a TSDB head to open


def _config(metrics_port: int) -> str:
    target = f"127.0.0.1:{metrics_port}"
    return (
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: rabbitmq\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
        "  - job_name: rabbitmq-per-object\n"
        "    metrics_path: /metrics/per-object\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )


@contextmanager
def _prometheus(tmp_path: Path, metrics_port: int) -> Iterator[str]:
    """Run Prometheus on a free loopback port until the block ends; yields its base URL."""
    config = tmp_path / "prometheus.yml"
    config.write_text(_config(metrics_port))
    port = spare_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    """The instant vector of ``expr`` (empty while Prometheus is not up or has no data)."""
    try:
        response = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10)
    except httpx.TransportError:
        return []
    if response.status_code != 200:
        return []
    body = response.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _wait_for(base: str, expr: str, expected: float, log: Path) -> list[dict[str, Any]]:
    """Poll until ``expr`` has a sample equal to ``expected``; its samples."""
    deadline = time.monotonic() + DEADLINE
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = _query(base, expr)
        if result and all(float(item["value"][1]) == expected for item in result):
            return result
        time.sleep(0.5)  # polling an observable condition, with a deadline
    log_text = log.read_text() if log.exists() else ""
    raise AssertionError(f"{expr} never became {expected}: {result}\n{log_text}")


def test_prometheus_scrapes_rabbitmq_series(
    tmp_path: Path, http_server: Server | NodeUnderTest
) -> None:
    server = http_server  # under AMQPD_TEST_WORKERS, a node: its series merged
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    try:
        channel = conn.channel()
        channel.queue_declare("scraped")
        for i in range(3):
            channel.basic_publish("", "scraped", f"m{i}".encode())
        channel.basic_publish("", "no-such-queue", b"dropped")
        channel.queue_declare("scraped", passive=True)  # a round trip: all published
        with _prometheus(tmp_path, server.prometheus_port) as base:
            log = tmp_path / "prometheus.log"
            _wait_for(base, 'up{job="rabbitmq"}', 1, log)
            _wait_for(base, 'up{job="rabbitmq-per-object"}', 1, log)
            _wait_for(base, 'rabbitmq_queue_messages_ready{job="rabbitmq"}', 3, log)
            _wait_for(base, 'rabbitmq_connections{job="rabbitmq"}', 1, log)
            _wait_for(base, 'rabbitmq_queues{job="rabbitmq"}', 1, log)
            received = _wait_for(
                base, 'rabbitmq_global_messages_received_total{job="rabbitmq"}', 4, log
            )
            assert received[0]["metric"]["protocol"] == "amqp091"
            _wait_for(
                base,
                'rabbitmq_global_messages_unroutable_dropped_total{job="rabbitmq"}',
                1,
                log,
            )
            [per_queue] = _wait_for(
                base,
                'rabbitmq_queue_messages_ready{job="rabbitmq-per-object",queue="scraped"}',
                3,
                log,
            )
            assert per_queue["metric"]["vhost"] == "/"
            [identity] = _wait_for(base, 'rabbitmq_identity_info{job="rabbitmq"}', 1, log)
            assert identity["metric"]["rabbitmq_node"].startswith("amqpd@")
            # the series move with the broker: consume everything, Prometheus sees 0
            for _ in range(3):
                method, _props, _body = channel.basic_get("scraped", auto_ack=True)
                assert method is not None
            _wait_for(base, 'rabbitmq_queue_messages_ready{job="rabbitmq"}', 0, log)
            _wait_for(
                base,
                'rabbitmq_global_messages_delivered_get_auto_ack_total{job="rabbitmq"}',
                3,
                log,
            )
            # rate() works over the counters, as Grafana's panels use them
            expr = 'rate(rabbitmq_global_messages_received_total{job="rabbitmq"}[10s])'
            deadline = time.monotonic() + DEADLINE
            while not _query(base, expr):
                assert time.monotonic() < deadline, "rate() over the counter stayed empty"
                time.sleep(0.5)
    finally:
        conn.close()
