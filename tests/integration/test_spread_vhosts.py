"""Stage 2 of ``--workers N`` (docs/multicore.md): a vhost spread over every worker
(``--spread-vhosts``). Connections to it go to the workers in turn; a queue lives on the
worker of the connection that declared it; exchanges and bindings are on every worker, and
a publish routed to another worker's queue crosses to it, its confirm waiting for every
copy. Driven with pika against a ``--workers 2`` node; which worker holds a queue is read
from each worker's own admin socket."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.broker_process import BrokerProcess
from tests.integration.test_workers import (
    _admin,
    _ctl,
    _listener_port,
    _refused_alone,
    _wait_for,
    _workers,
)

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@contextmanager
def _node(tmp_path: Path) -> Iterator[tuple[BrokerProcess, Path]]:
    data = tmp_path / "data"
    broker = BrokerProcess(
        data,
        extra=("--workers", "2", "--spread-vhosts", "/", "--no-management", "--no-prometheus"),
    )
    try:
        yield broker, data
    finally:
        broker.stop()


def _connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, "/", connection_attempts=1)
    )


def _queue_names(where: Path) -> set[str]:
    rows = json.loads(_ctl(where, "list-queues", "name", "--format", "json", "-q"))
    return {row["name"] for row in rows}


def _queues_on(data: Path, worker: int) -> set[str]:
    """The queues of "/" that worker ``worker`` owns: worker 1's admin socket lists its
    own; worker 0's lists the node's (every worker's), so worker 0 owns the rest."""
    on_one = _queue_names(data / "shard-1")
    return on_one if worker == 1 else _queue_names(data) - on_one


def _queues_answered(data: Path, worker: int) -> set[str]:
    """`_queues_on`, or none while a worker does not answer (being restarted)."""
    try:
        return _queues_on(data, worker)
    except subprocess.CalledProcessError:
        return set()


def _two_workers(port: int) -> tuple[pika.BlockingConnection, pika.BlockingConnection]:
    """Two connections that worker 0's gate gave to different workers (each in turn)."""
    first = _connect(port)
    second = _connect(port)
    return first, second


def _drain(channel: BlockingChannel, queue: str, count: int) -> list[bytes]:
    bodies: list[bytes] = []
    for _ in range(count):
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    return bodies


def test_a_spread_vhost_routes_across_workers_with_confirms(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        ca.queue_declare("qa", durable=True)
        cb.queue_declare("qb", durable=True)
        owners = (_queues_on(data, 0), _queues_on(data, 1))
        # each queue lives on its declaring connection's worker, and the two differ
        assert {"qa", "qb"} <= owners[0] | owners[1]
        assert ("qa" in owners[0]) != ("qb" in owners[0])

        # an exchange declared on one worker, bound on both: a bind-ok means every worker
        # routes with the binding
        ca.exchange_declare("fan", "fanout", durable=True)
        cb.queue_bind("qb", "fan")
        ca.queue_bind("qa", "fan")
        ca.confirm_delivery()
        for i in range(200):  # every confirm waits for both copies (one crosses)
            ca.basic_publish("fan", "", b"%d" % i, PERSISTENT, mandatory=True)
        expected = [b"%d" % i for i in range(200)]
        assert _drain(ca, "qa", 300) == expected
        assert _drain(cb, "qb", 300) == expected  # in order, per (channel, queue)

        # the default exchange reaches another worker's queue by its name, and the
        # other way round
        ca.basic_publish("", "qb", b"to b", PERSISTENT, mandatory=True)
        cb.confirm_delivery()
        cb.basic_publish("", "qa", b"to a", PERSISTENT, mandatory=True)
        assert _drain(cb, "qb", 2) == [b"to b"]
        assert _drain(ca, "qa", 2) == [b"to a"]

        # routed to nothing: returned, on either worker
        with pytest.raises(pika.exceptions.UnroutableError):
            ca.basic_publish("", "nowhere", b"x", mandatory=True)

        # a redeclaration on another worker is checked against the owner's declaration
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ca.queue_declare("qb", durable=False)
        assert refused.value.reply_code == 406
        ca = a.channel()
        assert ca.queue_declare("qb", passive=True).method.queue == "qb"
        a.close()
        b.close()


def test_a_consumer_moves_to_its_queues_worker_and_gets_what_crossed(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        ca.queue_declare("work", durable=True)
        owner = 0 if "work" in _queues_on(data, 0) else 1
        # b's connection is on the other worker: declaring the queue and setting qos there
        # do not pin it, so its consume moves it to the queue's worker, transparently
        cb.queue_declare("work", durable=True)
        cb.basic_qos(prefetch_count=10)
        got: list[bytes] = []
        where = data if owner == 0 else data / "shard-1"
        listed: list[str] = []

        def on_message(channel: BlockingChannel, method: Any, _props: Any, body: bytes) -> None:
            got.append(body)
            channel.basic_ack(method.delivery_tag)
            if len(got) == 1:  # the consumer is on the queue's worker: its admin socket says
                consumers = json.loads(_ctl(where, "list-consumers", "--format", "json", "-q"))
                listed.extend(row["queue_name"] for row in consumers)
            if len(got) == 50:
                channel.stop_consuming()

        cb.basic_consume("work", on_message)
        publisher = _connect(broker.port)  # on either worker: the copies cross if needed
        cp = publisher.channel()
        cp.confirm_delivery()
        for i in range(50):
            cp.basic_publish("", "work", b"%d" % i, PERSISTENT, mandatory=True)
        cb.start_consuming()
        assert got == [b"%d" % i for i in range(50)]
        assert listed == ["work"]
        publisher.close()
        a.close()
        b.close()


def test_a_connection_that_cannot_move_consumes_from_another_workers_queue(
    tmp_path: Path,
) -> None:
    with _node(tmp_path) as (broker, _data):
        a, b = _two_workers(broker.port)
        cb = b.channel()
        cb.queue_declare("only-on-b")
        ca = a.channel()
        ca.queue_declare("on-a")
        ca.basic_consume("on-a", lambda *_args: None)  # a consumer keeps it where it is
        assert ca.basic_get("only-on-b") == (None, None, None)  # served by b's worker
        cb.confirm_delivery()
        for i in range(20):
            cb.basic_publish("", "only-on-b", b"%d" % i)
        declared = ca.queue_declare("only-on-b", passive=True).method  # the owner's counts
        assert (declared.message_count, declared.consumer_count) == (20, 0)
        method, _props, body = ca.basic_get("only-on-b")
        assert body == b"0" and method.message_count == 19
        ca.basic_ack(method.delivery_tag)

        browser = a.channel()  # x-browse: copies, then the broker cancels the consumer
        seen: list[bytes] = []
        browser.basic_consume(
            "only-on-b",
            lambda _channel, _method, _props, body: seen.append(body),
            auto_ack=True,
            arguments={"x-browse": True},
        )
        browser.start_consuming()  # returns once the broker cancelled it
        assert seen == [b"%d" % i for i in range(1, 20)]
        assert cb.queue_declare("only-on-b", passive=True).method.message_count == 19

        ca.basic_qos(prefetch_count=5)
        got: list[bytes] = []

        def on_message(channel: BlockingChannel, method: Any, _props: Any, body: bytes) -> None:
            got.append(body)
            if len(got) == 10:  # one nacked back: it comes again, redelivered, at the end
                channel.basic_nack(method.delivery_tag, requeue=True)
                return
            channel.basic_ack(method.delivery_tag)
            if len(got) == 20:
                channel.stop_consuming()

        ca.basic_consume("only-on-b", on_message, consumer_tag="from-a")
        assert cb.queue_declare("only-on-b", passive=True).method.consumer_count == 1
        ca.start_consuming()
        assert got[:10] == [b"%d" % i for i in range(1, 11)]
        assert sorted(got[10:], key=int) == [b"%d" % i for i in range(10, 20)]
        # stop_consuming cancelled it: the cancel-ok came once the owner had dropped it
        assert cb.queue_declare("only-on-b", passive=True).method.consumer_count == 0

        for i in range(3):  # unacked when a's connection goes: back in the queue
            cb.basic_publish("", "only-on-b", b"late-%d" % i)
        held: list[bytes] = []

        def keep(channel: BlockingChannel, _method: Any, _props: Any, body: bytes) -> None:
            held.append(body)
            if len(held) == 3:
                channel.stop_consuming()

        ca.basic_consume("only-on-b", keep)
        ca.start_consuming()
        a.close()
        _wait_for(
            lambda: cb.queue_declare("only-on-b", passive=True).method.message_count == 3,
            "the unacked deliveries requeued on the owner",
        )
        assert _drain(cb, "only-on-b", 3) == [b"late-0", b"late-1", b"late-2"]
        b.close()


def test_deletes_and_exclusive_queues_hold_across_workers(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        cb.queue_declare("mine", exclusive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
            ca.queue_declare("mine")
        assert locked.value.reply_code == 405

        cb.queue_declare("doomed", durable=True)
        ca = a.channel()
        ca.queue_delete("doomed")  # deleted on its owner, from the other worker
        _wait_for(lambda: "doomed" not in _queues_on(data, 0) | _queues_on(data, 1), "the delete")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
            b.channel().queue_declare("doomed", passive=True)
        assert gone.value.reply_code == 404
        a.close()
        b.close()


def test_confirmed_crossing_messages_survive_kill_9_of_their_owner(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        cb.queue_declare("kept", durable=True)
        owner = 0 if "kept" in _queues_on(data, 0) else 1
        ca.confirm_delivery()
        for i in range(100):
            ca.basic_publish("", "kept", b"%d" % i, PERSISTENT, mandatory=True)
        with suppress(Exception):
            a.close()
        with suppress(Exception):
            b.close()
        pid = _workers(broker.proc.pid)[owner]
        os.kill(pid, signal.SIGKILL)
        _wait_for(lambda: _workers(broker.proc.pid).get(owner) not in (None, pid), "restart")
        _wait_for(lambda: "kept" in _queues_answered(data, owner), "the queue recovered")
        # whichever worker the next connection lands on, the queue's messages are there (a
        # connection on the other worker moves to the queue's with its first basic.get)
        connection = _connect(broker.port)
        bodies = _drain(connection.channel(), "kept", 200)
        assert bodies == [b"%d" % i for i in range(100)]
        connection.close()


def test_a_spread_vhosts_connection_limit_counts_every_workers_connections(
    tmp_path: Path,
) -> None:
    """max-connections of a spread vhost is the node's: its connections go to the workers
    in turn, and before, each worker admitted the limit (4 connections with a limit of 2).
    The third gets RabbitMQ's 530; once one closes, another is admitted."""
    with _node(tmp_path) as (broker, data):
        _admin(data, "vhosts", "set-max-connections", "/", "2")
        first, second = _connect(broker.port), _connect(broker.port)
        rows = json.loads(_ctl(data / "shard-1", "list-connections", "--format", "json"))
        assert len(rows) == 1  # one on each worker
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
            _connect(broker.port)
        assert "connection limit (2) is reached" in str(refused.value)
        assert "access to vhost '/' refused for user 'guest'" in str(refused.value)
        first.close()
        _connect(broker.port).close()
        second.close()


def test_a_spread_vhosts_queue_limit_counts_every_workers_queues(tmp_path: Path) -> None:
    """max-queues of a spread vhost is the node's: before, each worker admitted the limit
    (4 queues with a limit of 2, declared by connections on the two workers)."""
    with _node(tmp_path) as (broker, data):
        _admin(data, "vhosts", "set-max-queues", "/", "2")
        connections = [_connect(broker.port), _connect(broker.port)]  # one on each worker
        for index in range(2):
            connections[index].channel().queue_declare(f"q{index}")
        assert len(_queues_on(data, 0)) == len(_queues_on(data, 1)) == 1
        for connection in connections:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                connection.channel().queue_declare("one-too-many")
            assert refused.value.reply_code == 406
            assert refused.value.reply_text == (
                "PRECONDITION_FAILED - cannot declare queue 'one-too-many': queue limit in "
                "vhost '/' (2) is reached"
            )
        connections[1].channel().queue_delete("q1")
        connections[0].channel().queue_declare("room-again")
        for connection in connections:
            connection.close()


def test_a_balancing_locator_spreads_one_connections_queues(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, data):
        connection = _connect(broker.port)
        channel = connection.channel()
        locator = {"x-queue-leader-locator": "least-leaders"}  # RabbitMQ 3.10's name
        names = [f"part-{i}" for i in range(4)]
        for name in names:
            channel.queue_declare(name, durable=True, arguments=locator)
        assert len(_queues_on(data, 0) & set(names)) == 2
        assert len(_queues_on(data, 1) & set(names)) == 2
        channel.confirm_delivery()
        for name in names:  # two of them cross to the other worker
            for i in range(20):
                channel.basic_publish("", name, b"%s %d" % (name.encode(), i), PERSISTENT)
        channel.queue_purge(names[3])  # this connection published: purged on its worker
        for name in names[:3]:  # a connection of its own moves to each queue's worker
            consumer = _connect(broker.port)
            bodies = _drain(consumer.channel(), name, 100)
            assert bodies == [b"%s %d" % (name.encode(), i) for i in range(20)]
            consumer.close()
        _wait_for(lambda: _count(broker.port, names[3]) == 0, "the purge on its worker")
        connection.close()


def _count(port: int, queue: str) -> int:
    """The queue's message count, as a connection of its own (moved there) sees it."""
    connection = _connect(port)
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


def test_direct_reply_to_crosses_workers(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, _data):
        server, client = _two_workers(broker.port)
        sch = server.channel()
        sch.queue_declare("rpc")
        cch = client.channel()
        replies: list[bytes] = []
        cch.basic_consume(
            "amq.rabbitmq.reply-to", lambda _c, _m, _p, body: replies.append(body), auto_ack=True
        )
        asking = pika.BasicProperties(reply_to="amq.rabbitmq.reply-to")
        cch.basic_publish("", "rpc", b"ping", asking)  # crosses to the server's worker

        got: list[tuple[Any, bytes]] = []

        def request() -> bool:
            method, properties, body = sch.basic_get("rpc", auto_ack=True)
            if method is not None:
                got.append((properties, body))
            return bool(got)

        _wait_for(request, "the request")
        properties, body = got[0]
        assert body == b"ping" and properties.reply_to.startswith("amq.rabbitmq.reply-to.")
        # the address is alive for the server, although it is another worker's
        assert sch.queue_declare(properties.reply_to, passive=True).method.consumer_count == 1
        sch.basic_publish("", properties.reply_to, b"pong", mandatory=True)  # crosses back
        _wait_for(lambda: client.process_data_events(0.05) or bool(replies), "the reply")
        assert replies == [b"pong"]
        client.close()
        server.close()


def test_a_transaction_over_two_workers_commits_both_copies(tmp_path: Path) -> None:
    # the commit applies here and sends the other worker's copies on; its commit-ok waits
    # until they are stored there, as RabbitMQ's waits for every queue (docs/multicore.md)
    with _node(tmp_path) as (broker, _data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        ca.queue_declare("here", durable=True)
        cb.queue_declare("there", durable=True)
        ca.exchange_declare("both", "fanout")
        ca.queue_bind("here", "both")
        ca.queue_bind("there", "both")
        ca.tx_select()
        for i in range(10):
            ca.basic_publish("both", "", b"%d" % i, PERSISTENT)
        assert cb.queue_declare("there", passive=True).method.message_count == 0  # uncommitted
        ca.tx_rollback()
        for i in range(10):
            ca.basic_publish("both", "", b"%d" % i, PERSISTENT)
        ca.tx_commit()
        assert cb.queue_declare("there", passive=True).method.message_count == 10
        expected = [b"%d" % i for i in range(10)]
        assert _drain(ca, "here", 20) == expected
        assert _drain(cb, "there", 20) == expected
        a.close()
        b.close()


def _at_once(
    pair: tuple[pika.BlockingConnection, ...], *actions: Callable[[BlockingChannel], object]
) -> list[BaseException | None]:
    """Each connection of ``pair`` does its action on a new channel from its own thread, at
    once; what each raised."""
    start = threading.Barrier(len(pair))
    errors: list[BaseException | None] = [None] * len(pair)

    def run(index: int) -> None:
        try:
            channel = pair[index].channel()
            start.wait(30)
            actions[index](channel)
        except BaseException as exc:  # reported to the test's thread
            errors[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(pair))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


def _declare_together(
    pair: tuple[pika.BlockingConnection, ...], name: str, durable: tuple[bool, ...] = (True, True)
) -> list[BaseException | None]:
    """Each connection of ``pair`` declares queue ``name`` (``durable`` or not, in order)
    from its own thread, at once; what each raised."""
    return _at_once(
        pair,
        *[lambda channel, flag=flag: channel.queue_declare(name, durable=flag) for flag in durable],
    )


def test_a_queue_declared_on_both_workers_at_once_is_one_queue(tmp_path: Path) -> None:
    """Two clients declaring the same new queue at the same moment on different workers
    (each before the other's declaration reached it): the node ends with one queue of that
    name, as RabbitMQ does (model/replica_apply.py: the lower worker's wins)."""
    names = [f"race-{i}" for i in range(12)]
    with _node(tmp_path) as (broker, data):
        for name in names:
            pair = _two_workers(broker.port)  # a fresh pair: a declaring connection moves
            assert _declare_together(pair, name) == [None, None]
            for connection in pair:
                connection.close()
        rows = json.loads(_ctl(data, "list-queues", "name", "--format", "json", "-q"))
        listed = sorted(row["name"] for row in rows if row["name"].startswith("race-"))
        assert listed == sorted(names)  # each once, on one worker
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        ca.confirm_delivery()
        for name in names:  # whichever worker a client is on, it reaches the same queue
            ca.basic_publish("", name, b"via a", PERSISTENT, mandatory=True)
            cb.basic_publish("", name, b"via b", PERSISTENT)
        cb.confirm_delivery()  # every publish of cb's before it is routed by now
        for name in names:
            assert sorted(_drain(cb, name, 3)) == [b"via a", b"via b"]
        a.close()
        b.close()


def test_a_connection_that_cannot_move_reads_another_workers_stream(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, _data):
        a, b = _two_workers(broker.port)
        cb = b.channel()
        cb.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
        cb.confirm_delivery()
        for i in range(5):
            cb.basic_publish("", "events", b"e%d" % i)
        ca = a.channel()
        ca.queue_declare("pinned-here")
        ca.basic_consume("pinned-here", lambda *_args: None)  # keeps a where it is
        reader = a.channel()
        reader.basic_qos(prefetch_count=3)
        got: list[tuple[int, bytes]] = []

        def on_message(channel: BlockingChannel, method: Any, props: Any, body: bytes) -> None:
            got.append((props.headers["x-stream-offset"], body))
            channel.basic_ack(method.delivery_tag)  # credit for the next ones
            if len(got) == 5:
                channel.stop_consuming()

        reader.basic_consume("events", on_message, arguments={"x-stream-offset": "first"})
        reader.start_consuming()
        assert got == [(i, b"e%d" % i) for i in range(5)]
        a.close()
        b.close()


def _exchange_types(where: Path) -> dict[str, str]:
    rows = json.loads(_ctl(where, "list-exchanges", "name", "type", "--format", "json", "-q"))
    return {row["name"]: row["type"] for row in rows if row["name"].startswith("differ-")}


def test_differing_exchange_declarations_at_the_same_moment_leave_one_exchange(
    tmp_path: Path,
) -> None:
    """One client declares an exchange fanout, another on the other worker direct, at the
    same moment: one gets 406 and both workers end with the same exchange, so a publish
    routes alike on either (model/replica_apply.py: the declaration that sorts first wins)."""
    names = [f"differ-x{i}" for i in range(6)]
    with _node(tmp_path) as (broker, data):
        for name in names:
            pair = _two_workers(broker.port)
            errors = _at_once(
                pair,
                lambda channel, name=name: channel.exchange_declare(name, "fanout", durable=True),
                lambda channel, name=name: channel.exchange_declare(name, "direct", durable=True),
            )
            refused = [e for e in errors if e is not None]
            assert len(refused) == 1, errors
            assert isinstance(refused[0], pika.exceptions.ChannelClosedByBroker)
            assert refused[0].reply_code == 406
            for connection in pair:
                connection.close()
        on_zero, on_one = _exchange_types(data), _exchange_types(data / "shard-1")
        assert set(on_zero) == set(names)
        assert on_zero == on_one  # the same exchange on both workers


def test_differing_declarations_at_the_same_moment_refuse_the_second_with_406(
    tmp_path: Path,
) -> None:
    """One client declares a queue durable, another on the other worker transient, at the
    same moment: as in RabbitMQ, one of them has the queue and the other gets 406 (whichever
    order the workers heard them in; model/replica_apply.py)."""
    names = [f"differ-{i}" for i in range(8)]
    with _node(tmp_path) as (broker, data):
        winners: dict[str, bool] = {}
        for name in names:
            pair = _two_workers(broker.port)
            errors = _declare_together(pair, name, durable=(True, False))
            refused = [e for e in errors if e is not None]
            assert len(refused) == 1, errors
            error = refused[0]
            assert isinstance(error, pika.exceptions.ChannelClosedByBroker)
            assert error.reply_code == 406
            assert f"queue '{name}' in vhost '/'" in error.reply_text
            winners[name] = errors[0] is None  # the durable declaration won
            for connection in pair:
                connection.close()
        rows = json.loads(_ctl(data, "list-queues", "name", "durable", "--format", "json", "-q"))
        listed = {row["name"]: row["durable"] for row in rows if row["name"].startswith("differ-")}
        assert listed == winners  # each once, declared as its winner declared it


def _shared_topology(where: Path) -> tuple[set[str], set[tuple[str, str, str]]]:
    """The ``gone-`` / ``kept-`` exchanges one worker holds, and the bindings from them."""
    exchanges = json.loads(_ctl(where, "list-exchanges", "name", "--format", "json", "-q"))
    bindings = json.loads(
        _ctl(
            where,
            "list-bindings",
            "source_name",
            "destination_name",
            "routing_key",
            "--format",
            "json",
            "-q",
        )
    )
    ours = ("gone-", "kept-")
    return (
        {row["name"] for row in exchanges if row["name"].startswith(ours)},
        {
            (row["source_name"], row["destination_name"], row["routing_key"])
            for row in bindings
            if row["source_name"].startswith(ours)
        },
    )


@pytest.mark.parametrize("down", [0, 1])
def test_what_was_deleted_while_a_worker_was_down_stays_deleted(tmp_path: Path, down: int) -> None:
    """An exchange deleted and bindings removed while a worker was being restarted after
    kill -9 stay deleted on every worker once it is back, and after the node restarts: the
    restarted worker takes the exchanges and bindings from the workers that stayed up,
    whose changes it missed, as a RabbitMQ node rejoining its cluster takes the metadata
    store's (model/replica_apply.py). Worker 0 (the front) and worker 1 each in turn."""
    with _node(tmp_path) as (broker, data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        ca.queue_declare("probe-a")
        a_on = 0 if "probe-a" in _queues_on(data, 0) else 1
        up, on_down = (ca, cb) if a_on != down else (cb, ca)
        for name in ("gone-x", "kept-x", "kept-y"):
            up.exchange_declare(name, "direct", durable=True)
        up.queue_declare("kept-up", durable=True)  # on the worker that stays up
        on_down.queue_declare("kept-down", durable=True)  # on the one killed
        for queue in ("kept-up", "kept-down"):
            up.queue_bind(queue, "kept-x", "stays")
            up.queue_bind(queue, "kept-x", "unbound")
        up.exchange_bind("kept-y", "kept-x", "e2e")
        before = _shared_topology(data)
        assert before == _shared_topology(data / "shard-1")  # replicated everywhere

        pid = _workers(broker.proc.pid)[down]
        os.kill(pid, signal.SIGKILL)
        # at once, before the killed worker is back: it misses these
        up.exchange_delete("gone-x")
        up.exchange_unbind("kept-y", "kept-x", "e2e")
        for queue in ("kept-up", "kept-down"):
            up.queue_unbind(queue, "kept-x", "unbound")
        with suppress(Exception):
            a.close()
        with suppress(Exception):
            b.close()
        _wait_for(lambda: _workers(broker.proc.pid).get(down) not in (None, pid), "restart")
        # a declare-ok on each worker: each has applied what the other sent before it, the
        # restarted worker's snapshot (sent first when their link came up) included
        _wait_for(lambda: _connects(broker.port), "the front back")
        pair = _two_workers(broker.port)
        for index, connection in enumerate(pair):
            connection.channel().queue_declare(f"probe-after-{index}")
            connection.close()

        expected = (
            {"kept-x", "kept-y"},
            {("kept-x", "kept-up", "stays"), ("kept-x", "kept-down", "stays")},
        )
        assert _shared_topology(data) == expected
        assert _shared_topology(data / "shard-1") == expected
        # a publish from either worker routes as the node's bindings say
        for _ in range(2):
            connection = _connect(broker.port)
            channel = connection.channel()
            channel.confirm_delivery()
            channel.basic_publish("kept-x", "unbound", b"dropped", PERSISTENT)
            channel.basic_publish("kept-x", "stays", b"kept", PERSISTENT)
            connection.close()

        broker.stop()
        broker.restart()
        assert _shared_topology(data) == expected  # and so each worker stored it
        assert _shared_topology(data / "shard-1") == expected
        connection = _connect(broker.port)
        channel = connection.channel()
        for queue in ("kept-up", "kept-down"):
            assert _drain(channel, queue, 5) == [b"kept", b"kept"]
        connection.close()


def _connects(port: int) -> bool:
    try:
        _connect(port).close()
    except pika.exceptions.AMQPConnectionError:
        return False
    return True


def test_a_global_qos_full_channel_leaves_another_workers_messages_to_others(
    tmp_path: Path,
) -> None:
    """A pinned connection's channel (basic.qos global=true, 2) consumes a queue of its
    own worker and one of the other's, and acks nothing: it holds two messages in all,
    and what the other worker's queue sent it beyond that went back (RabbitMQ's limiter),
    so that queue's own consumer there gets every other message, none redelivered."""
    with _node(tmp_path) as (broker, _data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        ca.queue_declare("here")
        ca.confirm_delivery()
        ca.basic_publish("", "here", b"h")
        cb.queue_declare("there")
        cb.confirm_delivery()
        for i in range(10):
            cb.basic_publish("", "there", b"%d" % i)
        limited = a.channel()
        limited.basic_qos(prefetch_count=2, global_qos=True)
        got: list[bytes] = []
        limited.basic_consume("here", lambda _c, _m, _p, body: got.append(body))
        limited.basic_consume("there", lambda _c, _m, _p, body: got.append(body))
        _wait_for(lambda: (a.process_data_events(0.05), len(got) >= 2)[1], "two deliveries")
        a.process_data_events(0.5)  # none more comes: the channel is full
        assert got == [b"h", b"0"]
        taken: list[tuple[bytes, bool]] = []
        cb.basic_consume(
            "there", lambda _c, m, _p, body: taken.append((body, m.redelivered)), auto_ack=True
        )
        _wait_for(lambda: (b.process_data_events(0.05), len(taken) >= 9)[1], "the other nine")
        assert taken == [(b"%d" % i, False) for i in range(1, 10)]
        a.close()
        b.close()


def test_the_management_api_and_prometheus_show_a_spread_vhost_as_one_node(
    tmp_path: Path,
) -> None:
    """Operators see one broker when "/" is spread over both workers: every worker's
    queues, connections and consumers once each, every exchange and binding once,
    totals and Prometheus summed once; a queue another worker owns is purged and deleted
    through the API like any other."""
    data = tmp_path / "data"
    http = ("--management-port", "0", "--prometheus-port", "0")
    broker = BrokerProcess(data, extra=("--workers", "2", "--spread-vhosts", "/", *http))
    api = httpx.Client(auth=("guest", "guest"), timeout=30)
    try:
        api.base_url = httpx.URL(f"http://127.0.0.1:{_listener_port(data, 'http')}/api")
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        ca.exchange_declare("spread-x", "direct", durable=True)
        for channel, name in ((ca, "q-a"), (cb, "q-b")):
            channel.queue_declare(name, durable=True)
            channel.queue_bind(name, "spread-x", name)
            channel.confirm_delivery()
        on_one = _queue_names(data / "shard-1") & {"q-a", "q-b"}
        assert len(on_one) == 1  # one queue on each worker
        (far,) = on_one
        near, near_channel = ("q-b", cb) if far == "q-a" else ("q-a", ca)
        for name in ("q-a", "q-b"):
            for _ in range(3):
                ca.basic_publish("spread-x", name, b"m", PERSISTENT)
        near_channel.basic_consume(near, lambda *_args: None, consumer_tag="watcher")

        def listed() -> dict[str, tuple[int, int]]:
            rows = api.get("/queues/%2F", params={"columns": "name,messages,messages_ready"})
            return {q["name"]: (q["messages"], q["messages_ready"]) for q in rows.json()}

        # the consumer's three are unacked (messages counts them, messages_ready does not)
        _wait_for(lambda: listed() == {near: (3, 0), far: (3, 3)}, "the consumer's deliveries")
        exchanges = [x["name"] for x in api.get("/exchanges/%2F").json()]
        assert exchanges.count("spread-x") == 1 and exchanges.count("amq.direct") == 1
        bindings = api.get("/exchanges/%2F/spread-x/bindings/source").json()
        assert sorted(row["destination"] for row in bindings) == ["q-a", "q-b"]
        # the default exchange's binding of every queue, worker 1's too; a binding made
        # through the API to worker 1's queue (worker 0 routes with its stub)
        every = api.get("/bindings/%2F").json()
        assert sorted(row["destination"] for row in every if row["source"] == "") == [
            "q-a",
            "q-b",
        ]
        made = api.post(f"/bindings/%2F/e/amq.topic/q/{far}", json={"routing_key": "t.#"})
        assert made.status_code == 201, made.text
        [bound] = api.get(f"/bindings/%2F/e/amq.topic/q/{far}").json()
        assert bound["routing_key"] == "t.#"
        assert api.delete(f"/bindings/%2F/e/amq.topic/q/{far}/t.%23").status_code == 204
        assert api.get(f"/bindings/%2F/e/amq.topic/q/{far}").json() == []
        # the vhost's messages are both workers' (before: worker 0's only)
        assert api.get("/vhosts/%2F").json()["messages"] == 6
        assert [v["messages"] for v in api.get("/vhosts").json() if v["name"] == "/"] == [6]
        assert len(api.get("/connections").json()) == 2
        consumers = api.get("/consumers").json()
        assert [(c["queue"]["name"], c["consumer_tag"]) for c in consumers] == [(near, "watcher")]
        totals = api.get("/overview").json()["object_totals"]
        assert (totals["queues"], totals["connections"], totals["consumers"]) == (2, 2, 1)
        assert totals["exchanges"] == len(exchanges)
        status = json.loads(_ctl(data, "status", "--format", "json", "-q"))  # amqpd ctl status
        assert status["totals"]["exchanges"] == len(exchanges)  # each once, as above
        assert [row["vhosts"] for row in status["workers"]] == [["/"], ["/"]]  # "/" on both
        metrics = httpx.get(
            f"http://127.0.0.1:{_listener_port(data, 'http/prometheus')}/metrics", timeout=30
        ).text
        assert "\nrabbitmq_queues 2.0\n" in metrics
        assert "\nrabbitmq_consumers 1.0\n" in metrics

        assert api.delete(f"/queues/%2F/{far}/contents").status_code == 204
        _wait_for(lambda: listed()[far] == (0, 0), "the purge on worker 1")
        assert api.delete(f"/queues/%2F/{far}").status_code == 204
        _wait_for(lambda: far not in listed(), "the delete on worker 1")
        assert far not in _queue_names(data / "shard-1")
        a.close()
        b.close()
        broker.stop()
    finally:
        api.close()
        if broker.proc.poll() is None:
            broker.kill()


def test_a_spread_nodes_queues_keep_the_workers_they_live_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue of a spread vhost lives in its worker's store (shard-K/): a restart with fewer
    workers is refused, one line naming it, and ``auto`` on fewer CPUs starts as many
    workers as the data needs (amqpd/cli/worker_count.py), every queue served."""
    with _node(tmp_path) as (broker, data):
        a, b = _two_workers(broker.port)
        ca, cb = a.channel(), b.channel()
        for channel, name in ((ca, "qa"), (cb, "qb")):
            channel.confirm_delivery()
            channel.queue_declare(name, durable=True)
            channel.basic_publish("", name, b"kept", PERSISTENT)
        on_one = _queues_on(data, 1)
        a.close()
        b.close()
    assert len(on_one) == 1, on_one  # the connections were on different workers
    assert _refused_alone(data) == [
        f"amqpd: queue '{on_one.pop()}' in vhost '/' lives on worker 1 (its data is in "
        "shard-1/): start with --workers 2 or more"
    ]
    monkeypatch.setenv("AMQPD_WORKERS", "auto")
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # inherited by the node: "auto" would be 1
    try:
        node = BrokerProcess(data, extra=("--spread-vhosts", "/", "--no-management"))
    finally:
        os.sched_setaffinity(0, cpus)
    try:
        status = json.loads(_ctl(data, "status", "--format", "json", "-q"))
        assert len(status["workers"]) == 2
        conn = _connect(node.port)
        channel = conn.channel()
        for name in ("qa", "qb"):
            assert channel.queue_declare(name, passive=True).method.message_count == 1
        conn.close()
    finally:
        node.stop()
