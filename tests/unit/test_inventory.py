"""The inventory (RabbitMQ management API shapes) and the rate sampler, through the
sans-IO engine."""

from __future__ import annotations

import json

from pamqp import commands

from amqpd.engine import client_inventory, inventory, node_inventory
from amqpd.engine.rates import RateSampler
from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample
from tests.unit.protocol_support import connect, declare, deliveries, publish_frames, rpc


def _setup() -> tuple[Broker, object]:
    broker = Broker()
    client = connect(broker)
    client.conn.stats.host, client.conn.stats.port = "127.0.0.1", 5672
    declare(client, 1, "q1", durable=True)
    rpc(
        client,
        1,
        commands.Exchange.Declare(exchange="ex", exchange_type="topic"),
        commands.Exchange.DeclareOk,
    )
    rpc(
        client,
        1,
        commands.Queue.Bind(queue="q1", exchange="ex", routing_key="a.#"),
        commands.Queue.BindOk,
    )
    return broker, client


def test_queue_counts_and_message_stats() -> None:
    broker, client = _setup()
    for i in range(3):
        client.send(1, *publish_frames("a.b", b"x" * (i + 1), exchange="ex"))
    client.send(1, *publish_frames("nowhere", b"y", exchange="ex"))
    client.send(1, commands.Basic.Get(queue="q1", no_ack=False))
    [got] = deliveries(client.received())
    [item] = [q for q in inventory.queues(broker) if q["name"] == "q1"]
    assert item["vhost"] == "/" and item["durable"] and not item["exclusive"]
    assert item["type"] == "classic" and item["state"] == "running"
    assert item["messages"] == 3
    assert item["messages_ready"] == 2
    assert item["messages_unacknowledged"] == 1
    assert item["message_bytes"] == 6
    assert item["message_bytes_unacknowledged"] == 1
    assert item["consumers"] == 0 and item["consumer_utilisation"] is None
    stats = item["message_stats"]
    assert stats["publish"] == 3 and stats["get"] == 1 and stats["deliver_get"] == 1
    assert stats["publish_details"] == {"rate": 0.0}
    client.send(1, commands.Basic.Ack(delivery_tag=got.method.delivery_tag))
    assert inventory.queue(broker, "/", "q1")["message_stats"]["ack"] == 1  # type: ignore[index]
    assert inventory.queue(broker, "/", "nope") is None
    ex = inventory.exchange(broker, "/", "ex")
    assert ex is not None and ex["type"] == "topic"
    assert ex["message_stats"]["publish_in"] == 4
    assert ex["message_stats"]["publish_out"] == 3
    json.dumps(inventory.queues(broker))  # every shape is JSON


def test_bindings_include_the_default_exchange() -> None:
    broker, _client = _setup()
    found = {
        (b["source"], b["destination"], b["routing_key"], b["destination_type"])
        for b in inventory.bindings(broker, "/")
    }
    assert ("", "q1", "q1", "queue") in found
    assert ("ex", "q1", "a.#", "queue") in found
    [binding] = [b for b in inventory.bindings(broker) if b["source"] == "ex"]
    assert binding["properties_key"] == "a.#" and binding["arguments"] == {}


def test_connections_channels_consumers() -> None:
    broker, client = _setup()
    client.send(1, commands.Basic.Qos(prefetch_count=10))
    client.send(1, commands.Confirm.Select())
    client.send(1, commands.Basic.Consume(queue="q1", consumer_tag="c1"))
    client.received()
    [conn] = client_inventory.connections(broker)
    assert conn["name"] == "127.0.0.1:5672 -> 127.0.0.1:5672"
    assert conn["peer_host"] == "127.0.0.1" and conn["peer_port"] == 5672
    assert conn["user"] == "guest" and conn["vhost"] == "/" and conn["channels"] == 1
    assert conn["protocol"] == "AMQP 0-9-1" and conn["auth_mechanism"] == "PLAIN"
    assert conn["recv_oct"] > 0 and conn["send_oct"] > 0 and conn["recv_cnt"] > 0
    assert conn["state"] == "running"
    assert client_inventory.connection(broker, conn["name"]) == conn
    assert client_inventory.find_connection(broker, conn["name"]) is client.conn
    [channel] = client_inventory.channels(broker)
    assert channel["name"] == conn["name"] + " (1)"
    assert channel["confirm"] and not channel["transactional"]
    assert channel["prefetch_count"] == 10 and channel["consumer_count"] == 1
    assert channel["connection_details"]["name"] == conn["name"]
    [consumer] = client_inventory.consumers(broker, "/")
    assert consumer["consumer_tag"] == "c1"
    assert consumer["queue"] == {"name": "q1", "vhost": "/"}
    assert consumer["ack_required"] and consumer["prefetch_count"] == 10
    assert consumer["channel_details"]["name"] == channel["name"]
    json.dumps([conn, channel, consumer])


def test_sampler_rates_totals_and_utilisation() -> None:
    broker, client = _setup()
    sampler = RateSampler(broker)
    sampler.sample(100.0)
    for _ in range(10):
        client.send(1, *publish_frames("a.b", b"x", exchange="ex"))
    sampler.sample(105.0)
    item = inventory.queue(broker, "/", "q1")
    assert item is not None
    assert item["message_stats"]["publish_details"] == {"rate": 2.0}
    assert item["messages_details"] == {"rate": 2.0}
    overview = node_inventory.overview(broker, NodeSample(name="amqpd@test"))
    assert overview["message_stats"]["publish"] == 10
    assert overview["message_stats"]["publish_details"] == {"rate": 2.0}
    assert overview["queue_totals"]["messages"] == 10
    assert overview["object_totals"]["queues"] == 1
    assert overview["object_totals"]["connections"] == 1
    assert overview["node"] == "amqpd@test"
    # a consumer with credit: fully utilised
    client.send(1, commands.Basic.Consume(queue="q1", consumer_tag="c", no_ack=True))
    client.received()
    sampler.sample(110.0)
    assert inventory.queue(broker, "/", "q1")["consumer_utilisation"] == 1.0  # type: ignore[index]
    # totals survive the channel closing
    client.send(1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.received()
    totals = node_inventory.overview(broker, NodeSample())["message_stats"]
    assert totals["publish"] == 10 and totals["deliver_no_ack"] == 10
    json.dumps(overview)


def test_nodes_shape() -> None:
    broker = Broker()
    [node] = node_inventory.nodes(broker, NodeSample(name="n", mem_used=5, fd_total=1024))
    assert node["name"] == "n" and node["type"] == "disc" and node["running"]
    assert node["mem_used"] == 5 and node["fd_total"] == 1024
    assert node["mem_alarm"] is False and node["disk_free_alarm"] is False
