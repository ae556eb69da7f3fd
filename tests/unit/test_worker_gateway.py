"""Worker 0's management and Prometheus gateways (amqpd/shell/workers/gateway.py): two
in-memory brokers stand for two workers (worker 0 holds "/", worker 1 holds "v1"; both hold
the whole access state), their apps reached in-process, as `unix_caller` reaches worker 0;
`unix_caller` itself over a real Unix socket at the end."""

from __future__ import annotations

import base64
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import ASGIApp

from amqpd.model.admin_commands import execute
from amqpd.model.broker import Broker
from amqpd.shell import metrics
from amqpd.shell.links.federation_status import FederationLinkStatus
from amqpd.shell.management import create_app
from amqpd.shell.workers.gateway import management_gateway, metrics_gateway
from amqpd.shell.workers.gateway_merge import NODE_SUMS, merge_nodes, merge_vhosts
from amqpd.shell.workers.worker_calls import Answer, Headers, asgi_call, unix_caller
from amqpd.wire.errors import CONNECTION_FORCED
from tests.unit.engine_driver import Client
from tests.unit.management_support import Api, FakeHost
from tests.unit.protocol_support import connect, connection_error

GUEST = ("guest", "guest")


def _grant(broker: Broker, vhost: str) -> None:
    execute(broker, {"group": "vhosts", "command": "add", "name": vhost})
    execute(
        broker,
        {
            "group": "users",
            "command": "set-permissions",
            "name": "guest",
            "vhost": vhost,
            "configure": ".*",
            "write": ".*",
            "read": ".*",
        },
    )


class Host(FakeHost):
    """FakeHost with the shovels in ``shovels`` running (the `BrokerHost` protocol in full)."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.shovels: list[dict[str, Any]] = []

    def shovel_status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return [item for item in self.shovels if vhost is None or item["vhost"] == vhost]

    def federation_status(self, vhost: str | None = None) -> list[FederationLinkStatus]:
        return []


class Node:
    """Two workers behind worker 0's gateways. Worker 0 also keeps a stale copy of "v1"
    holding the queue "ghost": rows of a vhost come from its owner only."""

    def __init__(self) -> None:
        self.brokers = [Broker(), Broker()]
        for broker in self.brokers:
            _grant(broker, "v1")  # the access state is the same on every worker
        self.brokers[1].delete_vhost("/")  # worker 1 holds v1 only
        self.placement = {"/": 0, "v1": 1}
        self.hosts = [Host(broker) for broker in self.brokers]
        self.apps: list[ASGIApp] = [create_app(host) for host in self.hosts]
        self.metric_apps: list[ASGIApp] = [metrics.create_app(host) for host in self.hosts]
        self.calls: list[tuple[int, str, str]] = []
        self.management = management_gateway(self.apps[0], 2, self.owner, self._call(self.apps))
        self.metrics = metrics_gateway(self.metric_apps[0], 2, self._call(self.metric_apps))
        self.direct(0, "PUT", "/api/queues/v1/ghost")  # worker 0's stale copy of v1

    def owner(self, vhost: str) -> int:
        return self.placement.get(vhost, 0)

    def _call(self, apps: list[ASGIApp]) -> Any:
        async def call(
            index: int, method: str, path: str, query: bytes, headers: Headers, body: bytes
        ) -> Answer:
            self.calls.append((index, method, path + ("?" + query.decode() if query else "")))
            return await asgi_call(apps[index], method, path, query, headers, body)

        return call

    def queues(self, index: int, vhost: str) -> set[str]:
        host = self.brokers[index].vhosts.get(vhost)
        return set(host.queues) if host is not None else set()

    def request(
        self,
        method: str,
        path: str,
        app: ASGIApp | None = None,
        peer: str = "127.0.0.1",
        auth: tuple[str, str] | None = GUEST,
        **options: Any,
    ) -> httpx.Response:
        async def run() -> httpx.Response:
            transport = httpx.ASGITransport(app=app or self.management, client=(peer, 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
                return await client.request(method, path, auth=auth, **options)

        return anyio.run(run)

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def direct(self, index: int, method: str, path: str, **options: Any) -> httpx.Response:
        """A request to one worker's own app, past the gateway."""
        return self.request(method, path, app=self.apps[index], **options)

    def publish(self, vhost: str, queue: str, count: int = 1, index: int | None = None) -> None:
        path = f"/api/exchanges/{quote(vhost, safe='')}/amq.default/publish"
        body = {
            "routing_key": queue,
            "payload": "x",
            "payload_encoding": "string",
            "properties": {},
        }
        for _ in range(count):
            if index is None:
                answer = self.request("POST", path, json=body)
            else:
                answer = self.direct(index, "POST", path, json=body)
            assert answer.json() == {"routed": True}

    def remote_calls(self) -> list[tuple[int, str, str]]:
        return [call for call in self.calls if call[0] != 0]


@pytest.fixture
def node() -> Iterator[Node]:
    yield Node()


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


# -- listings ----------------------------------------------------------------------------------
def test_queue_listing_merges_workers_and_drops_rows_of_vhosts_not_owned(node: Node) -> None:
    node.direct(0, "PUT", "/api/queues/%2F/q0")
    node.direct(1, "PUT", "/api/queues/v1/q1")
    assert "ghost" in _names(node.direct(0, "GET", "/api/queues").json())
    rows = node.get("/api/queues").json()
    assert [(row["vhost"], row["name"]) for row in rows] == [("/", "q0"), ("v1", "q1")]
    assert {index for index, _m, _p in node.calls} == {0, 1}  # both asked, 0 in-process


def test_sort_pagination_and_columns_apply_after_merging(node: Node) -> None:
    for vhost, name in (("%2F", "q0"), ("%2F", "a0"), ("v1", "q1"), ("v1", "b1")):
        index = 0 if vhost == "%2F" else 1
        assert node.direct(index, "PUT", f"/api/queues/{vhost}/{name}").status_code == 201
    page = node.get("/api/queues?sort=name&page=2&page_size=1&columns=name").json()
    assert page == {
        "filtered_count": 4,
        "item_count": 1,
        "items": [{"name": "b1"}],
        "page": 2,
        "page_count": 4,
        "page_size": 1,
        "total_count": 4,
    }
    reverse = node.get("/api/queues?sort=name&sort_reverse=true&columns=name").json()
    assert reverse == [{"name": n} for n in ("q1", "q0", "b1", "a0")]
    filtered = node.get("/api/queues?page=1&name=1&columns=name,vhost").json()
    assert filtered["items"] == [{"name": "b1", "vhost": "v1"}, {"name": "q1", "vhost": "v1"}]
    # the workers are asked for every row, in full
    asked = [path for index, _m, path in node.calls if index == 1]
    assert asked and all("page" not in path and "columns" not in path for path in asked)
    refused = node.get("/api/queues?page=0")
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_pagination_parameters"


def test_vhost_rows_come_from_their_owner(node: Node) -> None:
    node.direct(1, "PUT", "/api/queues/v1/q1")
    node.publish("v1", "q1")  # through the gateway: to worker 1
    node.publish("v1", "ghost", count=3, index=0)  # worker 0's stale copy
    rows = node.get("/api/vhosts").json()
    assert [(row["name"], row["messages"]) for row in rows] == [("/", 0), ("v1", 1)]
    assert node.get("/api/vhosts/v1").json()["messages"] == 1  # GET: the owner's


def test_bindings_consumers_and_exchanges_merge(node: Node) -> None:
    node.direct(0, "PUT", "/api/exchanges/%2F/e0", json={"type": "fanout"})
    node.direct(1, "PUT", "/api/exchanges/v1/e1", json={"type": "fanout"})
    node.direct(1, "PUT", "/api/queues/v1/q1")
    assert node.direct(1, "POST", "/api/bindings/v1/e/e1/q/q1", json={}).status_code == 201
    exchanges = {(row["vhost"], row["name"]) for row in node.get("/api/exchanges").json()}
    assert {("/", "e0"), ("v1", "e1")} <= exchanges
    assert ("/", "e1") not in exchanges and ("v1", "e0") not in exchanges
    bindings = [
        (row["vhost"], row["source"], row["destination"])
        for row in node.get("/api/bindings").json()
    ]
    assert ("v1", "e1", "q1") in bindings
    assert ("v1", "", "ghost") not in bindings  # worker 0's stale copy
    assert ("v1", "", "q1") in bindings


# -- where single requests go ------------------------------------------------------------------
def test_vhost_scoped_requests_go_to_the_owner(node: Node) -> None:
    assert node.request("PUT", "/api/queues/v1/made").status_code == 201
    assert "made" in node.queues(1, "v1") and "made" not in node.queues(0, "v1")
    assert node.get("/api/queues/v1/made").json()["name"] == "made"
    assert (1, "PUT", "/api/queues/v1/made") in node.calls
    # the default vhost is worker 0's: answered by the wrapped app, no call made
    node.calls.clear()
    assert node.request("PUT", "/api/queues/%2F/here").status_code == 201
    assert "here" in node.queues(0, "/") and node.calls == []
    assert node.request("DELETE", "/api/queues/v1/made").status_code == 204
    assert "made" not in node.queues(1, "v1")


def test_access_writes_stay_on_worker_0(node: Node) -> None:
    answer = node.request("PUT", "/api/users/x", json={"password": "pw", "tags": "management"})
    assert answer.status_code == 201
    assert "x" in node.brokers[0].access.state.users
    assert "x" not in node.brokers[1].access.state.users  # worker 0 would replicate it
    policy = {"pattern": ".*", "definition": {"max-length": 3}}
    assert node.request("PUT", "/api/policies/v1/p", json=policy).status_code == 201
    assert ("v1", "p") in node.brokers[0].access.state.policies
    assert node.request("PUT", "/api/vhosts/v2").status_code == 201
    assert "v2" in node.brokers[0].access.state.vhosts
    assert node.remote_calls() == []


def test_overview_sums_the_workers_totals(node: Node) -> None:
    node.direct(0, "PUT", "/api/queues/%2F/q0")
    node.direct(1, "PUT", "/api/queues/v1/q1")
    node.publish("/", "q0", count=2)
    node.publish("v1", "q1", count=3)
    one = [node.direct(i, "GET", "/api/overview").json() for i in (0, 1)]
    merged = node.get("/api/overview").json()
    for section, key in (
        ("object_totals", "queues"),
        ("object_totals", "exchanges"),
        ("queue_totals", "messages"),
        ("queue_totals", "messages_ready"),
    ):
        assert merged[section][key] == one[0][section][key] + one[1][section][key], key
    assert merged["queue_totals"]["messages"] == 5
    assert merged["node"] == one[0]["node"] and merged["listeners"] == one[0]["listeners"]


def test_nodes_sum_every_workers_memory_descriptors_and_sockets(node: Node) -> None:
    """``/api/nodes`` and ``/api/nodes/{name}`` show the one node with its workers' usage
    summed; the limits and everything else are worker 0's."""
    one = [node.direct(i, "GET", "/api/nodes").json()[0] for i in (0, 1)]
    [merged] = node.get("/api/nodes").json()
    for key in NODE_SUMS:
        assert merged[key] == one[0][key] + one[1][key], key
    assert merged["fd_total"] == one[0]["fd_total"] and merged["name"] == one[0]["name"]
    single = node.get("/api/nodes/" + quote(one[0]["name"], safe="")).json()
    assert single["sockets_used"] == one[0]["sockets_used"] + one[1]["sockets_used"]
    assert single["mem_used"] == one[0]["mem_used"] + one[1]["mem_used"]


def test_the_nodes_memory_breakdown_sums_every_workers(node: Node) -> None:
    """``/api/nodes/{name}/memory``: each category and total is the workers' sum."""
    path = "/api/nodes/" + quote(node.direct(0, "GET", "/api/nodes").json()[0]["name"], safe="")
    one = [node.direct(i, "GET", path + "/memory").json()["memory"] for i in (0, 1)]
    merged = node.get(path + "/memory").json()["memory"]
    assert merged["strategy"] == "rss"
    for key in ("binary", "queue_procs", "connection_other", "other_system"):
        assert merged[key] == one[0][key] + one[1][key], key
    assert merged["total"] == {k: one[0]["total"][k] + one[1]["total"][k] for k in one[0]["total"]}


def test_a_spread_vhosts_rows_are_summed_and_others_come_from_their_worker() -> None:
    zero = [{"name": "/", "messages": 3, "tracing": False}, {"name": "v1", "messages": 1}]
    one = [{"name": "/", "messages": 4, "tracing": False}, {"name": "v1", "messages": 9}]
    rows = merge_vhosts([zero, one], owner=lambda _name: 1, spread=lambda name: name == "/")
    assert rows == [
        {"name": "/", "messages": 7, "tracing": False},  # on both workers
        {"name": "v1", "messages": 9},  # worker 1's
    ]


def test_a_node_alarm_of_any_worker_is_the_nodes() -> None:
    quiet = {"name": "n", "mem_used": 10, "mem_alarm": False, "disk_free_alarm": False}
    alarmed = {"name": "n", "mem_used": 5, "mem_alarm": True, "disk_free_alarm": False}
    assert merge_nodes([[quiet], [alarmed]]) == [{**quiet, "mem_used": 15, "mem_alarm": True}]
    assert merge_nodes([quiet, quiet])["mem_alarm"] is False
    assert merge_nodes([{"error": "x"}, []]) == {"error": "x"}


def test_connection_found_on_worker_1(node: Node) -> None:
    client = connect(node.brokers[1], vhost="v1")
    [row] = node.get("/api/connections").json()
    assert row["vhost"] == "v1"
    path = "/api/connections/" + quote(row["name"], safe="")
    assert node.get(path).json()["name"] == row["name"]
    assert node.get(path + "/channels").json()[0]["number"] == 1
    [channel] = node.get("/api/channels").json()
    assert node.get("/api/channels/" + quote(channel["name"], safe="")).status_code == 200
    assert _names(node.get("/api/vhosts/v1/connections").json()) == [row["name"]]
    assert node.request("DELETE", path, headers={"X-Reason": "bye"}).status_code == 204
    assert connection_error(client)[:2] == (CONNECTION_FORCED, "CONNECTION_FORCED - bye")
    missing = node.get("/api/connections/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "Object Not Found"
    assert [index for index, _m, p in node.calls if p == "/api/connections/nope"] == [0, 1]


def test_errors_pass_through(node: Node) -> None:
    wrong = node.get("/api/queues", auth=("guest", "nope"))
    assert wrong.status_code == 401 and "WWW-Authenticate" in wrong.headers
    assert node.get("/api/queues/v1/nope").status_code == 404
    assert node.get("/api/queues/v1/nope").json()["error"] == "Object Not Found"
    # the client's address reaches worker 1: guest may only log in from loopback
    assert node.get("/api/queues/v1", peer="10.1.2.3").status_code == 401
    assert node.get("/api/queues", peer="10.1.2.3").status_code == 401
    assert node.get("/api/queues/v1", peer="127.0.0.1").status_code == 200
    forged = node.get("/api/queues/v1", peer="10.1.2.3", headers={"X-Forwarded-For": "127.0.0.1"})
    assert forged.status_code == 401


def test_alarm_of_one_worker_fails_the_node_check(node: Node) -> None:
    assert node.get("/api/health/checks/alarms").json() == {"status": "ok"}
    node.brokers[1].alarms.active["memory"] = None
    answer = node.get("/api/health/checks/alarms")
    assert answer.status_code == 503
    assert [alarm["resource"] for alarm in answer.json()["alarms"]] == ["memory"]


# -- definitions -------------------------------------------------------------------------------
def _queue(name: str, vhost: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "durable": True, "auto_delete": False, "arguments": {}}
    if vhost is not None:
        row["vhost"] = vhost
    return row


def test_definitions_export_takes_each_vhosts_topology_from_its_owner(node: Node) -> None:
    node.direct(0, "PUT", "/api/queues/%2F/q0")
    node.direct(1, "PUT", "/api/queues/v1/q1")
    document = node.get("/api/definitions").json()
    assert {(q["vhost"], q["name"]) for q in document["queues"]} == {("/", "q0"), ("v1", "q1")}
    assert {v["name"] for v in document["vhosts"]} == {"/", "v1"}
    assert node.get("/api/definitions/v1").json()["queues"][0]["name"] == "q1"


def test_definitions_import_sends_each_vhosts_topology_to_its_owner(node: Node) -> None:
    document = {
        "users": [],
        "queues": [_queue("i0", "/"), _queue("i1", "v1")],
        "exchanges": [],
        "bindings": [],
    }
    assert node.request("POST", "/api/definitions", json=document).status_code == 204
    assert "i0" in node.queues(0, "/") and "i1" in node.queues(1, "v1")
    assert "i1" not in node.queues(0, "v1")
    # one vhost's definitions: its policies to worker 0, its queues to worker 1
    scoped = {
        "queues": [_queue("p1")],
        "policies": [{"name": "cap", "pattern": ".*", "definition": {"max-length": 5}}],
    }
    assert node.request("POST", "/api/definitions/v1", json=scoped).status_code == 204
    assert "p1" in node.queues(1, "v1") and "p1" not in node.queues(0, "v1")
    assert ("v1", "cap") in node.brokers[0].access.state.policies
    assert ("v1", "cap") not in node.brokers[1].access.state.policies  # replication's job
    bad = node.request("POST", "/api/definitions/v1", json={"queues": "no"})
    assert bad.status_code == 400 and "must be a list" in bad.json()["reason"]


# -- Prometheus --------------------------------------------------------------------------------
def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], name: str, **labels: str) -> float:
    for family in families.values():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no sample {name} {labels}")


def test_metrics_merge_into_one_exposition(node: Node) -> None:
    node.direct(0, "PUT", "/api/queues/%2F/q0")
    node.direct(1, "PUT", "/api/queues/v1/q1")
    node.publish("v1", "q1", count=2)
    answer = node.request("GET", "/metrics", app=node.metrics, auth=None)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == metrics.CONTENT_TYPE
    text = answer.text
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # every family once
    families = _families(text)
    one = [
        _families(node.request("GET", "/metrics", app=app, auth=None).text)
        for app in node.metric_apps
    ]
    assert _value(families, "rabbitmq_queues") == sum(_value(f, "rabbitmq_queues") for f in one)
    assert _value(families, "rabbitmq_queue_messages") == 2
    assert len(families["rabbitmq_build_info"].samples) == 1
    per_object = _families(
        node.request("GET", "/metrics/per-object", app=node.metrics, auth=None).text
    )
    assert _value(per_object, "rabbitmq_queue_messages", vhost="v1", queue="q1") == 2
    assert _value(per_object, "rabbitmq_queue_messages", vhost="/", queue="q0") == 0


def test_metrics_gateway_gzips_and_passes_other_paths(node: Node) -> None:
    async def raw(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=node.metrics)
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            request = client.build_request("GET", path, headers={"Accept-Encoding": "gzip"})
            return await client.send(request, stream=True)

    answer = anyio.run(raw, "/metrics")
    assert answer.headers["content-encoding"] == "gzip"
    body = anyio.run(answer.aread)
    assert b"rabbitmq_queues" in body  # httpx decoded it
    assert anyio.run(raw, "/nowhere").status_code == 404


# -- unix_caller -------------------------------------------------------------------------------
def test_unix_caller_reaches_worker_k_over_its_socket_and_worker_0_in_process(node: Node) -> None:
    node.direct(1, "PUT", "/api/queues/v1/q1")
    directory = Path(tempfile.mkdtemp(prefix="gw", dir="/tmp"))
    path = directory / "w1.management"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    config = uvicorn.Config(
        node.apps[1], lifespan="off", log_config=None, access_log=False, forwarded_allow_ips="*"
    )
    server = uvicorn.Server(config)
    token = "Basic " + base64.b64encode(b"guest:guest").decode()

    def headers(peer: str) -> Headers:
        return [(b"authorization", token.encode()), (b"x-forwarded-for", peer.encode())]

    async def run() -> list[Answer]:
        call = unix_caller(node.apps[0], lambda index: directory / f"w{index}.management")
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, [listener])
            answers = [
                await call(
                    1, "GET", "/api/queues/v1", b"columns=name", headers("127.0.0.1:9"), b""
                ),
                await call(1, "GET", "/api/queues/v1", b"", headers("10.0.0.1:9"), b""),
                await call(1, "PUT", "/api/queues/v1/made", b"", headers("127.0.0.1:9"), b"{}"),
                await call(0, "GET", "/api/queues/%2F", b"columns=name", headers("[::1]:9"), b""),
                await call(0, "GET", "/api/queues/%2F", b"", headers("10.0.0.1:9"), b""),
            ]
            await call.aclose()
            server.should_exit = True
        return answers

    try:
        answers = anyio.run(run)
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        directory.rmdir()
    statuses = [status for status, _h, _b in answers]
    assert statuses == [200, 401, 201, 200, 401]
    assert answers[0][2] == b'[{"name":"q1"}]'
    assert "made" in node.queues(1, "v1")
    assert answers[3][2] == b"[]"


def test_links_are_listed_from_every_worker_that_runs_them(node: Node) -> None:
    node.hosts[0].shovels = [{"name": "s0", "vhost": "v1"}, {"name": "s2", "vhost": "/"}]
    node.hosts[1].shovels = [{"name": "s1", "vhost": "v1"}]
    assert _names(node.get("/api/shovels").json()) == ["s2", "s0", "s1"]
    assert _names(node.get("/api/shovels/v1").json()) == ["s0", "s1"]
    assert _names(node.get("/api/shovels/%2F").json()) == ["s2"]
    assert node.get("/api/shovels/nope").status_code == 404


def test_a_spread_vhost_is_answered_from_every_worker() -> None:
    # a vhost spread over both workers (docs/multicore.md "Stage 2"): each worker has every
    # exchange, and the queues it owns; the gateway merges the queues and lists the
    # exchanges once
    brokers = [Broker(), Broker()]
    for broker in brokers:
        _grant(broker, "s")
        broker.vhosts["s"].declare_exchange("x", "fanout", False, True, False, False, {})
    brokers[0].vhosts["s"].declare_queue("a", False, True, False, False, {}, None)
    brokers[1].vhosts["s"].declare_queue("b", False, True, False, False, {}, None)
    apps: list[ASGIApp] = [create_app(Host(broker)) for broker in brokers]

    async def call(
        index: int, method: str, path: str, query: bytes, headers: Headers, body: bytes
    ) -> Answer:
        return await asgi_call(apps[index], method, path, query, headers, body)

    gateway = management_gateway(apps[0], 2, lambda _vhost: 1, call, lambda v: v == "s")

    def request(method: str, path: str) -> httpx.Response:
        async def run() -> httpx.Response:
            transport = httpx.ASGITransport(app=gateway, client=("127.0.0.1", 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
                return await client.request(method, path, auth=GUEST)

        return anyio.run(run)

    def names(path: str, vhost: str = "s") -> list[str]:
        return sorted(row["name"] for row in request("GET", path).json() if row["vhost"] == vhost)

    assert names("/api/queues/s") == names("/api/queues") == ["a", "b"]
    assert names("/api/exchanges/s").count("x") == names("/api/exchanges").count("x") == 1
    assert request("GET", "/api/queues/s/b").json()["name"] == "b"  # from worker 1
    assert request("DELETE", "/api/queues/s/b").status_code == 204
    assert "b" not in brokers[1].vhosts["s"].queues
    exported = request("GET", "/api/definitions").json()
    assert sorted(q["name"] for q in exported["queues"] if q["vhost"] == "s") == ["a"]
    assert [e["name"] for e in exported["exchanges"] if e["vhost"] == "s"] == ["x"]
    clients = [Client(broker) for broker in brokers]  # one connection on each worker
    for client in clients:
        client.handshake(vhost="s")
    connections = request("GET", "/api/vhosts/s/connections").json()
    assert [row["vhost"] for row in connections] == ["s", "s"]


class _Port:
    """The `ReplicaPort` a spread vhost has on worker ``worker`` (only its index is read)."""

    def __init__(self, worker: int) -> None:
        self.worker = worker


def test_a_spread_vhosts_exchanges_are_counted_once() -> None:
    # docs/multicore.md "Stage 2": each worker holds every exchange of the spread vhost "s";
    # worker 1 also holds "v1", which is its own
    brokers = [Broker(), Broker()]
    for index, broker in enumerate(brokers):
        for vhost in ("s", "v1"):
            _grant(broker, vhost)
        Api(broker).add_user("watcher", "management", vhosts=("s",))  # narrowed totals
        host = broker.vhosts["s"]
        exchange = host.declare_exchange("x", "fanout", False, True, False, False, {})
        queue = host.declare_queue("ab"[index], False, True, False, False, {}, None)
        host.bind(exchange, queue, "", {})  # each worker its own queue's binding (a sketch)
    brokers[1].delete_vhost("/")
    brokers[0].delete_vhost("v1")
    brokers[1].vhosts["v1"].declare_exchange("y", "direct", False, True, False, False, {})
    hosts = [Host(broker) for broker in brokers]
    apps: list[ASGIApp] = [create_app(host) for host in hosts]
    metric_apps: list[ASGIApp] = [metrics.create_app(host) for host in hosts]

    def caller(targets: list[ASGIApp]) -> Any:
        async def call(
            index: int, method: str, path: str, query: bytes, headers: Headers, body: bytes
        ) -> Answer:
            return await asgi_call(targets[index], method, path, query, headers, body)

        return call

    placed = {"/": 0, "v1": 1}.__getitem__
    gateway = management_gateway(apps[0], 2, placed, caller(apps), lambda v: v == "s")
    metrics_app = metrics_gateway(metric_apps[0], 2, caller(metric_apps))

    def get(app: ASGIApp, path: str, auth: tuple[str, str] | None = GUEST) -> httpx.Response:
        async def run() -> httpx.Response:
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
                return await client.get(path, auth=auth)

        return anyio.run(run)

    publish = {"routing_key": "", "payload": "x", "payload_encoding": "string", "properties": {}}
    for index, count in ((0, 2), (1, 3)):
        for _ in range(count):
            answer = Api(brokers[index]).post("/api/exchanges/s/x/publish", json=publish)
            assert answer.json() == {"routed": True}
    for index, broker in enumerate(brokers):
        broker.vhosts["s"].replica = _Port(index)  # type: ignore[assignment]

    exchanges = {
        (row["vhost"], row["name"]) for row in get(gateway, "/api/exchanges").json()
    }  # as listed: each of "s" once (worker 0's), "v1"'s from worker 1
    assert ("s", "x") in exchanges and ("v1", "y") in exchanges
    totals = get(gateway, "/api/overview").json()["object_totals"]
    assert totals["exchanges"] == len(exchanges)
    assert totals["queues"] == 2  # "a" on worker 0, "b" on worker 1
    watcher = ("watcher", "pw")
    narrowed = get(gateway, "/api/overview", auth=watcher).json()["object_totals"]
    assert narrowed["exchanges"] == len(brokers[0].vhosts["s"].exchanges)
    assert narrowed["queues"] == 2

    tables = (
        "exchange_names",
        "exchange_bindings",
        "vhost_status",
        "channel_queue_exchange_metrics",
    )
    families = "&".join("family=" + name for name in tables)
    text = get(metrics_app, "/metrics/detailed?" + families, auth=None).text
    scraped = _families(text)
    x = {"vhost": "s", "exchange": "x"}
    assert _value(scraped, "rabbitmq_cluster_exchange_name", **x) == 1
    assert _value(scraped, "rabbitmq_cluster_exchange_bindings", **x) == 1  # worker 0's
    assert _value(scraped, "rabbitmq_cluster_exchange_name", vhost="v1", exchange="y") == 1
    assert _value(scraped, "rabbitmq_cluster_vhost_status", vhost="s") == 1
    # a counter: the copies each worker routed, summed
    routed = {"exchange_vhost": "s", "exchange": "x"}
    assert _value(scraped, "rabbitmq_detailed_queue_messages_published_total", **routed) == 5
