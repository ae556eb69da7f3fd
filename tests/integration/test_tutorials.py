"""RabbitMQ's six Python tutorials (pika BlockingConnection) against a real amqpd server.

https://www.rabbitmq.com/tutorials/tutorial-one-python (and two .. six). Concurrent consumers
run in threads, each with its own connection; threads are synchronised with events and
queues, never with sleeps.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pika.exceptions
import pytest

from amqpd.shell.server import Server
from tests.integration.pika_support import TIMEOUT, params, pump_until


def collect(results: queue.Queue[Any], count: int, timeout: float = TIMEOUT) -> list[Any]:
    """Take ``count`` items from a thread-fed queue, failing if one takes too long."""
    out = []
    for _ in range(count):
        try:
            out.append(results.get(timeout=timeout))
        except queue.Empty:
            pytest.fail(f"only {len(out)} of {count} items arrived: {out!r}")
    return out


class ConsumerThread:
    """A consumer on its own connection in a thread.

    ``setup(channel)`` declares what it needs and returns the queue name to consume;
    ``on_message(channel, method, properties, body)`` handles each delivery. ``ready`` is
    set once Basic.Consume-Ok has arrived; ``stop()`` cancels, closes and joins.
    """

    def __init__(
        self,
        server: Server,
        setup: Callable[[Any], str],
        on_message: Callable[[Any, Any, Any, bytes], None],
        auto_ack: bool = False,
    ) -> None:
        self._server = server
        self._setup = setup
        self._on_message = on_message
        self._auto_ack = auto_ack
        self.ready = threading.Event()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.queue_name = ""
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ConsumerThread:
        self._thread.start()
        if not self.ready.wait(TIMEOUT):
            self.stop()
            raise AssertionError("consumer did not start")
        if self.error is not None:
            self.stop()  # joins the thread, then raises its error
        return self

    def _run(self) -> None:
        try:
            with pika.BlockingConnection(params(self._server)) as conn:
                ch = conn.channel()
                self.queue_name = self._setup(ch)
                ch.basic_consume(
                    self.queue_name,
                    lambda c, m, p, b: self._on_message(c, m, p, b),
                    auto_ack=self._auto_ack,
                )
                self.ready.set()
                while not self._stop.is_set():
                    conn.process_data_events(time_limit=0.02)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
            self.ready.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), "consumer thread did not stop"
        if self.error is not None:
            raise self.error


@contextmanager
def consumers(*threads: ConsumerThread) -> Iterator[None]:
    started: list[ConsumerThread] = []
    try:
        for thread in threads:
            started.append(thread.start())
        yield
    finally:
        for thread in started:
            thread.stop()


# ----------------------------------------------------------------------------------------
# 1. "Hello World!"
# ----------------------------------------------------------------------------------------
def test_hello_world(server: Server) -> None:
    with pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="hello")
        ch.basic_publish(exchange="", routing_key="hello", body=b"Hello World!")

    received: list[bytes] = []
    with pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="hello")

        def callback(channel: Any, method: Any, properties: Any, body: bytes) -> None:
            received.append(body)

        ch.basic_consume(queue="hello", on_message_callback=callback, auto_ack=True)
        pump_until(conn, lambda: bool(received))
        assert received == [b"Hello World!"]
        # auto_ack: nothing left behind
        assert ch.queue_declare(queue="hello", passive=True).method.message_count == 0


# ----------------------------------------------------------------------------------------
# 2. Work queues
# ----------------------------------------------------------------------------------------
def _task_queue(ch: Any) -> str:
    ch.queue_declare(queue="task_queue", durable=True)
    ch.basic_qos(prefetch_count=1)
    return "task_queue"


def test_work_queue_durable_and_persistent(server: Server) -> None:
    with pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        ok = ch.queue_declare(queue="task_queue", durable=True)
        assert ok.method.queue == "task_queue"
        ch.basic_publish(
            exchange="",
            routing_key="task_queue",
            body=b"a task...",
            properties=pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent),
        )
        method, props, body = ch.basic_get("task_queue")
        assert body == b"a task..."
        assert props.delivery_mode == 2
        ch.basic_ack(method.delivery_tag)
        # a non-durable redeclare of the durable queue is refused, as in RabbitMQ
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare(queue="task_queue", durable=False)
        assert info.value.reply_code == 406
        assert "durable" in info.value.reply_text


def test_work_queue_round_robin(server: Server) -> None:
    """Without prefetch, consumers get messages in turn (A, B, A, B, ...)."""
    results: queue.Queue[tuple[str, bytes]] = queue.Queue()

    def worker(name: str) -> ConsumerThread:
        def setup(ch: Any) -> str:
            ch.queue_declare(queue="task_queue", durable=True)
            return "task_queue"

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            results.put((name, body))
            ch.basic_ack(method.delivery_tag)

        return ConsumerThread(server, setup, on_message)

    with consumers(worker("A"), worker("B")), pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        for i in range(6):
            ch.basic_publish(
                "",
                "task_queue",
                f"task {i}".encode(),
                pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent),
            )
        got = collect(results, 6)
    by_worker = {name: [body for who, body in got if who == name] for name in "AB"}
    assert by_worker == {
        "A": [b"task 0", b"task 2", b"task 4"],
        "B": [b"task 1", b"task 3", b"task 5"],
    }


def test_work_queue_fair_dispatch(server: Server) -> None:
    """prefetch_count=1: a slow worker holding its unacked task gets no more tasks."""
    results: queue.Queue[tuple[str, bytes]] = queue.Queue()
    release_slow = threading.Event()

    def slow(ch: Any, method: Any, props: Any, body: bytes) -> None:
        results.put(("slow", body))
        # "work" until the test says so (processing of further I/O is blocked meanwhile,
        # so a message wrongly sent here would never be reported as received)
        release_slow.wait(TIMEOUT)
        ch.basic_ack(delivery_tag=method.delivery_tag)

    def fast(ch: Any, method: Any, props: Any, body: bytes) -> None:
        results.put(("fast", body))
        ch.basic_ack(delivery_tag=method.delivery_tag)

    slow_worker = ConsumerThread(server, _task_queue, slow)
    fast_worker = ConsumerThread(server, _task_queue, fast)
    try:
        with consumers(slow_worker, fast_worker), pika.BlockingConnection(params(server)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(10):
                ch.basic_publish(
                    "",
                    "task_queue",
                    f"task {i}".encode(),
                    pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent),
                )
            got = collect(results, 10)
            # all ten arrived while the slow worker was still holding its first task
            release_slow.set()
    finally:
        release_slow.set()
    # the slow worker's ack went through: nothing came back when its connection closed
    with pika.BlockingConnection(params(server)) as conn:
        ok = conn.channel().queue_declare("task_queue", passive=True)
        assert (ok.method.message_count, ok.method.consumer_count) == (0, 0)
    # round-robin gave the first task to the first consumer; everything else went to the
    # worker that had acked (the two threads report concurrently, so only per-worker
    # order is meaningful)
    assert [body for who, body in got if who == "slow"] == [b"task 0"]
    assert [body for who, body in got if who == "fast"] == [
        f"task {i}".encode() for i in range(1, 10)
    ]
    assert results.empty()


def test_work_queue_unacked_task_redelivered_when_worker_dies(server: Server) -> None:
    """Tutorial 2's message acknowledgment: a worker dying with an unacked task loses nothing."""
    with pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="task_queue", durable=True)
        ch.basic_publish("", "task_queue", b"important")

    with pika.BlockingConnection(params(server)) as dying:
        ch = dying.channel()
        ch.basic_qos(prefetch_count=1)
        method, _props, body = next(ch.consume("task_queue", inactivity_timeout=TIMEOUT))
        assert body == b"important"
        assert method.redelivered is False
        # closes without acking

    with pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        method, _props, body = next(ch.consume("task_queue", inactivity_timeout=TIMEOUT))
        assert method is not None
        assert body == b"important"
        assert method.redelivered is True
        ch.basic_ack(method.delivery_tag)
        ch.cancel()


# ----------------------------------------------------------------------------------------
# 3. Publish/Subscribe
# ----------------------------------------------------------------------------------------
def test_publish_subscribe_fanout(server: Server) -> None:
    results: queue.Queue[tuple[int, bytes]] = queue.Queue()
    names: list[str] = []

    def subscriber(n: int) -> ConsumerThread:
        def setup(ch: Any) -> str:
            ch.exchange_declare(exchange="logs", exchange_type="fanout")
            result = ch.queue_declare(queue="", exclusive=True)
            queue_name = result.method.queue
            names.append(queue_name)
            ch.queue_bind(exchange="logs", queue=queue_name)
            return queue_name

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            results.put((n, body))

        return ConsumerThread(server, setup, on_message, auto_ack=True)

    with consumers(subscriber(1), subscriber(2)), pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange="logs", exchange_type="fanout")
        for i in range(3):
            ch.basic_publish(exchange="logs", routing_key="", body=f"log {i}".encode())
        got = collect(results, 6)
        # server-named queues are exclusive to their owners' connections
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            conn.channel().queue_declare(names[0], passive=True)
        assert info.value.reply_code == 405

    assert len(names) == 2
    assert names[0] != names[1]
    assert all(name.startswith("amq.gen-") for name in names)
    for n in (1, 2):
        assert [body for who, body in got if who == n] == [b"log 0", b"log 1", b"log 2"]
    assert results.empty()


# ----------------------------------------------------------------------------------------
# 4. Routing
# ----------------------------------------------------------------------------------------
def test_routing_direct_exchange(server: Server) -> None:
    results: queue.Queue[tuple[str, str, bytes]] = queue.Queue()

    def receiver(name: str, severities: list[str]) -> ConsumerThread:
        def setup(ch: Any) -> str:
            ch.exchange_declare(exchange="direct_logs", exchange_type="direct")
            queue_name = ch.queue_declare(queue="", exclusive=True).method.queue
            for severity in severities:
                ch.queue_bind(exchange="direct_logs", queue=queue_name, routing_key=severity)
            return queue_name

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            results.put((name, method.routing_key, body))

        return ConsumerThread(server, setup, on_message, auto_ack=True)

    sent = [
        ("info", b"i1"),
        ("warning", b"w1"),
        ("error", b"e1"),
        ("debug", b"d1"),
        ("error", b"e2"),
    ]
    with (
        consumers(receiver("errors", ["error"]), receiver("all", ["info", "warning", "error"])),
        pika.BlockingConnection(params(server)) as conn,
    ):
        ch = conn.channel()
        ch.exchange_declare(exchange="direct_logs", exchange_type="direct")
        ch.confirm_delivery()
        for severity, body in sent:
            ch.basic_publish(exchange="direct_logs", routing_key=severity, body=body)
        # the unrouted "debug" message comes back when mandatory
        returned: list[bytes] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(b))
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("direct_logs", "debug", b"d2", mandatory=True)
        got = collect(results, 6)

    assert [(key, body) for who, key, body in got if who == "errors"] == [
        ("error", b"e1"),
        ("error", b"e2"),
    ]
    assert [(key, body) for who, key, body in got if who == "all"] == [
        ("info", b"i1"),
        ("warning", b"w1"),
        ("error", b"e1"),
        ("error", b"e2"),
    ]
    assert results.empty()


def test_routing_same_key_bound_to_two_queues(server: Server) -> None:
    """Multiple bindings: one key bound to two queues delivers to both (like fanout)."""
    with pika.BlockingConnection(params(server)) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange="direct_logs", exchange_type="direct")
        q1 = ch.queue_declare(queue="", exclusive=True).method.queue
        q2 = ch.queue_declare(queue="", exclusive=True).method.queue
        ch.queue_bind(q1, "direct_logs", routing_key="black")
        ch.queue_bind(q2, "direct_logs", routing_key="black")
        ch.queue_bind(q2, "direct_logs", routing_key="green")
        ch.basic_publish("direct_logs", "black", b"b")
        ch.basic_publish("direct_logs", "green", b"g")
        ch.basic_publish("direct_logs", "orange", b"o")
        counts = {q: ch.queue_declare(q, passive=True).method.message_count for q in (q1, q2)}
        assert counts == {q1: 1, q2: 2}
        assert ch.basic_get(q1, auto_ack=True)[2] == b"b"
        assert [ch.basic_get(q2, auto_ack=True)[2] for _ in range(2)] == [b"b", b"g"]


# ----------------------------------------------------------------------------------------
# 5. Topics
# ----------------------------------------------------------------------------------------
def test_topics(server: Server) -> None:
    bindings = {
        "q1": ["*.orange.*"],
        "q2": ["*.*.rabbit", "lazy.#"],
        "all": ["#"],
        "kern": ["kern.*"],
    }
    keys = [
        "quick.orange.rabbit",
        "lazy.orange.elephant",
        "quick.orange.fox",
        "lazy.brown.fox",
        "lazy.pink.rabbit",
        "quick.brown.fox",
        "orange",
        "quick.orange.new.rabbit",
        "lazy.orange.new.rabbit",
        "lazy",
        "kern.critical",
        "kern.critical.disk",
        "",
    ]
    expected = {
        "q1": ["quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox"],
        "q2": [
            "quick.orange.rabbit",
            "lazy.orange.elephant",
            "lazy.brown.fox",
            "lazy.pink.rabbit",
            "lazy.orange.new.rabbit",
            "lazy",
        ],
        "all": keys,
        "kern": ["kern.critical"],
    }
    results: queue.Queue[tuple[str, str]] = queue.Queue()

    def receiver(name: str) -> ConsumerThread:
        def setup(ch: Any) -> str:
            ch.exchange_declare(exchange="topic_logs", exchange_type="topic")
            queue_name = ch.queue_declare("", exclusive=True).method.queue
            for key in bindings[name]:
                ch.queue_bind(exchange="topic_logs", queue=queue_name, routing_key=key)
            return queue_name

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            assert body.decode() == method.routing_key
            results.put((name, method.routing_key))

        return ConsumerThread(server, setup, on_message, auto_ack=True)

    with (
        consumers(*(receiver(name) for name in bindings)),
        pika.BlockingConnection(params(server)) as conn,
    ):
        ch = conn.channel()
        ch.exchange_declare(exchange="topic_logs", exchange_type="topic")
        for key in keys:
            ch.basic_publish(exchange="topic_logs", routing_key=key, body=key.encode())
        got = collect(results, sum(len(v) for v in expected.values()))
    for name, want in expected.items():
        assert [key for who, key in got if who == name] == want, name
    assert results.empty()


# ----------------------------------------------------------------------------------------
# 6. RPC
# ----------------------------------------------------------------------------------------
def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def test_rpc(server: Server) -> None:
    def setup(ch: Any) -> str:
        ch.queue_declare(queue="rpc_queue")
        ch.basic_qos(prefetch_count=1)
        return "rpc_queue"

    def on_request(ch: Any, method: Any, props: Any, body: bytes) -> None:
        response = fib(int(body))
        ch.basic_publish(
            exchange="",
            routing_key=props.reply_to,
            properties=pika.BasicProperties(correlation_id=props.correlation_id),
            body=str(response).encode(),
        )
        ch.basic_ack(delivery_tag=method.delivery_tag)

    class FibonacciRpcClient:
        def __init__(self) -> None:
            self.connection = pika.BlockingConnection(params(server))
            self.channel = self.connection.channel()
            result = self.channel.queue_declare(queue="", exclusive=True)
            self.callback_queue = result.method.queue
            self.channel.basic_consume(
                queue=self.callback_queue, on_message_callback=self.on_response, auto_ack=True
            )
            self.response: bytes | None = None
            self.corr_id: str | None = None
            self.stray: list[bytes] = []

        def on_response(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
            if self.corr_id == props.correlation_id:
                self.response = body
            else:
                self.stray.append(body)

        def call(self, n: int) -> int:
            self.response = None
            self.corr_id = str(uuid.uuid4())
            self.channel.basic_publish(
                exchange="",
                routing_key="rpc_queue",
                properties=pika.BasicProperties(
                    reply_to=self.callback_queue, correlation_id=self.corr_id
                ),
                body=str(n).encode(),
            )
            pump_until(self.connection, lambda: self.response is not None)
            assert self.response is not None
            return int(self.response)

    with consumers(ConsumerThread(server, setup, on_request)):
        client = FibonacciRpcClient()
        try:
            assert client.callback_queue.startswith("amq.gen-")
            answers = [client.call(n) for n in (0, 1, 2, 10, 30, 90)]
            assert client.stray == []
        finally:
            client.connection.close()
    assert answers == [0, 1, 1, 55, 832040, 2880067194370816120]
