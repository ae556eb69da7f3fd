"""What the engine reports to the I/O shell after each piece of input (sans-IO, h11-style).

The engine never calls the shell back. Instead, while it processes a chunk, a tick or a
storage batch, every `Connection` whose output buffer goes from empty to non-empty (or that
must be closed) notes itself in ``output``, and a connection that may be read again after a
resource alarm notes itself in ``resume``. After handing the core its input, the shell takes
both (`take_output`, `take_resume`) and, once per connection, flushes / resumes it: one
write per connection per chunk, however many frames the chunk produced for it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

ConnT = TypeVar("ConnT")  # the engine's Connection


class Outbox(Generic[ConnT]):
    """The connections the shell must service; shared by every connection of a server."""

    __slots__ = ("output", "resume")

    def __init__(self) -> None:
        self.output: dict[ConnT, None] = {}  # output waiting, or should_close
        self.resume: dict[ConnT, None] = {}  # paused reader may read again

    def take_output(self) -> list[ConnT]:
        """The connections with output to flush (or to close) since the last call."""
        if not self.output:
            return []
        touched = list(self.output)
        self.output.clear()
        return touched

    def take_resume(self) -> list[ConnT]:
        """The connections whose reading may resume since the last call."""
        if not self.resume:
            return []
        resumed = list(self.resume)
        self.resume.clear()
        return resumed
