"""The runnable examples of docs/jms.md, run as written against each available broker.

Every ```python block of the guide that starts with ``# example: <name>`` is executed with
the guide's URL (``amqp://guest:guest@localhost:5672/%2F``) pointed at the test broker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.test_jms_brokers import BrokerHandle, broker, broker_kind

__all__ = ["broker", "broker_kind"]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "jms.md"
GUIDE_URL = "amqp://guest:guest@localhost:5672/%2F"
_BLOCK = re.compile(r"```python\n# example: (?P<name>[^\n]+)\n(?P<code>.*?)```", re.DOTALL)
EXAMPLES = {match["name"]: match["code"] for match in _BLOCK.finditer(GUIDE.read_text())}


def test_the_guide_has_examples() -> None:
    assert len(EXAMPLES) >= 5
    for code in EXAMPLES.values():
        assert GUIDE_URL in code


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_guide_example_runs(
    broker: BrokerHandle, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if broker.kind == "rabbitmq":  # the shared node: start from an empty ActiveMQ.DLQ
        channel_owner = broker.pika()
        try:
            channel_owner.channel().queue_declare("ActiveMQ.DLQ", durable=True)
        finally:
            channel_owner.close()
        broker.drain("ActiveMQ.DLQ")
    code = EXAMPLES[name].replace(GUIDE_URL, broker.url)
    exec(compile(code, f"docs/jms.md:{name}", "exec"), {"__name__": f"guide_{name}"})
    printed = capsys.readouterr().out
    expected = {
        "quick start": "order 1 {'region': 'eu'} 1",
        "listener, redelivery, ActiveMQ.DLQ": "[1, 2, 3, 4, 5, 6, 7] bad input rejected",
        "durable subscriber with a selector": "large",
        "request and reply over a temporary queue": "PING",
        "transacted session": "done: job",
        "asynchronous send": "stored order 7",
        "failover": "survives a broker restart",
        "queue browser": "['job 1', 'job 2']",
    }
    if name in expected:
        assert printed.strip() == expected[name]
