"""Links kept open between the tasks of one Python worker, closed when idle.

Spark's Kafka sink takes its producer from an executor-wide cache and closes producers idle
for ``spark.kafka.producer.cache.timeout``. The Python equivalent of an executor-wide object is
a module-level one in the Python worker process, which Spark reuses for many tasks
(``spark.python.worker.reuse``, on by default), one task at a time. So a task that ends with
every message confirmed checks its link in here, and the next task with the same settings
checks it out instead of opening a connection (one AMQP handshake, channel open and
``confirm.select`` saved per task; 200 partitions on 2 workers need 2 connections, not 200).

A daemon thread closes links idle longer than their idle timeout, and ``atexit`` closes the
rest. A link is either in the pool or in one task, never both, and only its holder runs its
I/O loop, so two threads never drive one pika connection.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable

from interop.spark.link import Link, LinkSettings

__all__ = ["LinkPool", "shared_pool"]

log = logging.getLogger(__name__)
# Idle links kept per settings; a worker runs one task at a time, so one is the usual count.
MAX_IDLE_PER_KEY = 2


class LinkPool:
    """Idle links by their settings.

    Args:
        clock: Monotonic clock.
        reaper: Start the background thread that closes idle links (tests call
            ``close_idle`` themselves).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, reaper: bool = True) -> None:
        self._clock = clock
        self._idle: dict[LinkSettings, list[tuple[Link, float]]] = {}
        self._lock = threading.Lock()
        self._reaper_enabled = reaper
        self._reaper: threading.Thread | None = None
        self._wake = threading.Event()

    def checkout(self, settings: LinkSettings) -> Link | None:
        """An idle, still open link opened with ``settings``, or None."""
        dead: list[Link] = []
        found: Link | None = None
        with self._lock:
            links = self._idle.get(settings, [])
            while links:
                link, _timeout = links.pop()
                if link.alive:
                    found = link
                    break
                dead.append(link)
        for link in dead:
            link.abort()
        return found

    def checkin(self, link: Link, idle_timeout: float) -> None:
        """Keep ``link`` for up to ``idle_timeout`` seconds of idleness (0: close it now)."""
        if idle_timeout <= 0 or not link.alive:
            link.close()
            return
        link.listener = None
        link.last_used = self._clock()
        surplus: list[Link] = []
        with self._lock:
            links = self._idle.setdefault(link.settings, [])
            links.append((link, idle_timeout))
            while len(links) > MAX_IDLE_PER_KEY:
                surplus.append(links.pop(0)[0])
            self._start_reaper()
        for extra in surplus:
            extra.close()

    def close_idle(self) -> int:
        """Close the links idle longer than their timeout; return how many."""
        now = self._clock()
        expired: list[Link] = []
        with self._lock:
            for key, links in list(self._idle.items()):
                keep = [(ln, t) for ln, t in links if now - ln.last_used < t]
                expired.extend(ln for ln, t in links if now - ln.last_used >= t)
                if keep:
                    self._idle[key] = keep
                else:
                    del self._idle[key]
        for link in expired:
            _quietly(link.close)
        return len(expired)

    def close_all(self) -> None:
        """Close every idle link (at interpreter exit)."""
        with self._lock:
            links = [ln for entries in self._idle.values() for ln, _ in entries]
            self._idle.clear()
        for link in links:
            _quietly(link.close)

    def _start_reaper(self) -> None:
        if not self._reaper_enabled or self._reaper is not None:
            return
        self._reaper = threading.Thread(target=self._reap, name="amqp-sink-reaper", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        while not self._wake.wait(1.0):
            self.close_idle()


def _quietly(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:  # a link that cannot close cleanly is dropped all the same
        log.debug("amqp sink: closing an idle link failed", exc_info=True)


_SHARED: LinkPool | None = None
_SHARED_LOCK = threading.Lock()


def shared_pool() -> LinkPool:
    """The pool of this Python worker process (created on first use)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = LinkPool()
            atexit.register(_SHARED.close_all)
        return _SHARED
