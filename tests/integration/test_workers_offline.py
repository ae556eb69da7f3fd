"""``amqpd definitions export|import`` and ``amqpd vhosts delete`` on a stopped ``--workers 2``
node: its data directory holds worker 1's vhosts in ``shard-1/``, and the commands read and
change them there, as the running node does through its workers."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

from amqpd.cli.admin import main as admin
from tests.integration.broker_process import BrokerProcess
from tests.integration.pika_support import login

pytestmark = pytest.mark.usefixtures("whole_vhosts")  # tests/conftest.py

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def run(*argv: str, stdin: str = "") -> str:
    """An ``amqpd`` admin command (on the node's admin socket while it runs, else on its
    stores); it must succeed."""
    out = io.StringIO()
    code = admin(list(argv), stdin=io.StringIO(stdin), stdout=out)
    assert code == 0, out.getvalue()
    return out.getvalue()


def add_vhost(data: Path, name: str) -> None:
    run("vhosts", "add", "--data-dir", str(data), name)
    run("users", "set-permissions", "--data-dir", str(data), "-p", name, "guest", *[".*"] * 3)


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """A stopped two-worker node's data: "/" on worker 0, "far" (added while it ran) on
    worker 1 with a durable queue "kept" holding one persistent message."""
    directory = tmp_path / "data"
    node = BrokerProcess(directory, extra=("--workers", "2"))
    try:
        add_vhost(directory, "far")
        conn = login(node.port, "guest", "guest", "far")
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare("kept", durable=True)
        channel.basic_publish("", "kept", b"confirmed", PERSISTENT)
        conn.close()
    finally:
        node.stop()
    assert json.loads((directory / "placement.json").read_text())["vhosts"]["far"] == 1
    yield directory


def queue_names(document: dict[str, object], vhost: str) -> list[str]:
    queues = document["queues"]
    assert isinstance(queues, list)
    return sorted(q["name"] for q in queues if q["vhost"] == vhost)


def test_export_reads_every_worker_and_import_writes_to_the_vhosts_worker(data: Path) -> None:
    exported = json.loads(run("definitions", "export", "--data-dir", str(data)))
    assert queue_names(exported, "far") == ["kept"]
    document = {
        "queues": [
            {"name": name, "vhost": vhost, "durable": True, "auto_delete": False, "arguments": {}}
            for name, vhost in (("imported", "far"), ("imported-here", "/"))
        ]
    }
    out = run("definitions", "import", "--data-dir", str(data), "-", stdin=json.dumps(document))
    assert "2 queues" in out  # both parts counted
    assert queue_names(
        json.loads(run("definitions", "export", "--data-dir", str(data))), "far"
    ) == [
        "imported",
        "kept",
    ]
    node = BrokerProcess(data, extra=("--workers", "2"))
    try:
        conn = login(node.port, "guest", "guest", "far")
        channel = conn.channel()
        channel.queue_declare("imported", passive=True)  # served by worker 1
        assert channel.queue_declare("kept", passive=True).method.message_count == 1
        conn.close()
        conn = login(node.port, "guest", "guest")
        conn.channel().queue_declare("imported-here", passive=True)
        conn.close()
    finally:
        node.stop()


def test_a_vhost_deleted_while_stopped_stays_deleted_with_everything_in_it(data: Path) -> None:
    run("vhosts", "delete", "--data-dir", str(data), "far")
    assert "far" not in json.loads((data / "placement.json").read_text())["vhosts"]
    assert "far" not in json.loads((data / "shard-1" / "placement.json").read_text())["vhosts"]
    add_vhost(data, "far")  # a new vhost of the same name: empty
    node = BrokerProcess(data, extra=("--workers", "2"))
    try:
        conn = login(node.port, "guest", "guest", "far")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare("kept", passive=True)
        assert info.value.reply_code == 404
        conn.close()
    finally:
        node.stop()
