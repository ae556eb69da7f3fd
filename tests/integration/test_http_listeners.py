"""The HTTP listeners (management API, Prometheus) start with the broker on their own ports,
answer on the broker's event loop, and stop with it."""

from __future__ import annotations

import httpx
import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import node_under_test


def test_management_and_prometheus_listen_beside_amqp(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with node_under_test(tmp_path_factory, http=True) as server:  # a node under workers
        assert server.management_port and server.prometheus_port
        assert len({server.port, server.management_port, server.prometheus_port}) == 3
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        try:
            overview = httpx.get(
                f"http://127.0.0.1:{server.management_port}/api/overview",
                auth=("guest", "guest"),
                timeout=30,
            )
            assert overview.status_code == 200
            protocols = {item["protocol"] for item in overview.json()["listeners"]}
            assert {"amqp", "http", "http/prometheus"} <= protocols
            metrics = httpx.get(f"http://127.0.0.1:{server.prometheus_port}/metrics", timeout=30)
            assert metrics.status_code == 200
            samples = {
                sample.name: sample.value
                for family in text_string_to_metric_families(metrics.text)
                for sample in family.samples
            }
            assert samples["rabbitmq_connections"] == 1
        finally:
            conn.close()
    refused = False
    try:
        httpx.get(f"http://127.0.0.1:{server.management_port}/api/overview", timeout=5)
    except httpx.ConnectError:
        refused = True
    assert refused, "the management listener must stop with the broker"
