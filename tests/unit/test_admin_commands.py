"""Admin commands on a live broker core (amqpd/admin_commands.py): what open connections see."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pamqp import commands

from amqpd.model.admin_commands import AdminError, execute
from amqpd.model.auth import hash_password
from amqpd.model.broker import Broker
from persistence.journal import Journal
from persistence.records import OpKind
from tests.unit.engine_driver import Client


def run(broker: Broker, group: str, command: str, **args: Any) -> str:
    return execute(broker, {"group": group, "command": command, **args}).output


def broker_with_app_user() -> Broker:
    broker = Broker(journal=Journal())
    run(broker, "users", "add", name="app", password_hash=hash_password("pw"), tags=[])
    run(broker, "users", "set-permissions", name="app", vhost="/", configure="^app", write=".*",
        read=".*")  # fmt: skip
    return broker


def connected(broker: Broker, vhost: str = "/", user: str = "app", password: str = "pw") -> Client:
    client = Client(broker)
    assert isinstance(client.handshake(vhost, user, password)[-1][1], commands.Connection.OpenOk)
    client.open_channel(1)
    return client


def declare(client: Client, name: str, durable: bool = False) -> Any:
    client.send(1, commands.Queue.Declare(queue=name, durable=durable))
    return client.methods()[-1]


def test_a_new_user_logs_in_at_once_and_permission_changes_reach_open_channels() -> None:
    broker = broker_with_app_user()
    client = connected(broker)
    assert isinstance(declare(client, "app.q"), commands.Queue.DeclareOk)
    refused = declare(client, "other")
    assert refused.reply_code == 403
    client.send(1, commands.Channel.CloseOk())
    client.open_channel(1)

    run(broker, "users", "set-permissions", name="app", vhost="/", configure=".*", write=".*",
        read=".*")  # fmt: skip
    assert isinstance(declare(client, "other"), commands.Queue.DeclareOk)  # same channel

    run(broker, "users", "clear-permissions", name="app", vhost="/")
    refused = declare(client, "app.q2")
    assert refused.reply_code == 403
    assert refused.reply_text == (
        "ACCESS_REFUSED - access to queue 'app.q2' in vhost '/' refused for user 'app'"
    )
    assert not client.conn.should_close and client.conn.state.name == "OPEN"


def test_deleting_a_user_closes_its_connections_only() -> None:
    broker = broker_with_app_user()
    app, guest = connected(broker), connected(broker, user="guest", password="guest")
    assert run(broker, "users", "delete", name="app") == "Deleted user 'app'."
    close = app.methods()[-1]
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (
        320,
        "CONNECTION_FORCED - user 'app' is deleted",
    )
    assert guest.received() == []
    assert isinstance(declare(guest, "still-served"), commands.Queue.DeclareOk)
    refused = Client(broker).handshake("/", "app", "pw")[-1][1]
    assert refused.reply_code == 403  # a deleted user cannot log in again


def test_deleting_a_vhost_closes_its_connections_and_journals_its_contents() -> None:
    broker = Broker(journal=Journal())
    run(broker, "vhosts", "add", name="prod")
    run(broker, "users", "set-permissions", name="guest", vhost="prod", configure=".*",
        write=".*", read=".*")  # fmt: skip
    in_prod, in_root = (
        connected(broker, "prod", "guest", "guest"),
        connected(broker, "/", "guest", "guest"),
    )
    assert isinstance(declare(in_prod, "jobs", durable=True), commands.Queue.DeclareOk)
    in_prod.send(
        1, commands.Exchange.Declare(exchange="events", exchange_type="topic", durable=True)
    )
    assert broker.journal is not None
    broker.journal.take_batch()

    run(broker, "vhosts", "delete", name="prod")
    close = in_prod.methods()[-1]
    assert (close.reply_code, close.reply_text) == (320, "CONNECTION_FORCED - vhost 'prod' is down")
    assert in_root.received() == []
    assert "prod" not in broker.vhosts and ("guest", "prod") not in broker.access.state.permissions
    batch = broker.journal.take_batch()
    assert batch is not None
    kinds = {kind for kind, _rows in batch.ops}
    assert {OpKind.DELETE_QUEUE, OpKind.DELETE_EXCHANGE} <= kinds
    refused = Client(broker).handshake("prod", "guest", "guest")[-1][1]
    assert (refused.reply_code, refused.reply_text) == (530, "NOT_ALLOWED - vhost 'prod' not found")


def test_refused_commands_change_nothing() -> None:
    broker = broker_with_app_user()
    before = repr(broker.access.state)
    for group, command, args in [
        ("users", "add", {"name": "app", "password_hash": hash_password("x"), "tags": []}),
        ("users", "delete", {"name": "nobody"}),
        (
            "users",
            "set-permissions",
            {"name": "app", "vhost": "/", "configure": "(", "write": ".*", "read": ".*"},
        ),
        (
            "users",
            "set-permissions",
            {"name": "app", "vhost": "nowhere", "configure": ".*", "write": ".*", "read": ".*"},
        ),
        ("users", "add", {"name": "x", "password_hash": "not base64!", "tags": []}),
        ("vhosts", "add", {"name": "/"}),
        ("vhosts", "delete", {"name": "nowhere"}),
        ("vhosts", "list-everything", {}),
        ("users", "add", {"password_hash": ""}),
        ("definitions", "import", {"definitions": {"users": [{"name": 1}]}}),
    ]:
        with pytest.raises(AdminError):
            run(broker, group, command, **args)
    assert repr(broker.access.state) == before


def test_export_lists_the_live_topology_but_exclusive_queues() -> None:
    broker = Broker(journal=Journal())
    client = connected(broker, "/", "guest", "guest")
    declare(client, "durable-q", durable=True)
    declare(client, "transient-q")
    client.send(1, commands.Queue.Declare(queue="mine", exclusive=True))
    client.send(1, commands.Queue.Bind(queue="durable-q", exchange="amq.topic", routing_key="a.#"))
    document = json.loads(run(broker, "definitions", "export"))
    assert [(q["name"], q["durable"]) for q in document["queues"]] == [
        ("durable-q", True),
        ("transient-q", False),
    ]
    assert document["exchanges"] == []  # amq.* exist everywhere and are not exported
    assert [(b["source"], b["destination"], b["routing_key"]) for b in document["bindings"]] == [
        ("amq.topic", "durable-q", "a.#")
    ]
    assert [u["name"] for u in document["users"]] == ["guest"]
