"""The management HTTP API over real sockets: Debian's rabbitmqadmin against it, a pika
connection closed through it, a persistent publish that survives a restart, and the AMQP
side serving on while the API is misused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import quote

import httpx
import pika
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest, node_under_test

RABBITMQADMIN = "/usr/bin/rabbitmqadmin"


@pytest.fixture
def broker(http_server: Server | NodeUnderTest) -> Server | NodeUnderTest:
    """A fresh broker with its management API (under AMQPD_TEST_WORKERS, a node's)."""
    return http_server


def api(server: Server | NodeUnderTest) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{server.management_port}", auth=("guest", "guest"), timeout=60
    )


def admin(server: Server | NodeUnderTest, *args: str) -> str:
    """Run the real rabbitmqadmin; it must succeed."""
    done = subprocess.run(
        [
            RABBITMQADMIN,
            "-H",
            "127.0.0.1",
            "-P",
            str(server.management_port),
            "-u",
            "guest",
            "-p",
            "guest",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def tsv(server: Server | NodeUnderTest, what: str, *columns: str) -> list[list[str]]:
    """``rabbitmqadmin -f tsv -q list WHAT [columns]`` rows (quiet: no header line)."""
    out = admin(server, "-f", "tsv", "-q", "list", what, *columns)
    return [line.split("\t") for line in out.splitlines() if line]


def test_rabbitmqadmin_lists_declares_publishes_gets_and_closes(
    broker: Server | NodeUnderTest, tmp_path: Path
) -> None:
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", broker.port, client_properties={"connection_name": "watched"}
        )
    )
    try:
        ch = conn.channel()
        ch.queue_declare("listed", durable=True)
        ch.basic_consume("listed", lambda *a: None, consumer_tag="ctag-1")
        admin(broker, "declare", "queue", "name=q1", "durable=false")
        admin(broker, "declare", "exchange", "name=e1", "type=fanout")
        admin(broker, "declare", "binding", "source=e1", "destination=q1")
        assert ["q1", "0"] in tsv(broker, "queues")
        assert ["listed", "0"] in tsv(broker, "queues")
        assert ["e1", "fanout"] in tsv(broker, "exchanges")
        assert ["e1", "q1", ""] in tsv(broker, "bindings")
        assert ["", "q1", "q1"] in tsv(broker, "bindings")
        [connection] = tsv(broker, "connections", "name", "user", "channels", "user_provided_name")
        assert connection[1:] == ["guest", "1", "watched"]
        [channel] = tsv(broker, "channels", "name", "user")
        assert channel == [connection[0] + " (1)", "guest"]
        consumers = admin(broker, "-f", "raw_json", "list", "consumers")
        assert [c["consumer_tag"] for c in json.loads(consumers)] == ["ctag-1"]
        assert "ctag-1" in admin(broker, "list", "consumers")  # the table of every field
        assert [row[0] for row in tsv(broker, "users", "name", "tags")] == ["guest"]
        assert [row[0] for row in tsv(broker, "vhosts")] == ["/"]

        admin(broker, "publish", "exchange=e1", "routing_key=any", "payload=hello")
        admin(broker, "publish", "routing_key=q1", "payload=second")
        got = json.loads(
            admin(
                broker, "-f", "raw_json", "get", "queue=q1", "count=5", "ackmode=ack_requeue_false"
            )
        )
        assert [m["payload"] for m in got] == ["hello", "second"]
        assert json.loads(admin(broker, "-f", "raw_json", "get", "queue=q1")) == []

        export = tmp_path / "defs.json"
        admin(broker, "export", str(export))
        document = json.loads(export.read_text())
        assert "listed" in {q["name"] for q in document["queues"]}
        document["queues"].append(
            {
                "name": "from-import",
                "vhost": "/",
                "durable": True,
                "auto_delete": False,
                "arguments": {},
            }
        )
        export.write_text(json.dumps(document))
        admin(broker, "import", str(export))
        assert "from-import" in {row[0] for row in tsv(broker, "queues")}

        admin(broker, "delete", "queue", "name=q1")
        admin(broker, "delete", "exchange", "name=e1")
        names = {row[0] for row in tsv(broker, "queues")}
        assert "q1" not in names and "e1" not in {row[0] for row in tsv(broker, "exchanges")}

        admin(broker, "close", "connection", f"name={connection[0]}")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            conn.process_data_events(time_limit=30)
            conn.process_data_events(time_limit=30)
        assert closed.value.reply_code == 320
        assert closed.value.reply_text == "CONNECTION_FORCED - Closed via management plugin"
    finally:
        if conn.is_open:
            conn.close()


def test_delete_connection_closes_it_with_the_x_reason(broker: Server | NodeUnderTest) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    other = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    client = api(broker)
    try:
        local_port = conn._impl._transport._sock.getsockname()[1]
        [name] = [
            c["name"] for c in client.get("/api/connections").json() if c["peer_port"] == local_port
        ]
        answer = client.delete(
            "/api/connections/" + quote(name, safe=""), headers={"X-Reason": "maintenance"}
        )
        assert answer.status_code == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            conn.process_data_events(time_limit=30)
            conn.process_data_events(time_limit=30)
        assert (closed.value.reply_code, closed.value.reply_text) == (
            320,
            "CONNECTION_FORCED - maintenance",
        )
        # the other connection and the API keep serving after bad requests
        for bad in (
            client.put("/api/queues/%2F/q", content=b"{"),
            client.post(
                "/api/queues/%2F/nope/get", json={"count": 1, "ackmode": "x", "encoding": "auto"}
            ),
            client.get("/api/queues/nope"),
            client.request("PATCH", "/api/overview"),
            httpx.get(
                f"http://127.0.0.1:{broker.management_port}/api/overview",
                auth=("guest", "x"),
                timeout=60,
            ),
        ):
            assert bad.status_code in (400, 401, 404, 405)
            assert "Traceback" not in bad.text
        ch = other.channel()
        ch.queue_declare("still-serving")
        assert client.get("/api/queues/%2F/still-serving").status_code == 200
    finally:
        client.close()
        for c in (conn, other):
            if c.is_open:
                c.close()


def test_publish_users_vhosts_permissions_survive_a_restart(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with (
        node_under_test(tmp_path_factory, http=True, data_dir=data) as server,
        api(server) as client,
    ):
        assert client.put("/api/queues/%2F/kept", json={"durable": True}).status_code == 201
        body = {
            "routing_key": "kept",
            "payload": "persisted",
            "payload_encoding": "string",
            "properties": {"delivery_mode": 2},
        }
        assert client.post("/api/exchanges/%2F/amq.default/publish", json=body).json() == {
            "routed": True
        }
        assert client.put("/api/vhosts/kept-vhost").status_code == 201
        tags = {"password": "pw", "tags": "monitoring"}
        assert client.put("/api/users/kept-user", json=tags).status_code == 201
        rights = {"configure": "", "write": ".*", "read": ".*"}
        assert client.put("/api/permissions/kept-vhost/kept-user", json=rights).status_code == 201
    with (
        node_under_test(tmp_path_factory, http=True, data_dir=data) as server,
        api(server) as client,
    ):
        got = client.post(
            "/api/queues/%2F/kept/get",
            json={"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"},
        )
        assert [m["payload"] for m in got.json()] == ["persisted"]
        who = client.get("/api/whoami", auth=("kept-user", "pw")).json()
        assert who == {"name": "kept-user", "tags": ["monitoring"]}
        kept = client.get("/api/permissions/kept-vhost/kept-user").json()
        assert (kept["configure"], kept["write"]) == ("", ".*")


def test_rabbitmqadmin_declares_lists_and_deletes_policies(broker: Server | NodeUnderTest) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("capped-q")
        admin(
            broker,
            "declare",
            "policy",
            "name=cap",
            "pattern=^capped-",
            'definition={"max-length": 3}',
            "apply-to=queues",
            "priority=2",
        )
        admin(
            broker,
            "declare",
            "operator_policy",
            "name=op-cap",
            "pattern=^capped-",
            'definition={"max-length": 2}',
        )
        assert tsv(broker, "policies", "vhost", "name", "pattern", "apply-to", "priority") == [
            ["/", "cap", "^capped-", "queues", "2"]
        ]
        [operator_row] = tsv(broker, "operator_policies", "name", "definition", "apply-to")
        assert operator_row[0] == "op-cap" and json.loads(operator_row[1]) == {"max-length": 2}
        assert operator_row[2] == "all"
        for n in range(5):
            ch.basic_publish("", "capped-q", f"m{n}".encode())
        with api(broker) as client:
            queue = client.get("/api/queues/%2F/capped-q").json()
            # one vhost's (with workers, worker 0 answers for a vhost another one serves)
            [policy] = client.get("/api/policies/%2F").json()
            assert [op["name"] for op in client.get("/api/operator-policies/%2F").json()] == [
                "op-cap"
            ]
            assert client.get("/api/vhost-limits/%2F").status_code == 200
        assert policy["name"] == "cap"
        assert (queue["policy"], queue["operator_policy"]) == ("cap", "op-cap")
        assert queue["effective_policy_definition"] == {"max-length": 2}
        assert ch.queue_declare("capped-q", passive=True).method.message_count == 2
        bodies = [ch.basic_get("capped-q", auto_ack=True)[2] for _ in range(2)]
        assert bodies == [b"m3", b"m4"]  # drop-head: the oldest were dropped

        admin(broker, "delete", "operator_policy", "name=op-cap")
        admin(broker, "delete", "policy", "name=cap")
        assert tsv(broker, "policies") == [] and tsv(broker, "operator_policies") == []
        for n in range(5):
            ch.basic_publish("", "capped-q", f"n{n}".encode())
        assert ch.queue_declare("capped-q", passive=True).method.message_count == 5
    finally:
        if conn.is_open:
            conn.close()


def test_policies_set_over_http_survive_a_restart(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    policy = {"pattern": "^kept", "definition": {"max-length": 1}, "apply-to": "queues"}
    with (
        node_under_test(tmp_path_factory, http=True, data_dir=data) as server,
        api(server) as client,
    ):
        assert client.put("/api/policies/%2F/kept-policy", json=policy).status_code == 201
        operator = {"pattern": "^kept", "definition": {"message-ttl": 60000}, "priority": 3}
        assert client.put("/api/operator-policies/%2F/kept-op", json=operator).status_code == 201
        assert client.put("/api/policies/%2F/dropped", json=policy).status_code == 201
        assert client.delete("/api/policies/%2F/dropped").status_code == 204
    with (
        node_under_test(tmp_path_factory, http=True, data_dir=data) as server,
        api(server) as client,
    ):
        assert [p["name"] for p in client.get("/api/policies").json()] == ["kept-policy"]
        kept = client.get("/api/operator-policies/%2F/kept-op").json()
        assert (kept["definition"], kept["priority"]) == ({"message-ttl": 60000}, 3)
        assert client.put("/api/queues/%2F/kept-q", json={"durable": False}).status_code == 201
        queue = client.get("/api/queues/%2F/kept-q").json()
        assert queue["effective_policy_definition"] == {"max-length": 1, "message-ttl": 60000}
