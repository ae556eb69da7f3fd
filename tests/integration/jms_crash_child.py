"""A zygote for crash tests: imports interop.jms once, then forks one consumer per request.

``python -m tests.integration.jms_crash_child URL QUEUE MODE [sync]`` reads lines from stdin
(``sync``: ``send_acks_async=False``, the ack is processed by the broker); each
line forks a child that connects, receives one message from QUEUE with prefetch 1 in
acknowledgement mode MODE (``AUTO_ACKNOWLEDGE``, ``CLIENT_ACKNOWLEDGE``, …; CLIENT and
INDIVIDUAL call ``acknowledge()``), then writes ``<pid> <body>`` to stdout and waits to be
killed (the test SIGKILLs it the moment it reads the line). Forking from a process that has
already imported pika keeps a run at a few milliseconds of CPU. Children die by themselves
after ``ALARM`` seconds if the test never kills them.
"""

from __future__ import annotations

import os
import signal
import sys

from interop.jms import AckMode, ConnectionFactory, PrefetchPolicy

ALARM = 120


def _child(url: str, queue: str, mode: AckMode, sync: bool) -> None:
    signal.alarm(ALARM)
    factory = ConnectionFactory(
        url, prefetch_policy=PrefetchPolicy(queue_prefetch=1), send_acks_async=not sync
    )
    connection = factory.create_connection()
    session = connection.create_session(ack_mode=mode)
    consumer = session.create_consumer(session.queue(queue))
    connection.start()
    message = consumer.receive(60)
    if message is not None and mode in (
        AckMode.CLIENT_ACKNOWLEDGE,
        AckMode.INDIVIDUAL_ACKNOWLEDGE,
    ):
        message.acknowledge()
    body = "NONE" if message is None else str(message.body)
    os.write(1, f"{os.getpid()} {body}\n".encode())
    while True:
        signal.pause()


def main() -> None:
    url, queue, mode_name = sys.argv[1:4]
    mode = AckMode[mode_name]
    sync = sys.argv[4:5] == ["sync"]
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    for _line in sys.stdin:
        if os.fork() == 0:
            try:
                _child(url, queue, mode, sync)
            finally:
                os._exit(1)


if __name__ == "__main__":
    main()
