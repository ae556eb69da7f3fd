"""``amqpd users|vhosts|definitions``: access control kept in the data directory's store."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pika
import pika.exceptions
import pytest

from amqpd.cli.admin import main as admin
from persistence.store import Store
from tests.conftest import node_under_test
from tests.integration.pika_support import login

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


def run(*argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = admin(list(argv), stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def test_users_and_vhosts_commands_change_what_the_broker_allows(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = str(tmp_path / "data")
    assert run("users", "add", "--data-dir", data, "svc", stdin="svc-pw\n")[0] == 0
    assert run("users", "add", "--data-dir", data, "svc", "again")[0] == 1  # exists
    assert run("vhosts", "add", "--data-dir", data, "prod", "--max-connections", "3")[0] == 0
    code, _ = run(
        "users", "set-permissions", "--data-dir", data, "-p", "prod", "svc", "^svc-", ".*", ".*"
    )
    assert code == 0
    assert run("users", "set-permissions", "--data-dir", data, "svc", "(", ".*", ".*")[0] == 1
    code, out = run("users", "list", "--data-dir", data)
    assert code == 0 and "svc\t[]" in out and "guest\t[administrator]" in out
    code, out = run("users", "list-permissions", "--data-dir", data, "-p", "prod")
    assert "svc\t^svc-\t.*\t.*" in out
    code, out = run("vhosts", "list", "--data-dir", data)
    assert "prod\t3\t" in out

    with node_under_test(tmp_path_factory, data_dir=Path(data)) as server:
        conn = login(server.port, "svc", "svc-pw", "prod")
        try:
            channel = conn.channel()
            channel.queue_declare("svc-work", durable=True)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                conn.channel().queue_declare("other")
            assert info.value.reply_code == 403
        finally:
            conn.close()
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            login(server.port, "svc", "svc-pw", "/")  # no permissions there

    assert run("users", "change-password", "--data-dir", data, "svc", "new-pw")[0] == 0
    assert run("users", "set-tags", "--data-dir", data, "svc", "monitoring")[0] == 0
    with node_under_test(tmp_path_factory, data_dir=Path(data)) as server:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(server.port, "svc", "svc-pw", "prod")
        login(server.port, "svc", "new-pw", "prod").close()

    assert run("vhosts", "delete", "--data-dir", data, "prod")[0] == 0
    assert run("users", "delete", "--data-dir", data, "svc")[0] == 0
    assert run("users", "delete", "--data-dir", data, "svc")[0] == 1

    async def stored() -> tuple[list[str], list[str]]:
        store = await Store.open(Path(data))
        try:
            state = await store.load_access()
            loaded = await store.load()
            return sorted(state.vhosts), [q.name for q in loaded.queues]
        finally:
            await store.close()

    vhosts, queues = asyncio.run(stored())
    assert vhosts == ["/"] and queues == []  # the vhost went with its durable queue


def test_definitions_export_and_import_between_data_dirs(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    source, target = str(tmp_path / "a"), str(tmp_path / "b")
    run("users", "add", "--data-dir", source, "svc", "svc-pw", "--tags", "administrator")
    with node_under_test(tmp_path_factory, data_dir=Path(source)) as srv:
        conn = login(srv.port, "guest", "guest")
        channel = conn.channel()
        channel.exchange_declare("events", "topic", durable=True)
        channel.queue_declare("audit", durable=True)
        channel.queue_bind("audit", "events", "#")
        conn.close()
        # a second connection: with "/" spread over workers, its queue is on the next one
        conn = login(srv.port, "guest", "guest")
        conn.channel().queue_declare("audit-2", durable=True)
        conn.close()
        # a vhost added now: under --workers, the least loaded worker serves it
        assert run("vhosts", "add", "--data-dir", source, "other")[0] == 0
        grant = ("users", "set-permissions", "--data-dir", source, "-p", "other", "guest")
        assert run(*grant, ".*", ".*", ".*")[0] == 0
        conn = login(srv.port, "guest", "guest", "other")
        conn.channel().queue_declare("audit-other", durable=True)
        conn.close()
        live = tmp_path / "live.json"  # exported by the running broker (every worker's part)
        assert run("definitions", "export", "--data-dir", source, str(live))[0] == 0
    # stopped: under AMQPD_TEST_WORKERS the queues are in the workers' shards (shard-K/)
    run("users", "set-permissions", "--data-dir", source, "svc", ".*", ".*", ".*")
    file = tmp_path / "defs.json"
    assert run("definitions", "export", "--data-dir", source, str(file))[0] == 0
    document = json.loads(file.read_text())
    assert {u["name"] for u in document["users"]} == {"guest", "svc"}
    assert all(
        u["hashing_algorithm"] == "rabbit_password_hashing_sha256" for u in document["users"]
    )
    assert "svc-pw" not in file.read_text()
    queues = sorted((q["vhost"], q["name"]) for q in document["queues"])
    assert queues == [("/", "audit"), ("/", "audit-2"), ("other", "audit-other")]
    assert [e["name"] for e in document["exchanges"]] == ["events"]  # once
    [binding] = document["bindings"]
    assert binding["routing_key"] == "#"
    exported_live = json.loads(live.read_text())
    for section in ("queues", "exchanges", "bindings"):
        assert sorted(map(str, exported_live[section])) == sorted(map(str, document[section]))

    code, out = run("definitions", "import", "--data-dir", target, str(file))
    assert code == 0 and "3 queues" in out
    with node_under_test(tmp_path_factory, data_dir=Path(target)) as srv:
        conn = login(srv.port, "svc", "svc-pw")
        try:
            channel = conn.channel()
            channel.queue_declare("audit", passive=True)
            channel.confirm_delivery()
            channel.basic_publish("events", "a.b", b"routed by the imported binding")
            assert channel.basic_get("audit", auto_ack=True)[2] == b"routed by the imported binding"
        finally:
            conn.close()


def test_broker_imports_definitions_at_startup_and_keeps_them(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    definitions = tmp_path / "definitions.json"
    definitions.write_text(
        json.dumps(
            {
                "users": [{"name": "ops", "password": "ops-pw", "tags": ["administrator"]}],
                "vhosts": [{"name": "/"}],
                "permissions": [
                    {"user": "ops", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
                ],
                "queues": [{"name": "jobs", "vhost": "/", "durable": True, "arguments": {}}],
            }
        )
    )

    def start(*extra: str) -> tuple[subprocess.Popen[str], int]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(data_dir), *extra],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ},
        )
        assert proc.stderr is not None
        for line in proc.stderr:
            match = LISTENING.search(line)
            if match:
                return proc, int(match.group(1))
        proc.wait(timeout=10)
        raise AssertionError("amqpd did not start")

    def stop(proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        proc.stderr.close()

    proc, port = start("--definitions", str(definitions))
    try:
        conn = login(port, "ops", "ops-pw")
        conn.channel().queue_declare("jobs", passive=True)
        conn.close()
    finally:
        stop(proc)
    proc, port = start()  # without the file: the store kept everything
    try:
        conn = login(port, "ops", "ops-pw")
        conn.channel().queue_declare("jobs", passive=True)
        conn.close()
    finally:
        stop(proc)


def test_a_broken_definitions_file_stops_startup(tmp_path: Path) -> None:
    definitions = tmp_path / "bad.json"
    definitions.write_text(json.dumps({"permissions": [{"user": "nobody", "vhost": "/"}]}))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "amqpd",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "d"),
            "--definitions",
            str(definitions),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "cannot import definitions" in result.stderr and "no user 'nobody'" in result.stderr
