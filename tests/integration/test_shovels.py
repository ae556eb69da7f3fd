"""Dynamic shovels amqpd -> amqpd over real sockets: nothing confirmed is lost when either
broker is killed (SIGKILL) or the link is cut during a transfer, and the link comes back by
itself; ``amqpd ctl`` set/list/clear and list-shovels."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.shovel_support import count, ctl, drain, publish, set_shovel, wait_for
from tests.integration.tcp_proxy import CuttableProxy

pytestmark = pytest.mark.slow

N = 6000
QUIET = ("--no-management", "--no-prometheus")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """Two brokers: the source (A, running the shovel) and the destination (B)."""
    brokers = [
        BrokerProcess(tmp_path / "a", extra=QUIET),
        BrokerProcess(tmp_path / "b", extra=QUIET),
    ]
    try:
        yield brokers[0], brokers[1]
    finally:
        for broker in brokers:
            if broker.proc.poll() is None:
                broker.stop()


def _shovel(dest_url: str, **extra: object) -> dict[str, object]:
    return {
        "src-uri": "amqp://",
        "src-queue": "src",
        "dest-uri": dest_url,
        "dest-queue": "dst",
        "reconnect-delay": 0.2,
        "src-prefetch-count": 200,
        **extra,
    }


def _state(data_dir: Path) -> str:
    done = ctl(data_dir, "list-shovels", "--format", "json")
    rows = json.loads(done.stdout) if done.returncode == 0 else []
    return str(rows[0]["state"]) if rows else ""


def _assert_all_arrived(url: str, n: int = N) -> int:
    seen, total = drain(url, "dst", n)
    assert seen == set(range(n)), f"missing: {sorted(set(range(n)) - seen)[:20]}"
    return total - n  # duplicates


def test_ctl_sets_lists_and_clears_a_shovel(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = pair
    publish(a.url, "src", range(100))
    set_shovel(a.data_dir, "s1", _shovel(b.url))
    wait_for(lambda: count(b.url, "dst") == 100, "100 messages at the destination")
    listed = ctl(a.data_dir, "list-parameters")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[1] == "component\tname\tvalue"
    assert listed.stdout.splitlines()[2].startswith("shovel\ts1\t{")
    status = ctl(a.data_dir, "list-shovels")
    lines = status.stdout.splitlines()
    assert lines[0].startswith("Shovel status on node ")
    header, row = lines[1].split("\t"), lines[2].split("\t")
    item = dict(zip(header, row, strict=True))
    assert (item["name"], item["vhost"], item["type"], item["state"]) == (
        "s1",
        "/",
        "dynamic",
        "running",
    )
    assert item["destination"] == f"amqp://127.0.0.1:{b.port}/%2F"  # no credentials
    refused = ctl(a.data_dir, "set-parameter", "shovel", "bad", '{"src-uri": "amqp://"}')
    assert refused.returncode == 69  # as rabbitmqctl: the banner, then the error
    assert refused.stdout.startswith('Setting runtime parameter "bad" for component "shovel"')
    assert "Must specify 'src-exchange' or 'src-queue'" in refused.stderr
    cleared = ctl(a.data_dir, "clear-parameter", "shovel", "s1")
    assert cleared.returncode == 0
    wait_for(lambda: ctl(a.data_dir, "list-shovels").stdout.count("\n") <= 1, "no shovel")
    publish(a.url, "src", range(100, 110))
    assert count(a.url, "src") == 10  # nothing moves any more


def test_kill_destination_during_transfer_loses_nothing(
    pair: tuple[BrokerProcess, BrokerProcess], tmp_path: Path
) -> None:
    a, b = pair
    publish(a.url, "src", range(N))
    set_shovel(a.data_dir, "s", _shovel(b.url))
    wait_for(lambda: count(b.url, "dst") >= N // 6, "the transfer to be under way")
    b.kill()
    restarted = BrokerProcess(tmp_path / "b", port=b.port, extra=QUIET)
    pair_b = restarted
    try:
        wait_for(lambda: count(pair_b.url, "dst") >= N, "every message at the destination")
        wait_for(lambda: _state(a.data_dir) == "running", "the shovel running again")
        _assert_all_arrived(pair_b.url)
        assert count(a.url, "src") == 0
    finally:
        restarted.stop()


def test_kill_source_during_transfer_loses_nothing(
    pair: tuple[BrokerProcess, BrokerProcess], tmp_path: Path
) -> None:
    a, b = pair
    publish(a.url, "src", range(N))
    set_shovel(a.data_dir, "s", _shovel(b.url))
    wait_for(lambda: count(b.url, "dst") >= N // 6, "the transfer to be under way")
    a.kill()
    restarted = BrokerProcess(tmp_path / "a", extra=QUIET)  # the shovel is stored
    try:
        wait_for(lambda: count(b.url, "dst") >= N, "every message at the destination")
        wait_for(lambda: count(restarted.url, "src") == 0, "the source queue empty")
        _assert_all_arrived(b.url)
    finally:
        restarted.stop()


def test_cut_link_reconnects_and_loses_nothing(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    """on-confirm: a cut link loses nothing (on-publish and no-ack may lose what was in
    flight, as in RabbitMQ, so they are not held to this)."""
    a, b = pair
    proxy = CuttableProxy(b.port)
    try:
        publish(a.url, "src", range(N))
        dest = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F"
        set_shovel(a.data_dir, "s", _shovel(dest))
        for part in (1, 2, 3):
            wait_for(lambda p=part: count(b.url, "dst") >= p * N // 5, "the transfer to go on")
            connections = proxy.accepted
            proxy.cut()
            wait_for(lambda c=connections: proxy.accepted > c, "the shovel to reconnect")
        wait_for(lambda: count(a.url, "src") == 0, "the source queue empty")
        wait_for(lambda: count(b.url, "dst") >= N, "every message at the destination")
        _assert_all_arrived(b.url)
        assert _state(a.data_dir) == "running"
    finally:
        proxy.close()


def test_a_silent_partition_is_noticed_by_heartbeats(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    """The link's bytes vanish without a FIN or RST: heartbeats (1 s here) tell the shovel,
    which reconnects; nothing is lost."""
    a, b = pair
    proxy = CuttableProxy(b.port)
    try:
        publish(a.url, "src", range(N))
        dest = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F?heartbeat=1"
        set_shovel(a.data_dir, "s", _shovel(dest))
        wait_for(lambda: count(b.url, "dst") >= N // 5, "the transfer to be under way")
        connections = proxy.accepted
        proxy.freeze()
        wait_for(lambda: proxy.accepted > connections, "the shovel to reconnect")
        wait_for(lambda: count(a.url, "src") == 0, "the source queue empty")
        wait_for(lambda: count(b.url, "dst") >= N, "every message at the destination")
        _assert_all_arrived(b.url)
    finally:
        proxy.close()


def test_shovel_survives_a_restart_and_delete_after_clears_it(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    publish(a.url, "src", range(50))
    set_shovel(a.data_dir, "once", _shovel(b.url, **{"src-delete-after": 20}))
    wait_for(lambda: count(b.url, "dst") == 20, "20 messages moved")
    wait_for(lambda: "once" not in ctl(a.data_dir, "list-parameters").stdout, "cleared")
    assert count(a.url, "src") == 30
    assert count(b.url, "dst") == 20


@pytest.mark.parametrize("ack_mode", ["on-publish", "no-ack"])
def test_exchange_source_other_ack_modes_and_forward_headers(
    pair: tuple[BrokerProcess, BrokerProcess], ack_mode: str
) -> None:
    a, b = pair
    value = {
        "src-uri": "amqp://",
        "src-exchange": "amq.topic",
        "src-exchange-key": "orders.#",
        "dest-uri": b.url,
        "dest-exchange": "amq.direct",
        "dest-exchange-key": "k",
        "ack-mode": ack_mode,
        "add-forward-headers": True,
        "dest-publish-properties": {"app_id": "shovelled", "delivery_mode": 2},
    }
    set_shovel(a.data_dir, "x", value)
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    try:
        channel = conn.channel()
        channel.queue_declare("dst", durable=True)
        channel.queue_bind("dst", "amq.direct", "k")
        wait_for(lambda: _state(a.data_dir) == "running", "the shovel running")
        source = pika.BlockingConnection(pika.URLParameters(a.url))
        out = source.channel()
        out.confirm_delivery()
        out.basic_publish("amq.topic", "orders.new", b"7")
        out.basic_publish("amq.topic", "other", b"8")  # not bound: not shovelled
        source.close()
        wait_for(lambda: count(b.url, "dst") == 1, "the message at the destination")
        method, props, body = channel.basic_get("dst", auto_ack=True)
        assert body == b"7" and method is not None
        assert props.app_id == "shovelled" and props.delivery_mode == 2
        [hop] = props.headers["x-shovelled"]
        assert hop["shovel-name"] == "x" and hop["shovel-vhost"] == "/"
        assert hop["shovel-type"] == "dynamic"
        assert hop["src-exchange"] == "amq.topic" and hop["src-exchange-key"] == "orders.#"
        assert hop["dest-exchange"] == "amq.direct"
        assert hop["dest-uri"] == f"amqp://127.0.0.1:{b.port}/%2F"
    finally:
        conn.close()
