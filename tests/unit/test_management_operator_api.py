"""RabbitMQ 3.10.8's operator endpoints (user limits, global parameters, topic permissions,
node memory, churn rates), the definitions layout RabbitMQ exports (operator policies as
``operator_policy`` parameters, user limits, ha-* policies) and bounded JSON bodies, through
the management app without sockets. Each expected shape and text was read from a RabbitMQ
3.10.8 node (Debian's package, management plugin) with the same requests."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pamqp import commands

import amqpd
from amqpd.engine import rates
from amqpd.model import bounded_json
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.model.definitions import export_definitions, import_definitions, topology
from amqpd.model.global_parameters import ensure_cluster_id
from amqpd.wire.errors import NOT_ALLOWED
from persistence.journal import Journal
from tests.unit.engine_driver import Client
from tests.unit.management_support import Api
from tests.unit.protocol_support import connect, connection_error, declare, publish_frames

# ``rabbitmqctl export_definitions -`` of a RabbitMQ 3.10.8 node after set_user_limits,
# set_vhost_limits, set_operator_policy and a policy with classic mirroring keys (the
# operator policy's definition comes as [key, value] pairs in this format)
RABBIT_EXPORT: dict[str, Any] = {
    "bindings": [],
    "exchanges": [],
    "global_parameters": [],
    "parameters": [
        {
            "component": "operator_policy",
            "name": "op1",
            "value": {
                "apply-to": "queues",
                "definition": [["max-length", 100]],
                "pattern": "^q",
                "priority": 0,
            },
            "vhost": "v1",
        },
        {
            "component": "vhost-limits",
            "name": "limits",
            "value": {"max-connections": 5},
            "vhost": "v1",
        },
    ],
    "permissions": [
        {"configure": ".*", "read": ".*", "user": "alice", "vhost": "v1", "write": ".*"},
        {"configure": ".*", "read": ".*", "user": "guest", "vhost": "/", "write": ".*"},
    ],
    "policies": [
        {
            "apply-to": "queues",
            "definition": {
                "ha-mode": "exactly",
                "ha-params": 2,
                "ha-promote-on-failure": "always",
                "ha-promote-on-shutdown": "always",
                "ha-sync-mode": "automatic",
                "message-ttl": 60000,
            },
            "name": "ha1",
            "pattern": "^ha\\.",
            "priority": 0,
            "vhost": "v1",
        }
    ],
    "queues": [
        {"arguments": {}, "auto_delete": False, "durable": True, "name": "q1", "vhost": "v1"},
        {"arguments": {}, "auto_delete": False, "durable": True, "name": "ha.1", "vhost": "v1"},
    ],
    "rabbit_version": "3.10.8",
    "rabbitmq_version": "3.10.8",
    "topic_permissions": [],
    "users": [
        {
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "limits": {"max-channels": 20, "max-connections": 10},
            "name": "alice",
            "password_hash": "RrfoFwLK/1D/ZKX+NnKsZQlKLr213jtcxnRTlexakZBcVvW1",
            "tags": ["monitoring"],
        },
        {
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "limits": {},
            "name": "guest",
            "password_hash": "XBs7RZK0kLJEw9AGj3I0c6e3XTRL1HSxfxl0B8P0rKGfW6zC",
            "tags": ["administrator"],
        },
    ],
    "vhosts": [
        {"limits": [], "metadata": {"description": "Default virtual host", "tags": []},
         "name": "/"},
        {"limits": [["max-connections", 5]], "metadata": {"description": "", "tags": ""},
         "name": "v1"},
    ],
}  # fmt: skip


# the keys of RabbitMQ 3.10.8's GET /api/nodes/{node}/memory ``memory`` object, in its order
RABBIT_MEMORY_KEYS = (
    "connection_readers", "connection_writers", "connection_channels", "connection_other",
    "queue_procs", "queue_slave_procs", "quorum_queue_procs", "quorum_queue_dlx_procs",
    "stream_queue_procs", "stream_queue_replica_reader_procs",
    "stream_queue_coordinator_procs", "plugins", "other_proc", "metrics", "mgmt_db", "mnesia",
    "quorum_ets", "other_ets", "binary", "msg_index", "code", "atom", "other_system",
    "allocated_unused", "reserved_unallocated", "strategy", "total",
)  # fmt: skip


def _import(document: dict[str, Any]) -> tuple[Broker, dict[str, int], list[str]]:
    broker = Broker()
    problems: list[str] = []
    counts = import_definitions(broker, copy.deepcopy(document), problems)
    return broker, counts, problems


def test_a_rabbitmq_export_imports_whole_and_counts_right() -> None:
    broker, counts, problems = _import(RABBIT_EXPORT)
    assert problems == []
    assert counts["operator_policies"] == 1 and counts["policies"] == 1
    assert counts["parameters"] == 1  # the vhost limit, applied
    state = broker.access.state
    assert state.user_limits == {"alice": {"max-channels": 20, "max-connections": 10}}
    assert state.vhosts["v1"].max_connections == 5
    assert state.operator_policies[("v1", "op1")].definition == {"max-length": 100}
    queues = broker.vhosts["v1"].queues
    assert queues["q1"].settings.max_length == 100  # the operator policy applies
    assert queues["ha.1"].settings.message_ttl == 60000  # the ha-* keys do not stop the rest


def test_exporting_again_loses_nothing_in_rabbitmqs_layout() -> None:
    broker, _counts, _problems = _import(RABBIT_EXPORT)
    exported = json.loads(json.dumps(export_definitions(broker.access.state, *topology(broker))))
    assert exported["rabbit_version"] == exported["rabbitmq_version"] == "3.10.8"
    assert "operator_policies" not in exported
    by_component = {p["component"]: p for p in exported["parameters"]}
    assert by_component["operator_policy"] == {
        "value": {
            "pattern": "^q",
            "definition": {"max-length": 100},
            "priority": 0,
            "apply-to": "queues",
        },
        "vhost": "v1",
        "component": "operator_policy",
        "name": "op1",
    }
    assert by_component["vhost-limits"]["value"] == {"max-connections": 5}
    users = {u["name"]: u for u in exported["users"]}
    assert users["alice"]["limits"] == {"max-channels": 20, "max-connections": 10}
    assert users["guest"]["limits"] == {}
    assert exported["policies"] == RABBIT_EXPORT["policies"]  # ha-* keys kept
    again, _counts, problems = _import(exported)
    assert problems == []
    assert again.access.state.user_limits == broker.access.state.user_limits
    assert again.access.state.operator_policies == broker.access.state.operator_policies


def test_vhost_max_queues_is_kept_and_unknown_limits_are_reported() -> None:
    document = copy.deepcopy(RABBIT_EXPORT)
    document["parameters"][1]["value"]["max-queues"] = 7
    broker, counts, problems = _import(document)
    assert problems == [] and counts["parameters"] == 1
    assert broker.access.state.vhosts["v1"].max_queues == 7
    assert broker.vhosts["v1"].max_queues == 7
    exported = export_definitions(broker.access.state, *topology(broker))
    [limits] = [p for p in exported["parameters"] if p["component"] == "vhost-limits"]
    assert limits["value"] == {"max-connections": 5, "max-queues": 7}
    document["parameters"][1]["value"]["max-streams"] = 7  # no such limit in amqpd
    _broker, counts, problems = _import(document)
    assert problems == [
        "vhost limit 'max-streams' of vhost 'v1': not supported by amqpd (it enforces "
        "max-connections, max-queues)"
    ]
    assert counts["parameters"] == 0


def test_user_limits_api_as_rabbitmq() -> None:
    api = Api()
    api.add_user("alice", "monitoring")
    assert api.get("/api/user-limits").json() == []
    assert api.get("/api/user-limits/alice").json() == []
    assert api.get("/api/user-limits/nobody").status_code == 404
    put = api.put("/api/user-limits/alice/max-connections", json={"value": 10})
    assert put.status_code == 204
    assert api.put("/api/user-limits/alice/max-channels", json={"value": -1}).status_code == 204
    expected = [{"user": "alice", "value": {"max-channels": -1, "max-connections": 10}}]
    assert api.get("/api/user-limits").json() == expected
    assert api.get("/api/user-limits/alice").json() == expected
    assert api.get("/api/users/alice").json()["limits"] == expected[0]["value"]
    bogus = api.put("/api/user-limits/alice/bogus", json={"value": 3})
    assert bogus.status_code == 400
    assert bogus.json()["reason"] == 'Unrecognised terms [{<<"bogus">>,3}] in user-limits'
    text = api.put("/api/user-limits/alice/max-channels", json={"value": "x"})
    assert text.json()["reason"] == 'max-channels should be a number, actually was <<"x">>'
    nobody = api.put("/api/user-limits/nobody/max-channels", json={"value": 3})
    assert nobody.status_code == 400 and nobody.json()["reason"] == ["no_such_user", "nobody"]
    missing = api.put("/api/user-limits/alice/max-channels", json={})
    assert missing.json()["reason"] == "[{key_missing,value}]"
    assert api.delete("/api/user-limits/alice/max-channels").status_code == 204
    assert api.delete("/api/user-limits/alice/max-channels").status_code == 204
    assert api.get("/api/user-limits/alice").json() == [
        {"user": "alice", "value": {"max-connections": 10}}
    ]


def test_user_limits_are_enforced_with_rabbitmqs_texts() -> None:
    api = Api()
    api.put("/api/user-limits/guest/max-connections", json={"value": 1})
    api.put("/api/user-limits/guest/max-channels", json={"value": 2})
    first = connect(api.broker, 1, 2)
    second = Client(api.broker)
    _number, close = second.handshake()[-1]
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == NOT_ALLOWED
    assert close.reply_text == (
        "NOT_ALLOWED - connection refused for user 'guest': user connection limit (1) is reached"
    )
    first.send(3, commands.Channel.Open())
    code, text, _cls, _method = connection_error(first)
    assert code == NOT_ALLOWED
    assert text == (
        "NOT_ALLOWED - number of channels opened for user 'guest' has reached the maximum "
        "allowed user limit of (2)"
    )


def test_global_parameters_list_the_cluster_id() -> None:
    api = Api()
    ensure_cluster_id(api.broker.access.state)
    [item] = api.get("/api/global-parameters").json()
    assert item["name"] == "internal_cluster_id"
    assert item["value"].startswith("rabbitmq-cluster-id-") and len(item["value"]) == 42
    assert api.get("/api/global-parameters/internal_cluster_id").json() == item
    assert api.get("/api/global-parameters/nope").status_code == 404
    assert api.put("/api/global-parameters/foo", json={"value": {"a": 1}}).status_code == 201
    assert api.put("/api/global-parameters/foo", json={"value": 2}).status_code == 204
    assert api.put("/api/global-parameters/foo", json={"x": 1}).json()["reason"] == (
        "[{key_missing,value}]"
    )
    assert api.get("/api/global-parameters/foo").json() == {"name": "foo", "value": 2}
    assert api.delete("/api/global-parameters/foo").status_code == 204
    assert api.delete("/api/global-parameters/foo").status_code == 404
    assert not ensure_cluster_id(api.broker.access.state)  # made once


def test_topic_permissions_are_empty_and_refused_not_ignored() -> None:
    api = Api()
    assert api.get("/api/topic-permissions").json() == []
    assert api.get("/api/users/guest/topic-permissions").json() == []
    assert api.get("/api/vhosts/%2F/topic-permissions").json() == []
    assert api.get("/api/users/nobody/topic-permissions").status_code == 404
    put = api.put("/api/topic-permissions/%2F/guest", json={"exchange": "amq.topic", "write": ".*"})
    assert put.status_code == 400 and "not supported by amqpd" in put.json()["reason"]


def test_node_memory_has_rabbitmqs_shape() -> None:
    api = Api()
    client = connect(api.broker)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.received()
    answer = api.get("/api/nodes/amqpd@test/memory")
    assert answer.status_code == 200
    memory = answer.json()["memory"]
    assert set(memory) == set(RABBIT_MEMORY_KEYS)  # exactly RabbitMQ 3.10.8's keys
    assert memory["strategy"] == "rss"
    assert set(memory["total"]) == {"erlang", "rss", "allocated"}
    for key in ("connection_other", "queue_procs", "binary", "msg_index", "other_system"):
        assert isinstance(memory[key], int)
    assert memory["connection_other"] > 0 and memory["queue_procs"] > 0
    assert api.get("/api/nodes/rabbit@elsewhere/memory").status_code == 404


def test_overview_has_churn_rates_with_rabbitmqs_keys() -> None:
    api = Api()
    sampler = rates.RateSampler(api.broker)
    sampler.sample(0.0)
    client = connect(api.broker)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.received()
    sampler.sample(5.0)
    churn = api.get("/api/overview").json()["churn_rates"]
    assert churn["connection_created"] == 1 and churn["channel_created"] == 1
    assert churn["queue_declared"] == 1 and churn["queue_created"] == 1
    assert churn["connection_created_details"] == {"rate": 0.2}
    assert set(churn) == {
        f"{key}{suffix}"
        for key in (
            "channel_closed",
            "channel_created",
            "connection_closed",
            "connection_created",
            "queue_created",
            "queue_declared",
            "queue_deleted",
        )
        for suffix in ("", "_details")
    }


def test_one_rabbitmq_version_everywhere() -> None:
    api = Api()
    overview = api.get("/api/overview").json()
    assert overview["rabbitmq_version"] == overview["management_version"] == "3.10.8"
    assert amqpd.RABBITMQ_VERSION == "3.10.8"


def test_deeply_nested_json_is_a_clear_400_everywhere() -> None:
    api = Api()
    deep = "[" * 5000 + "]" * 5000
    for path in ("/api/definitions", "/api/queues/%2F/q", "/api/policies/%2F/p"):
        method = api.post if path == "/api/definitions" else api.put
        answer = method(path, content=deep, headers={"content-type": "application/json"})
        assert answer.status_code == 400, path
        assert answer.json()["reason"] == "JSON nested deeper than 100 levels"
    nested: Any = 1
    for _ in range(150):  # under the parser's own bound, over amqpd's
        nested = {"a": nested}
    answer = api.put("/api/queues/%2F/q", json={"arguments": nested})
    assert answer.status_code == 400
    assert api.put("/api/queues/%2F/q", json={"arguments": {"x-a": {"b": [1]}}}).status_code == 201


def test_parameters_list_vhost_limits_and_operator_policies_as_rabbitmq() -> None:
    broker, _counts, _problems = _import(RABBIT_EXPORT)
    api = Api(broker)
    listed = api.get("/api/parameters").json()
    assert {(p["component"], p["vhost"], p["name"]) for p in listed} == {
        ("operator_policy", "v1", "op1"),
        ("vhost-limits", "v1", "limits"),
    }
    assert api.get("/api/parameters/operator_policy/v1/op1").json() == {
        "value": {
            "pattern": "^q",
            "definition": {"max-length": 100},
            "priority": 0,
            "apply-to": "queues",
        },
        "vhost": "v1",
        "component": "operator_policy",
        "name": "op1",
    }
    assert api.get("/api/parameters/vhost-limits").json() == [
        {
            "value": {"max-connections": 5},
            "vhost": "v1",
            "component": "vhost-limits",
            "name": "limits",
        }
    ]
    assert api.get("/api/parameters/vhost-limits/v1/nope").status_code == 404


def test_queue_listing_counts_persistent_and_paged_out_messages() -> None:
    api = Api(Broker(BrokerConfig(), Journal()))
    client = connect(api.broker)
    declare(client, 1, "durable", durable=True)
    for _ in range(3):
        client.send(1, *publish_frames("durable", b"12345", delivery_mode=2))
    client.send(1, *publish_frames("durable", b"transient"))
    client.received()
    queue = api.broker.vhosts["/"].queues["durable"]
    paged = next(iter(queue.ready)).message
    paged.body = None  # paged out, as paging.page_out does it
    queue.residency.dropped(paged)
    item = api.get("/api/queues/%2F/durable").json()
    assert (item["messages_persistent"], item["message_bytes_persistent"]) == (3, 15)
    assert (item["messages_paged_out"], item["message_bytes_paged_out"]) == (1, 5)
    assert (item["messages_ram"], item["message_bytes_ram"]) == (3, 19)
    assert (item["messages_ready_ram"], item["messages_unacknowledged_ram"]) == (3, 0)


def test_bounded_json_refuses_deep_documents_with_one_text() -> None:
    assert bounded_json.loads('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    for text in ("[" * 5000 + "]" * 5000, "[" * 101 + "]" * 101):
        with pytest.raises(ValueError, match=r"^JSON nested deeper than 100 levels$"):
            bounded_json.loads(text)
    assert bounded_json.loads("[" * 100 + "]" * 100) is not None
    with pytest.raises(ValueError):
        bounded_json.loads("{not json")
