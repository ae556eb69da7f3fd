"""JMS message selectors (client-side evaluation for topic subscribers)."""

from __future__ import annotations

from typing import Any

import pytest

from interop.jms import InvalidSelectorException, TextMessage
from interop.jms.selector import compile_selector

PROPS: dict[str, Any] = {"color": "red", "weight": 3, "price": 2.5, "flag": True, "code": "a_b%"}


def matches(selector: str, props: dict[str, Any] = PROPS) -> bool:
    return compile_selector(selector)(props.get)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("color = 'red' AND weight > 2", True),
        ("color <> 'red'", False),
        ("weight >= 3 AND weight <= 3", True),
        ("price > 2.25 AND price < 2.75", True),
        ("weight * 2 + 1 = 7", True),
        ("weight / 2 = 1", True),  # integer division, as in Java
        ("-weight < 0", True),
        ("weight BETWEEN 1 AND 3", True),
        ("weight NOT BETWEEN 1 AND 3", False),
        ("color IN ('red', 'blue')", True),
        ("color NOT IN ('red', 'blue')", False),
        ("color LIKE 'r%'", True),
        ("color LIKE '_e_'", True),
        ("color NOT LIKE 'b%'", True),
        ("code LIKE 'a!_b!%' ESCAPE '!'", True),
        ("flag = TRUE", True),
        ("flag", True),
        ("weight > 0x2", True),
        ("weight = 3L", True),
        ("1.5e1 > weight", True),
        ("(weight > 2 OR missing = 1) AND color IS NOT NULL", True),
        ("missing IS NULL", True),
        ("and_or_not = 1", False),
        ("Color = 'red'", False),  # identifiers are case-sensitive
        ("COLOR = 'red' or weight = 3", True),  # keywords are not
        ("", True),
    ],
)
def test_selectors(selector: str, expected: bool) -> None:
    assert matches(selector) is expected


@pytest.mark.parametrize(
    "selector",
    [
        "missing > 1",  # NULL comparison: unknown, not selected
        "NOT missing > 1",  # NOT unknown is unknown
        "missing = 1 AND weight = 3",
        "missing IN ('a')",
        "missing LIKE 'a%'",
        "weight = '3'",  # comparing a number with a string is false
        "color > 'a'",  # strings compare for equality only
        "flag > FALSE",
        "weight / 0 = 1",
    ],
)
def test_null_and_type_rules(selector: str) -> None:
    assert matches(selector) is False


def test_three_valued_logic() -> None:
    assert matches("missing = 1 OR weight = 3") is True
    assert matches("NOT (missing = 1)") is False
    assert matches("NOT (weight = 1)") is True


def test_selects_on_jms_headers() -> None:
    message = TextMessage("x", properties={"region": "eu"}, type="order")
    message.priority = 7
    message.message_id = "ID:1"
    message.timestamp = 1.5
    predicate = compile_selector(
        "JMSPriority > 4 AND JMSType = 'order' AND JMSDeliveryMode = 'PERSISTENT' "
        "AND JMSMessageID = 'ID:1' AND JMSTimestamp = 1500 AND JMSXDeliveryCount = 1 "
        "AND region = 'eu'"
    )
    assert predicate(message.get_property) is True


@pytest.mark.parametrize(
    "selector",
    ["color =", "color = 'x", "a NOT b", "IN", "a IN (1)", "a = 1 b", "a LIKE 'x' ESCAPE 'ab'"],
)
def test_invalid_selectors(selector: str) -> None:
    with pytest.raises(InvalidSelectorException, match="selector"):
        compile_selector(selector)
