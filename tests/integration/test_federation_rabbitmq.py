"""Federated exchanges between amqpd and a private RabbitMQ 3.10 node with its federation
plugin, both ways and in a cycle: amqpd's links declare RabbitMQ's helper exchange (an
x-max-hops of type long) and follow bindings; RabbitMQ's plugin federates from amqpd (its
helper exchange is amqpd's x-federation-upstream type); with both, each message arrives
once on each side."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.federation_support import (
    collect,
    declare,
    federate,
    links,
    ok,
    publish,
    upstream_bindings,
    wait_running,
)
from tests.integration.rabbit_node import RABBIT_REASON, RabbitNode, rabbit_node
from tests.integration.shovel_support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a busy machine

QUIET = ("--no-management", "--no-prometheus")


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitNode]:
    if RABBIT_REASON is not None:
        pytest.fail(f"these tests need RabbitMQ: {RABBIT_REASON}")
    node = RabbitNode(prefix="fed", plugins=("rabbitmq_federation",))
    try:
        node.wait()
        rabbitmqctl(node, "set_cluster_name", "rabbit-r")
        yield node
    finally:
        node.stop()


@pytest.fixture
def amqpd(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "a", extra=QUIET)
    try:
        ok(broker.data_dir, "set-cluster-name", "amqpd-a")
        yield broker
    finally:
        broker.stop()


def rabbitmqctl(node: RabbitNode, *args: str) -> str:
    """``rabbitmqctl -q -n NODE ARGS`` (the plugin's commands need its plugins file)."""
    env = {**os.environ, "RABBITMQ_ENABLED_PLUGINS_FILE": str(node.base / "enabled_plugins")}
    done = subprocess.run(
        ["rabbitmqctl", "-q", "-n", node.node, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"rabbitmqctl {args}: {done.stdout} {done.stderr}"
    return done.stdout


def rabbit_links(node: RabbitNode) -> list[dict[str, str]]:
    return list(json.loads(rabbitmqctl(node, "federation_status", "--formatter", "json")))


def rabbit_upstream_keys(node: RabbitNode, exchange: str) -> set[str]:
    out = rabbitmqctl(node, "list_bindings", "source_name", "destination_name", "routing_key")
    found = set()
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] == exchange and parts[1].startswith("federation: "):
            found.add(parts[2])
    return found


def test_amqpd_federates_from_rabbitmq(rabbit: RabbitNode, amqpd: BrokerProcess) -> None:
    declare(rabbit.url, "fed.r2a")
    declare(amqpd.url, "fed.r2a", queues={"q.r2a": ["k.*"]})
    federate(amqpd.data_dir, "rabbit", {"uri": rabbit.url, "reconnect-delay": 0.5}, "^fed.r2a$")
    wait_running(amqpd.data_dir)
    wait_for(lambda: rabbit_upstream_keys(rabbit, "fed.r2a") == {"k.*"}, "k.* bound at RabbitMQ")
    helpers = rabbitmqctl(rabbit, "list_exchanges", "name", "type")
    # RabbitMQ accepted amqpd's helper: x-federation-upstream, x-max-hops of type long
    assert "federation: fed.r2a -> amqpd-a B\tx-federation-upstream" in helpers

    publish(rabbit.url, [("k.1", "one"), ("x.1", "unbound"), ("k.end", "end")], "fed.r2a")
    got = collect(amqpd.url, "q.r2a", "end")
    assert [body for body, _ in got] == ["one"]
    [hop] = got[0][1]["x-received-from"]
    assert (hop["cluster-name"], hop["exchange"], hop["vhost"]) == ("rabbit-r", "fed.r2a", "/")
    assert hop["uri"] == rabbit.url.replace("guest:guest@", "")

    # the policy goes: amqpd's link deletes its queue at RabbitMQ
    ok(amqpd.data_dir, "clear-policy", "fed-rabbit")
    wait_for(lambda: links(amqpd.data_dir) == [], "the link stopped")

    def leftovers() -> list[str]:
        names = rabbitmqctl(rabbit, "list_queues", "name").splitlines()
        return [name for name in names if name.startswith("federation: fed.r2a")]

    wait_for(lambda: leftovers() == [], "the upstream queue deleted at RabbitMQ")


def test_rabbitmq_federates_from_amqpd_and_a_cycle_delivers_once(
    rabbit: RabbitNode, amqpd: BrokerProcess
) -> None:
    declare(amqpd.url, "fed.a2r", queues={"qa": ["#"]})
    declare(rabbit.url, "fed.a2r", queues={"qr": ["#"]})
    upstream = json.dumps({"uri": amqpd.url, "reconnect-delay": 1})
    rabbitmqctl(rabbit, "set_parameter", "federation-upstream", "amqpd", upstream)
    policy = json.dumps({"federation-upstream": "amqpd"})
    rabbitmqctl(rabbit, "set_policy", "--apply-to", "exchanges", "fed-a2r", "^fed.a2r$", policy)
    try:

        def rabbit_running() -> bool:
            return any(
                item["upstream"] == "amqpd" and item["status"] == "running"
                for item in rabbit_links(rabbit)
            )

        wait_for(rabbit_running, "RabbitMQ's link to amqpd running")
        wait_for(lambda: upstream_bindings(amqpd.data_dir, "fed.a2r") == {"#"}, "# on amqpd")
        helpers = ok(amqpd.data_dir, "list-exchanges", "name", "type")
        assert "federation: fed.a2r -> rabbit-r B\tx-federation-upstream" in helpers

        publish(amqpd.url, [("k", "from-amqpd"), ("k", "end-1")], "fed.a2r")
        got = collect(rabbit.url, "qr", "end-1")
        assert [body for body, _ in got] == ["from-amqpd"]
        [hop] = got[0][1]["x-received-from"]
        assert (hop["cluster-name"], hop["exchange"]) == ("amqpd-a", "fed.a2r")

        # and back: amqpd federates the same exchange from RabbitMQ - a cycle
        federate(amqpd.data_dir, "rabbit", {"uri": rabbit.url, "reconnect-delay": 0.5})
        wait_running(amqpd.data_dir)
        wait_for(lambda: rabbit_upstream_keys(rabbit, "fed.a2r") == {"#"}, "# at RabbitMQ")
        publish(amqpd.url, [("k", f"a-{n}") for n in range(10)] + [("k", "end-a")], "fed.a2r")
        publish(rabbit.url, [("k", f"r-{n}") for n in range(10)] + [("k", "end-r")], "fed.a2r")
        everything = sorted([f"a-{n}" for n in range(10)] + [f"r-{n}" for n in range(10)])
        earlier = ["from-amqpd", "end-1"]  # published before, never consumed from qa
        at_amqpd = collect(amqpd.url, "qa", "end-a", "end-r")
        assert sorted(b for b, _ in at_amqpd) == sorted([*earlier, *everything])
        assert sorted(b for b, _ in collect(rabbit.url, "qr", "end-a", "end-r")) == everything
        # nothing more comes round: a last marker each way is the next message
        publish(amqpd.url, [("k", "last")], "fed.a2r")
        assert collect(rabbit.url, "qr", "last") == []
        assert collect(amqpd.url, "qa", "last") == []
    finally:
        rabbitmqctl(rabbit, "clear_policy", "fed-a2r")
        rabbitmqctl(rabbit, "clear_parameter", "federation-upstream", "amqpd")


def test_a_rabbitmq_without_the_plugin_gets_a_fanout_helper(amqpd: BrokerProcess) -> None:
    """An upstream that does not know x-federation-upstream closes the connection (503);
    the link declares a fanout helper instead, as RabbitMQ's link does, and runs."""
    if RABBIT_REASON is not None:
        pytest.fail(f"these tests need RabbitMQ: {RABBIT_REASON}")
    plain = rabbit_node()  # the session's node, no plugins
    plain.wait()
    declare(plain.url, "fed.plain")
    declare(amqpd.url, "fed.plain", queues={"q.plain": ["k"]})
    federate(amqpd.data_dir, "plain", {"uri": plain.url, "reconnect-delay": 0.5}, "^fed.plain$")
    wait_running(amqpd.data_dir)
    helpers = rabbitmqctl(plain, "list_exchanges", "name", "type")
    assert "federation: fed.plain -> amqpd-a B\tfanout" in helpers
    publish(plain.url, [("k", "one"), ("j", "unbound"), ("k", "end")], "fed.plain")
    assert [body for body, _ in collect(amqpd.url, "q.plain", "end")] == ["one"]
    ok(amqpd.data_dir, "clear-policy", "fed-plain")
    wait_for(lambda: links(amqpd.data_dir) == [], "the link stopped")
    wait_for(lambda: "fed.plain" not in rabbitmqctl(plain, "list_queues", "name"), "queue deleted")


def test_rabbitmq_refuses_what_amqpd_refuses(rabbit: RabbitNode, amqpd: BrokerProcess) -> None:
    """The x-federation-upstream declaration checks, side by side."""
    for url in (rabbit.url, amqpd.url):
        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            channel = conn.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                channel.exchange_declare("xfu", "x-federation-upstream")
            assert refused.value.reply_code == 406
            assert refused.value.reply_text == ("PRECONDITION_FAILED - Argument x-max-hops missing")
        finally:
            conn.close()
