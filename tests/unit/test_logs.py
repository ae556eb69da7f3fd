"""Log lines: escaped, capped, one per event, in text or JSON."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from amqpd.cli.logs import (
    ARG_LIMIT,
    JSONFormatter,
    KeyValueFormatter,
    ReopeningFileHandler,
    configure_logging,
    reopen_logs,
)


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("amqpd.test", logging.INFO, __file__, 1, msg, args, None)


def test_a_newline_in_a_value_cannot_forge_a_line() -> None:
    forged = 'bob\nts=2026-01-01T00:00:00.000Z level=info logger=amqpd msg="admin logged in"'
    line = KeyValueFormatter().format(_record("user '%s' authenticated", forged))
    assert "\n" not in line
    assert "bob\\nts=" in line
    assert line.count('msg="') == 1
    assert '\\"admin logged in\\"' in line


def test_control_characters_and_backslashes_are_escaped() -> None:
    line = KeyValueFormatter().format(_record("name %s", "a\x1b[31mred\r\x00\\"))
    assert "\x1b" not in line and "\r" not in line and "\x00" not in line
    assert "a\\x1b[31mred\\r\\x00\\\\" in line


def test_long_values_are_capped() -> None:
    line = KeyValueFormatter().format(_record("user '%s' refused", "u" * 5000))
    assert len(line) < ARG_LIMIT + 200
    assert "...(4744 more characters)" in line


def test_numbers_keep_their_format() -> None:
    line = KeyValueFormatter().format(_record("port %d, ratio %.2f", 5672, 0.5))
    assert "port 5672, ratio 0.50" in line


def test_json_lines() -> None:
    text = JSONFormatter().format(_record("user '%s'", "a\nb" + "x" * 1000))
    assert "\n" not in text
    item = json.loads(text)
    assert item["level"] == "info" and item["logger"] == "amqpd.test"
    assert item["msg"].startswith("user 'a\nb")
    assert "more characters" in item["msg"]


def test_log_file_reopens(tmp_path: Path) -> None:
    path = tmp_path / "amqpd.log"
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    try:
        configure_logging("info", "text", path)
        logging.getLogger("amqpd.test").info("first")
        path.rename(tmp_path / "amqpd.log.1")
        assert reopen_logs()
        logging.getLogger("amqpd.test").info("second")
        for handler in root.handlers:
            handler.flush()
        assert "second" in path.read_text()
        assert "second" not in (tmp_path / "amqpd.log.1").read_text()
        assert isinstance(root.handlers[0], ReopeningFileHandler)
        root.handlers[0].close()
        configure_logging("debug")
        assert logging.getLogger("aiosqlite").getEffectiveLevel() == logging.WARNING
        assert not reopen_logs()
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
