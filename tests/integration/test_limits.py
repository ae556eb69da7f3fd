"""Resource alarms and the slow-consumer bound, against the real server (a thousand
connections at once: test_many_connections.py).

The alarm cycle tests feed the broker's resource monitor a measurement the test controls
(``ServerConfig.memory_probe`` / ``disk_probe``); everything else is the real path: the
monitor task, the core's throttle, the shell no longer reading from a blocked publisher.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika
from pamqp import commands

from amqpd.engine.connection import Connection
from amqpd.model.broker import BrokerConfig
from amqpd.shell.server import Server, ServerConfig, background_server
from tests.integration.raw_client import RawClient

DEADLINE = 30.0  # generous: these poll for an event, so a quiet machine never waits this long


def wait_for(condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    """Poll a condition on the broker (there is no event to wait on across threads)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


class Gauge:
    """A measurement the test sets and the broker's monitor reads."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self, *_args: Any) -> int:
        return self.value


@contextmanager
def alarm_server(
    memory: Gauge, disk: Gauge | None = None, tmp_path: Path | None = None
) -> Iterator[Server]:
    config = ServerConfig(
        port=0,
        memory_check_interval=0.01,
        memory_probe=memory,
        data_dir=tmp_path,
    )
    if disk is not None:
        config.disk_probe = disk
    broker_config = BrokerConfig(
        memory_high_watermark=1_000_000, disk_free_limit=1_000_000 if disk else None
    )
    with background_server(broker_config, config) as server:
        yield server


class Watcher:
    """A pika connection recording connection.blocked / unblocked."""

    def __init__(self, port: int) -> None:
        self.conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        self.events: list[str] = []
        self.conn.add_on_connection_blocked_callback(
            lambda _c, frame_: self.events.append(f"blocked:{frame_.method.reason}")
        )
        self.conn.add_on_connection_unblocked_callback(
            lambda _c, _f: self.events.append("unblocked")
        )

    def wait_event(self, count: int, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while len(self.events) < count:
            assert time.monotonic() < deadline, self.events
            self.conn.process_data_events(time_limit=0.05)


def ready(server: Server, queue: str) -> int:
    return len(server.broker.vhosts["/"].queues[queue].ready)


def paused(server: Server) -> bool:
    """Whether the broker stopped reading from a publisher (the shell leaves its data in the
    kernel)."""
    return any(conn.paused for conn in list(server.broker.connections))


def run_alarm_cycle(
    server: Server, raise_alarm: Callable[[], None], clear: Callable[[], None], reason: str
) -> None:
    """Like RabbitMQ (rabbit_reader), the broker stops reading from a publisher at the end of
    the first chunk with content in it while an alarm is on. pika writes a message's frames
    one by one, so the chunk may end between the header and the body of the message that
    triggered the block: that message is complete only after the alarm clears. Hence no
    assertion on it while blocked, except that nothing after it was read."""
    publisher = Watcher(server.port)
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    try:
        pub = publisher.conn.channel()
        pub.queue_declare("alarm-q")
        pub.basic_publish("", "alarm-q", b"before")
        pub.basic_publish("", "alarm-q", b"for the consumer")
        con = consumer.channel()
        assert con.basic_get("alarm-q", auto_ack=True)[2] == b"before"

        raise_alarm()
        wait_for(lambda: bool(server.broker.alarms.active))
        assert publisher.events == []  # nothing is sent before the connection publishes
        pub.basic_publish("", "alarm-q", b"while blocked 1")
        publisher.wait_event(1)
        assert publisher.events == [f"blocked:{reason}"]
        assert paused(server)  # set before connection.blocked was sent
        # The publisher is no longer read from: this one stays in the socket (pika has
        # written it when basic_publish returns).
        pub.basic_publish("", "alarm-q", b"while blocked 2")
        # Consumers keep being served (their qos, gets and acks are still read) ...
        con.basic_qos(prefetch_count=1)
        method, _props, body = con.basic_get("alarm-q")
        assert body == b"for the consumer" and method is not None
        con.basic_ack(method.delivery_tag)
        # ... and the queue holds at most the message that triggered the block.
        assert ready(server, "alarm-q") <= 1
        assert paused(server) and publisher.events == [f"blocked:{reason}"]

        clear()
        publisher.wait_event(2)
        assert publisher.events[-1] == "unblocked"
        wait_for(lambda: ready(server, "alarm-q") == 2)  # both, once the publisher is read
        assert con.basic_get("alarm-q", auto_ack=True)[2] == b"while blocked 1"
        assert con.basic_get("alarm-q", auto_ack=True)[2] == b"while blocked 2"
        pub.basic_publish("", "alarm-q", b"after")
        wait_for(lambda: ready(server, "alarm-q") == 1)
        assert len(publisher.events) == 2 and not paused(server)
    finally:
        publisher.conn.close()
        consumer.close()


def test_memory_alarm_blocks_publishers_and_unblocks_them() -> None:
    memory = Gauge(0)
    with alarm_server(memory) as server:

        def raise_alarm() -> None:
            memory.value = 2_000_000

        def clear() -> None:
            memory.value = 10

        run_alarm_cycle(server, raise_alarm, clear, "low on memory")


def test_disk_alarm_blocks_publishers_and_unblocks_them(tmp_path: Path) -> None:
    memory = Gauge(0)
    disk = Gauge(10**12)
    with alarm_server(memory, disk, tmp_path) as server:

        def raise_alarm() -> None:
            disk.value = 10

        def clear() -> None:
            disk.value = 10**12

        run_alarm_cycle(server, raise_alarm, clear, "low on disk")


def test_both_alarms_are_named_and_both_must_clear(tmp_path: Path) -> None:
    memory = Gauge(2_000_000)
    disk = Gauge(10)
    with alarm_server(memory, disk, tmp_path) as server:
        wait_for(lambda: len(server.broker.alarms.active) == 2)
        publisher = Watcher(server.port)
        try:
            publisher.conn.channel().basic_publish("", "nowhere", b"x")
            publisher.wait_event(1)
            assert publisher.events == ["blocked:low on memory & disk"]
            memory.value = 0
            wait_for(lambda: len(server.broker.alarms.active) == 1)
            publisher.conn.process_data_events(time_limit=0.1)
            assert publisher.events == ["blocked:low on memory & disk"]
            disk.value = 10**12
            publisher.wait_event(2)
            assert publisher.events[-1] == "unblocked"
        finally:
            publisher.conn.close()


def test_real_disk_probe_with_an_impossible_limit_blocks(tmp_path: Path) -> None:
    config = ServerConfig(port=0, data_dir=tmp_path)
    with background_server(BrokerConfig(disk_free_limit=10**18), config) as server:
        wait_for(lambda: "disk" in server.broker.alarms.active)
        publisher = Watcher(server.port)
        try:
            publisher.conn.channel().basic_publish("", "nowhere", b"x")
            publisher.wait_event(1)
            assert publisher.events == ["blocked:low on disk"]
        finally:
            # A blocked connection is not read, so its Close would wait: free the disk first.
            server.broker.alarms.disk_free_limit = 0
            publisher.wait_event(2)
            publisher.conn.close()


# -- slow consumer -----------------------------------------------------------------------------
def consumer_connection(server: Server) -> Connection:
    for conn in server.broker.connections:
        if conn.client_properties.get("product") == "amqpd raw test client":
            return conn
    raise AssertionError("raw consumer not connected")


def test_a_consumer_that_stops_reading_gets_only_a_few_mib_written_ahead() -> None:
    body = b"s" * 65536
    count = 480  # 30 MiB
    with background_server(BrokerConfig(), ServerConfig(port=0)) as server:
        sock_client = RawClient.connect(server.port)
        sock_client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        with sock_client as client:
            client.handshake()
            client.open_channel(1)
            client.rpc(1, commands.Queue.Declare(queue="slow"), commands.Queue.DeclareOk)
            client.rpc(
                1,
                commands.Basic.Consume(queue="slow", consumer_tag="c", no_ack=True),
                commands.Basic.ConsumeOk,
            )
            conn = consumer_connection(server)
            publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
            try:
                channel = publisher.channel()
                channel.confirm_delivery()
                for _ in range(count):
                    channel.basic_publish("", "slow", body)
            finally:
                publisher.close()
            # The consumer has not read a byte: the broker stopped at the write-ahead limit
            # and the rest waits in the queue.
            limit = server.broker.config.write_ahead_limit
            waiting = ready(server, "slow")
            buffered = conn._out_size + conn._unflushed
            assert waiting > count // 2
            assert buffered <= limit + len(body) + 4096, buffered
            assert conn.output_full
            # Once it reads, everything arrives, in order.
            received = 0
            while received < count:
                _channel, value = client.read_frame(timeout=10)
                if isinstance(value, commands.Basic.Deliver):
                    received += 1
            assert ready(server, "slow") == 0
