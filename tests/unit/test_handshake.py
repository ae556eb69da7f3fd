"""Connection.Start as RabbitMQ 3.10 sends it: server properties (the capabilities, the
product/version clients key behaviour off, operator overrides) and the offered mechanisms."""

from __future__ import annotations

from pamqp import commands

from amqpd.engine import handshake, node_inventory
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.model.statistics import NodeSample
from tests.unit.engine_driver import Client


def start_of(broker: Broker) -> commands.Connection.Start:
    client = Client(broker)
    client.feed(b"AMQP\x00\x00\x09\x01")
    [start] = client.methods()
    assert isinstance(start, commands.Connection.Start)
    return start


def test_capabilities_are_rabbitmqs_including_consumer_priorities() -> None:
    """rabbitpy refuses ``priority=`` consumers unless consumer_priorities is announced.
    Besides RabbitMQ's, amqpd announces the extensions the JMS client looks for (broker-side
    selectors, browsing, message groups, delayed messages); clients ignore capabilities they
    do not know."""
    properties = start_of(Broker()).server_properties
    assert properties["capabilities"] == {
        "consumer_selectors": True,
        "queue_browsing": True,
        "message_groups": True,
        "delayed_messages": True,
        "publisher_confirms": True,
        "exchange_exchange_bindings": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
        "connection.blocked": True,
        "consumer_priorities": True,
        "authentication_failure_close": True,
        "per_consumer_qos": True,
        "direct_reply_to": True,
    }


def test_default_properties_announce_the_rabbitmq_behaviour_amqpd_implements() -> None:
    properties = start_of(Broker()).server_properties
    assert properties["product"] == "RabbitMQ"
    assert properties["version"] == handshake.RABBITMQ_VERSION
    assert properties["version"].startswith("3.10.")
    assert "amqpd" in properties["information"]
    assert list(properties) == sorted(properties)  # rabbit_reader sorts them by key
    assert set(properties) == {
        "capabilities",
        "cluster_name",
        "copyright",
        "information",
        "platform",
        "product",
        "version",
    }


def test_configured_properties_override_the_defaults_but_not_the_capabilities() -> None:
    config = BrokerConfig(
        server_properties=(("product", "amqpd"), ("version", "0.1.0"), ("region", "eu-1"))
    )
    properties = start_of(Broker(config)).server_properties
    assert (properties["product"], properties["version"]) == ("amqpd", "0.1.0")
    assert properties["region"] == "eu-1"
    assert properties["capabilities"]["consumer_priorities"] is True
    assert list(properties) == sorted(properties)


def test_offered_mechanisms_follow_rabbitmqs_order_and_external_needs_a_certificate() -> None:
    assert start_of(Broker()).mechanisms == "AMQPLAIN PLAIN"
    offered = handshake.offered_mechanisms
    assert offered(("PLAIN", "AMQPLAIN", "EXTERNAL"), None) == "AMQPLAIN PLAIN"
    assert offered(("PLAIN", "AMQPLAIN", "EXTERNAL"), "CN=x") == "AMQPLAIN EXTERNAL PLAIN"
    assert offered(("PLAIN",), "CN=x") == "PLAIN"


def test_the_management_node_lists_the_offered_mechanisms_as_enabled() -> None:
    broker = Broker(BrokerConfig(auth_mechanisms=("PLAIN", "EXTERNAL")))
    [node] = node_inventory.nodes(broker, NodeSample(name="n"))
    assert {m["name"]: m["enabled"] for m in node["auth_mechanisms"]} == {
        "PLAIN": True,
        "AMQPLAIN": False,
        "EXTERNAL": True,
    }
