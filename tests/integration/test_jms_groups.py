"""Message groups through interop.jms (JMSXGroupID / JMSXGroupSeq, ActiveMQ's semantics),
kept by amqpd's queue argument ``x-message-groups`` across client processes."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from interop.jms import ConnectionFactory, JMSException
from tests.conftest import node_under_test
from tests.integration.groups_run import check, run
from tests.integration.rabbit_node import rabbit_node
from tests.integration.test_jms_brokers import BROKERS


def test_100_groups_over_4_consumer_processes_one_killed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """10,000 messages (the 100,000 run is tests/perf/message_groups.py): per-group order,
    one consumer per group at a time, groups spread, the killed consumer's groups taken over
    by the others with nothing lost, JMSXGroupFirstForConsumer on each first message."""
    with node_under_test(tmp_path_factory) as server:
        reports = run(
            server.port,
            f"groups.{uuid.uuid4().hex[:8]}",
            groups=100,
            messages=10_000,
            kill_after=500,
        )
    check(reports, groups=100, messages=10_000)


def test_group_seq_minus_one_closes_the_group(tmp_path_factory: pytest.TempPathFactory) -> None:
    with node_under_test(tmp_path_factory) as server:
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
        with ConnectionFactory(url).create_connection() as connection:
            session = connection.create_session()
            queue = session.queue(f"close.{uuid.uuid4().hex[:8]}")
            consumer = session.create_consumer(queue)
            connection.start()
            producer = session.create_producer(queue)
            for seq, body in ((1, "a"), (-1, "end"), (1, "again")):
                producer.send(body, properties={"JMSXGroupID": "g", "JMSXGroupSeq": seq})
            got = [consumer.receive(10) for _ in range(3)]
        flags = [m.get_property("JMSXGroupFirstForConsumer") if m else "lost" for m in got]
        assert [m.body if m else None for m in got] == ["a", "end", "again"]
        assert flags == [True, None, True]  # the closed group opens again


@pytest.mark.parametrize("kind", BROKERS)
def test_groups_need_amqpd_and_say_so_elsewhere(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """On RabbitMQ (no ``message_groups`` capability) a grouped send is refused clearly."""
    with contextlib.ExitStack() as stack:
        if kind == "rabbitmq":
            node = rabbit_node()
            node.wait()
            port = node.port
        else:
            port = stack.enter_context(node_under_test(tmp_path_factory)).port
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        connection = stack.enter_context(ConnectionFactory(url).create_connection())
        session = connection.create_session()
        producer = session.create_producer(session.queue(f"groups.{uuid.uuid4().hex[:8]}"))
        if kind == "rabbitmq":
            with pytest.raises(JMSException, match=r"message groups \(JMSXGroupID\) need amqpd"):
                producer.send("x", properties={"JMSXGroupID": "g"})
        else:
            producer.send("x", properties={"JMSXGroupID": "g"})
        producer.send("plain")  # everything else works as before
