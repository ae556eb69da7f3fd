"""A user's channels on every worker, so that ``max-channels`` holds for the node.

RabbitMQ counts a user's channels over the whole cluster (rabbit_channel_tracking): with
``--workers N`` a user's connections may be on several workers, and the limit must count
them all. A channel.open is answered inside the sans-IO engine, which cannot wait for
another process, so each worker *publishes* its counts instead of being asked: a small
JSON file per worker in the node's private runtime directory (``wK.channels``: user ->
channels open on worker K), rewritten (aside, then renamed) whenever a user with a
``max-channels`` limit opens or closes a channel there, and when the limits change. The
engine's check (engine/connection.py) adds the other workers' files to its own count.

Users without a limit cost nothing: no file is written for them. A worker that starts
(a restarted one included) writes its file at once, empty of the channels its predecessor
had. As with RabbitMQ's tracking, two channel.opens racing on two workers at the same
instant may both pass.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from amqpd.engine.connection import Connection
from amqpd.model.broker import Broker
from amqpd.model.user_limits import has_channel_limit
from amqpd.shell.workers.role import WorkerRole

__all__ = ["ChannelTally"]

log = logging.getLogger(__name__)


class ChannelTally:
    """Worker ``role.index``'s side: publishes its counts, reads the others'
    (model/broker.py ``OtherWorkersChannels``)."""

    def __init__(self, role: WorkerRole, broker: Broker) -> None:
        self.role = role
        self.broker = broker

    def _path(self, index: int) -> os.PathLike[str]:
        return self.role.runtime / f"w{index}.channels"

    def elsewhere(self, user: str) -> int:
        """The channels ``user`` has open on the other workers (a missing or unreadable
        file counts none: that worker is starting)."""
        total = 0
        for index in range(self.role.count):
            if index == self.role.index:
                continue
            try:
                with open(self._path(index), "rb") as file:
                    counts: Any = json.loads(file.read())
            except (OSError, ValueError):
                continue
            value = counts.get(user) if isinstance(counts, dict) else None
            if isinstance(value, int):
                total += value
        return total

    def changed(self, user: str) -> None:
        """``user`` opened or closed a channel on this worker."""
        if has_channel_limit(self.broker, user):
            self.publish()

    def publish(self) -> None:
        """Write this worker's counts of every user that has a max-channels limit (at
        start, and when the limits change)."""
        counts: dict[str, int] = {}
        for connection in self.broker.connections:
            if not isinstance(connection, Connection) or not connection.channels:
                continue
            user = connection.user
            if has_channel_limit(self.broker, user):
                counts[user] = counts.get(user, 0) + len(connection.channels)
        path = self._path(self.role.index)
        scratch = f"{os.fspath(path)}.tmp"
        try:
            with open(scratch, "w") as file:
                file.write(json.dumps(counts))
            os.replace(scratch, path)
        except OSError as exc:  # the runtime directory is the node's own: not expected
            log.warning("cannot publish this worker's channel counts to %s: %s", path, exc)
