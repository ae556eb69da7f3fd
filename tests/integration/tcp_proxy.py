"""A TCP proxy on 127.0.0.1 whose connections a test can cut (reset) or freeze (a silent
network partition)."""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttableProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target``; `cut` resets every proxied
    connection at once (both peers see the link die); new connections are accepted again
    afterwards. Stop it with `close`."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._frozen: set[socket.socket] = set()  # connections whose bytes are dropped
        self.accepted = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if src in self._frozen:
                    continue  # a partition: the bytes vanish, nobody is told
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_RDWR)

    def freeze(self) -> None:
        """Black-hole every current connection (a network partition: no FIN, no RST);
        only heartbeats can tell the peers. New connections work normally."""
        with self._lock:
            self._frozen.update(self._sockets)

    def cut(self) -> None:
        """Reset every connection through the proxy, idle ones too. ``close`` alone would
        not: the pipe threads blocked in ``recv`` keep each socket open until a byte
        arrives, so a link with nothing in flight (a shovel waiting for confirms) stayed up
        until a heartbeat. ``shutdown`` wakes them and tells the peer at once; the close
        with a zero linger then resets."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        """Stop accepting and cut everything."""
        with self._lock:
            self._closed = True
        self._listener.close()
        self.cut()
