"""The shell's supervisor of federated-queue links (amqpd/shell/links/queue_federation.py),
driven by the sans-IO core: which links run, and what demand they see. The scenario never
yields to the event loop, so the links' tasks are created and cancelled without running
(they point at a closed port besides); no broker process is needed."""

from __future__ import annotations

import asyncio
import socket

from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.model.parameters import clear_parameter, set_parameter
from amqpd.model.policy_admin import clear_policy, set_policy
from amqpd.shell.links.link_specs import LocalEndpoint
from amqpd.shell.links.queue_federation import QueueFederation
from tests.unit.protocol_support import connect, declare


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _links(federation: QueueFederation) -> list[tuple[str, str, str]]:
    return sorted((s.name, s.upstream, s.upstream_name) for s in federation.federation_status())


def test_links_follow_policies_upstreams_queues_and_demand() -> None:
    async def scenario() -> None:
        port = _closed_port()
        broker = Broker()
        local = LocalEndpoint("127.0.0.1", port, "amqpd-links", "secret")
        federation = QueueFederation(broker, local)
        uri = f"amqp://127.0.0.1:{port}"
        set_parameter(broker, "federation-upstream", "/", "one", {"uri": uri})
        set_parameter(broker, "federation-upstream", "/", "two", {"uri": uri, "queue": "up"})
        policy = {"pattern": "^fq", "definition": {"federation-upstream-set": "all"}}
        set_policy(broker, "/", "fed", {**policy, "apply-to": "queues"})
        client = connect(broker)
        declare(client, 1, "fq")
        declare(client, 1, "other")
        federation.start()
        assert _links(federation) == [("fq", "one", "fq"), ("fq", "two", "up")]

        client.send(1, commands.Basic.Consume(queue="fq", consumer_tag="c"))
        client.received()
        federation.follow(broker.federated_queues.take())
        fq = broker.vhosts["/"].queues["fq"]
        assert federation._queues[fq].demand.wants is True  # what both links follow

        set_parameter(broker, "federation-upstream", "/", "two", {"uri": uri, "queue": "up2"})
        federation.reconcile()  # a changed upstream: its link restarts with the new spec
        assert _links(federation) == [("fq", "one", "fq"), ("fq", "two", "up2")]
        clear_parameter(broker, "federation-upstream", "/", "one")
        federation.reconcile()
        assert _links(federation) == [("fq", "two", "up2")]

        clear_policy(broker, "/", "fed")
        federation.reconcile()
        assert _links(federation) == []
        set_policy(broker, "/", "fed", {**policy, "apply-to": "queues"})
        federation.reconcile()
        assert _links(federation) == [("fq", "two", "up2")]
        client.send(1, commands.Queue.Delete(queue="fq"))
        assert [type(m) for m in client.methods()] == [
            commands.Queue.DeleteOk,
            commands.Basic.Cancel,  # the consumer's
        ]
        federation.follow(broker.federated_queues.take())
        assert _links(federation) == []
        await federation.aclose()

    asyncio.run(scenario())
