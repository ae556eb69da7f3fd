"""Which worker runs a link (``--workers N``): shovels and federated exchanges' links run
once per node, as RabbitMQ runs each dynamic shovel and each federation link on one node of
a cluster.

A vhost served by one worker has its links there (the only worker whose ``broker.vhosts``
holds it). A spread vhost (``--spread-vhosts``) is on every worker; each of its links runs
on one, chosen by a stable hash of the vhost and the link's name, so that a node's links
spread over its cores and every worker agrees without asking. A link of a worker that died
is down until the supervisor has restarted that worker (RabbitMQ would restart it on
another node; here the worker is back within seconds).
"""

from __future__ import annotations

import zlib

from amqpd.model.broker import Broker


def runs_here(broker: Broker, vhost: str, name: str) -> bool:
    """Whether this worker runs the link ``name`` (a shovel's, a federated exchange's) of
    ``vhost``."""
    if vhost not in broker.vhosts:
        return False
    replica = broker.replica_of(vhost) if broker.replica_of is not None else None
    if replica is None:
        return True
    return zlib.crc32(f"{vhost}\0{name}".encode()) % replica.workers == replica.worker
