"""The management API of federation: federation-upstream(-set) parameters through
/api/parameters (RabbitMQ 3.10.8's texts), policies with the federation keys,
/api/federation-links[/{vhost}] (RabbitMQ's fields: a running link, a link in error),
/api/cluster-name PUT, and a local exchange federated from another exchange of the same
broker moving messages."""

from __future__ import annotations

from collections.abc import Iterator

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


def _links(api: httpx.Client, path: str = "/api/federation-links") -> list[dict[str, object]]:
    answer = api.get(path)
    assert answer.status_code == 200
    return list(answer.json())


def test_parameters_policies_and_texts(api: httpx.Client) -> None:
    path = "/api/parameters/federation-upstream/%2F/up"
    assert api.put(path, json={"value": {"uri": "amqp://h", "max-hops": 2}}).status_code == 201
    assert api.get(path).json() == {
        "value": {"max-hops": 2, "uri": "amqp://h"},
        "vhost": "/",
        "component": "federation-upstream",
        "name": "up",
    }
    refused = api.put(path, json={"value": {"uri": "amqp://h", "ack-mode": "sometimes"}})
    assert refused.status_code == 400
    assert refused.json()["reason"] == (  # RabbitMQ 3.10.8's, HTML-escaped as its API does
        'Validation failed\n\nack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,'
        '&lt;&lt;"on-publish"&gt;&gt;,&lt;&lt;"on-confirm"&gt;&gt;], actually was '
        '&lt;&lt;"sometimes"&gt;&gt;\n'
    )
    set_path = "/api/parameters/federation-upstream-set/%2F/s"
    assert api.put(set_path, json={"value": [{"upstream": "up"}]}).status_code == 201
    assert api.put(set_path, json={"value": [{"bogus": 1}]}).status_code == 400
    policy = {"pattern": "^x", "definition": {"federation-upstream-set": 1}}
    refused = api.put("/api/policies/%2F/p", json=policy)
    assert refused.status_code == 400
    assert "1 is not a valid federation upstream set name" in refused.json()["reason"]
    policy["definition"] = {"federation-upstream-set": "s"}
    assert api.put("/api/policies/%2F/p", json=policy).status_code == 201
    assert api.delete(set_path).status_code == 204
    assert api.delete(path).status_code == 204


def test_links_status_and_a_local_federation(
    server: Server | NodeUnderTest, api: httpx.Client
) -> None:
    assert api.get("/api/cluster-name").json() == {"name": api.get("/api/overview").json()["node"]}
    assert api.put("/api/cluster-name", json={}).json()["reason"] == "[{key_missing,name}]"
    assert api.put("/api/cluster-name", json={"name": "here"}).status_code == 204
    assert api.get("/api/cluster-name").json() == {"name": "here"}
    assert _links(api) == []

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    channel = conn.channel()
    channel.exchange_declare("src", "direct")
    channel.exchange_declare("fed.x", "direct")
    channel.queue_declare("sink")
    channel.queue_bind("sink", "fed.x", "k")
    # "local" reaches this broker itself; the others cannot connect, log in, open the vhost
    local = {"uri": "amqp://", "exchange": "src", "reconnect-delay": 0.5, "bind-nowait": True}
    assert (
        api.put("/api/parameters/federation-upstream/%2F/local", json={"value": local}).status_code
        == 201
    )
    nowhere = {"uri": "amqp://u:secret@127.0.0.1:1", "reconnect-delay": 0.5}
    assert (
        api.put(
            "/api/parameters/federation-upstream/%2F/nowhere", json={"value": nowhere}
        ).status_code
        == 201
    )
    for name, uri in (
        ("denied", f"amqp://guest:wrong@127.0.0.1:{server.port}"),
        ("novhost", f"amqp://guest:guest@127.0.0.1:{server.port}/nope"),
    ):
        value = {"uri": uri, "reconnect-delay": 0.5}
        path = f"/api/parameters/federation-upstream/%2F/{name}"
        assert api.put(path, json={"value": value}).status_code == 201
    policy = {
        "pattern": "^fed\\.",
        "definition": {"federation-upstream-set": "all"},
        "apply-to": "exchanges",
    }
    assert api.put("/api/policies/%2F/fed", json=policy).status_code == 201

    def settled() -> bool:
        states = {str(item["upstream"]): item["status"] for item in _links(api)}
        expected = {"local": "running", "nowhere": "error", "denied": "error"}
        return states == {**expected, "novhost": "error"}

    wait_for(settled, "one running link and three in error", timeout=60)
    assert len(_links(api)) == 4  # each link runs once (a spread vhost too: on one worker)
    by_upstream = {item["upstream"]: item for item in _links(api)}
    running, failed = by_upstream["local"], by_upstream["nowhere"]
    assert set(running) == {
        "node",
        "exchange",
        "upstream_exchange",
        "type",
        "vhost",
        "upstream",
        "id",
        "status",
        "local_connection",
        "uri",
        "timestamp",
    }
    assert (running["exchange"], running["upstream_exchange"], running["type"]) == (
        "fed.x",
        "src",
        "exchange",
    )
    assert running["uri"] == "amqp://"
    assert failed["uri"] == "amqp://127.0.0.1:1"  # the credentials are never shown
    assert failed["error"] == "econnrefused", failed  # as RabbitMQ names it
    assert "ACCESS_REFUSED - Login was refused" in str(by_upstream["denied"]["error"])
    assert "refused Connection.Open" in str(by_upstream["novhost"]["error"])
    assert _links(api, "/api/federation-links/%2F") == _links(api)
    assert api.put("/api/vhosts/other", json={}).status_code == 201
    assert _links(api, "/api/federation-links/other") == []
    assert api.get("/api/federation-links/nope").status_code == 404

    # messages published to src travel into fed.x's queue, with x-received-from
    channel.confirm_delivery()
    channel.basic_publish("src", "k", b"hello", pika.BasicProperties(user_id="guest"))
    wait_for(lambda: channel.queue_declare("sink", passive=True).method.message_count == 1, "1")
    _method, properties, body = channel.basic_get("sink", auto_ack=True)
    assert body == b"hello"
    assert properties.user_id is None  # trust-user-id is false: the user-id is cleared
    [hop] = properties.headers["x-received-from"]
    assert (hop["cluster-name"], hop["exchange"], hop["uri"]) == ("here", "src", "amqp://")
    conn.close()

    assert api.delete("/api/policies/%2F/fed").status_code == 204
    wait_for(lambda: _links(api) == [], "no links once the policy is gone")


def test_overview_names_the_cluster_and_the_helper_type(api: httpx.Client) -> None:
    assert api.put("/api/cluster-name", json={"name": "named"}).status_code == 204
    overview = api.get("/api/overview").json()
    assert overview["cluster_name"] == "named"
    helper = [t for t in overview["exchange_types"] if t["name"] == "x-federation-upstream"]
    assert helper == [
        {
            "name": "x-federation-upstream",
            "description": "Federation upstream helper exchange",
            "internal_purpose": "federation",
            "enabled": True,
        }
    ]


def test_a_vhost_with_a_space_and_a_slash(
    server: Server | NodeUnderTest, api: httpx.Client
) -> None:
    """The link reaches its own vhost (and a host-less upstream URI names one) whatever
    characters the name has."""
    vhost, quoted = "fed space/x", "fed%20space%2Fx"
    assert api.put(f"/api/vhosts/{quoted}", json={}).status_code == 201
    full = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put(f"/api/permissions/{quoted}/guest", json=full).status_code in (201, 204)
    upstream = {"uri": f"amqp:///{quoted}", "exchange": "src", "reconnect-delay": 0.5}
    path = f"/api/parameters/federation-upstream/{quoted}/here"
    assert api.put(path, json={"value": upstream}).status_code == 201
    policy = {"pattern": "^fed$", "definition": {"federation-upstream": "here"}}
    policy["apply-to"] = "exchanges"
    assert api.put(f"/api/policies/{quoted}/p", json=policy).status_code == 201
    params = pika.ConnectionParameters("127.0.0.1", server.port, virtual_host=vhost)
    conn = pika.BlockingConnection(params)
    channel = conn.channel()
    channel.exchange_declare("src", "fanout")
    channel.exchange_declare("fed", "fanout")
    channel.queue_declare("sink")
    channel.queue_bind("sink", "fed", "")

    def running() -> bool:
        return [item["status"] for item in _links(api, f"/api/federation-links/{quoted}")] == [
            "running"
        ]

    wait_for(running, "the link running in its vhost")
    channel.confirm_delivery()
    channel.basic_publish("src", "", b"spaced")
    wait_for(lambda: channel.queue_declare("sink", passive=True).method.message_count == 1, "1")
    [hop] = channel.basic_get("sink", auto_ack=True)[1].headers["x-received-from"]
    assert hop["vhost"] == vhost
    conn.close()
