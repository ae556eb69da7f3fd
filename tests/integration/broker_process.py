"""amqpd as a subprocess on 127.0.0.1 (port 0) for tests that kill, stop or restart it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


class BrokerProcess:
    """``python -m amqpd --port 0 --data-dir DIR``; ``port`` and ``url`` are set once it
    listens. Its stderr is drained in the background so it never blocks on a full pipe."""

    def __init__(self, data_dir: Path, port: int = 0, extra: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *("-m", "amqpd", "--port", str(port), "--data-dir", str(data_dir)),
                *extra,
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            match = LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                break
        else:
            raise AssertionError(f"amqpd exited with {self.proc.wait()} before listening")
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self._drain = threading.Thread(target=self.proc.stderr.read, daemon=True)
        self._drain.start()

    def kill(self) -> None:
        """SIGKILL (a crash)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._close_pipe()

    def stop(self) -> None:
        """A clean stop (SIGCONT first, in case a test paused it); asserts exit status 0."""
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0
        self._close_pipe()

    def _close_pipe(self) -> None:
        self._drain.join(timeout=10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
