"""A JMS consumer process for the message-group tests.

``python -m tests.integration.jms_groups_child URL QUEUE NAME PREFETCH`` consumes QUEUE in
CLIENT_ACKNOWLEDGE mode and, for each message, writes ``NAME GROUP N FIRST`` to stdout
(FIRST: its JMSXGroupFirstForConsumer, 1 or 0) *before* acknowledging it, so a message this
process reported may come back to another consumer if it is killed, but none it
acknowledged goes unreported. It runs until killed.
"""

from __future__ import annotations

import os
import signal
import sys

from interop.jms import AckMode, ConnectionFactory, PrefetchPolicy


def main() -> None:
    url, queue, name, prefetch = sys.argv[1:5]
    signal.alarm(600)  # never outlive a broken test
    factory = ConnectionFactory(url, prefetch_policy=PrefetchPolicy(queue_prefetch=int(prefetch)))
    connection = factory.create_connection()
    session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
    consumer = session.create_consumer(session.queue(queue))
    connection.start()
    os.write(1, f"{name} ready\n".encode())
    while True:
        message = consumer.receive(1.0)
        if message is None:
            continue
        group = message.get_property("JMSXGroupID")
        first = 1 if message.get_property("JMSXGroupFirstForConsumer") else 0
        os.write(1, f"{name} {group} {message.get_property('n')} {first}\n".encode())
        message.acknowledge()


if __name__ == "__main__":
    main()
