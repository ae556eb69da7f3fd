"""A consumer that kills itself (SIGKILL) the moment a ``receive()`` returns.

``python -m tests.integration.jms_dups_child URL MODE PREFETCH OPTIMIZE COUNT DEST`` connects
with prefetch PREFETCH (``optimize_acknowledge`` when OPTIMIZE is ``1``), creates a consumer
in acknowledgement mode MODE on DEST (``queue:NAME``, or ``durable:CLIENT:NAME:TOPIC`` for a
durable topic subscription), receives COUNT messages and, right after the last ``receive``
returns, SIGKILLs itself: no close, no flush, as a crash would. The test then counts what
the broker gives back.
"""

from __future__ import annotations

import os
import signal
import sys

from interop.jms import AckMode, ConnectionFactory, PrefetchPolicy


def main() -> None:
    url, mode_name, prefetch_text, optimize, count_text, dest = sys.argv[1:7]
    signal.alarm(120)  # never outlive a broken test
    prefetch = int(prefetch_text)
    kind, _, rest = dest.partition(":")
    policy = PrefetchPolicy()
    policy.set_all(prefetch)
    factory = ConnectionFactory(
        url,
        client_id=rest.split(":")[0] if kind == "durable" else None,
        prefetch_policy=policy,
        optimize_acknowledge=optimize == "1",
        optimize_acknowledge_timeout=0,
    )
    connection = factory.create_connection()
    session = connection.create_session(ack_mode=AckMode[mode_name])
    if kind == "durable":
        _client, name, topic = rest.split(":")
        consumer = session.create_durable_subscriber(session.topic(topic), name)
    else:
        consumer = session.create_consumer(session.queue(rest))
    connection.start()
    for _ in range(int(count_text)):
        if consumer.receive(60) is None:
            os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
