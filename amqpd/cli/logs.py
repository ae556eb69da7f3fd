"""Logs people can trust: one line per event, every value escaped and capped.

Two formats: ``text`` (``ts=… level=… logger=… msg="…"``, easy to grep) and ``json`` (one
object per line: ts, level, logger, msg). Whatever a client sends that ends up in a log
line - a user name, a queue name, a client-provided connection name - is an argument of a
%-style call; each argument is capped at `ARG_LIMIT` characters before it is formatted and
the finished message is escaped (control characters, newlines, quotes, backslashes), so a
name containing a newline cannot forge a second log line and a 5,000-character name costs
one short line. The JSON format escapes through the JSON encoder.

Logs go to standard error, or to ``--log-file``. A log file is reopened on SIGHUP (the
shell calls `reopen`), which is what ``logrotate``'s default ``create`` mode needs. Library
loggers are kept at warning (aiosqlite, asyncio; aiormq, the shovels' client, at critical:
amqpd/shell/links/ logs each failure once) so that ``--log-level debug`` shows amqpd's own
events.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Final

ARG_LIMIT: Final = 256  # characters of one logged value
MESSAGE_LIMIT: Final = 4096  # characters of one message
QUIET_LIBRARIES: Final = ("aiosqlite", "asyncio", "uvicorn.access")
_ESCAPES: Final = {i: f"\\x{i:02x}" for i in [*range(32), 127]} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}


def cap(value: Any, limit: int = ARG_LIMIT) -> Any:
    """A string (or bytes) argument cut to ``limit`` characters, saying how much was cut;
    other values unchanged."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}...({len(value) - limit} more characters)"
    return value


def escape(text: str) -> str:
    """Control characters, newlines, quotes and backslashes as escapes: one line, always."""
    return text.translate(_ESCAPES)


def message_of(record: logging.LogRecord) -> str:
    """The record's message with each argument capped (the message capped too)."""
    args = record.args
    if isinstance(args, tuple):
        record.args = tuple(cap(arg) if not isinstance(arg, int | float) else arg for arg in args)
    elif isinstance(args, dict):
        record.args = {key: cap(value) for key, value in args.items()}
    try:
        message = record.getMessage()
    finally:
        record.args = args
    return cap(message, MESSAGE_LIMIT)  # type: ignore[no-any-return]


def _stamp(record: logging.LogRecord) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{stamp}.{int(record.msecs):03d}Z"


class KeyValueFormatter(logging.Formatter):
    """``ts=… level=… logger=… msg="…"`` lines, easy to grep and to parse."""

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"ts={_stamp(record)} level={record.levelname.lower()} "
            f'logger={record.name} msg="{escape(message_of(record))}"'
        )
        if record.exc_info:
            line += ' exc="' + escape(self.formatException(record.exc_info)) + '"'
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg (and exc)."""

    def format(self, record: logging.LogRecord) -> str:
        item = {
            "ts": _stamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": message_of(record),
        }
        if record.exc_info:
            item["exc"] = self.formatException(record.exc_info)
        return json.dumps(item, ensure_ascii=False)


class ReopeningFileHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Appends to a file; `reopen` closes and opens it again (after logrotate moved it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(self._open())

    def _open(self) -> Any:
        return self.path.open("a", encoding="utf-8", errors="backslashreplace")

    def close(self) -> None:
        self.acquire()
        try:
            self.stream.close()
        finally:
            self.release()
        super().close()

    def reopen(self) -> None:
        self.acquire()
        try:
            old = self.stream
            self.stream = self._open()
            old.close()
        finally:
            self.release()


def configure_logging(level: str, log_format: str = "text", log_file: Path | None = None) -> None:
    """Send logs to stderr (or ``log_file``) at ``level`` (debug/info/warning/error/
    critical/none) in ``log_format`` (text or json).

    Raises:
        OSError: the log file cannot be opened.
    """
    handler: logging.Handler = (
        ReopeningFileHandler(log_file)
        if log_file is not None
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(JSONFormatter() if log_format == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.CRITICAL + 1 if level == "none" else level.upper())
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    # The shovels' AMQP client logs a lost link as an error; the link logs it once itself.
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)


def reopen_logs() -> bool:
    """Reopen the log file (SIGHUP); False if logs do not go to a file."""
    reopened = False
    for handler in logging.getLogger().handlers:
        if isinstance(handler, ReopeningFileHandler):
            handler.reopen()
            reopened = True
    return reopened
