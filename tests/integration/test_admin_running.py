"""``amqpd users|vhosts|definitions`` against a running broker (its admin socket), with pika.

What RabbitMQ 3.10 does with ``rabbitmqctl`` is the reference (checked side by side): a
permission change reaches open channels, a deleted user's connections get 320 "user 'u' is
deleted", a deleted vhost's connections 320 "vhost 'v' is down".
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pwd
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path

import pika
import pika.exceptions
import pytest

from amqpd.cli.admin import main as admin
from amqpd.model.broker import BrokerConfig
from amqpd.shell.admin_socket import SOCKET_NAME
from amqpd.shell.server import Server, ServerConfig, background_server
from persistence.sqlite_open import LOCK_FILENAME
from tests.conftest import NodeUnderTest, node_process
from tests.integration.pika_support import login, pump_until

CLOSE_TIMEOUT = 10.0


def run(data: Path, *argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    group, command, *rest = argv
    code = admin([group, command, "--data-dir", str(data), *rest], io.StringIO(stdin), out)
    return code, out.getvalue()


def ok(data: Path, *argv: str, stdin: str = "") -> str:
    code, out = run(data, *argv, stdin=stdin)
    assert code == 0, (argv, out)
    return out


@contextmanager
def broker(data: Path) -> Iterator[Server | NodeUnderTest]:
    """A broker on ``data``: in this process, or under ``AMQPD_TEST_WORKERS=N`` (scripts/
    test-all's workers passes) a ``--workers N`` node (tests/conftest.py `node_process`),
    whose worker 0 answers the admin socket for every worker."""
    workers = int(os.environ.get("AMQPD_TEST_WORKERS") or 1)
    if workers > 1:
        with node_process(data, workers) as node:
            yield node
        return
    with background_server(BrokerConfig(), ServerConfig(port=0, data_dir=data)) as server:
        yield server


def closed_by_broker(conn: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker:
    """Process events until the broker closes the connection; the close it sent."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        pump_until(conn, lambda: False, CLOSE_TIMEOUT)
    return closed.value


def test_user_commands_take_effect_on_the_running_broker_and_persist(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with broker(data) as server:
        assert (data / SOCKET_NAME).is_socket()
        assert stat.S_IMODE((data / SOCKET_NAME).stat().st_mode) == 0o600

        assert ok(data, "users", "add", "svc", stdin="svc-pw\n") == "Added user 'svc'.\n"
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            login(server.port, "svc", "svc-pw")  # no permissions yet: 530
        ok(data, "users", "set-permissions", "svc", "^svc-", ".*", ".*")
        conn = login(server.port, "svc", "svc-pw")
        channel = conn.channel()
        channel.queue_declare("svc-work")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("other")
        assert refused.value.reply_code == 403

        # Widened while the connection is open: the same connection may now declare it.
        ok(data, "users", "set-permissions", "svc", ".*", ".*", ".*")
        channel = conn.channel()
        channel.queue_declare("other")
        ok(data, "users", "clear-permissions", "svc")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("svc-more")
        assert refused.value.reply_text == (
            "ACCESS_REFUSED - access to queue 'svc-more' in vhost '/' refused for user 'svc'"
        )
        assert conn.is_open

        ok(data, "users", "set-permissions", "svc", ".*", ".*", ".*")
        ok(data, "users", "change-password", "svc", "new-pw")
        ok(data, "users", "set-tags", "svc", "monitoring")
        assert "svc\t[monitoring]" in ok(data, "users", "list")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(server.port, "svc", "svc-pw")
        login(server.port, "svc", "new-pw").close()
        assert run(data, "users", "add", "svc", "again")[0] == 1  # refused by the broker

        guest = login(server.port, "guest", "guest")
        ok(data, "users", "add", "temp", "temp-pw")
        ok(data, "users", "set-permissions", "temp", ".*", ".*", ".*")
        doomed = login(server.port, "temp", "temp-pw")
        ok(data, "users", "delete", "temp")
        closed = closed_by_broker(doomed)
        assert (closed.reply_code, closed.reply_text) == (
            320,
            "CONNECTION_FORCED - user 'temp' is deleted",
        )
        assert conn.is_open and guest.is_open
        guest.channel().queue_declare("guest-still-served")
        guest.close()
        conn.close()

    # Everything the running broker was told is in its store.
    assert not (data / SOCKET_NAME).exists()
    out = ok(data, "users", "list")  # the stopped broker's store, read directly
    assert "svc\t[monitoring]" in out and "temp" not in out
    with broker(data) as server:
        login(server.port, "svc", "new-pw").close()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(server.port, "temp", "temp-pw")


def test_vhost_commands_take_effect_on_the_running_broker_and_persist(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with broker(data) as server:
        ok(data, "vhosts", "add", "prod", "--description", "production")
        ok(data, "users", "set-permissions", "-p", "prod", "guest", ".*", ".*", ".*")
        assert "prod\t\tproduction" in ok(data, "vhosts", "list")
        in_prod = login(server.port, "guest", "guest", "prod")
        channel = in_prod.channel()
        channel.exchange_declare("events", "topic", durable=True)
        channel.queue_declare("jobs", durable=True)
        channel.queue_bind("jobs", "events", "job.#")
        channel.confirm_delivery()
        channel.basic_publish(
            "events", "job.1", b"work", pika.BasicProperties(delivery_mode=2), mandatory=True
        )
        exported = json.loads(ok(data, "definitions", "export"))
        assert {(q["vhost"], q["name"]) for q in exported["queues"]} == {("prod", "jobs")}
        assert {(b["source"], b["destination"]) for b in exported["bindings"]} == {
            ("events", "jobs")
        }

        in_root = login(server.port, "guest", "guest", "/")
        ok(data, "vhosts", "set-max-connections", "prod", "1")
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            login(server.port, "guest", "guest", "prod")  # limit reached: 530
        ok(data, "vhosts", "set-max-connections", "prod", "-1")

        assert ok(data, "vhosts", "delete", "prod").startswith("Deleted vhost 'prod'")
        closed = closed_by_broker(in_prod)
        assert (closed.reply_code, closed.reply_text) == (
            320,
            "CONNECTION_FORCED - vhost 'prod' is down",
        )
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            login(server.port, "guest", "guest", "prod")  # 530 vhost not found
        in_root.channel().queue_declare("root-still-served")
        in_root.close()

        ok(data, "vhosts", "add", "prod")  # a new, empty vhost of the same name
        ok(data, "users", "set-permissions", "-p", "prod", "guest", ".*", ".*", ".*")
        again = login(server.port, "guest", "guest", "prod")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
            again.channel().queue_declare("jobs", passive=True)
        assert missing.value.reply_code == 404
        again.close()

    with broker(data) as server:  # the deleted queue and its message stayed deleted
        again = login(server.port, "guest", "guest", "prod")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
            again.channel().queue_declare("jobs", passive=True)
        assert missing.value.reply_code == 404
        again.close()


def test_definitions_import_on_the_running_broker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    definitions = tmp_path / "defs.json"
    definitions.write_text(
        json.dumps(
            {
                "vhosts": [{"name": "imported"}],
                "permissions": [
                    {
                        "user": "guest",
                        "vhost": "imported",
                        "configure": ".*",
                        "write": ".*",
                        "read": ".*",
                    }
                ],
                "queues": [
                    {
                        "name": "q1",
                        "vhost": "imported",
                        "durable": True,
                        "auto_delete": False,
                        "arguments": {},
                    }
                ],
            }
        )
    )
    with broker(data) as server:
        out = ok(data, "definitions", "import", str(definitions))
        assert out.startswith("Imported 0 users, 1 vhosts, 1 permissions")
        conn = login(server.port, "guest", "guest", "imported")
        assert conn.channel().queue_declare("q1", passive=True).method.message_count == 0
        conn.close()
    with broker(data) as server:
        conn = login(server.port, "guest", "guest", "imported")
        conn.channel().queue_declare("q1", passive=True)
        conn.close()


def test_admin_commands_interleave_with_confirmed_publishing(tmp_path: Path) -> None:
    """The access tables are written between the group committer's transactions: commands
    during a confirm stream neither fail nor cost a confirm."""
    data = tmp_path / "data"
    published = 3000
    with broker(data) as server:
        conn = login(server.port, "guest", "guest")
        channel = conn.channel()
        channel.queue_declare("stream", durable=True)
        channel.confirm_delivery()
        failures: list[BaseException] = []

        def publish() -> None:
            try:
                for i in range(published):
                    channel.basic_publish(
                        "", "stream", str(i).encode(), pika.BasicProperties(delivery_mode=2)
                    )
            except BaseException as exc:  # reported by the assertion below
                failures.append(exc)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        for i in range(20):
            ok(data, "users", "add", f"user-{i}", "pw")
        publisher.join()
        assert failures == []
        conn.close()
    with broker(data) as server:
        conn = login(server.port, "guest", "guest")
        assert (
            conn.channel().queue_declare("stream", passive=True).method.message_count == published
        )
        conn.close()
    assert all(f"user-{i}\t[]" in ok(data, "users", "list") for i in range(20))


def raw_request(data: Path, payload: bytes) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CLOSE_TIMEOUT)
        sock.connect(str(data / SOCKET_NAME))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)  # a request without its newline ends here
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    answer = json.loads(reply)
    assert isinstance(answer, dict)
    return answer


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"not json\n", "malformed request"),
        (b"[1, 2]\n", "malformed request: not a JSON object"),
        (b'{"group": "users"', "malformed request"),  # no newline before EOF
        (b'{"group": "users", "command": "drop-all"}\n', "unknown command: users drop-all"),
        (b'{"group": "users", "command": "delete"}\n', "request without 'name'"),
        (b'{"group": "users", "command": "delete", "name": 7}\n', "name must be a string"),
        (
            b'{"group": "vhosts", "command": "add", "name": "v", "max_connections": "x"}\n',
            "max_connections must be an integer",
        ),
    ],
)
def test_malformed_admin_requests_are_refused_and_the_broker_keeps_serving(
    tmp_path: Path, payload: bytes, error: str
) -> None:
    data = tmp_path / "data"
    with broker(data) as server:
        answer = raw_request(data, payload)
        assert answer["ok"] is False and str(answer["error"]).startswith(error), answer
        assert "v" not in ok(data, "vhosts", "list").split()
        login(server.port, "guest", "guest").close()


def test_a_locked_directory_without_an_admin_socket_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    ok(data, "users", "list")  # creates the store
    with (data / LOCK_FILENAME).open("a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # like a broker without one
        assert run(data, "users", "add", "x", "pw")[0] == 2
    err = capsys.readouterr().err
    assert "has no admin socket" in err and "--definitions FILE" in err


def admin_as(uid: int | None, data: Path) -> tuple[int, str]:
    """``amqpd users list`` in a forked child running as ``uid`` (None: as we are); the
    exit status and what it printed on stderr."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no exec, so it needs no access to the interpreter's files
        status = 3
        try:
            os.close(read_end)
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            err = io.StringIO()
            with redirect_stderr(err):
                status = run(data, "users", "list")[0]
            os.write(write_end, err.getvalue().encode())
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        err = pipe.read().decode()
    _pid, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status), err


def test_only_the_brokers_user_may_use_the_admin_socket() -> None:
    """File mode 0600 keeps other users out; SO_PEERCRED refuses them even if it is opened
    up. (As root, "another user" is nobody; otherwise the socket is made unreadable.)"""
    nobody = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory() as base:
        data = Path(base) / "data"
        with broker(data):
            Path(base).chmod(0o755)
            data.chmod(0o755)
            socket_file = data / SOCKET_NAME
            if nobody is None:
                socket_file.chmod(0o000)
            code, err = admin_as(nobody, data)
            assert code == 2, err
            assert "run the command as the broker's user" in err
            if nobody is not None:
                socket_file.chmod(0o666)
                code, err = admin_as(nobody, data)
                assert code == 1, err
                assert f"uid {nobody} may not administer this broker" in err
