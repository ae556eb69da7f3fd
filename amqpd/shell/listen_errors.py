"""A listener that cannot be opened names itself: which option set the port, and the port
(``cannot listen for the management API on 127.0.0.1:15672 (--management-port): Address
already in use``), rather than the AMQP port whatever failed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class ListenError(OSError):
    """Binding one listener failed; ``str()`` is the one line the CLI prints."""

    def __init__(self, what: str, option: str, host: str, port: int, error: OSError) -> None:
        super().__init__(error.errno, error.strerror or str(error))
        self.what, self.option, self.host, self.port = what, option, host, port

    def __str__(self) -> str:
        return (
            f"cannot listen for {self.what} on {self.host}:{self.port} ({self.option}): "
            f"{self.strerror}; is another broker running? Choose another port with {self.option}"
        )


@contextmanager
def naming(what: str, option: str, host: str, port: int) -> Iterator[None]:
    """Turn an `OSError` raised while binding into a `ListenError` naming the listener."""
    try:
        yield
    except ListenError:
        raise
    except OSError as exc:
        raise ListenError(what, option, host, port, exc) from exc
