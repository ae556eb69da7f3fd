"""The broker's selector evaluator (amqpd/model/selector.py) is a copy of the client's
(interop/jms/selector.py), because neither package may import the other. This keeps the
two from drifting: the same verdicts on the same selectors, and the same source apart from
the module docstring and the exception class."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from amqpd.model import selector as broker_selector
from interop.jms import selector as client_selector
from interop.jms.errors import InvalidSelectorException

ROOT = Path(__file__).resolve().parents[2]
PROPS: dict[str, Any] = {"color": "red", "weight": 3, "price": 2.5, "flag": True, "code": "a_b%"}
SELECTORS = [
    "color = 'red' AND weight > 2",
    "weight * 2 + 1 = 7",
    "weight / 2 = 1",
    "weight NOT BETWEEN 1 AND 3",
    "color IN ('red', 'blue')",
    "code LIKE 'a!_b!%' ESCAPE '!'",
    "missing IS NULL",
    "NOT missing > 1",
    "missing = 1 OR weight = 3",
    "weight = '3'",
    "price > 2.25 AND price < 2.75",
    "1.5e1 > weight",
    "weight > 0x2",
    "flag",
    "",
]
INVALID = ["color =", "color = 'x", "a NOT b", "a IN (1)", "a LIKE 'x' ESCAPE 'ab'"]


@pytest.mark.parametrize("text", SELECTORS)
def test_same_verdicts(text: str) -> None:
    client = client_selector.compile_selector(text)(PROPS.get)
    broker = broker_selector.compile_selector(text)(PROPS.get)
    assert client is broker


@pytest.mark.parametrize("text", INVALID)
def test_both_refuse(text: str) -> None:
    with pytest.raises(InvalidSelectorException):
        client_selector.compile_selector(text)
    with pytest.raises(broker_selector.SelectorError):
        broker_selector.compile_selector(text)


def _body(path: Path) -> str:
    """The source after the module docstring, with the exception name made neutral."""
    source = path.read_text()
    source = source.split('"""', 2)[2]
    source = re.sub(
        r"\nclass SelectorError\(ValueError\):\n    \"\"\"[^\"]*\"\"\"\n\n", "\n", source
    )
    source = source.replace("from interop.jms.errors import InvalidSelectorException\n", "")
    source = source.replace('"SelectorError", ', "")
    source = source.replace("InvalidSelectorException", "E").replace("SelectorError", "E")
    return re.sub(r"\n\s*\n+", "\n", source)


def test_same_source_apart_from_the_error_class() -> None:
    client = _body(ROOT / "interop" / "jms" / "selector.py")
    broker = _body(ROOT / "amqpd" / "model" / "selector.py")
    assert client == broker
