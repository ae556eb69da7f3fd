"""Definitions that round-trip with RabbitMQ 3.10.8, both ways, as an operator moves them:
a private RabbitMQ node is given users with limits, a vhost limit, an operator policy, a
policy with classic mirroring keys and some topology (rabbitmqctl, pika); its own export
(``rabbitmqctl export_definitions``) is imported into amqpd with Debian's ``rabbitmqadmin
import``; amqpd's export (``rabbitmqadmin export``) is imported back
into the emptied RabbitMQ node (``rabbitmqctl import_definitions``), whose export then
equals the first one: nothing is lost either way."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from amqpd.model.broker import BrokerConfig
from amqpd.shell.server import Server, ServerConfig, background_server
from tests.integration.rabbit_node import RABBIT_REASON, RabbitNode

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitNode]:
    if RABBIT_REASON is not None:
        pytest.fail(f"these tests need RabbitMQ: {RABBIT_REASON}")
    node = RabbitNode(prefix="defs")
    try:
        node.wait()
        yield node
    finally:
        node.stop()


def ctl(rabbit: RabbitNode, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["rabbitmqctl", "-n", rabbit.node, "-q", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def _pairs(value: Any) -> Any:
    """rabbitmqctl writes a proplist as [[key, value], ...]: compare it as an object."""
    if isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        return {p[0]: p[1] for p in value}
    return value


DEFAULTS = {"internal": False}  # rabbitmqctl's export leaves an exchange's internal out


def _normal(document: dict[str, Any]) -> dict[str, Any]:
    """What must survive a round trip, in a form that compares across both layouts."""

    def rows(section: str, *keys: str) -> list[str]:
        return sorted(
            json.dumps({key: item.get(key, DEFAULTS.get(key)) for key in keys}, sort_keys=True)
            for item in document.get(section) or []
        )

    parameters = []
    for item in document.get("parameters") or []:
        value = dict(item["value"])
        if "definition" in value:
            value["definition"] = _pairs(value["definition"])
        parameters.append(
            json.dumps({**item, "value": value}, sort_keys=True)
        )  # operator policies and vhost limits
    return {
        "users": rows("users", "name", "password_hash", "hashing_algorithm", "tags", "limits"),
        "vhosts": sorted(item["name"] for item in document["vhosts"]),
        "permissions": rows("permissions", "user", "vhost", "configure", "write", "read"),
        "policies": rows(
            "policies", "vhost", "name", "pattern", "apply-to", "priority", "definition"
        ),
        "parameters": sorted(parameters),
        "queues": rows("queues", "vhost", "name", "durable", "auto_delete", "arguments"),
        "exchanges": rows(
            "exchanges", "vhost", "name", "type", "durable", "auto_delete", "internal"
        ),
        "bindings": rows(
            "bindings", "vhost", "source", "destination", "destination_type", "routing_key"
        ),
    }


def _set_up(rabbit: RabbitNode) -> None:
    ctl(rabbit, "add_vhost", "v1")
    ctl(rabbit, "add_user", "alice", "secret")
    ctl(rabbit, "set_user_tags", "alice", "monitoring")
    ctl(rabbit, "set_permissions", "-p", "v1", "alice", ".*", ".*", ".*")
    ctl(rabbit, "set_permissions", "-p", "v1", "guest", ".*", ".*", ".*")
    ctl(rabbit, "set_user_limits", "alice", '{"max-connections": 10, "max-channels": 20}')
    ctl(rabbit, "set_vhost_limits", "-p", "v1", '{"max-connections": 5, "max-queues": 100}')
    ctl(
        rabbit,
        "set_operator_policy",
        "-p",
        "v1",
        "--apply-to",
        "queues",
        "op1",
        "^q",
        '{"max-length": 100}',
    )
    ctl(rabbit, "set_policy", "-p", "v1", "--apply-to", "queues", "ha1", "^ha\\.",
        '{"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "automatic", '
        '"ha-promote-on-shutdown": "always", "message-ttl": 60000}')  # fmt: skip
    url = f"amqp://guest:guest@127.0.0.1:{rabbit.port}/v1"
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.exchange_declare("ex1", "topic", durable=True)
        channel.queue_declare("q1", durable=True, arguments={"x-max-priority": 5})
        channel.queue_declare("ha.1", durable=True)
        channel.queue_bind("q1", "ex1", "a.#")
    finally:
        connection.close()


def _wipe(rabbit: RabbitNode) -> None:
    """Back to a fresh node's definitions (guest in '/')."""
    ctl(rabbit, "delete_vhost", "v1")
    ctl(rabbit, "delete_user", "alice")


@pytest.fixture
def amqpd(tmp_path: Path) -> Iterator[Server]:
    config = ServerConfig(port=0, management_port=0, data_dir=tmp_path)
    with background_server(BrokerConfig(), config) as server:
        yield server


def _api(server: Server) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{server.management_port}", auth=("guest", "guest"), timeout=60
    )


def rabbitmqadmin(server: Server, *args: str) -> str:
    """Debian's rabbitmqadmin against amqpd's management API; it must succeed."""
    done = subprocess.run(
        ["/usr/bin/rabbitmqadmin", "-H", "127.0.0.1", "-P", str(server.management_port),
         "-u", "guest", "-p", "guest", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def test_definitions_round_trip_with_rabbitmq_both_ways(
    rabbit: RabbitNode, amqpd: Server, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    _set_up(rabbit)
    original = json.loads(ctl(rabbit, "export_definitions", "-"))
    assert original["rabbit_version"] == "3.10.8"
    assert any(p["component"] == "operator_policy" for p in original["parameters"])
    rabbit_file, amqpd_file = tmp_path / "rabbit.json", tmp_path / "amqpd.json"
    rabbit_file.write_text(json.dumps(original))
    assert "Uploaded definitions" in rabbitmqadmin(amqpd, "import", str(rabbit_file))
    assert "Exported definitions" in rabbitmqadmin(amqpd, "export", str(amqpd_file))
    exported = json.loads(amqpd_file.read_text())
    with _api(amqpd) as client:
        limits = client.get("/api/user-limits").json()
        assert limits == [{"user": "alice", "value": {"max-channels": 20, "max-connections": 10}}]
        assert (
            client.get("/api/queues/v1/ha.1").json()["effective_policy_definition"]["message-ttl"]
            == 60000
        )
        assert client.get("/api/queues/v1/q1").json()["operator_policy"] == "op1"
    warning = "policy 'ha1' in vhost 'v1': ha-mode, ha-params, ha-promote-on-shutdown, "
    assert warning + "ha-sync-mode ignored" in caplog.text  # and the rest applied (above)
    assert exported["rabbit_version"] == "3.10.8"
    assert _normal(exported) == _normal(original)  # RabbitMQ -> amqpd: nothing lost
    _wipe(rabbit)
    ctl(rabbit, "import_definitions", "--format", "json", stdin=json.dumps(exported))
    again = json.loads(ctl(rabbit, "export_definitions", "-"))
    assert _normal(again) == _normal(original)  # amqpd -> RabbitMQ: nothing lost
