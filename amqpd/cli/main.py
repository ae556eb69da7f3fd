"""Command line: ``amqpd`` starts the broker (``amqpd --help`` lists the options)."""

from __future__ import annotations

import argparse
import difflib
import gc
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import anyio

from amqpd import BUILD, __version__
from amqpd.cli import admin, ctl, worker_count
from amqpd.cli.config_file import read_config
from amqpd.cli.logs import configure_logging, reopen_logs
from amqpd.cli.options import MAX_WORKERS, SETTINGS
from amqpd.cli.security import apply_options
from amqpd.cli.settings import (
    SettingError,
    add_arguments,
    apply_plain_option,
    check_data_dir,
    resolve,
)
from amqpd.model.broker import BrokerConfig
from amqpd.model.definitions import DefinitionsError
from amqpd.shell.listen_errors import ListenError
from amqpd.shell.server import ServerConfig, run
from amqpd.shell.store_role import LockLost
from amqpd.shell.workers import role as worker_role
from amqpd.shell.workers.memory import NodeMemory, write_pid
from amqpd.shell.workers.supervisor import become_supervisor, die_with_supervisor, report_fatal
from persistence.errors import StoreError
from persistence.schema import DB_FILENAME

log = logging.getLogger("amqpd")
E = TypeVar("E", bound=BaseException)
STORE_FILES = (DB_FILENAME, DB_FILENAME + "-wal", DB_FILENAME + "-shm")


SUBCOMMANDS = """\
subcommands (each has its own --help):
  amqpd ctl COMMAND ...        inspect a running broker: list-queues, list-exchanges,
                               list-bindings, list-connections, list-channels,
                               list-consumers, close-connection, status, ping,
                               set-policy, clear-policy, list-policies,
                               set-operator-policy, clear-operator-policy,
                               list-operator-policies
  amqpd users COMMAND ...      users and permissions: add, delete, change-password,
                               set-tags, list, set-permissions, clear-permissions,
                               list-permissions
  amqpd vhosts COMMAND ...     virtual hosts: add, set-max-connections, delete, list
  amqpd definitions COMMAND    RabbitMQ definitions JSON: export, import
  amqpd perf ...               the load generator (workloads W1-W6 against any broker)
"""


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a misspelt option (``--managment-port``)."""

    def error(self, message: str) -> NoReturn:
        words = message.rpartition(":")[2].split() if "unrecognized arguments" in message else []
        known = [flag for action in self._actions for flag in action.option_strings]
        for word in words:
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.75)
            if word.startswith("--") and close:
                message += f"; did you mean {close[0]}?"
                break
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``amqpd`` argument parser; every option also reads an AMQPD_* variable."""
    parser = _Parser(
        prog="amqpd",
        usage="amqpd [options]  |  amqpd {ctl,users,vhosts,definitions,perf} ...",
        description="An AMQP 0-9-1 message broker that RabbitMQ clients use unchanged.\n"
        "Without a subcommand it runs the broker. Every option can also be set with the\n"
        "environment variable shown, or in the --config file.",
        epilog=SUBCOMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"amqpd {__version__} ({BUILD.describe()})"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="a rabbitmq.conf-style file (key = value lines; docs/configuration.md lists the "
        "keys). Precedence: flag > AMQPD_* variable > config file > default [AMQPD_CONFIG]",
    )
    add_arguments(parser, SETTINGS)
    return parser


# Objects (container ones) allocated, less those freed, before a young collection; CPython's
# default is 700. A broker allocates a few per message (its entry, the frames' tuples) and frees
# almost all of them by reference counting, so at 700 it ran a collection every few hundred
# messages, ~10% of its CPU under load (py-spy; docs/multicore.md, session 18). A larger
# threshold keeps the cyclic garbage found per collection the same, only collected later.
GC_YOUNG_THRESHOLD = 10_000


def _fatal(message: str) -> None:
    """Why the broker stops: logged, or in a worker of several left for the supervisor,
    which logs it as the node's last line once every worker stopped (the others' shutdown
    lines would bury it)."""
    if not report_fatal(message):
        log.error("%s", message)


def tune_garbage_collector() -> None:
    """Before serving: everything imported and configured so far lives for the whole run,
    so it is moved out of the collector's sight (gc.freeze) and young collections are made
    rarer (GC_YOUNG_THRESHOLD; the older generations keep CPython's ratios)."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``amqpd`` command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "perf":
        from interop.perf.cli import main as perf_main

        return perf_main(argv[1:])
    if argv and argv[0] in admin.COMMANDS:
        return admin.main(argv)
    if argv and argv[0] == "ctl":
        return ctl.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args = settings_from(parser, args)
        try:
            configure_logging(args.log_level, args.log_format, args.log_file)
        except OSError as exc:
            raise SettingError(
                f"invalid setting --log-file {args.log_file}: cannot open it: {exc.strerror}"
            ) from None
        role = worker_role.from_environment()
        check_data_dir(args.data_dir, STORE_FILES)
        if role is None:  # auto, or a count too small for the data: one line, exit 2
            # (PostgreSQL: once worker 0 holds the store, amqpd/shell/workers/node.py)
            store_dir = args.data_dir if args.store is None else None
            args.workers = worker_count.resolve(args.workers, store_dir, MAX_WORKERS)
        applied = apply_options(args)
    except (SettingError, ValueError) as exc:
        print(f"amqpd: {exc}", file=sys.stderr)
        return 2
    if args.workers > 1 and role is None:
        log_file = None if args.log_file is None else str(args.log_file)
        become_supervisor(
            argv,
            args.workers,
            {"level": args.log_level, "format": args.log_format, "file": log_file},
        )
    if role is not None:
        die_with_supervisor()
    data_dir = args.data_dir if role is None else role.data_dir(args.data_dir)
    if data_dir is not None and data_dir != args.data_dir:
        data_dir.mkdir(exist_ok=True)
    if BUILD.stale:
        log.warning("running the core as %s", BUILD.describe())
    broker_config = BrokerConfig(
        heartbeat=args.heartbeat,
        max_message_size=args.max_message_size,
        frame_max=args.frame_max,
        channel_max=args.channel_max,
        **applied.broker,
    )
    server_config = ServerConfig(
        host=args.host,
        port=args.port,
        data_dir=data_dir,
        store=args.store,
        synchronous=args.sync.upper(),
        reopen_logs=reopen_logs,
        default_user=(args.default_user, args.default_pass) if args.default_user else None,
        management_port=None if args.no_management else args.management_port,
        prometheus_port=None if args.no_prometheus else args.prometheus_port,
        management_host=args.management_host,
        prometheus_host=args.prometheus_host,
        worker=role,
        spread_vhosts=args.spread_vhosts,
        **applied.server,
    )
    if role is not None:
        write_pid(role)
        server_config.memory_probe = NodeMemory(role)  # the node's memory alarm
    tune_garbage_collector()
    backend_options = {}
    try:
        import uvloop  # noqa: F401

        backend_options["use_uvloop"] = True
    except ImportError:
        pass
    try:
        anyio.run(
            run, broker_config, server_config, backend="asyncio", backend_options=backend_options
        )
    except (OSError, StoreError, DefinitionsError, BaseExceptionGroup) as exc:
        definitions_error = _find(exc, DefinitionsError)
        if definitions_error is not None:
            _fatal(f"cannot import definitions: {definitions_error}")
            return 2
        lost = _find(exc, LockLost)
        if lost is not None:
            log.error("%s; exiting (restart amqpd to rejoin as a standby)", lost)
            return 3
        store_error = _find(exc, StoreError)
        if store_error is not None:
            _fatal(f"cannot open the store: {store_error}")
            return 2
        listen_error = _find(exc, ListenError)
        if listen_error is not None:
            _fatal(str(listen_error))
            return 1
        os_error = _find(exc, OSError)
        if os_error is None:
            raise
        reason = os_error.strerror or os_error
        _fatal(
            f"cannot listen on {args.host}:{args.port}: {reason}; is another broker running? "
            "Use --port"
        )
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def settings_from(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
) -> argparse.Namespace:
    """Resolve every setting (flag > AMQPD_* > --config file > default) and check it.

    Raises:
        SettingError: the first refused value, as one line.
    """
    env = os.environ if environ is None else environ
    config_path = args.config or (Path(env["AMQPD_CONFIG"]) if env.get("AMQPD_CONFIG") else None)
    conf = read_config(config_path) if config_path is not None else None
    resolve(args, SETTINGS, conf.settings if conf is not None else {}, env)
    if conf is not None:
        for dest, entry in conf.plain.items():
            if not apply_plain_option(parser, args, dest, entry):
                log.warning(
                    "config file: %s (%s) is not supported by this build", entry.key, entry.where
                )
    if (args.default_user is None) != (args.default_pass is None):
        raise SettingError("invalid setting --default-user/--default-pass: give both or neither")
    return args


def _find(exc: BaseException, kind: type[E]) -> E | None:
    """The first ``kind`` exception in ``exc`` or, for an exception group, inside it."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
