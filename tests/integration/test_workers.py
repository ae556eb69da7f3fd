"""``--workers 2``: each vhost served by its own worker process, connections handed over
after the handshake, a killed worker restarted with every confirmed message, the others
serving meanwhile; kill -9 of the whole node; a worker count too small for the data."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pika
import pika.credentials
import pika.exceptions
import pytest

from amqpd.shell.admin_socket import send_request
from tests.integration.broker_process import BrokerProcess
from tests.integration.shovel_support import count, ctl, publish, wait_for
from tests.integration.tls_certs import make_pki

AMQPD = (sys.executable, "-m", "amqpd")


pytestmark = pytest.mark.usefixtures("whole_vhosts")  # tests/conftest.py


def _admin(data_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [*AMQPD, *args, "--data-dir", str(data_dir)], check=True, capture_output=True, text=True
    )
    return done.stdout


def _add_v1(data_dir: Path) -> None:
    """The vhost v1, for guest: on worker 1 of a new node, whose worker 0 holds "/"."""
    _admin(data_dir, "vhosts", "add", "v1")
    _admin(data_dir, "users", "set-permissions", "guest", "--vhost", "v1", ".*", ".*", ".*")


def _workers(supervisor: int) -> dict[int, int]:
    """worker index -> pid, of the supervisor's children."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != supervisor:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
            for item in environ:
                if item.startswith(b"AMQPD_WORKER_INDEX="):
                    found[int(item.split(b"=", 1)[1])] = int(entry.name)
    return found


def _wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextmanager
def _channel(port: int, vhost: str) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    params = pika.ConnectionParameters("127.0.0.1", port, vhost, connection_attempts=1)
    connection = pika.BlockingConnection(params)
    try:
        yield connection.channel()
    finally:
        with suppress(Exception):
            connection.close()


class Publisher(threading.Thread):
    """Publishes persistent messages with confirms to ``queue`` in ``vhost``, reconnecting
    after failures; ``confirmed`` holds every body the broker confirmed."""

    def __init__(self, port: int, vhost: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.port, self.vhost, self.queue = port, vhost, queue
        self.confirmed: list[bytes] = []
        self.failures = 0
        self.stop = threading.Event()
        self.progress = threading.Event()  # set after each confirm

    def run(self) -> None:
        sequence = 0
        while not self.stop.is_set():
            try:
                with _channel(self.port, self.vhost) as channel:
                    channel.confirm_delivery()
                    while not self.stop.is_set():
                        body = f"{self.vhost}-{sequence}".encode()
                        sequence += 1
                        channel.basic_publish(
                            "", self.queue, body, pika.BasicProperties(delivery_mode=2)
                        )
                        self.confirmed.append(body)
                        self.progress.set()
            except (pika.exceptions.AMQPError, OSError):
                self.failures += 1
                self.stop.wait(0.05)  # the worker is restarting: try again


def _declares(port: int, vhost: str, queue: str) -> bool:
    """Whether a connection to ``vhost`` opens and declares ``queue`` now."""
    try:
        with _channel(port, vhost) as channel:
            channel.queue_declare(queue, durable=True)
    except (pika.exceptions.AMQPError, OSError):
        return False
    return True


def _drain(port: int, vhost: str, queue: str) -> set[bytes]:
    bodies: set[bytes] = set()
    with _channel(port, vhost) as channel:
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.add(body)


def test_vhosts_on_two_workers_survive_a_killed_worker_and_a_killed_node(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        _add_v1(data)
        assert (data / "shard-1").is_dir()
        workers = _workers(broker.proc.pid)
        assert sorted(workers) == [0, 1]
        for vhost in ("/", "v1"):
            with _channel(broker.port, vhost) as channel:
                channel.queue_declare("work", durable=True)
        # v1's queue is in worker 1's store, "/"'s in worker 0's
        assert (data / "placement.json").read_text().count('"v1": 1') == 1

        root = Publisher(broker.port, "/", "work")
        moved = Publisher(broker.port, "v1", "work")
        root.start()
        moved.start()
        _wait_for(lambda: len(moved.confirmed) >= 200 and len(root.confirmed) >= 200, "confirms")
        subprocess.run(["kill", "-9", str(workers[1])], check=True)
        served_during_restart = len(root.confirmed)
        _wait_for(lambda: _workers(broker.proc.pid).get(1, workers[1]) != workers[1], "restart")
        _wait_for(lambda: moved.failures > 0, "the publisher to notice")
        before = len(moved.confirmed)
        _wait_for(lambda: len(moved.confirmed) > before + 100, "confirms after the restart")
        assert len(root.confirmed) > served_during_restart  # worker 0 kept serving
        root.stop.set()
        moved.stop.set()
        root.join(30)
        moved.join(30)
        assert root.failures == 0  # its connection was on worker 0 throughout

        broker.kill()  # the supervisor: its workers die with it
        _wait_for(lambda: not _workers(broker.proc.pid), "the workers to die")
        broker.restart()
        for publisher in (root, moved):
            stored = _drain(broker.port, publisher.vhost, "work")
            lost = [body for body in publisher.confirmed if body not in stored]
            assert not lost, f"{len(lost)} confirmed messages lost in {publisher.vhost}"
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_a_worker_count_too_small_for_the_data_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        _admin(data, "vhosts", "add", "v1")
    finally:
        broker.stop()
    assert _refused_alone(data) == [
        "amqpd: vhost 'v1' lives on worker 1 (its data is in shard-1/): "
        "start with --workers 2 or more"
    ]


def _refused_alone(data: Path) -> list[str]:
    """What ``amqpd --workers 1`` on ``data`` prints, once it exited with status 2."""
    result = subprocess.run(
        [*AMQPD, "--workers", "1", "--port", "0", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    return result.stderr.strip().splitlines()


@pytest.mark.parametrize("setting", ["0", "two", "257"])
def test_a_bad_worker_count_is_one_line_and_exit_2(tmp_path: Path, setting: str) -> None:
    result = subprocess.run(
        [*AMQPD, "--workers", setting, "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f'amqpd: invalid setting --workers {setting}: must be "auto" or an integer from 1 to 256'
    ]


def test_tls_connections_to_another_workers_vhost_are_relayed_with_their_identity(
    tmp_path: Path,
) -> None:
    """A TLS session cannot move between processes: worker 0 relays it, and worker 1 sees
    the client's certificate identity (EXTERNAL login) and reports the connection as TLS."""
    pki = make_pki(tmp_path / "pki")
    data = tmp_path / "data"
    tls = [*("--tls-port", "0", "--tls-cert", str(pki.server_cert), "--tls-key")]
    tls += [str(pki.server_key), "--tls-ca", str(pki.ca), "--tls-verify-peer"]
    tls += ["--auth-mechanisms", "PLAIN,AMQPLAIN,EXTERNAL"]
    extra = ("--workers", "2", "--no-management", "--no-prometheus", "--log-level", "info")
    broker = BrokerProcess(data, extra=(*extra, *tls))
    try:
        user = "CN=app-client,O=amqpd tests"
        _admin(data, "vhosts", "add", "v1")
        _admin(data, "users", "add", user, "--no-password")
        _admin(data, "users", "set-permissions", user, "--vhost", "v1", ".*", ".*", ".*")
        tls_port = _tls_port(data)
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        params = pika.ConnectionParameters(
            "127.0.0.1",
            tls_port,
            "v1",
            credentials=pika.credentials.ExternalCredentials(),
            ssl_options=pika.SSLOptions(context, "localhost"),
            connection_attempts=1,
        )
        connection = pika.BlockingConnection(params)
        try:
            channel = connection.channel()
            channel.queue_declare("relayed")
            channel.basic_publish("", "relayed", b"x" * 200_000)  # several TLS records
            _method, _props, body = channel.basic_get("relayed", auto_ack=True)
            assert body == b"x" * 200_000
            columns = ("user", "vhost", "ssl", "peer_host", "auth_mechanism")
            listed = json.loads(
                _ctl(data / "shard-1", "list-connections", *columns, "--format", "json", "-q")
            )
            assert listed == [  # on worker 1, reported as TLS from the client's address
                {
                    "user": user,
                    "vhost": "v1",
                    "ssl": True,
                    "peer_host": "127.0.0.1",
                    "auth_mechanism": "EXTERNAL",
                }
            ]
            node_wide = _ctl(data, "list-connections", *columns, "--format", "json", "-q")
            assert json.loads(node_wide) == listed  # worker 0 answers for the whole node
            queues = _ctl(data, "list-queues", "-p", "v1", "--format", "json", "-q")
            assert json.loads(queues) == [{"name": "relayed", "messages": 0}]
            # the relay outlives the handshake timeout (10 s) that bounds worker 0's gate
            connection.sleep(11)
            channel.basic_publish("", "relayed", b"later")
            assert channel.basic_get("relayed", auto_ack=True)[2] == b"later"
        finally:
            connection.close()
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def _ctl(data_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [*AMQPD, "ctl", *args, "--data-dir", str(data_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def _tls_port(data_dir: Path) -> int:
    """The AMQPS port worker 0 listens on (from ``amqpd ctl status``)."""
    status = json.loads(_ctl(data_dir, "status", "--format", "json", "-q"))
    ports = [item["port"] for item in status["listeners"] if item["protocol"] == "amqp/ssl"]
    assert len(ports) == 1, status["listeners"]
    return int(ports[0])


def _listener_port(data_dir: Path, protocol: str) -> int:
    status = json.loads(_ctl(data_dir, "status", "--format", "json", "-q"))
    return int(next(item["port"] for item in status["listeners"] if item["protocol"] == protocol))


def test_the_management_api_and_prometheus_show_one_node(tmp_path: Path) -> None:
    """Operators see one broker: a vhost created through the API goes to worker 1, a queue
    declared there through the API lives on worker 1, listings and totals cover both
    workers, Prometheus merges their metrics."""
    data = tmp_path / "data"
    http = ("--management-port", "0", "--prometheus-port", "0")
    broker = BrokerProcess(data, extra=("--workers", "2", *http))
    api = httpx.Client(auth=("guest", "guest"), timeout=30)
    try:
        api.base_url = httpx.URL(f"http://127.0.0.1:{_listener_port(data, 'http')}/api")
        assert api.put("/vhosts/v1").status_code == 201
        permit = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api.put("/permissions/v1/guest", json=permit).status_code in (201, 204)
        assert api.put("/queues/v1/on-one", json={"durable": True}).status_code == 201
        assert api.put("/queues/%2F/on-zero", json={"durable": True}).status_code == 201
        with _channel(broker.port, "v1") as channel:
            channel.confirm_delivery()
            for _ in range(3):
                channel.basic_publish("", "on-one", b"m", pika.BasicProperties(delivery_mode=2))
        on_one = json.loads(_ctl(data / "shard-1", "list-queues", "-p", "v1", "--format", "json"))
        assert on_one == [{"name": "on-one", "messages": 3}]  # in worker 1's broker
        queues = api.get("/queues", params={"columns": "vhost,name,messages"}).json()
        assert sorted((q["vhost"], q["name"], q["messages"]) for q in queues) == [
            ("/", "on-zero", 0),
            ("v1", "on-one", 3),
        ]
        assert api.get("/queues/v1/on-one").json()["messages"] == 3
        overview = api.get("/overview").json()
        assert overview["object_totals"]["queues"] == 2
        assert overview["queue_totals"]["messages"] == 3
        vhosts = {v["name"]: v.get("messages", 0) for v in api.get("/vhosts").json()}
        assert vhosts == {"/": 0, "v1": 3}
        metrics = httpx.get(
            f"http://127.0.0.1:{_listener_port(data, 'http/prometheus')}/metrics", timeout=30
        ).text
        assert metrics.count("# TYPE rabbitmq_queues gauge") == 1
        assert "\nrabbitmq_queues 2.0\n" in metrics
        reply = send_request(data, {"group": "ctl", "command": "status"})  # ctl status
        assert reply is not None and reply.ok, reply
        status = json.loads(reply.text)
        assert status["totals"]["queues"] == 2
        assert [
            (w["index"], w["vhosts"], w["queues"], w["messages"]) for w in status["workers"]
        ] == [
            (0, ["/"], 1, 0),
            (1, ["v1"], 1, 3),
        ]
        assert "Worker 1: OS PID " in _ctl(data, "status")
        # the node's figures: the supervisor's pid (RabbitMQ's "OS PID" is the node's), the
        # memory the alarm compares (the supervisor's and every worker's), all descriptors
        worker_1 = send_request(data / "shard-1", {"group": "ctl", "command": "status"})
        assert worker_1 is not None and worker_1.ok, worker_1
        own = json.loads(worker_1.text)
        assert status["pid"] == str(broker.proc.pid) != own["pid"]
        assert [w["pid"] for w in status["workers"]][1] == own["pid"]
        supervisor = _resident(broker.proc.pid)
        assert status["memory"]["used"] > own["memory"]["used"] + supervisor
        assert status["file_descriptors"]["used"] > own["file_descriptors"]["used"]
        (node,) = api.get("/nodes").json()
        assert node["os_pid"] == status["pid"]
        assert node["mem_used"] > own["memory"]["used"] + supervisor
        memory = api.get(f"/nodes/{node['name']}/memory").json()["memory"]
        assert memory["strategy"] == "rss"  # every worker's breakdown summed: the node's
        assert memory["total"]["rss"] > own["memory"]["used"] + supervisor
        broker.stop()
    finally:
        api.close()
        if broker.proc.poll() is None:
            broker.kill()


def test_a_shovel_runs_on_its_vhosts_worker_and_delete_after_clears_it_node_wide(
    tmp_path: Path,
) -> None:
    """A shovel of vhost v1 runs on worker 1 (its links reach the node through worker 0 as
    the internal user), moves from v1 (worker 1) to / (worker 0), and src-delete-after
    clears its parameter on worker 0, which owns the parameters."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        _add_v1(data)
        v1_url = f"amqp://guest:guest@127.0.0.1:{broker.port}/v1"
        publish(v1_url, "src", range(30))
        shovel = {
            "src-uri": "amqp:///v1",
            "src-queue": "src",
            "dest-uri": "amqp://",
            "dest-queue": "dst",
            "src-delete-after": 20,
        }
        done = ctl(data, "set-parameter", "-p", "v1", "shovel", "once", json.dumps(shovel))
        assert done.returncode == 0, done.stderr
        wait_for(lambda: count(broker.url, "dst") == 20, "20 messages moved to worker 0")
        parameters = ("list-parameters", "-p", "v1")
        wait_for(lambda: "once" not in ctl(data, *parameters).stdout, "the parameter cleared")
        assert count(v1_url, "src") == 10
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_a_definitions_file_puts_each_vhosts_topology_on_its_worker(tmp_path: Path) -> None:
    definitions = tmp_path / "definitions.json"
    definitions.write_text(
        json.dumps(
            {
                "vhosts": [{"name": "/"}, {"name": "v1"}],
                "permissions": [
                    {"user": "guest", "vhost": "v1", "configure": ".*", "write": ".*", "read": ".*"}
                ],
                "queues": [
                    {"name": "q0", "vhost": "/", "durable": True, "arguments": {}},
                    {"name": "q1", "vhost": "v1", "durable": True, "arguments": {}},
                ],
                "exchanges": [
                    {"name": "x1", "vhost": "v1", "type": "fanout", "durable": True},
                ],
                "bindings": [
                    {
                        "source": "x1",
                        "vhost": "v1",
                        "destination": "q1",
                        "destination_type": "queue",
                        "routing_key": "",
                        "arguments": {},
                    }
                ],
            }
        )
    )
    data = tmp_path / "data"
    extra = ("--workers", "2", "--no-management", "--no-prometheus")
    broker = BrokerProcess(data, extra=(*extra, "--definitions", str(definitions)))
    try:
        # the node listens once every worker has the state: each answers at once
        reply = send_request(data, {"group": "ctl", "command": "status"})  # ctl status
        assert reply is not None and reply.ok, reply
        status = json.loads(reply.text)
        assert [row["vhosts"] for row in status["workers"]] == [["/"], ["v1"]]
        assert all(row["pid"] for row in status["workers"]), status["workers"]
        # and worker 1 has the vhost's topology (amqpd/shell/workers/inbox.py)
        with _channel(broker.port, "v1") as channel:  # the binding came along
            channel.confirm_delivery()
            channel.basic_publish("x1", "", b"routed")
        assert json.loads(_ctl(data, "list-queues", "-p", "v1", "--format", "json", "-q")) == [
            {"name": "q1", "messages": 1}
        ]
        assert "q1" in _ctl(data / "shard-1", "list-queues", "-p", "v1")
        assert "q0" in _ctl(data, "list-queues")
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def _resident(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) * 1024


def test_the_memory_alarm_is_node_wide_and_blocks_publishers_on_every_worker(
    tmp_path: Path,
) -> None:
    """The watermark is above what any one process uses and below what the node (the
    supervisor and its workers) uses: every worker raises the alarm and blocks its
    publishers, as RabbitMQ's node-wide alarm does. The watermark is set once the node's
    processes were measured (between the largest and their sum), with `amqpd ctl`."""
    data = tmp_path / "data"
    extra = ("--workers", "2", "--no-management", "--no-prometheus")
    broker = BrokerProcess(data, extra=extra)
    try:
        _add_v1(data)
        workers = _workers(broker.proc.pid)
        node = [broker.proc.pid, *workers.values()]
        largest, total = max(_resident(pid) for pid in node), sum(_resident(pid) for pid in node)
        watermark = (largest + total) // 2  # about 30 MB from each at idle
        assert largest < watermark < total
        _ctl(data, "set-vm-memory-high-watermark", "absolute", str(watermark), "-q")

        def alarms(data_dir: Path) -> list[str]:
            status = json.loads(_ctl(data_dir, "status", "--format", "json", "-q"))
            return list(status["alarms"])

        wait_for(lambda: alarms(data / "shard-1") == ["memory"], "worker 1's alarm")
        wait_for(lambda: alarms(data) == ["memory"], "worker 0's alarm")
        assert _resident(workers[1]) < watermark  # worker 1 alone is below it
        blocked: list[str] = []
        params = pika.ConnectionParameters("127.0.0.1", broker.port, "v1", connection_attempts=1)
        connection = pika.BlockingConnection(params)
        connection.add_on_connection_blocked_callback(
            lambda _conn, frame: blocked.append(frame.method.reason)
        )
        connection.channel().basic_publish("", "nowhere", b"x")
        deadline = time.monotonic() + 30
        while not blocked and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
        assert blocked == ["low on memory"]
        # a blocked connection reads nothing more (RabbitMQ too): the broker's stop closes it
        broker.stop()
        with suppress(pika.exceptions.AMQPError):
            connection.process_data_events(time_limit=1)  # reads the 320
        assert connection.is_closed
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_an_alarm_limit_set_with_ctl_holds_on_every_worker_and_a_restarted_one(
    tmp_path: Path,
) -> None:
    """``amqpd ctl set-vm-memory-high-watermark 0`` raises the memory alarm on both workers;
    worker 1 killed and restarted by the supervisor starts with the changed limit (the
    node's runtime directory keeps it), not the configured one; a node restarted comes
    back with the configured one, as a RabbitMQ node does."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:

        def alarms(data_dir: Path) -> list[str]:
            status = json.loads(_ctl(data_dir, "status", "--format", "json", "-q"))
            return list(status["alarms"])

        assert _ctl(data, "set-vm-memory-high-watermark", "0", "-q") == ""
        for where in (data, data / "shard-1"):
            wait_for(lambda where=where: alarms(where) == ["memory"], f"{where}'s alarm")
        worker_1 = _workers(broker.proc.pid)[1]
        subprocess.run(["kill", "-9", str(worker_1)], check=True)
        _wait_for(lambda: _workers(broker.proc.pid).get(1, worker_1) != worker_1, "restart")
        restarted = _workers(broker.proc.pid)[1]
        wait_for(lambda: send_request(data / "shard-1", {"group": "ping"}) is not None, "ping")
        wait_for(lambda: alarms(data / "shard-1") == ["memory"], "the restarted worker's alarm")
        assert _workers(broker.proc.pid)[1] == restarted
        broker.stop()
        broker.restart()
        assert alarms(data) == alarms(data / "shard-1") == []
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_definitions_export_and_import_cover_every_worker(tmp_path: Path) -> None:
    """``amqpd definitions export`` shows each vhost's queues from its worker, and
    importing that document into a new node puts them back on their workers."""
    data = tmp_path / "data"
    extra = ("--workers", "2", "--no-management", "--no-prometheus")
    broker = BrokerProcess(data, extra=extra)
    try:
        _add_v1(data)
        for vhost, queue in (("/", "q0"), ("v1", "q1")):
            with _channel(broker.port, vhost) as channel:
                channel.queue_declare(queue, durable=True)
        exported = tmp_path / "exported.json"
        _admin(data, "definitions", "export", str(exported))
        document = json.loads(exported.read_text())
        assert sorted((q["vhost"], q["name"]) for q in document["queues"]) == [
            ("/", "q0"),
            ("v1", "q1"),
        ]
        broker.stop()
        other = tmp_path / "other"
        broker = BrokerProcess(other, extra=extra)
        imported = _admin(other, "definitions", "import", str(exported))
        assert "2 queues" in imported  # each worker's part counted
        assert "q1" in _ctl(other / "shard-1", "list-queues", "-p", "v1")
        assert "q0" in _ctl(other, "list-queues")
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_a_silent_client_is_dropped_at_the_gate_after_the_handshake_timeout(
    tmp_path: Path,
) -> None:
    """Worker 0 reads each handshake itself; a client that sends the protocol header and
    then nothing is disconnected after the handshake timeout (10 s, as RabbitMQ)."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as client:
            client.sendall(b"AMQP\x00\x00\x09\x01")
            received = b""
            began = time.monotonic()
            while chunk := client.recv(4096):  # Connection.Start, then the close
                received += chunk
            waited = time.monotonic() - began
        assert received[:1] == b"\x01"  # Connection.Start came first
        assert 9 <= waited < 25
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_a_worker_that_keeps_dying_stops_the_node(tmp_path: Path) -> None:
    """A worker is restarted after each death; the sixth within a minute stops the node
    (exit 1), as an OTP supervisor gives up past its restart intensity."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        for death in range(6):
            pid = _workers(broker.proc.pid)[1]
            subprocess.run(["kill", "-9", str(pid)], check=True)
            if death < 5:
                _wait_for(lambda old=pid: _workers(broker.proc.pid).get(1, old) != old, "restart")
        assert broker.reap(timeout=60) == 1
        assert not _workers(broker.proc.pid)
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_a_killed_worker_0_leaves_the_other_workers_connections_serving(tmp_path: Path) -> None:
    """Worker 0 only handed the connection over: while it restarts, a publisher on worker 1
    keeps getting confirms; afterwards worker 0 serves new connections again."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        _add_v1(data)
        with _channel(broker.port, "v1") as channel:
            channel.queue_declare("work", durable=True)
        moved = Publisher(broker.port, "v1", "work")
        moved.start()
        _wait_for(lambda: len(moved.confirmed) >= 100, "confirms")
        front = _workers(broker.proc.pid)[0]
        subprocess.run(["kill", "-9", str(front)], check=True)
        during = len(moved.confirmed)
        _wait_for(lambda: _workers(broker.proc.pid).get(0, front) != front, "restart")
        _wait_for(lambda: len(moved.confirmed) > during + 100, "confirms meanwhile")
        _wait_for(lambda: _declares(broker.port, "/", "after"), "worker 0 serving again")
        moved.stop.set()
        moved.join(30)
        assert moved.failures == 0  # its connection lives in worker 1
        stored = _drain(broker.port, "v1", "work")
        assert not [body for body in moved.confirmed if body not in stored]
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_a_vhost_whose_worker_is_down_is_refused_with_541(tmp_path: Path) -> None:
    """While worker 1 is down and not yet restarted, opening its vhost waits up to the
    handshake timeout and is then refused with 541 "vhost … is down" (as RabbitMQ refuses a
    vhost whose supervisor is not running); "/" on worker 0 serves meanwhile, and the vhost
    serves again once its worker is back."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        _add_v1(data)
        assert _declares(broker.port, "v1", "before")
        worker = _workers(broker.proc.pid)[1]
        os.kill(broker.proc.pid, signal.SIGSTOP)  # the supervisor cannot restart it yet
        try:
            pidfd = os.pidfd_open(worker)
            os.kill(worker, signal.SIGKILL)
            assert select.select([pidfd], [], [], 30)[0], "worker 1 did not die"
            os.close(pidfd)
            params = pika.ConnectionParameters(
                "127.0.0.1", broker.port, "v1", connection_attempts=1, stack_timeout=60
            )
            with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
                pika.BlockingConnection(params)
            assert "541" in str(refused.value), refused.value
            assert "vhost 'v1' is down" in str(refused.value), refused.value
            assert _declares(broker.port, "/", "meanwhile")
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        _wait_for(lambda: _declares(broker.port, "v1", "after"), "worker 1 serving again")
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def _refused(port: int, vhost: str) -> str:
    """The error text of a connection to ``vhost`` that the broker refuses."""
    params = pika.ConnectionParameters("127.0.0.1", port, vhost, connection_attempts=1)
    with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
        pika.BlockingConnection(params)
    return str(refused.value)


@pytest.mark.parametrize("limit", ["user", "node"])
def test_connection_limits_count_the_connections_of_every_worker(
    tmp_path: Path, limit: str
) -> None:
    """A user's max-connections and the node's connection_max hold for the node: one
    connection on worker 0 ("/") and one on worker 1 (v1) reach a limit of 2 for either
    vhost, as with one process; closing one makes room again."""
    data = tmp_path / "data"
    extra = ("--connection-max", "2") if limit == "node" else ()
    options = ("--workers", "2", "--no-management", "--no-prometheus", *extra)
    broker = BrokerProcess(data, extra=options)
    try:
        _add_v1(data)
        if limit == "user":
            _admin(data, "users", "set-limit", "guest", "max-connections", "2")
        expected = {
            "user": "NOT_ALLOWED - connection refused for user 'guest': "
            "user connection limit (2) is reached",
            "node": "NOT_ALLOWED - connection refused: node connection limit (2) is reached",
        }[limit]
        on_worker_0 = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        on_worker_1 = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", broker.port, "v1")
        )
        for vhost in ("/", "v1"):
            text = _refused(broker.port, vhost)
            assert "530" in text and expected in text, text
        unknown = _refused(broker.port, "nope")  # as rabbit_reader: the vhost first
        assert "530" in unknown and "vhost 'nope' not found" in unknown, unknown
        on_worker_1.close()
        assert _declares(broker.port, "v1", "room-again")
        on_worker_0.close()
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()


def test_workers_still_starting_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    """The death signal is set before a worker runs any Python: a node stopped while its
    workers start (SIGSTOP, as a debugger or a frozen host) and then killed leaves no
    worker behind (one that stayed would hold the store and the inherited pipes)."""
    command = [*AMQPD, "--port", "0", "--data-dir", str(tmp_path / "data"), "--workers", "2"]
    node = subprocess.Popen(
        [*command, "--no-management", "--no-prometheus"],
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: len(_workers(node.pid)) == 2, "both workers spawned", 30)
        os.killpg(node.pid, signal.SIGSTOP)  # the workers are still importing amqpd
        workers = list(_workers(node.pid).values())
        pidfds = [os.pidfd_open(pid) for pid in workers]
        node.kill()
        node.wait(30)
        for pidfd in pidfds:
            assert select.select([pidfd], [], [], 30)[0], "a worker outlived its supervisor"
            os.close(pidfd)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        node.wait(30)


def test_a_users_max_channels_counts_the_channels_of_every_worker(tmp_path: Path) -> None:
    """A user's max-channels holds for the node (RabbitMQ counts over the cluster): one
    channel on worker 0 ("/") and one on worker 1 (v1) reach a limit of 2 on either worker,
    with RabbitMQ's 530 text; closing a channel, or a whole connection, on one worker makes
    room on the other."""
    data = tmp_path / "data"
    options = ("--workers", "2", "--no-management", "--no-prometheus")
    broker = BrokerProcess(data, extra=options)
    try:
        _add_v1(data)
        on_worker_0 = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        on_worker_1 = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", broker.port, "v1")
        )
        first = on_worker_0.channel()
        on_worker_1.channel()
        _admin(data, "users", "set-limit", "guest", "max-channels", "2")
        expected = (
            "NOT_ALLOWED - number of channels opened for user 'guest' has reached the "
            "maximum allowed user limit of (2)"
        )
        for vhost in ("/", "v1"):  # the limit was set with both channels already open
            third = pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", broker.port, vhost)
            )
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused:
                third.channel()
            assert refused.value.reply_code == 530, refused.value
            assert expected in refused.value.reply_text, refused.value
        first.close()  # room on worker 0 is room on worker 1
        on_worker_1.channel().queue_declare("room-on-worker-1")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker):
            on_worker_0.channel()  # full again: worker 1 has both
        on_worker_1.close()  # a closed connection gives its channels back
        on_worker_0 = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        on_worker_0.channel()
        on_worker_0.channel()
        on_worker_0.close()
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()
