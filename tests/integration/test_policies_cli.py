"""Policies through ``amqpd ctl`` on a running broker and on a stopped data directory,
kept in the store across restarts; definitions import/export with ``-`` (stdin/stdout)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from amqpd.cli.ctl import main as ctl
from tests.conftest import node_under_test


def run_ctl(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = ctl(list(argv), stdout=out)
    return code, out.getvalue()


def test_policy_set_on_a_running_broker_applies_at_once_and_survives_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        try:
            channel = conn.channel()
            channel.confirm_delivery()
            channel.queue_declare("orders", durable=True)
            for i in range(20):
                channel.basic_publish(
                    "", "orders", f"{i}".encode(), pika.BasicProperties(delivery_mode=2)
                )
            code, out = run_ctl(
                "set-policy",
                "--data-dir",
                str(data),
                "--apply-to",
                "queues",
                "cap",
                "^orders$",
                '{"max-length": 5}',
            )
            assert code == 0, out
            assert out.startswith('Setting policy "cap" for pattern "^orders$"')
            assert channel.queue_declare("orders", passive=True).method.message_count == 5
            code, out = run_ctl("list-queues", "--data-dir", str(data), "name", "policy")
            assert "orders\tcap" in out
            code, out = run_ctl(
                "set-operator-policy", "--data-dir", str(data), "op", ".*", '{"max-length": -1}'
            )
            assert code == 69  # rabbitmqctl's status for a refused policy
            assert out.startswith('Setting operator policy override "op" for pattern ".*"')
            err = capsys.readouterr().err
            assert "Error:\nValidation failed\n\n-1 is not a valid maximum length" in err
        finally:
            conn.close()
    # stopped: the policy is in the store, and the ctl commands work on the directory
    code, out = run_ctl("list-policies", "--data-dir", str(data), "-q")
    assert code == 0
    assert out.splitlines() == [
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority",
        '/\tcap\t^orders$\tqueues\t{"max-length":5}\t0',
    ]
    assert (
        run_ctl("set-operator-policy", "--data-dir", str(data), "op", ".*", '{"max-length":2}')[0]
        == 0
    )
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        try:
            channel = conn.channel()
            channel.confirm_delivery()
            assert channel.queue_declare("orders", passive=True).method.message_count == 2
            for i in range(3):
                channel.basic_publish("", "orders", f"n{i}".encode())
            assert channel.queue_declare("orders", passive=True).method.message_count == 2
        finally:
            conn.close()
        exported = subprocess.run(
            [sys.executable, "-m", "amqpd", "definitions", "export", "--data-dir", str(data), "-"],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ,
        )
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert [p["name"] for p in document["policies"]] == ["cap"]
    operator = [p for p in document["parameters"] if p["component"] == "operator_policy"]
    assert [p["name"] for p in operator] == ["op"]  # as RabbitMQ 3.10 exports them
    assert not Path("-").exists()


def test_definitions_import_from_stdin_reports_what_it_could_not_apply(tmp_path: Path) -> None:
    data = tmp_path / "data"
    document = {
        "policies": [
            {"vhost": "/", "name": "ok", "pattern": "^a", "definition": {"message-ttl": 1000}},
            {"vhost": "/", "name": "bad", "pattern": "^b", "definition": {"ha-mode": "none"}},
        ]
    }
    result = subprocess.run(
        [sys.executable, "-m", "amqpd", "definitions", "import", "--data-dir", str(data), "-"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert result.returncode == 1
    assert "1 definition(s) could not be applied" in result.stderr
    assert "policy 'bad'" in result.stderr
    code, out = run_ctl("list-policies", "--data-dir", str(data), "-q", "--no-table-headers")
    assert code == 0
    assert out.splitlines() == ['/\tok\t^a\tall\t{"message-ttl":1000}\t0']
