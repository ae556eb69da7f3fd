"""Settings of the ``amqpd`` command: one table, four sources, checked before anything starts.

Theory of operation
-------------------
Every setting is one `Setting` row (amqpd/cli/options.py holds the table): its option
name, the ``AMQPD_*`` variable, the ``rabbitmq.conf`` / amqpd config-file keys, a *kind*
that turns text into a value or says what is allowed, a default and a help line. The
table builds the argparse options (all with ``default=None``, so "given on the command
line" can be told apart) and `resolve` then picks each value by precedence:

    command-line flag  >  AMQPD_* environment variable  >  --config file  >  default

Every value, from whichever source, goes through its kind, so ``--port 99999``,
``AMQPD_PORT=abc`` and ``listeners.tcp.default = abc`` in a file are refused alike, with one
line naming the source, the value and what is allowed (`SettingError`; the CLI prints it
and exits with status 2). Nothing here starts anything.

The config file is RabbitMQ's ``rabbitmq.conf`` format (sysctl-style ``key = value`` lines,
``#`` comments). Keys both brokers share keep RabbitMQ's names; the others are amqpd's own
(``amqpd.<setting>``). Keys RabbitMQ knows that mean nothing to amqpd (clustering, plugins)
are reported once as ignored; a key neither knows is an error, as in RabbitMQ.

To add a setting: one `Setting` row in amqpd/cli/options.py (and a line in
docs/configuration.md). An option added to the parser by hand still works as before; a
config-file key can point at it through `CONF_KEYS` (its argparse ``type`` converts the
value).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV_PREFIX = "AMQPD_"


class SettingError(ValueError):
    """A setting whose value is refused; ``str()`` is the one line the CLI prints."""


class Invalid(ValueError):
    """Raised by a kind: the text says what is allowed."""


Kind = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting of the broker (a row of the table in amqpd/cli/options.py)."""

    dest: str  # attribute of the parsed namespace, e.g. "port"
    kind: Kind  # text -> value; raises Invalid("what is allowed")
    default: str | None  # as text (parsed by ``kind`` too); None: not set
    help: str
    conf: tuple[str, ...] = ()  # config-file keys (rabbitmq.conf names first)
    group: str = "broker"
    boolean: bool = False  # a --flag / --no-flag option instead of --flag VALUE
    negatable: bool = True  # a boolean also gets --no-flag (not for --no-management)
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()


# -- kinds ---------------------------------------------------------------------------------


def integer(minimum: int, maximum: int, note: str = "", infinity: int | None = None) -> Kind:
    """A whole number in ``[minimum, maximum]`` (``infinity``: what "infinity" means)."""
    allowed = f"an integer from {minimum} to {maximum}{note}"
    if infinity is not None:
        allowed += ' or "infinity"'

    def parse(text: str) -> int:
        text = text.strip()
        if infinity is not None and text.lower() == "infinity":
            return infinity
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise Invalid(f"must be {allowed}")
        value = int(text)
        if not minimum <= value <= maximum:
            raise Invalid(f"must be {allowed}")
        return value

    return parse


def port(zero_note: str = " (0 picks a free one)") -> Kind:
    """A TCP port."""
    return integer(0, 65535, zero_note)


def choice(*values: str) -> Kind:
    """One of ``values`` (case does not matter; the value is returned in lower case)."""

    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in values:
            raise Invalid("must be one of " + ", ".join(values))
        return value

    return parse


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def boolean(text: str) -> bool:
    """A strict boolean: true/false, yes/no, on/off, 1/0; anything else is refused."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise Invalid("must be true or false (also yes/no, on/off, 1/0)")


def host(text: str) -> str:
    """An IP address or a host name to listen on."""
    value = text.strip()
    if not value:
        raise Invalid("must be an IP address or a host name")
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", value):
            raise Invalid("must be an IP address or a host name") from None
    return value


def readable_file(text: str) -> Path:
    """A file that exists and can be read."""
    path = Path(text)
    if not path.is_file():
        raise Invalid("no such file" if not path.exists() else "is not a regular file")
    if not os.access(path, os.R_OK):
        raise Invalid("cannot be read by this user")
    return path


def writable_file(text: str) -> Path:
    """A file that can be created or appended to."""
    path = Path(text)
    if path.exists():
        if not path.is_file():
            raise Invalid("is not a regular file")
        if not os.access(path, os.W_OK):
            raise Invalid("cannot be written by this user")
        return path
    parent = path.parent
    if not parent.is_dir():
        raise Invalid(f"its directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise Invalid(f"cannot be created: directory {parent} is not writable by this user")
    return path


def directory(text: str) -> Path:
    """A directory (checked for use as the data directory by `check_data_dir`)."""
    if not text.strip():
        raise Invalid("must be a directory path")
    return Path(text)


def user_list(text: str) -> tuple[str, ...]:
    """Comma-separated user names ("none" or empty: nobody)."""
    if text.strip().lower() == "none":
        return ()
    return tuple(user.strip() for user in text.split(",") if user.strip())


# -- resolution ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, table: Iterable[Setting]) -> None:
    """Add one option per setting (grouped; defaults and variables in the help)."""
    groups: dict[str, Any] = {}
    for setting in table:
        group = groups.get(setting.group)
        if group is None:
            group = groups[setting.group] = (
                parser if setting.group == "broker" else parser.add_argument_group(setting.group)
            )
        shown = "" if setting.default is None else f", default {setting.default or '(empty)'}"
        help_text = f"{setting.help} [{setting.env}{shown}]"
        if setting.boolean and setting.negatable:
            group.add_argument(
                setting.flag,
                dest=setting.dest,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        elif setting.boolean:
            group.add_argument(
                setting.flag, dest=setting.dest, action="store_const", const=True, help=help_text
            )
        else:
            group.add_argument(
                setting.flag,
                dest=setting.dest,
                default=None,
                metavar=setting.metavar or setting.dest.upper(),
                help=help_text,
            )


@dataclass(frozen=True, slots=True)
class ConfEntry:
    """One ``key = value`` line of a config file."""

    key: str
    value: str
    where: str  # "FILE line N"


def resolve(
    args: argparse.Namespace,
    table: Sequence[Setting],
    conf: Mapping[str, ConfEntry],
    environ: Mapping[str, str] | None = None,
) -> None:
    """Replace each table setting in ``args`` with its checked value (flag > env > conf >
    default).

    Raises:
        SettingError: the first value refused, naming its source.
    """
    env = os.environ if environ is None else environ
    for setting in table:
        given = getattr(args, setting.dest, None)
        if given is not None:
            if setting.boolean:
                continue  # --flag / --no-flag: already a bool
            label, raw = f"{setting.flag} {given}", str(given)
        elif setting.env in env:
            raw = env[setting.env]
            label = f"{setting.env}={raw}"
        elif setting.dest in conf:
            entry = conf[setting.dest]
            raw = entry.value
            label = f"{entry.key} = {raw} ({entry.where})"
        elif setting.default is not None:
            raw, label = setting.default, f"default {setting.flag} {setting.default}"
        else:
            setattr(args, setting.dest, None)
            continue
        try:
            value = setting.kind(raw)
        except Invalid as exc:
            raise SettingError(f"invalid setting {_cap(label)}: {exc}") from None
        setattr(args, setting.dest, value)


def _cap(text: str, limit: int = 300) -> str:
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    text = re.sub(r"(//[^/@:\s]*:)[^@/\s]*@", r"\1***@", text)  # a URL's password
    return text if len(text) <= limit else text[:limit] + "..."


def apply_plain_option(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    dest: str,
    entry: ConfEntry,
) -> bool:
    """Set an option added to the parser by hand (not in the table) from a config-file
    entry, if the command line did not give it. Returns False if there is no such option.

    Raises:
        SettingError: the option's argparse ``type`` refused the value.
    """
    for action in parser._actions:  # argparse has no public accessor for this
        if action.dest != dest:
            continue
        if getattr(args, dest, None) != action.default:
            return True  # the command line (or its variable default) wins
        convert = action.type if callable(action.type) else str
        try:
            value = convert(entry.value)
        except (TypeError, ValueError) as exc:
            raise SettingError(
                f"invalid setting {_cap(f'{entry.key} = {entry.value} ({entry.where})')}: {exc}"
            ) from None
        if action.choices is not None and value not in action.choices:
            allowed = ", ".join(str(c) for c in action.choices)
            raise SettingError(
                f"invalid setting {_cap(f'{entry.key} = {entry.value} ({entry.where})')}: "
                f"must be one of {allowed}"
            )
        setattr(args, dest, value)
        return True
    return False


def check_data_dir(data_dir: Path, store_files: Sequence[str]) -> None:
    """Refuse a data directory the broker could open but not write, before it starts: the
    directory must be creatable or writable, and each store file that exists must belong
    to this user and be readable and writable (a store owned by another user would open,
    then fail every persistent publish).

    Raises:
        SettingError: naming the path, what is wrong and what to do.
    """
    label = f"invalid setting --data-dir {_cap(str(data_dir))}"
    if data_dir.exists() and not data_dir.is_dir():
        raise SettingError(f"{label}: is not a directory (it is a file)")
    for parent in data_dir.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SettingError(f"{label}: {parent} is not a directory (it is a file)")
            break
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingError(f"{label}: cannot create it: {exc.strerror or exc}") from None
    if not data_dir.is_dir():
        raise SettingError(f"{label}: is not a directory")
    if not os.access(data_dir, os.R_OK | os.W_OK | os.X_OK):
        raise SettingError(f"{label}: must be a directory this user can write")
    uid = os.geteuid()
    for name in store_files:
        path = data_dir / name
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise SettingError(f"{label}: cannot read {path}: {exc.strerror or exc}") from None
        if info.st_uid != uid:
            raise SettingError(
                f"{label}: store file {path} belongs to uid {info.st_uid}, not to the user "
                f"running amqpd (uid {uid}); run amqpd as its owner or chown the directory"
            )
        if info.st_mode & 0o600 != 0o600:
            raise SettingError(
                f"{label}: store file {path} is not readable and writable by its owner (chmod u+rw)"
            )
        try:  # what the mode does not show: immutable, read-only mount, not a file
            os.close(os.open(path, os.O_RDWR))
        except OSError as exc:
            raise SettingError(
                f"{label}: store file {path} cannot be written ({exc.strerror or exc}); "
                "amqpd would refuse every persistent message"
            ) from None
