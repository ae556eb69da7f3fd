"""The message-group goal run, shared by the suite (10,000 messages) and tests/perf
(100,000): GROUPS groups over CONSUMERS consumer processes, one of them SIGKILLed midway.

`run` starts the consumers (`tests.integration.jms_groups_child`), waits until the queue
has them all, sends the messages (group ``g<i mod GROUPS>``, property ``n`` counting within
the group, JMSXGroupSeq n + 1), kills consumer 0 once it has reported ``kill_after``
messages, and returns every report once each (group, n) has been reported; `check` asserts
the goal's properties on them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pika

from interop.jms import ConnectionFactory, DeliveryMode


@dataclass
class Reports:
    """What the consumers reported, in the order each one reported it."""

    by_consumer: dict[str, list[tuple[str, int, bool]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    victim: str = "c0"
    groups_before_kill: dict[str, set[str]] = field(default_factory=dict)
    seconds: float = 0.0


def _consumers(port: int, queue: str) -> int:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.consumer_count)
    except pika.exceptions.ChannelClosedByBroker:
        return 0
    finally:
        if conn.is_open:
            conn.close()


def run(
    port: int,
    queue: str,
    *,
    groups: int,
    messages: int,
    consumers: int = 4,
    prefetch: int = 100,
    kill_after: int,
    timeout: float = 300.0,
) -> Reports:
    """Run the scenario against amqpd on ``port`` (see the module comment)."""
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    reports = Reports()
    lock = threading.Lock()
    done = threading.Event()
    seen: set[tuple[str, int]] = set()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ready = threading.Semaphore(0)

    def read(name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            parts = line.decode().split()
            if parts[1] == "ready":
                ready.release()
                continue
            group, n, first = parts[1], int(parts[2]), parts[3] == "1"
            with lock:
                if done.is_set():
                    # the run is over and its consumers are being killed one by one: what a
                    # killed one reported but had not acked goes to those still alive, and
                    # is not part of the run
                    continue
                mine = reports.by_consumer[name]
                mine.append((group, n, first))
                seen.add((group, n))
                if name == reports.victim and len(mine) == kill_after:
                    reports.groups_before_kill = {
                        c: {g for g, _n, _f in got} for c, got in reports.by_consumer.items()
                    }
                    os.kill(proc.pid, signal.SIGKILL)
                if len(seen) == messages:
                    done.set()

    try:
        for index in range(consumers):
            name = f"c{index}"
            command = [sys.executable, "-m", "tests.integration.jms_groups_child", url, queue]
            proc = subprocess.Popen([*command, name, str(prefetch)], stdout=subprocess.PIPE)
            procs[name] = proc
            threading.Thread(target=read, args=(name, proc), daemon=True).start()
        for _ in range(consumers):
            assert ready.acquire(timeout=120), "a consumer process did not start"
        deadline = time.monotonic() + 60
        while _consumers(port, queue) < consumers:  # every subscription is in place
            assert time.monotonic() < deadline, "consumers not registered"
            time.sleep(0.05)
        started = time.monotonic()
        with ConnectionFactory(url).create_connection() as connection:
            session = connection.create_session()
            producer = session.create_producer(session.queue(queue))
            producer.delivery_mode = DeliveryMode.NON_PERSISTENT
            for i in range(messages):
                group, n = f"g{i % groups}", i // groups
                properties = {"JMSXGroupID": group, "JMSXGroupSeq": n + 1, "n": n}
                producer.send(f"{group}:{n}", properties=properties)
        assert done.wait(timeout), f"only {len(seen)} of {messages} messages reported"
        reports.seconds = time.monotonic() - started
        return reports
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()


def check(reports: Reports, groups: int, messages: int, consumers: int = 4) -> None:
    """The goal: order kept per group, one consumer per group at a time, groups spread,
    the killed consumer's groups taken over with nothing lost."""
    victim = reports.victim
    assert reports.groups_before_kill, "the victim was never killed"
    per_group: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for name, got in reports.by_consumer.items():
        firsts: set[str] = set()
        for group, n, first in got:
            per_group[group][name].append(n)
            assert first == (group not in firsts), (name, group, n, first)
            firsts.add(group)
    per_group_count = messages // groups
    for group, holders in per_group.items():
        for name, ns in holders.items():  # order kept on every consumer
            assert ns == sorted(set(ns)), (group, name, ns[:20])
        everything = {n for ns in holders.values() for n in ns}
        assert everything == set(range(per_group_count)), group  # nothing lost
        others = [name for name in holders if name != victim]
        assert len(others) == 1, (group, sorted(holders))  # one consumer at a time
        if victim in holders:  # taken over where the victim stopped
            assert min(holders[others[0]]) in (max(holders[victim]), max(holders[victim]) + 1)
    spread = {name: len(owned) for name, owned in reports.groups_before_kill.items()}
    assert len(spread) == consumers and min(spread.values()) >= groups // consumers // 2, spread
