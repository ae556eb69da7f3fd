"""A spare TCP port on 127.0.0.1 for a server a test starts later.

It is chosen below the kernel's ephemeral range (net.ipv4.ip_local_port_range starts at
32768 by default), so nothing that binds port 0 meanwhile (a JVM's driver or block manager,
another test's client connection, a client retrying against this very port and meeting
itself) can take it between this check and the server's bind.
"""

from __future__ import annotations

import random
import socket

PORT_LOW, PORT_HIGH = 20000, 32000


def spare_port() -> int:
    for _ in range(200):
        port = random.randrange(PORT_LOW, PORT_HIGH)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # every pick taken: any free port will do
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
