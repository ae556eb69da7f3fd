"""Publisher confirms: which publishes to ack or nack, and in how few frames.

Pure logic with no I/O. The channel keeps one :class:`ConfirmTracker` per channel in
confirm mode and sends the :class:`ConfirmFrame` objects that
:meth:`ConfirmTracker.take_frames` returns.
"""

from __future__ import annotations

from confirms.coalesce import ConfirmFrame, coalesce
from confirms.tracker import ConfirmTracker

__all__ = ["ConfirmFrame", "ConfirmTracker", "coalesce"]
