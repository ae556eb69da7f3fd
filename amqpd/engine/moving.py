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

from typing import Final, Protocol

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


class Recorded(Protocol):
    """What these functions use of a `Connection` (engine/connection.py)."""

    recording: bytearray | None
    move_to: int | None
    move_at: int
    frame_reader: codec.FrameReader

    def set_should_close(self) -> None: ...


def record(conn: Recorded, data: bytes) -> None:
    """Keep ``data``, received by a connection that may still move (at most MAX_RECORDING
    bytes: past it, it stays where it is)."""
    recording = conn.recording
    assert recording is not None
    if len(recording) + len(data) > MAX_RECORDING:
        conn.recording = None
    else:
        recording += data


def stop_for_move(conn: Recorded, worker: int, payload_size: int) -> None:
    """Stop at the frame being handled (``payload_size`` bytes of payload): the shell hands
    the socket and ``recording`` to ``worker``, which replays everything before that frame
    (its replies thrown away) and goes on from it."""
    recording = conn.recording
    assert recording is not None
    reader = conn.frame_reader
    conn.move_to = worker
    conn.move_at = len(recording) - reader.buffered - payload_size - FRAME_OVERHEAD
    reader.discard()
    conn.set_should_close()


def replayable(index: int, payload: bytes) -> bool:
    """Whether the method ``index`` (its frame ``payload``) may be done again elsewhere."""
    if index not in REPLAYABLE:
        return False
    if index == QUEUE_DECLARE:
        declare = codec.decode_method(index, payload)
        assert isinstance(declare, spec.Queue.Declare)
        return bool(declare.queue) and not declare.exclusive
    return True
