"""The "wants messages" signal of federated queues, driven through the sans-IO engine.

RabbitMQ's rule (rabbit_federation_queue:notify): a federated queue's links consume from
their upstreams only while the queue has no ready messages and a consumer of priority
>= 0 could take a message now. The core records each queue whose state may have changed;
`FederatedQueues.take` (what the shell calls after each step) reports the flips.
"""

from __future__ import annotations

from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.model.federated_queues import DemandChange
from amqpd.model.policy_admin import clear_policy, set_policy
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import connect, declare, publish_frames, rpc, split


def federate(broker: Broker, pattern: str = "^fed", vhost: str = "/") -> None:
    """A policy with a federation key for queues matching ``pattern``."""
    body = {
        "pattern": pattern,
        "definition": {"federation-upstream-set": "all"},
        "apply-to": "queues",
    }
    set_policy(broker, vhost, "fed", body)


def unfederate(broker: Broker, vhost: str = "/") -> None:
    clear_policy(broker, vhost, "fed")


def flips(broker: Broker) -> list[tuple[str, bool, bool]]:
    """(queue, federated, wants) for everything reported since the last call."""
    return sorted(_row(change) for change in broker.federated_queues.take())


def _row(change: DemandChange) -> tuple[str, bool, bool]:
    return (change.queue.name, change.federated, change.wants)


def consume(client: Client, channel: int, queue: str, tag: str, **arguments: object) -> None:
    """basic.consume; its Consume-Ok (and nothing delivered) is read."""
    no_ack = bool(arguments.pop("no_ack", False))
    client.send(
        channel,
        commands.Basic.Consume(
            queue=queue, consumer_tag=tag, no_ack=no_ack, arguments=dict(arguments)
        ),
    )
    replies = client.received()
    assert [type(method) for _c, method in replies] == [commands.Basic.ConsumeOk], replies


def qos(client: Client, channel: int, count: int) -> None:
    rpc(client, channel, commands.Basic.Qos(prefetch_count=count), commands.Basic.QosOk)


def ready_client(broker: Broker) -> Client:
    client = connect(broker, 1, 2)
    declare(client, 1, "fed.q")
    return client


def test_a_federated_queue_is_reported_once_with_no_demand() -> None:
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    declare(client, 1, "plain")
    assert flips(broker) == [("fed.q", True, False)]
    assert flips(broker) == []
    assert broker.vhosts["/"].queues["plain"].demand_set is None


def test_a_consumer_with_credit_on_an_empty_queue_wants_messages() -> None:
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    flips(broker)
    consume(client, 1, "fed.q", "c1")
    assert flips(broker) == [("fed.q", True, True)]
    client.send(1, commands.Basic.Cancel(consumer_tag="c1"))
    assert flips(broker) == [("fed.q", True, False)]


def test_ready_messages_stop_the_demand_and_draining_them_restores_it() -> None:
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    qos(client, 1, 1)
    consume(client, 1, "fed.q", "c1")
    client.received()
    assert flips(broker) == [("fed.q", True, True)]
    client.send(2, *publish_frames("fed.q", b"a"))  # delivered: the only credit is taken
    assert flips(broker) == [("fed.q", True, False)]
    client.send(2, *publish_frames("fed.q", b"b"))  # stays ready
    assert flips(broker) == []
    messages, _ = split(client.received())
    assert [m.body for m in messages] == [b"a"]
    client.send(1, commands.Basic.Ack(delivery_tag=messages[0].method.delivery_tag))
    # "b" is delivered at once: the queue is empty, but the consumer has no credit
    assert flips(broker) == []
    messages, _ = split(client.received())
    assert [m.body for m in messages] == [b"b"]
    client.send(1, commands.Basic.Ack(delivery_tag=messages[0].method.delivery_tag))
    assert flips(broker) == [("fed.q", True, True)]


def test_a_blocked_consumer_does_not_want_messages() -> None:
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    qos(client, 1, 2)
    consume(client, 1, "fed.q", "c1")
    assert flips(broker) == [("fed.q", True, True)]
    client.send(2, *publish_frames("fed.q", b"a"), *publish_frames("fed.q", b"b"))
    assert flips(broker) == [("fed.q", True, False)]
    messages, _ = split(client.received())
    client.send(1, commands.Basic.Ack(delivery_tag=messages[0].method.delivery_tag))
    assert flips(broker) == [("fed.q", True, True)]  # one credit back, nothing ready


def test_links_at_negative_priority_never_count() -> None:
    """A federation link consumes at x-priority -1; it must not make its own queue fetch
    (two brokers federating each other would otherwise pull a message back and forth)."""
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    flips(broker)
    consume(client, 1, "fed.q", "link", **{"x-priority": -1})
    assert flips(broker) == []
    consume(client, 2, "fed.q", "app", **{"x-priority": 0})
    assert flips(broker) == [("fed.q", True, True)]


def test_many_flips_within_one_step_collapse_into_the_last_state() -> None:
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    flips(broker)
    frames = (
        commands.Basic.Consume(queue="fed.q", consumer_tag="c1"),
        commands.Basic.Cancel(consumer_tag="c1"),
    )
    client.send(1, *frames)
    assert flips(broker) == []


def test_basic_get_and_purge_that_empty_the_queue_restore_the_demand() -> None:
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    qos(client, 1, 1)
    consume(client, 1, "fed.q", "c1")
    client.send(2, *publish_frames("fed.q", b"a"), *publish_frames("fed.q", b"b"))
    client.send(2, *publish_frames("fed.q", b"c"))
    client.received()
    assert flips(broker) == [("fed.q", True, False)]
    client.send(2, commands.Basic.Get(queue="fed.q", no_ack=True))
    client.received()
    assert flips(broker) == []  # "c" is still ready
    rpc(client, 2, commands.Queue.Purge(queue="fed.q"), commands.Queue.PurgeOk)
    assert flips(broker) == []  # empty, but the consumer still holds "a" unacked
    client.send(1, commands.Basic.Ack(delivery_tag=1))
    assert flips(broker) == [("fed.q", True, True)]


def test_expiry_that_empties_the_queue_is_noticed_by_the_ticker() -> None:
    """A selective consumer leaves non-matching messages ready; when they expire, the
    queue is empty and its consumer has credit: it wants messages."""
    broker = Broker()
    federate(broker)
    client = connect(broker, 1, 2)
    declare(client, 1, "fed.q", arguments={"x-message-ttl": 1000})
    consume(client, 1, "fed.q", "sel", **{"x-selector": "colour = 'red'"})
    client.received()
    assert flips(broker) == [("fed.q", True, True)]
    client.send(2, *publish_frames("fed.q", b"blue", headers={"colour": "blue"}))
    assert flips(broker) == [("fed.q", True, False)]
    client.advance(2.0)
    assert flips(broker) == [("fed.q", True, True)]


def test_a_policy_without_a_federation_key_does_not_federate() -> None:
    broker = Broker()
    body = {"pattern": "^fed", "definition": {"max-length": 10}, "apply-to": "queues"}
    set_policy(broker, "/", "limits", body)
    ready_client(broker)
    assert flips(broker) == []


def test_policy_changes_and_deletion_start_and_stop_federation() -> None:
    broker = Broker()
    client = ready_client(broker)
    assert flips(broker) == []
    federate(broker)
    assert flips(broker) == [("fed.q", True, False)]
    unfederate(broker)
    assert flips(broker) == [("fed.q", False, False)]
    assert broker.vhosts["/"].queues["fed.q"].demand_set is None
    federate(broker)
    assert flips(broker) == [("fed.q", True, False)]
    rpc(client, 1, commands.Queue.Delete(queue="fed.q"), commands.Queue.DeleteOk)
    assert flips(broker) == [("fed.q", False, False)]
    assert broker.federated_queues.queues == []


def test_closing_the_consumers_channel_stops_the_demand() -> None:
    broker = Broker()
    federate(broker)
    client = ready_client(broker)
    consume(client, 1, "fed.q", "c1")
    assert flips(broker) == [("fed.q", True, True)]
    rpc(
        client,
        1,
        commands.Channel.Close(reply_code=200, class_id=0, method_id=0),
        commands.Channel.CloseOk,
    )
    assert flips(broker) == [("fed.q", True, False)]


def test_reply_to_pseudo_queues_and_refused_declarations_are_never_federated() -> None:
    broker = Broker()
    federate(broker, pattern=".*")
    client = connect(broker)
    consume(client, 1, "amq.rabbitmq.reply-to", "r", no_ack=True)
    client.send(
        1,
        commands.Queue.Declare(
            queue="refused", durable=False, arguments={"x-queue-type": "quorum"}
        ),
    )
    client.received()
    assert flips(broker) == []
