"""The model's side of federation: the x-federation-upstream exchange type (RabbitMQ's
rabbit_federation_upstream_exchange; each refusal text below is what RabbitMQ 3.10.8 with
rabbitmq_federation answered), the topology version the links follow, the cluster name."""

from __future__ import annotations

from typing import Any

import pytest

from amqpd.engine import handshake
from amqpd.model.admin_commands import execute
from amqpd.model.broker import Broker
from amqpd.model.federation_exchange import (
    binding_arguments,
    helper_exchange,
    queue_name,
    received_from,
    upstream_bindings,
    with_received_from,
)
from amqpd.wire.errors import AMQPError
from exchanges.federation_upstream import FederationUpstreamRouter, should_forward
from exchanges.registry import EXCHANGE_TYPES, create_router

ARGS = {"x-max-hops": 2, "x-downstream-name": "dn", "x-downstream-vhost": "/"}


def _declare(broker: Broker, name: str, type_name: str, arguments: dict[str, Any]) -> Any:
    vhost = broker.vhosts["/"]
    return vhost.declare_exchange(name, type_name, False, True, True, True, arguments)


def test_the_type_is_known_and_its_arguments_checked() -> None:
    assert "x-federation-upstream" in EXCHANGE_TYPES
    broker = Broker()
    for arguments, text in (
        ({}, "Argument x-max-hops missing"),
        ({"x-max-hops": "a"}, "Argument x-max-hops must be of type long"),
    ):
        with pytest.raises(AMQPError) as refused:
            _declare(broker, "fx", "x-federation-upstream", arguments)
        assert (refused.value.reply_code, refused.value.text) == (406, text)
    exchange = _declare(broker, "fx", "x-federation-upstream", ARGS)
    assert isinstance(exchange.router, FederationUpstreamRouter)
    assert _declare(broker, "fx", "x-federation-upstream", dict(ARGS)) is exchange
    with pytest.raises(AMQPError) as refused:
        _declare(broker, "fx", "x-federation-upstream", {**ARGS, "x-max-hops": 3})
    assert refused.value.reply_code == 406 and "inequivalent arg 'x-max-hops'" in refused.value.text


def test_it_drops_what_went_too_far_or_would_return_downstream() -> None:
    router = create_router("x-federation-upstream", ARGS)
    router.bind("q", "ignored", {})
    assert router.route("k", None) == ["q"]

    def routed(received: object) -> bool:
        return router.route("k", {"x-received-from": received}) == ["q"]

    assert routed([{"cluster-name": "other", "vhost": "/"}])
    assert not routed([{"cluster-name": "dn", "vhost": "/"}])  # back to its downstream
    assert routed([{"cluster-name": "dn", "vhost": "v"}])  # same cluster, another vhost
    assert not routed([{"cluster-name": "a"}, {"cluster-name": "b"}])  # 2 hops made, max 2
    assert routed("junk")
    assert (
        should_forward({"x-received-from": [{"cluster-name": b"dn", "vhost": b"/"}]}, 5, "dn", "/")
        is False
    )


def test_topology_changes_bump_the_version_publishing_does_not() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    seen = [broker.topology.value]

    def changed() -> bool:
        now = broker.topology.value
        moved = now != seen[-1]
        seen.append(now)
        return moved

    exchange = vhost.declare_exchange("x", "topic", False, True, False, False, {})
    assert changed()
    queue = vhost.declare_queue("q", False, True, False, False, {}, None)
    assert changed()
    vhost.bind(exchange, queue, "a.#", {})
    assert changed()
    vhost.bind(exchange, queue, "a.#", {})  # the same binding again: nothing changed
    assert not changed()
    vhost.unbind(exchange, queue, "a.#", {})
    assert changed()
    vhost.bind(exchange, queue, "b", {})
    changed()
    vhost.delete_queue(queue)  # its bindings go with it
    assert changed()
    vhost.delete_exchange("x", False)
    assert changed()


def test_cluster_name_is_the_node_name_until_set_and_is_announced() -> None:
    broker = Broker()
    broker.statistics.node = "amqpd@box"
    assert broker.cluster_name == "amqpd@box"
    outcome = execute(broker, {"group": "parameters", "command": "set-cluster-name", "name": "c1"})
    assert outcome.changed and broker.cluster_name == "c1"
    assert broker.access.state.global_parameters["cluster_name"] == "c1"
    assert handshake.server_properties((), broker.cluster_name)["cluster_name"] == "c1"
    # a configured server property still wins, as RabbitMQ's server_properties setting
    assert handshake.server_properties((("cluster_name", "x"),), "c1")["cluster_name"] == "x"


def test_upstream_names_as_rabbitmq_builds_them() -> None:
    # the names RabbitMQ 3.10.8 gave (list_queues / list_exchanges on its upstream)
    assert queue_name("src", "/", "fedcmp@vm", "/", "fed") == "federation: src -> fedcmp@vm:fed"
    assert queue_name("fed", "/", "c", "/", "fed") == "federation: fed -> c"
    assert queue_name("fed", "up", "c", "/", "fed") == "federation: fed -> c:/:fed"
    assert helper_exchange("federation: fed -> c", "B") == "federation: fed -> c B"


def test_received_from_is_prepended() -> None:
    entry = received_from("amqp://h", "x", True, "up-cluster", "/")
    assert entry == {
        "uri": "amqp://h",
        "exchange": "x",
        "redelivered": True,
        "cluster-name": "up-cluster",
        "vhost": "/",
    }
    earlier = {"x-received-from": [{"cluster-name": "first"}], "other": 1}
    headers = with_received_from(earlier, entry)
    assert headers["x-received-from"] == [entry, {"cluster-name": "first"}]
    assert headers["other"] == 1 and earlier["x-received-from"] == [{"cluster-name": "first"}]
    assert with_received_from(None, entry) == {"x-received-from": [entry]}


def test_bindings_travel_no_further_than_messages() -> None:
    # a plain binding goes upstream with max-hops hops left
    args = binding_arguments({}, 2, "up", "/", "down", "/", "fed", "A")
    assert args == {
        "x-bound-from": [{"cluster-name": "down", "vhost": "/", "exchange": "/:fed A", "hops": 2}]
    }
    # one that came from further down counts down from the most restrictive max-hops
    assert args is not None
    onward = binding_arguments(args, 5, "up2", "/", "mid", "/", "fed", "B")
    assert onward is not None and onward["x-bound-from"][0]["hops"] == 1
    assert onward["x-bound-from"][1:] == args["x-bound-from"]
    # ...and stops at 0, or when it would go back to a cluster it came from
    assert binding_arguments(onward, 5, "up3", "/", "top", "/", "fed", "A") is None
    assert binding_arguments(args, 5, "down", "/", "mid", "/", "fed", "A") is None
    # one identity per distinct (key, arguments); duplicates downstream bind once upstream
    wanted = upstream_bindings([("k", {}), ("k", {}), ("j", {})], 1, None, "/", "c", "/", "x", "A")
    assert sorted(key for key, _args in wanted.values()) == ["j", "k"]
