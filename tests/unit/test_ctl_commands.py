"""``amqpd ctl`` requests carried out on the sans-IO engine, and the CLI's table output."""

from __future__ import annotations

import argparse
import io

import pytest
from pamqp import commands

from amqpd.cli import ctl
from amqpd.cli.main import build_parser
from amqpd.engine import client_inventory, ctl_commands
from amqpd.model.admin_commands import AdminError
from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample
from tests.unit.protocol_support import connect, connection_error, declare, publish_frames


def test_listing_uses_rabbitmqctl_columns() -> None:
    broker = Broker()
    client = connect(broker)
    declare(client, 1, "q", arguments={"x-max-length": 5})
    client.send(1, *publish_frames("q", b"abc"))
    node = NodeSample()
    table = ctl_commands.execute(broker, {"command": "list-queues"}, node)
    assert table["columns"] == ["name", "messages"]
    assert table["rows"] == [["q", 1]]
    assert table["banner"].splitlines() == [
        "Timeout: 60.0 seconds ...",
        "Listing queues for vhost / ...",
    ]
    table = ctl_commands.execute(
        broker,
        {"command": "list-queues", "columns": ["name", "message_bytes", "arguments", "durable"]},
        node,
    )
    assert table["rows"] == [["q", 3, {"x-max-length": 5}, False]]
    with pytest.raises(AdminError, match="Info key"):
        ctl_commands.execute(broker, {"command": "list-queues", "columns": ["bogus"]}, node)
    with pytest.raises(AdminError, match="does not exist"):
        ctl_commands.execute(broker, {"command": "list-queues", "vhost": "nope"}, node)
    with pytest.raises(AdminError, match="unknown command"):
        ctl_commands.execute(broker, {"command": "frobnicate"}, node)


def test_close_connection_sends_320_with_the_reason() -> None:
    broker = Broker()
    client = connect(broker)
    [item] = client_inventory.connections(broker)
    text = ctl_commands.execute(
        broker, {"command": "close-connection", "name": item["name"], "reason": "bye"}, NodeSample()
    )
    assert "bye" in text
    assert connection_error(client)[:2] == (320, "CONNECTION_FORCED - bye")
    with pytest.raises(AdminError):
        ctl_commands.close_connection(broker, "nobody", None)


def test_status_and_ping() -> None:
    broker = Broker()
    connect(broker).send(1, commands.Basic.Qos(prefetch_count=1))
    node = NodeSample(name="amqpd@x", mem_used=10, uptime=5000)
    assert ctl_commands.execute(broker, {"command": "ping"}, node) == {
        "ok": True,
        "node": "amqpd@x",
    }
    status = ctl_commands.execute(broker, {"command": "status"}, node)
    assert status["uptime"] == 5 and status["totals"]["connections"] == 1
    assert "Connection count: 1" in ctl._status(status)


def test_table_output_like_rabbitmqctl() -> None:
    table = {
        "banner": "Listing queues for vhost / ...",
        "columns": ["name", "durable", "arguments", "consumer_utilisation"],
        "rows": [["q", True, {"x-max-length": 10, "x-queue-mode": "lazy"}, None]],
    }
    out = io.StringIO()
    args = argparse.Namespace(format="tsv", quiet=False, no_table_headers=False)
    ctl._print_table(table, args, out)
    assert out.getvalue().splitlines() == [
        "Listing queues for vhost / ...",
        "name\tdurable\targuments\tconsumer_utilisation",
        'q\ttrue\t[{"x-max-length",10},{"x-queue-mode","lazy"}]\t',
    ]
    out = io.StringIO()
    ctl._print_table({**table, "rows": []}, args, out)
    assert out.getvalue() == "Listing queues for vhost / ...\n"  # no header for no rows
    out = io.StringIO()
    ctl._print_table(table, argparse.Namespace(format="json"), out)
    assert out.getvalue().startswith('[\n{"name":"q","durable":true,')


def test_version_and_help_list_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.startswith("amqpd ")
    help_text = build_parser().format_help()
    for word in ("ctl", "users", "vhosts", "definitions", "perf", "list-queues", "ping"):
        assert word in help_text
