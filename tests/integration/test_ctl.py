"""``amqpd ctl`` against a running broker: rabbitmqctl-style listings, close-connection,
status and ping (exit codes for probes)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from amqpd.cli.ctl import EX_UNAVAILABLE
from amqpd.cli.ctl import main as ctl
from tests.conftest import node_under_test
from tests.integration.broker_process import BrokerProcess
from tests.integration.pika_support import pump_until


def run(data: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    command, *rest = argv
    code = ctl([command, "--data-dir", str(data), *rest], out)
    return code, out.getvalue()


def test_listings_status_and_close_connection(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        params = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{server.port}/")
        params.client_properties = {"connection_name": "ctl-test"}
        conn = pika.BlockingConnection(params)
        channel = conn.channel()
        channel.queue_declare("work", durable=True, arguments={"x-max-length": 10})
        channel.basic_qos(prefetch_count=5)
        for i in range(3):
            channel.basic_publish("", "work", f"m{i}".encode())
        channel.basic_consume("work", lambda *a: None, consumer_tag="ctag1")
        conn.process_data_events(time_limit=0.3)

        code, out = run(data, "list-queues")
        assert code == 0
        lines = out.splitlines()
        assert lines[:3] == [
            "Timeout: 60.0 seconds ...",
            "Listing queues for vhost / ...",
            "name\tmessages",
        ]
        assert "work\t3" in lines[3:]

        code, out = run(
            data,
            "list-queues",
            "-q",
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
            "durable",
            "arguments",
        )
        assert code == 0
        assert out.splitlines() == [
            "name\tmessages_ready\tmessages_unacknowledged\tconsumers\tdurable\targuments",
            'work\t0\t3\t1\ttrue\t[{"x-max-length",10}]',
        ]

        code, out = run(data, "list-queues", "--format", "json", "name", "messages")
        assert json.loads(out) == [{"name": "work", "messages": 3}]

        code, out = run(data, "list-exchanges", "-q", "--no-table-headers")
        assert "amq.topic\ttopic" in out.splitlines()

        code, out = run(data, "list-bindings", "-q")
        assert "\texchange\twork\tqueue\twork\t[]" in out.splitlines()

        code, out = run(data, "list-connections", "-q", "name", "user", "state", "channels")
        [header, row] = out.splitlines()
        assert header == "name\tuser\tstate\tchannels"
        name, user, state, channels = row.split("\t")
        assert name.endswith(f" -> 127.0.0.1:{server.port}") and name.startswith("127.0.0.1:")
        assert (user, state, channels) == ("guest", "running", "1")

        code, out = run(
            data,
            "list-channels",
            "-q",
            "name",
            "prefetch_count",
            "consumer_count",
            "messages_unacknowledged",
        )
        assert out.splitlines()[1] == f"{name} (1)\t5\t1\t3"

        code, out = run(
            data,
            "list-consumers",
            "-q",
            "queue_name",
            "consumer_tag",
            "ack_required",
            "prefetch_count",
        )
        assert out.splitlines()[1] == "work\tctag1\ttrue\t5"

        code, out = run(data, "list-queues", "no_such_column")
        assert code == 1

        code, out = run(data, "status")
        assert code == 0 and "Status of node amqpd@" in out and "Queue count: 1" in out
        assert "Role: standalone" in out  # SQLite: no election (PostgreSQL: active / standby)
        code, out = run(data, "status", "--format", "json")
        status = json.loads(out)
        assert status["totals"]["connections"] == 1 and status["memory"]["used"] > 0
        assert status["listeners"][0]["port"] == server.port
        assert status["role"] == "standalone"

        code, out = run(data, "close-connection", name, "go away")
        assert code == 0
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            pump_until(conn, lambda: False, 10)
        assert closed.value.reply_code == 320
        assert closed.value.reply_text == "CONNECTION_FORCED - go away"
        assert run(data, "close-connection", name)[0] == 1


def test_ping_exit_codes_of_the_command(tmp_path: Path) -> None:
    data = tmp_path / "data"
    command = [sys.executable, "-m", "amqpd", "ctl", "ping", "--data-dir", str(data)]
    down = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert down.returncode == EX_UNAVAILABLE, down
    broker = BrokerProcess(data)
    try:
        up = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert up.returncode == 0, up
        assert up.stdout.startswith("Ping succeeded")
        listing = subprocess.run(
            [sys.executable, "-m", "amqpd", "ctl", "list-queues", "--data-dir", str(data)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert listing.returncode == 0
        assert listing.stdout == "Timeout: 60.0 seconds ...\nListing queues for vhost / ...\n"
    finally:
        broker.stop()
    after = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert after.returncode == EX_UNAVAILABLE


def test_alarm_limits_set_on_the_running_node_block_and_release_publishers(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """rabbitmqctl set_vm_memory_high_watermark / set_disk_free_limit: 0 raises the memory
    alarm at once, a limit above the free disk space the disk alarm; publishers get
    connection.blocked with RabbitMQ's reason and connection.unblocked once the limits are
    back. Under AMQPD_TEST_SPREAD the two connections are on the two workers (they go to
    the workers in turn, and a publish routed nowhere moves neither)."""
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, data_dir=data) as node:
        events: list[list[str]] = [[], []]
        connections = []
        for seen in events:
            connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.port))
            connection.add_on_connection_blocked_callback(
                lambda _c, frame, seen=seen: seen.append(frame.method.reason)
            )
            connection.add_on_connection_unblocked_callback(
                lambda _c, _frame, seen=seen: seen.append("unblocked")
            )
            connections.append(connection)

        def publish_until(expected: list[str]) -> None:
            """Publish on each connection until it has seen ``expected``: a connection is
            told it is blocked when it publishes after the alarm went on (RabbitMQ's too),
            and the alarm goes on at the broker's next measurement."""
            for connection, seen in zip(connections, events, strict=True):
                channel = connection.channel()
                deadline = time.monotonic() + 30
                while seen != expected:
                    assert time.monotonic() < deadline, (seen, expected)
                    channel.basic_publish("", "nowhere", b"m")  # routed nowhere: nothing moves
                    connection.process_data_events(time_limit=0.1)

        def status_until(done: Callable[[dict[str, Any]], bool]) -> None:
            """Poll ``amqpd ctl status`` (each worker measures on its own clock)."""
            deadline = time.monotonic() + 30
            while not done(status := json.loads(run(data, "status", "--format", "json")[1])):
                assert time.monotonic() < deadline, status
                time.sleep(0.05)

        code, out = run(data, "set-vm-memory-high-watermark", "0")
        assert code == 0 and out.startswith("Setting memory threshold on amqpd@")
        assert out.endswith(" to 0 ...\n")
        publish_until(["low on memory"])
        status = json.loads(run(data, "status", "--format", "json")[1])
        assert (status["alarms"], status["memory"]["limit"]) == (["memory"], 0)
        assert run(data, "set-vm-memory-high-watermark", "absolute", "64GiB", "-q") == (0, "")
        publish_until(["low on memory", "unblocked"])
        status_until(lambda status: status["alarms"] == [])  # every worker's cleared

        code, out = run(data, "set-disk-free-limit", "1000000GB")
        assert code == 0 and out.endswith(" to 1000000GB bytes ...\n")
        publish_until(["low on memory", "unblocked", "low on disk"])
        status_until(lambda status: status["alarms"] == ["disk"])
        status = json.loads(run(data, "status", "--format", "json")[1])
        assert status["disk"]["limit"] == 10**15
        assert run(data, "set-disk-free-limit", "mem_relative", "0.01", "-q")[0] == 0
        publish_until(["low on memory", "unblocked", "low on disk", "unblocked"])
        for connection in connections:
            connection.close()
    for bad in (["1.5"], ["absolute"], ["absolute", "lots"], ["0.4", "0.5"]):
        with pytest.raises(SystemExit) as refused:  # argparse: usage and the error, exit 2
            run(data, "set-vm-memory-high-watermark", *bad)
        assert refused.value.code == 2
