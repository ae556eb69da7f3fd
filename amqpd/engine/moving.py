"""Which of a connection's methods may be done again on another worker (stage 2, a spread
vhost: amqpd/model/replica.py).

A connection of a spread vhost that declares, consumes from, gets from, purges or deletes a
queue another worker owns moves to that worker when nothing it did pins it here
(engine/topology.py `MoveConnection`; at most MAX_MOVES times, so one that uses queues of
several workers does not go back and forth): the worker it moves to replays every byte it
received before that frame, throwing the replies away (the client has them), and goes on
from the frame, where the queue's counts, consumers and messages are. So
everything before must be safe to do twice: opening and closing channels, qos, the mode
switches, declaring exchanges and named shared queues, binding. Anything else (a publish,
a consumer, a delivery taken, a delete, a purge, an unbind, a commit, a server-named or
exclusive queue, which would get another name or owner) pins the connection where it is.
"""

from __future__ import annotations

from typing import Final

from pamqp import commands as spec

from amqpd.wire import codec

# the methods that may be done again, and the most bytes kept for a move (a hand-over
# message carries them: amqpd/shell/workers/handover.py MAX_MESSAGE)
QUEUE_DECLARE: Final = spec.Queue.Declare.index
REPLAYABLE: Final = frozenset(
    {
        spec.Channel.Open.index,
        spec.Channel.Close.index,
        spec.Channel.CloseOk.index,
        spec.Basic.Qos.index,
        spec.Confirm.Select.index,
        spec.Tx.Select.index,
        spec.Exchange.Declare.index,
        spec.Exchange.Bind.index,
        QUEUE_DECLARE,
        spec.Queue.Bind.index,
    }
)
MAX_RECORDING: Final = 512 * 1024
MAX_MOVES: Final = 2  # a connection using queues of several workers stops moving after that
FRAME_OVERHEAD: Final = 8  # a frame's header (type, channel, size) and end octet


def replayable(index: int, payload: bytes) -> bool:
    """Whether the method ``index`` (its frame ``payload``) may be done again elsewhere."""
    if index not in REPLAYABLE:
        return False
    if index == QUEUE_DECLARE:
        declare = codec.decode_method(index, payload)
        assert isinstance(declare, spec.Queue.Declare)
        return bool(declare.queue) and not declare.exclusive
    return True
