"""The management API's resources, statuses and error bodies (RabbitMQ 3.10's, checked side
by side), through the app without sockets; changes go through the core's paths."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import pytest
from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.wire.errors import CONNECTION_FORCED
from tests.unit.management_support import Api
from tests.unit.protocol_support import connect, connection_error, declare, split

NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


def publish(api: Api, key: str, payload: str, exchange: str = "amq.default", **extra: Any) -> Any:
    body = {"routing_key": key, "payload": payload, "payload_encoding": "string", "properties": {}}
    body.update(extra)
    return api.post(f"/api/exchanges/%2F/{exchange}/publish", json=body)


def get(
    api: Api, queue: str, count: int = 5, ackmode: str = "ack_requeue_true", **extra: Any
) -> Any:
    body = {"count": count, "ackmode": ackmode, "encoding": "auto", **extra}
    return api.post(f"/api/queues/%2F/{queue}/get", json=body)


def test_queue_declare_is_201_then_204_and_inequivalent_is_400() -> None:
    api = Api()
    assert api.put("/api/queues/%2F/q1", json={"durable": True}).status_code == 201
    assert (
        api.put("/api/queues/%2F/q1", json={"durable": "true", "auto_delete": "false"}).status_code
        == 204
    )
    conflict = api.put("/api/queues/%2F/q1", json={"durable": False})
    assert conflict.status_code == 400
    assert conflict.json() == {
        "error": "bad_request",
        "reason": "inequivalent arg 'durable' for queue 'q1' in vhost '/': "
        "received 'false' but current is 'true'",
    }
    queue = api.broker.default_vhost.queues["q1"]
    assert queue.durable and not queue.auto_delete and queue.exclusive_owner is None
    item = api.get("/api/queues/%2F/q1").json()
    assert item["name"] == "q1" and item["vhost"] == "/" and item["durable"] is True


def test_bad_bodies_and_unknown_objects() -> None:
    api = Api()
    assert api.put("/api/queues/%2F/q", content=b"{bad").json() == {
        "error": "bad_request",
        "reason": "not_json",
    }
    assert api.put("/api/queues/%2F/q", content=b"[1]").status_code == 400
    assert api.put("/api/queues/%2F/q", json={"durable": "maybe"}).json()["reason"] == [
        "not_boolean",
        "maybe",
    ]
    bad_arg = api.put("/api/queues/%2F/q", json={"arguments": {"x-max-length": "abc"}})
    assert bad_arg.status_code == 400 and "x-max-length" in bad_arg.json()["reason"]
    assert api.put("/api/queues/nope/q", json={}).json() == {
        "error": "not_found",
        "reason": "vhost_not_found",
    }
    for path in ("/api/queues/nope", "/api/queues/%2F/nope", "/api/vhosts/nope", "/api/nope"):
        answer = api.get(path)
        assert (answer.status_code, answer.json()) == (404, NOT_FOUND), path
    reserved = api.put("/api/queues/%2F/amq.q", json={})
    assert reserved.status_code == 401 and reserved.json()["reason"] == "Access refused."
    assert api.delete("/api/queues/%2F/nope").status_code == 404
    wrong_method = api.post("/api/overview")
    assert wrong_method.status_code == 405 and "GET" in wrong_method.headers["allow"]
    assert api.request("PATCH", "/api/queues/%2F/q").status_code == 405


def test_delete_queue_if_empty_if_unused_and_purge() -> None:
    api = Api()
    api.put("/api/queues/%2F/q", json={})
    assert publish(api, "q", "hello").json() == {"routed": True}
    not_empty = api.delete("/api/queues/%2F/q?if-empty=true")
    assert not_empty.json() == {
        "error": "bad_request",
        "reason": "queue 'q' in vhost '/' not empty",
    }
    assert api.delete("/api/queues/%2F/q/contents").status_code == 204
    assert api.get("/api/queues/%2F/q").json()["messages"] == 0
    client = connect(api.broker)
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c1"))
    assert api.delete("/api/queues/%2F/q?if-unused=true").json()["reason"] == (
        "queue 'q' in vhost '/' in use"
    )
    assert api.delete("/api/queues/%2F/q").status_code == 204
    assert "q" not in api.broker.default_vhost.queues
    frames = client.received()
    assert any(isinstance(method, commands.Basic.Cancel) for _ch, method in frames)


def test_get_requeues_acks_or_rejects() -> None:
    api = Api()
    api.put("/api/queues/%2F/q", json={})
    publish(api, "q", "one")
    publish(
        api,
        "q",
        "/w==",
        payload_encoding="base64",
        properties={"delivery_mode": 2, "headers": {"a": 1}, "type": "t", "timestamp": 1700000000},
    )
    first = get(api, "q").json()
    assert [m["redelivered"] for m in first] == [False, False]
    assert [m["message_count"] for m in first] == [1, 0]
    assert first[0] == {
        "payload_bytes": 3,
        "redelivered": False,
        "exchange": "",
        "routing_key": "q",
        "message_count": 1,
        "properties": [],
        "payload": "one",
        "payload_encoding": "string",
    }
    assert first[1]["payload"] == "/w==" and first[1]["payload_encoding"] == "base64"
    assert first[1]["properties"] == {
        "headers": {"a": 1},
        "delivery_mode": 2,
        "timestamp": 1700000000,
        "type": "t",
    }
    again = get(api, "q", truncate=1).json()
    assert [m["redelivered"] for m in again] == [True, True]
    assert again[0]["payload"] == "o" and again[0]["payload_bytes"] == 3
    assert len(get(api, "q", 1, "ack_requeue_false").json()) == 1
    assert len(get(api, "q", 5, "reject_requeue_false").json()) == 1
    assert get(api, "q").json() == []
    stats = api.get("/api/queues/%2F/q").json()["message_stats"]
    assert stats["get"] == 6 and stats["redeliver"] == 4 and stats["ack"] == 1
    assert get(api, "nope").json() == {
        "error": "not_found",
        "reason": "NOT_FOUND - no queue 'nope' in vhost '/'",
    }
    missing = api.post("/api/queues/%2F/q/get", json={"count": 1, "ackmode": "ack_requeue_true"})
    assert missing.json() == {"error": "bad_request", "reason": "[{key_missing,encoding}]"}


def test_get_requeue_reaches_a_waiting_consumer_with_redelivered() -> None:
    api = Api()
    client = connect(api.broker)
    declare(client, 1, "q")
    publish(api, "q", "m")
    assert len(get(api, "q").json()) == 1  # nobody consumed yet
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    [delivery], _consume_ok = split(client.received())
    assert delivery.body == b"m" and delivery.method.redelivered


def test_publish_routes_through_exchanges_and_reports_unroutable() -> None:
    api = Api()
    api.put("/api/exchanges/%2F/ex", json={"type": "topic"})
    api.put("/api/queues/%2F/q", json={})
    bound = api.post("/api/bindings/%2F/e/ex/q/q", json={"routing_key": "a.#"})
    assert bound.status_code == 201 and bound.headers["location"] == "q/a.%23"  # "a.#" quoted
    assert publish(api, "a.b", "x", exchange="ex").json() == {"routed": True}
    assert publish(api, "zz", "x", exchange="ex").json() == {"routed": False}
    assert api.get("/api/queues/%2F/q").json()["messages"] == 1
    stats = api.get("/api/exchanges/%2F/ex").json()["message_stats"]
    assert stats["publish_in"] == 2 and stats["publish_out"] == 1
    gone = publish(api, "k", "x", exchange="nope")
    assert gone.json() == {
        "error": "bad_request",
        "reason": "404 NOT_FOUND - no exchange 'nope' in vhost '/'",
    }
    assert publish(api, "q", "x", payload_encoding="base64").json()["reason"] == [
        "not_base64",
        "x",
    ]
    no_props = api.post(
        "/api/exchanges/%2F/amq.default/publish",
        json={"routing_key": "q", "payload": "x", "payload_encoding": "string"},
    )
    assert no_props.json() == {"error": "bad_request", "reason": "[{key_missing,properties}]"}


def test_exchanges_declare_delete_and_errors() -> None:
    api = Api()
    assert api.put("/api/exchanges/%2F/e1", json={"type": "direct"}).status_code == 201
    assert api.put("/api/exchanges/%2F/e1", json={"type": "direct"}).status_code == 204
    assert api.put("/api/exchanges/%2F/e1", json={"type": "topic"}).json()["reason"] == (
        "inequivalent arg 'type' for exchange 'e1' in vhost '/': "
        "received 'topic' but current is 'direct'"
    )
    assert api.put("/api/exchanges/%2F/amq.foo", json={}).status_code == 401
    assert api.delete("/api/exchanges/%2F/amq.direct").json()["reason"] == "Access refused."
    assert api.delete("/api/exchanges/%2F/nope").json() == NOT_FOUND
    api.put("/api/exchanges/%2F/e2", json={"type": "fanout"})
    assert api.post("/api/bindings/%2F/e/e1/e/e2", json={"routing_key": "k"}).status_code == 201
    assert api.delete("/api/exchanges/%2F/e1?if-unused=true").json()["reason"] == (
        "exchange 'e1' in vhost '/' in use"
    )
    assert [
        b["destination"] for b in api.get("/api/exchanges/%2F/e2/bindings/destination").json()
    ] == ["e2"]
    assert [b["source"] for b in api.get("/api/exchanges/%2F/e1/bindings/source").json()] == ["e1"]
    assert api.delete("/api/exchanges/%2F/e1").status_code == 204
    assert "e1" not in api.broker.default_vhost.exchanges
    default = api.get("/api/exchanges/%2F/amq.default").json()
    assert default["name"] == "" and default["type"] == "direct"


def test_bindings_get_and_delete_by_properties_key() -> None:
    api = Api()
    api.put("/api/queues/%2F/q", json={})
    api.put("/api/exchanges/%2F/ex", json={})
    api.post("/api/bindings/%2F/e/ex/q/q", json={"routing_key": "a/b"})
    with_args = api.post(
        "/api/bindings/%2F/e/ex/q/q", json={"routing_key": "k", "arguments": {"x": 1}}
    )
    props = with_args.headers["location"].split("/", 1)[1]
    listed = api.get("/api/bindings/%2F/e/ex/q/q").json()
    assert {(b["routing_key"], b["properties_key"]) for b in listed} == {
        ("a/b", "a%2Fb"),
        ("k", props),
    }
    assert [b["source"] for b in api.get("/api/queues/%2F/q/bindings").json()] == ["", "ex", "ex"]
    one = api.get("/api/bindings/%2F/e/ex/q/q/" + quote("a%2Fb", safe=""))
    assert one.json()["routing_key"] == "a/b"
    assert api.delete("/api/bindings/%2F/e/ex/q/q/" + quote(props, safe="")).status_code == 204
    assert api.delete("/api/bindings/%2F/e/ex/q/q/" + quote(props, safe="")).json() == NOT_FOUND
    assert api.post("/api/bindings/%2F/e/ex/q/nope", json={}).json() == {
        "error": "not_found",
        "reason": "no queue 'nope' in vhost '/'",
    }
    assert len(api.get("/api/bindings/%2F").json()) == 2  # default binding + a/b
    assert api.post("/api/bindings/%2F/e/ex/x/q", json={}).json() == NOT_FOUND
    assert api.get("/api/bindings/%2F/e/ex/x/q").json() == NOT_FOUND


def test_close_connection_with_reason() -> None:
    broker = Broker()
    api = Api(broker)
    client = connect(broker)
    [item] = api.get("/api/connections").json()
    path = "/api/connections/" + quote(item["name"], safe="")
    assert api.get(path + "/channels").json()[0]["number"] == 1
    assert api.delete(path, headers={"X-Reason": "bye now"}).status_code == 204
    code, text, _c, _m = connection_error(client)
    assert (code, text) == (CONNECTION_FORCED, "CONNECTION_FORCED - bye now")
    assert api.delete("/api/connections/nope").json() == NOT_FOUND
    assert api.host.after_core_calls >= 1


def test_users_vhosts_permissions_through_admin_commands() -> None:
    api = Api()
    assert (
        api.put("/api/users/bob", json={"password": "s3", "tags": "management"}).status_code == 201
    )
    assert (
        api.put("/api/users/bob", json={"password": "s4", "tags": ["monitoring"]}).status_code
        == 204
    )
    assert api.get("/api/whoami", auth=("bob", "s4")).json() == {
        "name": "bob",
        "tags": ["monitoring"],
    }
    assert api.put("/api/users/x", json={"password": "p"}).json()["reason"] == "tags_not_present"
    assert api.put("/api/users/x", json={"password_hash": "bad!", "tags": ""}).status_code == 400
    assert api.put("/api/vhosts/v2", json={"description": "d", "tags": "a,b"}).status_code == 201
    vhost = api.get("/api/vhosts/v2").json()
    assert vhost["description"] == "d" and vhost["tags"] == ["a", "b"]
    assert api.get("/api/permissions/v2/guest").json()["configure"] == ".*"
    assert (
        api.put(
            "/api/permissions/v2/bob", json={"configure": "", "write": ".*", "read": ".*"}
        ).status_code
        == 201
    )
    assert api.put("/api/permissions/v2/bob", json={"configure": ".*"}).json()["reason"] == (
        "[{key_missing,write},{key_missing,read}]"
    )
    assert (
        api.put(
            "/api/permissions/nope/bob", json={"configure": "", "write": "", "read": ""}
        ).json()["reason"]
        == "vhost_or_user_not_found"
    )
    assert {p["user"] for p in api.get("/api/vhosts/v2/permissions").json()} == {"guest", "bob"}
    assert [p["vhost"] for p in api.get("/api/users/bob/permissions").json()] == ["v2"]
    assert api.delete("/api/permissions/v2/bob").status_code == 204
    assert api.delete("/api/permissions/v2/bob").json() == NOT_FOUND
    assert api.delete("/api/vhosts/v2").status_code == 204
    assert "v2" not in api.broker.vhosts and api.delete("/api/vhosts/v2").status_code == 404
    assert api.delete("/api/users/bob").status_code == 204
    assert api.get("/api/users/bob").json() == NOT_FOUND
    groups = [(r["group"], r["command"]) for r in api.host.admin_requests]
    assert ("users", "put") in groups and ("vhosts", "delete") in groups


def test_definitions_export_and_import() -> None:
    api = Api()
    api.put("/api/queues/%2F/dq", json={"durable": True})
    exported = api.get("/api/definitions").json()
    assert "dq" in {q["name"] for q in exported["queues"]}
    assert {u["name"] for u in exported["users"]} == {"guest"}
    document = {
        "queues": [
            {
                "name": "imported",
                "vhost": "/",
                "durable": True,
                "auto_delete": False,
                "arguments": {},
            }
        ]
    }
    assert api.post("/api/definitions", json=document).status_code == 204
    assert "imported" in api.broker.default_vhost.queues
    scoped = {
        "queues": [{"name": "scoped", "durable": True, "auto_delete": False, "arguments": {}}]
    }
    assert api.post("/api/definitions/%2F", json=scoped).status_code == 204
    assert "scoped" in api.broker.default_vhost.queues
    policy = {"pattern": "^x", "definition": {"max-length": 3}, "apply-to": "queues"}
    with_policies = {
        "policies": [{"name": "p1", **policy}],
        "parameters": [
            {"component": "operator_policy", "name": "op1", "value": policy},
            {"component": "vhost-limits", "name": "limits", "value": {"max-queues": 50}},
        ],
    }
    assert api.post("/api/definitions/%2F", json=with_policies).status_code == 204
    per_vhost = api.get("/api/definitions/%2F").json()
    assert "users" not in per_vhost and all("vhost" not in q for q in per_vhost["queues"])
    assert [p["name"] for p in per_vhost["policies"]] == ["p1"]
    assert {(p["component"], p["name"]) for p in per_vhost["parameters"]} == {
        ("operator_policy", "op1"),
        ("vhost-limits", "limits"),
    }
    assert all("vhost" not in p for p in per_vhost["parameters"] + per_vhost["policies"])
    assert api.post("/api/definitions", content=b"{bad").json() == {
        "error": "bad_request",
        "reason": "failed_to_parse_json",
    }


def test_health_checks_and_aliveness() -> None:
    api = Api()
    assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
    api.broker.alarms.active["memory"] = None
    failed = api.get("/api/health/checks/local-alarms")
    assert failed.status_code == 503
    assert failed.json()["alarms"] == [{"node": api.broker.statistics.node, "resource": "memory"}]
    del api.broker.alarms.active["memory"]
    assert api.get("/api/aliveness-test/%2F").json() == {"status": "ok"}
    assert api.get("/api/aliveness-test/%2F/").json() == {"status": "ok"}  # trailing slash
    assert [q["name"] for q in api.get("/api/queues/").json()] == ["aliveness-test"]
    assert api.get("/api/queues//").status_code == 404
    assert api.get("/api/aliveness-test/nope").json() == NOT_FOUND
    assert api.get("/api/extensions").json() == []
    overview = api.get("/api/overview").json()
    assert overview["object_totals"]["queues"] == 1  # aliveness-test
    node = api.get("/api/nodes").json()[0]["name"]
    assert api.get("/api/nodes/" + quote(node, safe="")).json()["name"] == node
    assert api.get("/api/nodes/other@host").json() == NOT_FOUND
    assert base64  # imported for payloads above


def test_listener_and_vhost_health_checks_and_cluster_name() -> None:
    api = Api()
    assert api.get("/api/health/checks/virtual-hosts").json() == {"status": "ok"}
    assert api.get("/api/health/checks/port-listener/5672").json() == {
        "status": "ok",
        "port": 5672,
    }
    missing = api.get("/api/health/checks/port-listener/1234")
    assert missing.status_code == 503
    assert missing.json() == {
        "status": "failed",
        "reason": "No active listener",
        "missing": 1234,
        "ports": [5672, 15672],
    }
    assert api.get("/api/health/checks/port-listener/abc").json() == {
        "error": "bad_request",
        "reason": "Invalid port",
    }
    assert api.get("/api/health/checks/protocol-listener/amqp091").json() == {
        "status": "ok",
        "protocol": "amqp",
    }
    mqtt = api.get("/api/health/checks/protocol-listener/mqtt")
    assert mqtt.status_code == 503 and mqtt.json()["protocols"] == ["amqp", "http"]
    assert api.get("/api/cluster-name").json() == {"name": api.broker.statistics.node}
    assert api.put("/api/exchanges/%2F/e", json={"type": "bogus"}).json() == {
        "error": "bad_request",
        "reason": "invalid exchange type 'bogus'",
    }


def test_vhost_connections_and_channels() -> None:
    broker = Broker()
    api = Api(broker)
    api.put("/api/vhosts/v2")
    connect(broker)
    connect(broker, vhost="v2")
    assert [c["vhost"] for c in api.get("/api/vhosts/v2/connections").json()] == ["v2"]
    assert [c["vhost"] for c in api.get("/api/vhosts/%2F/channels").json()] == ["/"]
    assert api.get("/api/vhosts/nope/channels").json() == NOT_FOUND


PUBLISH = "/api/exchanges/%2F/amq.default/publish"


def _publish_body(**changes: Any) -> dict[str, Any]:
    body = {"routing_key": "q", "payload": "x", "payload_encoding": "string", "properties": {}}
    body.update(changes)
    return body


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", PUBLISH, _publish_body(routing_key="k" * 256)),
        ("POST", PUBLISH, _publish_body(properties={"priority": 1000})),
        ("POST", PUBLISH, _publish_body(properties={"headers": {"big": 2**80}})),
        ("POST", PUBLISH, _publish_body(properties={"expiration": "abc"})),
        ("POST", PUBLISH, _publish_body(properties={"user_id": "bob"})),
        ("POST", PUBLISH, _publish_body(properties={"timestamp": "x"})),
        ("POST", PUBLISH, _publish_body(properties={"bogus": 1})),
        ("POST", PUBLISH, _publish_body(properties="x")),
        ("POST", PUBLISH, _publish_body(payload=1)),
        ("POST", PUBLISH, _publish_body(payload_encoding="rot13")),
        ("PUT", "/api/queues/%2F/" + "x" * 256, {}),
        ("PUT", "/api/queues/%2F/q2", {"arguments": {"x-max-priority": 1000}}),
        ("PUT", "/api/queues/%2F/q2", {"arguments": "x"}),
        ("PUT", "/api/exchanges/%2F/e", {"type": 5}),
        (
            "POST",
            "/api/queues/%2F/q/get",
            {"count": "x", "ackmode": "ack_requeue_true", "encoding": "auto"},
        ),
        ("POST", "/api/queues/%2F/q/get", {"count": 1, "ackmode": "nope", "encoding": "auto"}),
        (
            "POST",
            "/api/queues/%2F/q/get",
            {"count": 1, "ackmode": "ack_requeue_true", "encoding": "x"},
        ),
        ("POST", "/api/bindings/%2F/e/amq.headers/q/q", {"arguments": {"x-match": "bogus"}}),
        ("POST", "/api/bindings/%2F/e/amq.direct/q/q", {"routing_key": "k" * 256}),
        ("PUT", "/api/users/u", {"password": 5, "tags": ""}),
        ("PUT", "/api/users/u", {"password": "p", "tags": 5}),
        ("PUT", "/api/users/u", {"password": "p", "tags": "", "hashing_algorithm": "x"}),
        ("PUT", "/api/permissions/%2F/guest", {"configure": "(", "write": "", "read": ""}),
        ("PUT", "/api/vhosts/v", {"tags": 5}),
        ("POST", "/api/definitions", {"users": "x"}),
        ("POST", "/api/definitions/%2F", {"queues": "x"}),
        ("POST", "/api/definitions", {"users": [{"name": "x", "password_hash": "!!", "tags": ""}]}),
    ],
)
def test_bad_input_is_400_with_a_json_reason(method: str, path: str, body: Any) -> None:
    api = Api()
    api.put("/api/queues/%2F/q", json={})
    answer = api.request(method, path, json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "bad_request" and answer.json()["reason"]
    assert api.get("/api/queues/%2F/q").status_code == 200  # still serving


def test_close_reason_is_utf8_and_cut_to_a_shortstr() -> None:
    broker = Broker()
    api = Api(broker)
    client = connect(broker)
    [item] = api.get("/api/connections").json()
    path = "/api/connections/" + quote(item["name"], safe="")
    assert api.delete(path, headers={"X-Reason": ("é" * 300).encode()}).status_code == 204
    _code, text, _c, _m = connection_error(client)
    assert text.startswith("CONNECTION_FORCED - éé") and len(text.encode()) <= 255
    # cut like rabbit_binary_generator: 252 bytes and "...", never half a character
    assert text.endswith("...")
    assert set(text.removeprefix("CONNECTION_FORCED - ").removesuffix("...")) == {"é"}


def test_vhost_limits_max_connections() -> None:
    api = Api()
    api.put("/api/vhosts/v2")
    assert api.put("/api/vhost-limits/v2/max-connections", json={"value": 10}).status_code == 204
    assert api.broker.access.state.vhosts["v2"].max_connections == 10
    assert api.get("/api/vhost-limits").json() == [
        {"vhost": "v2", "value": {"max-connections": 10}}
    ]
    assert api.get("/api/vhost-limits/%2F").json() == []
    bad = api.put("/api/vhost-limits/v2/max-connections", json={"value": "x"})
    assert bad.status_code == 400 and "should be a number" in bad.json()["reason"]
    assert api.put("/api/vhost-limits/v2/max-connections", json={}).json()["reason"] == (
        "[{key_missing,value}]"
    )
    assert api.put("/api/vhost-limits/v2/max-streams", json={"value": 1}).status_code == 400
    assert api.put("/api/vhost-limits/nope/max-connections", json={"value": 1}).json() == (
        NOT_FOUND
    )
    assert api.delete("/api/vhost-limits/v2/max-connections").status_code == 204
    assert api.get("/api/vhost-limits/v2").json() == []


def test_vhost_limits_max_queues_as_rabbitmq() -> None:
    api = Api()
    api.put("/api/vhosts/v2")
    api.put("/api/permissions/v2/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    assert api.put("/api/vhost-limits/v2/max-queues", json={"value": 1}).status_code == 204
    assert api.get("/api/vhost-limits/v2").json() == [{"vhost": "v2", "value": {"max-queues": 1}}]
    assert api.put("/api/queues/v2/a1", json={}).status_code == 201
    assert api.put("/api/queues/v2/a1", json={}).status_code == 204  # existing: fine
    refused = api.put("/api/queues/v2/a2", json={})
    assert refused.status_code == 400  # RabbitMQ 3.10.8's text, side by side
    assert refused.json()["reason"] == (
        "cannot declare queue 'a2': queue limit in vhost 'v2' (1) is reached"
    )
    assert api.delete("/api/vhost-limits/v2/max-queues").status_code == 204
    assert api.put("/api/queues/v2/a2", json={}).status_code == 201


def test_more_health_checks_and_users_without_permissions() -> None:
    api = Api()
    api.put("/api/users/lonely", json={"password": "p", "tags": ""})
    assert [u["name"] for u in api.get("/api/users/without-permissions").json()] == ["lonely"]
    for path in (
        "/api/healthchecks/node",
        "/api/healthchecks/node/any",
        "/api/health/checks/certificate-expiration/1/months",
    ):
        assert api.get(path).json() == {"status": "ok"}, path
    assert api.get("/api/health/checks/node-is-quorum-critical").json() == {
        "status": "ok",
        "reason": "single node cluster",
    }


def test_answers_are_not_cached_and_head_works() -> None:
    api = Api()
    answer = api.get("/api/overview")
    assert answer.headers["cache-control"] == "no-cache"
    assert answer.headers["content-type"] == "application/json"
    assert api.request("HEAD", "/api/queues").status_code == 200
    assert api.get("/api/queues/%2F/nope").headers["cache-control"] == "no-cache"


def test_names_with_slashes_percent_and_utf8_in_paths() -> None:
    api = Api()
    name = "a/b c%d é"
    path = "/api/queues/%2F/" + quote(name, safe="")
    assert api.put(path, json={}).status_code == 201
    assert name in api.broker.default_vhost.queues
    assert api.get(path).json()["name"] == name
    api.put("/api/vhosts/" + quote("v/1", safe=""))
    assert "v/1" in api.broker.vhosts
    assert api.get("/api/vhosts/v%2F1").json()["name"] == "v/1"
    assert api.delete(path).status_code == 204 and name not in api.broker.default_vhost.queues


def test_api_publishes_and_gets_count_in_the_node_totals() -> None:
    api = Api()
    api.put("/api/queues/%2F/q", json={})
    publish(api, "q", "a")
    publish(api, "nowhere", "b")
    get(api, "q", 5, "ack_requeue_false")
    stats = api.get("/api/overview").json()["message_stats"]
    assert stats["publish"] == 2 and stats["drop_unroutable"] == 1
    assert stats["get"] == 1 and stats["ack"] == 1 and stats["get_empty"] == 1
