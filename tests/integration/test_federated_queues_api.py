"""Federated queues configured over the management API on one broker (an upstream
``amqp://`` is this broker, the upstream's ``queue`` another queue of it): the link shows
in /api/federation-links as RabbitMQ lists queue links, uses the upstream's queue and
consumer tag, and goes when the policy or the queue goes."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest
from tests.integration.shovel_support import wait_for


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


def _links(api: httpx.Client, vhost: str = "%2F") -> list[dict[str, Any]]:
    answer = api.get(f"/api/federation-links/{vhost}")
    assert answer.status_code == 200
    found: list[dict[str, Any]] = answer.json()
    return found


def _statuses(api: httpx.Client, vhost: str) -> list[str]:
    return [item["status"] for item in _links(api, vhost)]


def _consumer_tags(api: httpx.Client, queue: str) -> list[str]:
    answer = api.get("/api/consumers/%2F")
    assert answer.status_code == 200
    return [item["consumer_tag"] for item in answer.json() if item["queue"]["name"] == queue]


def test_a_queue_federated_from_another_queue_of_the_same_broker(
    server: Server | NodeUnderTest, api: httpx.Client
) -> None:
    upstream = {"value": {"uri": "amqp://", "queue": "src", "consumer-tag": "fed-self"}}
    assert api.put("/api/parameters/federation-upstream/%2F/self", json=upstream).status_code in (
        201,
        204,
    )
    policy = {
        "pattern": "^dst$",
        "definition": {"federation-upstream": "self"},
        "apply-to": "queues",
    }
    assert api.put("/api/policies/%2F/fed", json=policy).status_code in (201, 204)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    channel = conn.channel()
    channel.queue_declare("src", durable=True)
    for number in range(10):
        channel.basic_publish("", "src", str(number).encode())
    channel.queue_declare("dst", durable=True)
    wait_for(lambda: [item["status"] for item in _links(api)] == ["running"], "the link running")
    [link] = _links(api)
    assert {key: link[key] for key in ("type", "queue", "upstream_queue", "upstream", "uri")} == {
        "type": "queue",
        "queue": "dst",
        "upstream_queue": "src",
        "upstream": "self",
        "uri": "amqp://",
    }
    assert _consumer_tags(api, "src") == []  # nobody consumes dst yet

    got: list[bytes] = []
    for method, _props, body in channel.consume("dst", inactivity_timeout=60):
        assert body is not None, f"only {len(got)} of 10 arrived"
        got.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(got) == 10:
            break
    assert got == [str(n).encode() for n in range(10)]
    assert _consumer_tags(api, "src") == ["fed-self"]  # dst's consumer still waits

    assert api.delete("/api/policies/%2F/fed").status_code == 204
    wait_for(lambda: _links(api) == [], "the link gone with its policy")
    wait_for(lambda: _consumer_tags(api, "src") == [], "the link's consumer gone")
    assert api.put("/api/policies/%2F/fed", json=policy).status_code in (201, 204)
    wait_for(lambda: len(_links(api)) == 1, "the link back with the policy")
    channel.cancel()
    channel.queue_delete("dst")
    wait_for(lambda: _links(api) == [], "the link gone with its queue")
    conn.close()


def test_a_refused_upstream_declaration_is_shown_and_retried(
    server: Server | NodeUnderTest, api: httpx.Client
) -> None:
    """The link declares the upstream queue like the local one (durable here); an upstream
    queue declared otherwise refuses that with 406: the link shows the error and retries
    after its reconnect delay until the upstream queue is fixed."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    channel = conn.channel()
    channel.queue_declare("src", durable=False)
    upstream = {"value": {"uri": "amqp://", "queue": "src", "reconnect-delay": 0.2}}
    api.put("/api/parameters/federation-upstream/%2F/self", json=upstream)
    policy = {
        "pattern": "^dst$",
        "definition": {"federation-upstream": "self"},
        "apply-to": "queues",
    }
    api.put("/api/policies/%2F/fed", json=policy)
    channel.queue_declare("dst", durable=True)
    wait_for(lambda: [item["status"] for item in _links(api)] == ["error"], "the link failing")
    [link] = _links(api)
    assert "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'src'" in link["error"]
    channel.queue_delete("src")
    wait_for(lambda: [item["status"] for item in _links(api)] == ["running"], "the link running")
    assert channel.queue_declare("src", passive=True).method.message_count == 0  # declared
    conn.close()


def test_a_federated_queue_in_another_vhost(
    server: Server | NodeUnderTest, api: httpx.Client
) -> None:
    """An upstream URI without a vhost means the local queue's vhost (here one whose name
    needs quoting), for the upstream connection and for the link's local one alike."""
    assert api.put("/api/vhosts/fed%20eu").status_code in (201, 204)
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put("/api/permissions/fed%20eu/guest", json=everything).status_code in (201, 204)
    upstream = {"value": {"uri": "amqp://", "queue": "src"}}
    api.put("/api/parameters/federation-upstream/fed%20eu/self", json=upstream)
    policy = {
        "pattern": "^dst$",
        "definition": {"federation-upstream": "self"},
        "apply-to": "queues",
    }
    api.put("/api/policies/fed%20eu/fed", json=policy)
    params = pika.ConnectionParameters("127.0.0.1", server.port, virtual_host="fed eu")
    conn = pika.BlockingConnection(params)
    channel = conn.channel()
    channel.queue_declare("src", durable=True)
    channel.basic_publish("", "src", b"hello")
    channel.queue_declare("dst", durable=True)
    wait_for(lambda: _statuses(api, "fed%20eu") == ["running"], "the link running")
    for method, _props, body in channel.consume("dst", inactivity_timeout=60):
        assert body == b"hello"
        channel.basic_ack(method.delivery_tag)
        break
    conn.close()


def test_an_unreachable_upstream_is_shown_as_rabbitmq_words_it(
    server: Server | NodeUnderTest, api: httpx.Client
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    upstream = {"value": {"uri": f"amqp://127.0.0.1:{port}", "reconnect-delay": 0.2}}
    api.put("/api/parameters/federation-upstream/%2F/gone", json=upstream)
    policy = {
        "pattern": "^dst$",
        "definition": {"federation-upstream": "gone"},
        "apply-to": "queues",
    }
    api.put("/api/policies/%2F/fed", json=policy)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    conn.channel().queue_declare("dst", durable=True)
    wait_for(lambda: _statuses(api, "%2F") == ["error"], "the link failing")
    [link] = _links(api)
    assert link["error"] == "econnrefused"
    conn.close()
