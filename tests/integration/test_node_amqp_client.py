"""@cloudamqp/amqp-client (node) against amqpd: it parses Channel.OpenOk by its fixed size,
so pamqp's default reserved field ("0" instead of RabbitMQ's empty longstr) desynchronised
it and every later call timed out (issue 21, item 1). scripts/test-all installs the client
with ``npm ci`` in tests/integration/node."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from amqpd.shell.server import Server

SCRIPT = Path(__file__).parent / "node" / "amqp_client_check.mjs"


def test_amqp_client_opens_channels_declares_publishes_gets_and_consumes(server: Server) -> None:
    result = subprocess.run(
        ["node", str(SCRIPT), f"amqp://guest:guest@127.0.0.1:{server.port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {
        "queue": "node-café",
        "body": "hello from node",
        "channels": [1, 2],
        "consumed": "to the consumer",
    }
