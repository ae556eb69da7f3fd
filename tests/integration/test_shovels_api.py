"""The management API of shovels: /api/parameters (RabbitMQ's statuses and validation
texts) and /api/shovels (state of a local -> local shovel moving messages)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest
from tests.integration.shovel_support import wait_for

SHOVEL: dict[str, Any] = {
    "src-uri": "amqp://",
    "src-queue": "from",
    "dest-uri": "amqp://",
    "dest-queue": "to",
}
PATH = "/api/parameters/shovel/%2F/s"


@pytest.fixture
def server(http_server: Server | NodeUnderTest) -> Server | NodeUnderTest:
    """A fresh broker with its management API (under AMQPD_TEST_WORKERS, a node's)."""
    return http_server


@pytest.fixture
def api(server: Server | NodeUnderTest) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"http://127.0.0.1:{server.management_port}", auth=("guest", "guest"), timeout=60
    ) as client:
        yield client


def _ready(server: Server | NodeUnderTest, queue: str) -> int:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return -1
    finally:
        if conn.is_open:
            conn.close()


def test_put_get_list_delete(server: Server | NodeUnderTest, api: httpx.Client) -> None:
    assert api.put(PATH, json={"value": SHOVEL}).status_code == 201
    assert api.put(PATH, json={"value": SHOVEL}).status_code == 204
    expected = {"value": SHOVEL, "vhost": "/", "component": "shovel", "name": "s"}
    assert api.get(PATH).json() == expected
    # stored as RabbitMQ stores it (a map): keys come back sorted
    assert list(api.get(PATH).json()["value"]) == sorted(SHOVEL)
    assert api.get("/api/parameters").json() == [expected]
    assert api.get("/api/parameters/shovel").json() == [expected]
    assert api.get("/api/parameters/shovel/%2F").json() == [expected]
    assert api.get("/api/parameters/federation-upstream").json() == []
    assert api.delete(PATH).status_code == 204
    assert api.delete(PATH).status_code == 404
    assert api.get(PATH).status_code == 404
    assert api.get("/api/parameters").json() == []


def test_refusals(api: httpx.Client) -> None:
    refused = api.put(PATH, json={"value": {"src-uri": "amqp://", "dest-uri": "amqp://"}})
    assert refused.status_code == 400
    assert refused.json() == {
        "error": "bad_request",
        "reason": "Validation failed\n\nMust specify 'src-exchange' or 'src-queue'\n",
    }
    unknown = api.put(PATH, json={"value": {**SHOVEL, "bogus": 1}})
    assert unknown.json()["reason"] == (  # checked against RabbitMQ 3.10.8, HTML-escaped too
        'Validation failed\n\nUnrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in s\n'
    )
    other = api.put("/api/parameters/mqtt-x/%2F/u", json={"value": {"uri": "x"}})
    assert other.status_code == 400
    assert other.json()["reason"] == "Validation failed\n\ncomponent mqtt-x not found\n"
    federation = api.put("/api/parameters/federation-upstream/%2F/u", json={"value": {"uri": "x"}})
    assert federation.status_code == 400  # RabbitMQ 3.10.8's text, side by side
    assert federation.json()["reason"] == (
        'Validation failed\n\n"x" not a valid URI: {{unable_to_parse_uri,no_scheme},"x"}\n'
    )
    assert api.delete("/api/parameters/federation-upstream/%2F/u").status_code == 404
    assert api.put(PATH, json={}).status_code == 400
    assert api.put("/api/parameters/shovel/nowhere/s", json={"value": SHOVEL}).status_code == 404
    assert api.get("/api/parameters").json() == []


def test_policymaker_tag_needed(server: Server | NodeUnderTest, api: httpx.Client) -> None:
    assert api.put("/api/users/plain", json={"password": "pw", "tags": ""}).status_code == 201
    api.put("/api/permissions/%2F/plain", json={"configure": ".*", "write": ".*", "read": ".*"})
    refused = httpx.get(
        f"http://127.0.0.1:{server.management_port}/api/parameters", auth=("plain", "pw")
    )
    assert refused.status_code == 401


def test_shovel_status_and_transfer(server: Server | NodeUnderTest, api: httpx.Client) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare("from", durable=True)
        for number in range(10):
            channel.basic_publish("", "from", str(number).encode())
    finally:
        conn.close()
    assert api.put(PATH, json={"value": SHOVEL}).status_code == 201
    wait_for(lambda: _ready(server, "to") == 10, "10 messages shovelled")
    assert _ready(server, "from") == 0
    [item] = api.get("/api/shovels").json()
    assert {key: item[key] for key in ("name", "vhost", "type", "state")} == {
        "name": "s",
        "vhost": "/",
        "type": "dynamic",
        "state": "running",
    }
    assert item["src_uri"] == "amqp://" and item["dest_uri"] == "amqp://"
    assert item["src_queue"] == "from" and item["dest_queue"] == "to"
    assert item["src_protocol"] == "amqp091" and "timestamp" in item
    assert api.get("/api/shovels/%2F").json() == [item]
    assert api.get("/api/shovels/nowhere").status_code == 404
    api.delete(PATH)
    wait_for(lambda: api.get("/api/shovels").json() == [], "the shovel gone")


def test_a_shovel_to_nowhere_is_terminated_with_a_reason(api: httpx.Client) -> None:
    value = {**SHOVEL, "dest-uri": "amqp://guest:guest@127.0.0.1:1/", "reconnect-delay": 5}
    api.put(PATH, json={"value": value})

    def terminated() -> bool:
        items = api.get("/api/shovels").json()
        return bool(items) and items[0]["state"] == "terminated"

    wait_for(terminated, "the shovel terminated")
    [item] = api.get("/api/shovels").json()
    assert "Errno 111" in item["reason"]  # connection refused
