"""What SIGHUP does: RabbitMQ ignores it; amqpd reopens its log file (for logrotate).

`Hangups` reopens the log file and says so each time; without a log file it says once that
the signal is ignored, then stays silent. In a node of several workers the supervisor says
it for the node and passes the signal on: each worker reopens its own file quietly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class Hangups:
    """Handles SIGHUP. ``reopen``: reopens the log file, True if logs go to one (None: they
    do not); ``quiet``: log nothing (a worker, whose supervisor logs)."""

    def __init__(self, reopen: Callable[[], bool] | None, quiet: bool = False) -> None:
        self.reopen = reopen
        self.quiet = quiet
        self.count = 0

    def __call__(self) -> None:
        reopened = self.reopen is not None and self.reopen()
        if not self.quiet:
            if reopened:
                log.info("received SIGHUP; reopened the log file")
            elif self.count == 0:
                log.info("received SIGHUP; ignored (and from now on silently)")
        self.count += 1
