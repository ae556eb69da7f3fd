"""Flow control across workers (issue 26): the owner of a spread vhost's queues tells a
publishing worker which of them are far behind their consumers, so that worker pauses the
publishers that feed them, as it pauses those of its own queues (model/enqueue.py
FLOW_BACKLOG, engine/connection.py `read_delay`). RabbitMQ's credit flow does this between
a channel and a queue process on another node; without it a publisher on one worker could
fill another worker's queues without bound.

Theory of operation
-------------------
`FloodWatch` is the owner's end of one forwarding link. After each chunk of forwarded
publishes, `note` gets the queues that passed FLOW_BACKLOG with active consumers (what
`enqueue_routed` collected); a queue not yet reported becomes *flooding* and a
``("flow", vhost, queue, True)`` event is queued for the peer. `check` (after each chunk,
and every CHECK_EVERY seconds while anything is reported, since a paused publisher sends
nothing that would trigger it) reports ``("flow", vhost, queue, False)`` for each reported
queue that caught up (at most FLOW_BACKLOG // 2 ready, no active consumer, or deleted).
`take` writes the queued events as CONTROL records, in order with the link's other answers.

On the publishing worker the event sets `RemoteQueue.flooding` on the queue's stub
(shell/workers/spread.py); routing to a flooding stub puts it into the connection's
``flow_queues`` (engine/content.py), and `read_delay` waits while the stub stays flooding,
FLOW_MAX_PAUSE per chunk at most, as for a local queue. A lost link clears the flags (the
peer's stubs are refreshed by its snapshot when it comes back).
"""

from __future__ import annotations

import pickle
from typing import Final

from amqpd.model.enqueue import FLOW_BACKLOG
from amqpd.model.queue import Queue
from amqpd.wire.forwarding import encode_control

CHECK_EVERY: Final = 0.005  # seconds between checks while a queue is reported flooding


class FloodWatch:
    """Which of this worker's queues one peer was told are flooding."""

    __slots__ = ("_events", "reported")

    def __init__(self) -> None:
        self.reported: set[Queue] = set()
        self._events: list[tuple[str, str, str, bool]] = []

    def note(self, flooding: set[Queue]) -> bool:
        """Queues a chunk of the peer's publishes left far behind; whether any is new."""
        new = False
        for queue in flooding:
            if queue not in self.reported:
                self.reported.add(queue)
                self._events.append(("flow", queue.vhost_name, queue.name, True))
                new = True
        return new

    def check(self) -> bool:
        """Report the queues that caught up; whether any did."""
        caught_up = [
            queue for queue in self.reported if queue.deleted or not queue.behind(FLOW_BACKLOG // 2)
        ]
        for queue in caught_up:
            self.reported.discard(queue)
            self._events.append(("flow", queue.vhost_name, queue.name, False))
        return bool(caught_up)

    def take(self, out: bytearray) -> None:
        """Append the queued events to ``out`` as CONTROL records."""
        for event in self._events:
            encode_control(out, pickle.dumps(event))
        self._events.clear()
