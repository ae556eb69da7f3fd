"""Federated exchanges amqpd -> amqpd over real sockets (broker subprocesses): messages and
bindings follow, x-received-from, loops are cut (max-hops, a two-broker cycle), the link
status, cleanup when the policy goes, and nothing confirmed is lost when the upstream or
the downstream broker is killed (SIGKILL) or the link is cut during a continuous transfer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.federation_support import (
    ContinuousPublisher,
    collect,
    declare,
    federate,
    links,
    ok,
    publish,
    upstream_bindings,
    wait_running,
)
from tests.integration.shovel_support import count, drain, wait_for
from tests.integration.tcp_proxy import CuttableProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a busy machine

QUIET = ("--no-management", "--no-prometheus")


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    """Three brokers with the cluster names a, b and c."""
    started: list[BrokerProcess] = []
    try:
        for name in ("a", "b", "c"):
            broker = BrokerProcess(tmp_path / name, extra=QUIET)
            started.append(broker)
            ok(broker.data_dir, "set-cluster-name", name)
        yield started
    finally:
        for broker in started:
            if broker.proc.poll() is None:
                broker.stop()


def test_messages_and_bindings_follow(brokers: list[BrokerProcess]) -> None:
    a, b, _c = brokers
    declare(a.url)
    declare(b.url, queues={"q": ["a.#"]})
    upstream = {"uri": a.url, "reconnect-delay": 0.5, "expires": 600000, "message-ttl": 60000}
    federate(b.data_dir, "up-a", upstream)
    wait_running(b.data_dir)
    wait_for(lambda: upstream_bindings(a.data_dir) == {"a.#"}, "a.# bound upstream")
    queues = ok(a.data_dir, "list-queues", "name", "arguments").splitlines()
    assert (
        'federation: fed -> b\t[{"x-expires",600000},{"x-internal-purpose","federation"},'
        '{"x-message-ttl",60000}]'
    ) in queues
    table = ok(b.data_dir, "list-federation-links").splitlines()
    assert table[0].startswith("Listing federation links on node amqpd@")
    assert table[1].split("\t") == [
        "error",
        "exchange",
        "id",
        "last_changed",
        "local_connection",
        "queue",
        "status",
        "type",
        "upstream",
        "upstream_exchange",
        "upstream_queue",
        "uri",
        "vhost",
    ]
    [item] = links(b.data_dir)
    assert (item["type"], item["exchange"], item["upstream_exchange"]) == ("exchange", "fed", "fed")
    assert (item["upstream"], item["vhost"], item["error"]) == ("up-a", "/", "")
    assert item["uri"] == a.url.replace("guest:guest@", "")  # no credentials shown
    assert item["local_connection"] == "Federation link (upstream: up-a, policy: fed-up-a)"

    publish(a.url, [("a.1", "one"), ("b.1", "not bound"), ("a.2", "two"), ("a.end", "end")])
    got = collect(b.url, "q", "end")
    assert [body for body, _headers in got] == ["one", "two"]
    [hop] = got[0][1]["x-received-from"]
    assert hop == {
        "uri": a.url.replace("guest:guest@", ""),
        "exchange": "fed",
        "redelivered": False,
        "cluster-name": "a",
        "vhost": "/",
    }

    # a binding added downstream is bound upstream; a removed one is unbound
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    channel = conn.channel()
    channel.queue_declare("q2", durable=True)
    channel.queue_bind("q2", "fed", "b.*")
    wait_for(lambda: upstream_bindings(a.data_dir) == {"a.#", "b.*"}, "b.* bound upstream")
    publish(a.url, [("b.1", "b-one"), ("b.end", "end")])
    assert [body for body, _ in collect(b.url, "q2", "end")] == ["b-one"]
    channel.queue_unbind("q", "fed", "a.#")
    conn.close()
    wait_for(lambda: upstream_bindings(a.data_dir) == {"b.*"}, "a.# unbound upstream")
    publish(a.url, [("a.3", "unbound now"), ("b.end", "end")])
    assert [body for body, _ in collect(b.url, "q2", "end")] == []
    assert count(b.url, "q") == 0  # a.3 did not travel

    # the policy goes: the link stops and its upstream queue is deleted
    ok(b.data_dir, "clear-policy", "fed-up-a")
    wait_for(lambda: links(b.data_dir) == [], "the link gone")

    def upstream_queues() -> list[str]:
        out = ok(a.data_dir, "list-queues", "name")
        return [line for line in out.splitlines() if line.startswith("federation: ")]

    wait_for(lambda: upstream_queues() == [], "the upstream queue deleted")


def test_max_hops_and_a_cycle_deliver_each_message_once(brokers: list[BrokerProcess]) -> None:
    a, b, c = brokers
    for broker in brokers:
        declare(broker.url, queues={"q": ["#"]})
    # a <-> b (max-hops 1, the default) and c <- b with max-hops 2
    federate(a.data_dir, "up-b", {"uri": b.url, "reconnect-delay": 0.5})
    federate(b.data_dir, "up-a", {"uri": a.url, "reconnect-delay": 0.5})
    federate(c.data_dir, "up-b", {"uri": b.url, "reconnect-delay": 0.5, "max-hops": 2})
    for broker in brokers:
        wait_running(broker.data_dir)
    wait_for(lambda: upstream_bindings(a.data_dir) == {"#"}, "b's binding on a")
    wait_for(lambda: upstream_bindings(b.data_dir) == {"#"}, "a's and c's bindings on b")

    publish(a.url, [("k", f"from-a-{n}") for n in range(20)] + [("k", "end-a")])
    publish(b.url, [("k", f"from-b-{n}") for n in range(20)] + [("k", "end-b")])
    # each broker has its own messages once and the other's once, nothing came back
    everything = sorted(f"from-{x}-{n}" for x in "ab" for n in range(20))
    assert sorted(body for body, _ in collect(a.url, "q", "end-a", "end-b")) == everything
    assert sorted(body for body, _ in collect(b.url, "q", "end-a", "end-b")) == everything
    # c federates from b with max-hops 2: b's messages (1 hop at c) and a's (2 hops)
    c_got = collect(c.url, "q", "end-a", "end-b")
    assert sorted(body for body, _ in c_got) == everything
    hops = {body: len(headers["x-received-from"]) for body, headers in c_got}
    assert hops["from-a-0"] == 2 and hops["from-b-0"] == 1
    assert count(a.url, "q") == 0 and count(b.url, "q") == 0 and count(c.url, "q") == 0

    # max-hops 1 on c: what b got from a no longer reaches c
    ok(c.data_dir, "set-parameter", "federation-upstream", "up-b", json.dumps({"uri": b.url}))
    wait_running(c.data_dir)
    wait_for(lambda: "running" in {i["status"] for i in links(c.data_dir)}, "c's link again")
    publish(a.url, [("k", "a-again")])
    publish(b.url, [("k", "b-again"), ("k", "end-2")])
    assert [body for body, _ in collect(c.url, "q", "end-2")] == ["b-again"]


@pytest.mark.parametrize("victim", ["downstream", "upstream"])
def test_sigkill_during_a_transfer_loses_nothing(brokers: list[BrokerProcess], victim: str) -> None:
    a, b, c = brokers
    c.stop()
    declare(a.url)
    declare(b.url, queues={"sink": ["t.#"]})
    federate(b.data_dir, "up-a", {"uri": a.url, "reconnect-delay": 0.2, "prefetch-count": 100})
    wait_running(b.data_dir)
    wait_for(lambda: upstream_bindings(a.data_dir) == {"t.#"}, "t.# bound upstream")
    publisher = ContinuousPublisher(lambda: a.url)
    publisher.start()
    try:
        publisher.wait_confirmed(1500)
        broker = b if victim == "downstream" else a
        broker.kill()
        if victim == "downstream":
            publisher.wait_confirmed(500)  # the upstream keeps them meanwhile
        broker.restart()
        wait_running(b.data_dir)
        publisher.wait_confirmed(1500)
    finally:
        confirmed = publisher.finish()
    assert publisher.failures or victim == "downstream"
    seen, total = drain(b.url, "sink", len(confirmed))
    missing = confirmed - seen
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:10]}"
    assert total >= len(confirmed)  # duplicates are allowed (on-confirm), losses are not


def test_a_cut_link_reconnects_and_loses_nothing(brokers: list[BrokerProcess]) -> None:
    """The link to the upstream goes through a proxy that resets it three times during a
    continuous transfer; each time the link comes back by itself."""
    a, b, c = brokers
    c.stop()
    declare(a.url)
    declare(b.url, queues={"sink": ["t.#"]})
    proxy = CuttableProxy(a.port)
    try:
        via_proxy = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F"
        federate(b.data_dir, "up-a", {"uri": via_proxy, "reconnect-delay": 0.2})
        wait_running(b.data_dir)
        wait_for(lambda: upstream_bindings(a.data_dir) == {"t.#"}, "t.# bound upstream")
        publisher = ContinuousPublisher(lambda: a.url)
        publisher.start()
        try:
            for _ in range(3):
                publisher.wait_confirmed(800)
                connections = proxy.accepted
                proxy.cut()
                wait_for(lambda n=connections: proxy.accepted > n, "the link reconnected")
                wait_running(b.data_dir)
            publisher.wait_confirmed(800)
        finally:
            confirmed = publisher.finish()
        # drained while the proxy still carries the link: what is still upstream must move
        seen, total = drain(b.url, "sink", len(confirmed))
    finally:
        proxy.close()
    missing = confirmed - seen
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:10]}"
    assert total >= len(confirmed)
