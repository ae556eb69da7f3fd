"""``--config FILE``: RabbitMQ's ``rabbitmq.conf`` format, read into setting entries.

The format is sysctl-like: one ``key = value`` per line, ``#`` starts a comment, blank
lines are skipped, the last of a repeated key wins (as in RabbitMQ). Keys are the
``rabbitmq.conf`` names for settings both brokers share (``listeners.tcp.default``,
``heartbeat``, ``ssl_options.certfile`` ...) and ``amqpd.<setting>`` for amqpd's own; each
is documented in docs/configuration.md. A key RabbitMQ knows that means nothing here
(clustering, plugins) is noted once and ignored; any other unknown key is an error, like
RabbitMQ's refusal to start with an unknown key. Values are checked later, by the
settings table (amqpd/cli/settings.py), like flags and variables.
"""

from __future__ import annotations

import difflib
import logging
import re
from pathlib import Path

from amqpd.cli.options import CONVERTED_KEYS, IGNORED_PREFIXES, PLAIN_KEYS, SETTINGS
from amqpd.cli.settings import ConfEntry, Invalid, SettingError, boolean

log = logging.getLogger(__name__)

_LINE = re.compile(r"\s*([A-Za-z0-9_.$-]+)\s*=\s*(.*?)\s*")
_KEYS: dict[str, str] = {key: s.dest for s in SETTINGS for key in s.conf}


# Keys that would change what the operator gets in a way amqpd cannot honour: refused,
# never ignored (a listener the operator believes encrypted must not silently be plain).
_REFUSED_PREFIXES = ("management.ssl.", "prometheus.ssl.")
_OTHER_KEYS = ("listeners.tcp.default", "ssl_options.verify", "loopback_users.guest")


def _did_you_mean(key: str) -> str:
    """``; did you mean X?`` for the closest known key, or where the keys are listed."""
    known = [*_KEYS, *CONVERTED_KEYS, *PLAIN_KEYS, *_OTHER_KEYS]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if close:
        return f"; did you mean {close[0]}?"
    return "; the keys amqpd knows are in docs/configuration.md"


class ConfigFile:
    """The entries of one config file: ``settings`` (table dests) and ``plain`` (options
    added by hand, by dest)."""

    def __init__(self) -> None:
        self.settings: dict[str, ConfEntry] = {}
        self.plain: dict[str, ConfEntry] = {}
        self.ignored: list[str] = []
        self._loopback: dict[str, bool] = {}
        self._loopback_where = ""

    def finish(self) -> None:
        """Fold per-user ``loopback_users.NAME = true`` lines into the setting."""
        if self._loopback and "loopback_users" not in self.settings:
            users = ",".join(name for name, on in self._loopback.items() if on) or "none"
            self.settings["loopback_users"] = ConfEntry(
                "loopback_users.*", users, self._loopback_where
            )

    def add(self, key: str, value: str, where: str) -> None:
        """Record one line.

        Raises:
            SettingError: an unknown key or a value that cannot be split (listeners).
        """
        entry = ConfEntry(key, value, where)
        if key in _KEYS:
            if key == "log.file" and value.lower() == "false":
                self.settings.pop("log_file", None)
                return
            self.settings[_KEYS[key]] = entry
        elif key in CONVERTED_KEYS:
            dest, convert = CONVERTED_KEYS[key]
            try:
                converted = convert(value)
            except Invalid as exc:
                raise SettingError(f"invalid setting {key} = {value} ({where}): {exc}") from None
            self.settings[dest] = ConfEntry(key, converted, where)
        elif key in ("listeners.tcp.default", "listeners.tcp.1"):
            self._listener(entry, "host", "port")
        elif key == "ssl_options.verify":
            if value not in ("verify_peer", "verify_none"):
                raise SettingError(
                    f"invalid setting {key} = {value} ({where}): must be verify_peer or verify_none"
                )
            self.settings["tls_verify_peer"] = ConfEntry(
                key, "true" if value == "verify_peer" else "false", where
            )
        elif key.startswith("loopback_users."):
            try:
                self._loopback[key.split(".", 1)[1]] = boolean(value)
            except Invalid as exc:
                raise SettingError(f"invalid setting {key} = {value} ({where}): {exc}") from None
            self._loopback_where = where
        elif key in PLAIN_KEYS:
            self.plain[PLAIN_KEYS[key]] = entry
        elif key.startswith(_REFUSED_PREFIXES):
            raise SettingError(
                f"unsupported setting {key} ({where}): amqpd serves the management API and "
                "Prometheus over plain HTTP only; put a TLS-terminating proxy in front of them"
            )
        elif key.startswith(IGNORED_PREFIXES):
            self.ignored.append(f"{key} ({where})")
        else:
            raise SettingError(f"unknown setting {key} ({where}){_did_you_mean(key)}")

    def _listener(self, entry: ConfEntry, host_dest: str, port_dest: str) -> None:
        value = entry.value
        address, _, port = value.rpartition(":")
        if address:
            self.settings[host_dest] = ConfEntry(entry.key, address.strip("[]"), entry.where)
        self.settings[port_dest] = ConfEntry(entry.key, port, entry.where)


def read_config(path: Path) -> ConfigFile:
    """Parse a config file.

    Raises:
        SettingError: the file cannot be read, a line is not ``key = value`` or a key is
            unknown.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SettingError(f"invalid setting --config {path}: cannot read it: {reason}") from None
    config = ConfigFile()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not stripped:
            continue
        where = f"{path} line {number}"
        match = _LINE.fullmatch(stripped)
        if match is None:
            raise SettingError(f"invalid config file {where}: expected 'key = value'")
        config.add(match.group(1), match.group(2), where)
    config.finish()
    if config.ignored:
        log.warning(
            "config file: ignoring %d RabbitMQ setting(s) that mean nothing to amqpd: %s",
            len(config.ignored),
            ", ".join(config.ignored),
        )
    return config
