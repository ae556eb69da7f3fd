"""The table of the broker's settings (see amqpd/cli/settings.py for how it is used).

One row per setting: option ``--dest-name``, variable ``AMQPD_DEST_NAME``, config-file keys
(RabbitMQ's ``rabbitmq.conf`` name where both brokers share the setting, else
``amqpd.dest_name``), the kind that checks it, its default and a help line. Each row is
documented in docs/configuration.md (tests/unit/test_settings.py checks that every key is).
"""

from __future__ import annotations

from typing import Final

from amqpd.cli import worker_count
from amqpd.cli.settings import (
    Invalid,
    Setting,
    boolean,
    choice,
    directory,
    host,
    integer,
    port,
    readable_file,
    user_list,
    writable_file,
)
from amqpd.engine import handshake
from amqpd.shell import resources
from persistence.backend import parse_store_url
from persistence.errors import StoreError


def _store_url(text: str) -> str:
    """A postgresql:// URL (docs/operations.md)."""
    try:
        return parse_store_url(text.strip())
    except StoreError as exc:
        raise Invalid(str(exc).split(": ", 1)[-1]) from None


LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical", "none")
MAX_MESSAGE_SIZE: Final = 536_870_912  # RabbitMQ's upper bound (512 MiB)
MAX_WORKERS: Final = 256


def _size(text: str) -> int:
    try:
        value = resources.parse_size(text)
    except ValueError:
        raise Invalid("must be a size: bytes, or a number with kB, MB, GB, KiB, MiB, GiB") from None
    return value


def _watermark(text: str) -> str:
    """vm_memory_high_watermark: a fraction of the memory (0 < x <= 1) or a size."""
    try:
        resources.parse_size(text, 1 << 40)
    except ValueError:
        raise Invalid(
            "must be a fraction of the memory above 0 and at most 1 (0.4), "
            "or a size (512MB, 1GiB, bytes)"
        ) from None
    return text.strip()


def _relative_disk(text: str) -> str:
    """disk_free_limit.relative: a multiple of the machine's memory (e.g. 1.5)."""
    try:
        factor = float(text)
    except ValueError:
        raise Invalid("must be a number above 0 (a multiple of the memory, e.g. 1.5)") from None
    if not factor > 0:
        raise Invalid("must be a number above 0 (a multiple of the memory, e.g. 1.5)")
    return str(int(factor * resources.total_memory()))


def _workers(text: str) -> int:
    """--workers: a count of worker processes, or "auto" (the CPUs this process may use)."""
    text = text.strip().lower()
    if text == "auto":
        return worker_count.AUTO  # the CPUs, but what the data needs (worker_count.resolve)
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise Invalid(f'must be "auto" or an integer from 1 to {MAX_WORKERS}')
    return int(text)


def _vhost_names(text: str) -> tuple[str, ...]:
    """--spread-vhosts: vhost names, comma-separated, or "*" for every vhost."""
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if any(len(name.encode()) > 255 for name in names):
        raise Invalid("must be vhost names (up to 255 bytes each), comma-separated, or *")
    return names


def _nonempty(text: str) -> str:
    if not text:
        raise Invalid("must not be empty")
    return text


def _mechanisms(text: str) -> tuple[str, ...]:
    """auth_mechanisms: SASL mechanisms to offer, comma-separated."""
    names = tuple(dict.fromkeys(n.strip().upper() for n in text.split(",") if n.strip()))
    if not names or any(n not in handshake.MECHANISMS for n in names):
        raise Invalid("must be some of " + ", ".join(handshake.MECHANISMS) + ", comma-separated")
    return names


def _server_properties(text: str) -> tuple[tuple[str, str], ...]:
    """server_properties: KEY=VALUE pairs separated by ";" (Connection.Start overrides)."""
    properties: dict[str, str] = {}
    for pair in (p for p in text.split(";") if p.strip()):
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key or len(key.encode()) > 255:
            raise Invalid("must be KEY=VALUE pairs separated by ';' (keys up to 255 bytes)")
        if key == "capabilities":
            raise Invalid("may not set capabilities (the broker's own table)")
        properties[key] = value
    return tuple(properties.items())


TLS: Final = "TLS (AMQPS)"
ACCESS: Final = "access control"
LIMITS: Final = "limits and alarms"
LOGS: Final = "logging"

_BROKER: Final[tuple[Setting, ...]] = (
    Setting("host", host, "127.0.0.1", "address to listen on", ("amqpd.host",)),
    Setting("port", port(), "5672", "AMQP port; 0 picks a free one", ("amqpd.port",)),
    Setting(
        "workers",
        _workers,
        "auto",
        'worker processes ("auto": one per CPU this process may use, and at least as many as '
        "the data directory's queues live on; 1: one process). Worker 0 keeps the listeners "
        "and hands each connection to the worker of its queues (docs/multicore.md)",
        ("amqpd.workers",),
        metavar="N|auto",
    ),
    Setting(
        "spread_vhosts",
        _vhost_names,
        "*",
        "with more than one worker: vhosts whose queues spread over every worker (comma-"
        "separated names, * for all, '' for none: every other vhost lives wholly on one "
        "worker): connections go to the workers in turn, a queue lives on the worker of the "
        "connection that declared it (or the least loaded, x-queue-leader-locator="
        "least-leaders), publishes cross to it, and a consumer's connection moves to its "
        "queue's worker (docs/multicore.md, stage 2)",
        ("amqpd.spread_vhosts",),
        metavar="NAMES",
    ),
    Setting(
        "data_dir",
        directory,
        "./data",
        "directory of the SQLite store",
        ("amqpd.data_dir",),
        metavar="DIR",
    ),
    Setting(
        "store",
        _store_url,
        None,
        "a shared PostgreSQL store, postgresql://user[:password]@host:port/database: brokers "
        "on one database elect an active node, the others wait as standbys (default: the "
        "SQLite store in --data-dir, which also holds the admin socket)",
        ("amqpd.store",),
        metavar="URL",
    ),
    Setting(
        "sync",
        choice("full", "normal"),
        "full",
        "SQLite synchronous mode: full survives power loss; normal is faster and can lose "
        "the last commits on power loss (never on a crash of amqpd alone)",
        ("amqpd.sync",),
    ),
    Setting(
        "heartbeat",
        integer(0, 65535, " (seconds; 0 disables)"),
        "60",
        "heartbeat interval offered to clients, seconds; 0 disables",
        ("heartbeat",),
    ),
    Setting(
        "frame_max",
        integer(4096, 2**31 - 1, " (bytes)"),
        "131072",
        "largest frame offered to clients, bytes",
        ("frame_max",),
    ),
    Setting(
        "channel_max",
        integer(1, 65535),
        "2047",
        "channels per connection offered to clients",
        ("channel_max",),
    ),
    Setting(
        "max_message_size",
        integer(1, MAX_MESSAGE_SIZE, " (bytes)"),
        str(128 << 20),
        "largest accepted message body in bytes",
        ("max_message_size",),
    ),
    Setting(
        "log_level",
        choice(*LOG_LEVELS),
        "info",
        "log verbosity",
        ("log.console.level", "log.file.level", "amqpd.log_level"),
        LOGS,
    ),
    Setting(
        "log_format",
        choice("text", "json"),
        "text",
        "log line format: text (key=value) or json (one object per line)",
        ("amqpd.log_format",),
        LOGS,
    ),
    Setting(
        "log_file",
        writable_file,
        None,
        "write logs to this file instead of standard error; reopened on SIGHUP (for logrotate)",
        ("log.file",),
        LOGS,
        metavar="FILE",
    ),
    # TLS
    Setting(
        "tls_port",
        port(),
        "5671",
        "AMQPS port, used when --tls-cert is given; 0 picks a free one",
        ("listeners.ssl.default",),
        TLS,
    ),
    Setting(
        "tls_cert",
        readable_file,
        None,
        "server certificate (PEM); enables the AMQPS listener",
        ("ssl_options.certfile",),
        TLS,
        metavar="FILE",
    ),
    Setting(
        "tls_key",
        readable_file,
        None,
        "server private key (PEM)",
        ("ssl_options.keyfile",),
        TLS,
        metavar="FILE",
    ),
    Setting(
        "tls_ca",
        readable_file,
        None,
        "CA certificates that sign client certificates (PEM)",
        ("ssl_options.cacertfile",),
        TLS,
        metavar="FILE",
    ),
    Setting(
        "tls_verify_peer",
        boolean,
        "false",
        "verify client certificates against --tls-ca and offer the EXTERNAL mechanism",
        ("amqpd.tls_verify_peer",),
        TLS,
        boolean=True,
    ),
    Setting(
        "tls_fail_if_no_peer_cert",
        boolean,
        "false",
        "with --tls-verify-peer: refuse clients without a certificate",
        ("ssl_options.fail_if_no_peer_cert",),
        TLS,
        boolean=True,
    ),
    Setting(
        "tls_cert_login_from",
        choice("distinguished_name", "common_name"),
        "distinguished_name",
        "EXTERNAL user name: the certificate's subject DN or its CN",
        ("ssl_cert_login_from",),
        TLS,
    ),
    # access control
    Setting(
        "definitions",
        readable_file,
        None,
        "RabbitMQ definitions JSON to import at startup",
        ("load_definitions", "definitions.local.path"),
        ACCESS,
        metavar="FILE",
    ),
    Setting(
        "loopback_users",
        user_list,
        "guest",
        "comma-separated users that may only connect from localhost; empty or none for nobody",
        ("loopback_users", "amqpd.loopback_users"),
        ACCESS,
    ),
    Setting(
        "auth_mechanisms",
        _mechanisms,
        "PLAIN,AMQPLAIN",
        "SASL mechanisms to offer (PLAIN, AMQPLAIN, EXTERNAL), as RabbitMQ's auth_mechanisms; "
        "EXTERNAL only on TLS connections with a verified client certificate",
        ("amqpd.auth_mechanisms",),
        ACCESS,
    ),
    Setting(
        "server_properties",
        _server_properties,
        None,
        "Connection.Start server properties to announce instead of the defaults (product, "
        "version, platform, copyright, information, cluster_name, or new keys), as "
        "KEY=VALUE;KEY=VALUE like RabbitMQ's server_properties",
        ("amqpd.server_properties",),
        ACCESS,
        metavar="KEY=VALUE;...",
    ),
    Setting(
        "default_user",
        _nonempty,
        None,
        "the user a new data directory is created with instead of guest (with --default-pass)",
        ("default_user",),
        ACCESS,
    ),
    Setting(
        "default_pass",
        _nonempty,
        None,
        "the password of --default-user",
        ("default_pass",),
        ACCESS,
    ),
    # limits and alarms
    Setting(
        "connection_max",
        integer(0, 2**31 - 1, " (0: no limit)", infinity=0),
        "0",
        "open connections allowed on the broker; 0 (or infinity) for no limit",
        ("connection_max",),
        LIMITS,
    ),
    Setting(
        "vm_memory_high_watermark",
        _watermark,
        str(resources.DEFAULT_MEMORY_FRACTION),
        "memory above which publishers are blocked: a fraction of the machine's memory "
        "(0.4) or a size (512MB, 1GiB, bytes)",
        ("vm_memory_high_watermark.relative", "vm_memory_high_watermark.absolute"),
        LIMITS,
    ),
    Setting(
        "disk_free_limit",
        _size,
        "50MB",
        "free space on the data directory's disk below which publishers are blocked "
        "(a size; 0 disables)",
        ("disk_free_limit.absolute",),
        LIMITS,
    ),
)

HTTP: Final = "HTTP listeners"
SETTINGS: Final[tuple[Setting, ...]] = (
    *_BROKER,
    Setting(
        "management_port",
        port(),
        "15672",
        "port of the management HTTP API and dashboard, on --host",
        ("management.tcp.port",),
        HTTP,
    ),
    Setting(
        "management_host",
        host,
        None,
        "address of the management HTTP API and dashboard (default: --host)",
        ("management.tcp.ip",),
        HTTP,
    ),
    Setting(
        "no_management",
        boolean,
        "false",
        "do not serve the management API and dashboard",
        ("amqpd.no_management",),
        HTTP,
        boolean=True,
        negatable=False,
    ),
    Setting(
        "prometheus_port",
        port(),
        "15692",
        "port of the Prometheus endpoint (/metrics), on --host",
        ("prometheus.tcp.port",),
        HTTP,
    ),
    Setting(
        "prometheus_host",
        host,
        None,
        "address of the Prometheus endpoint (default: --host)",
        ("prometheus.tcp.ip",),
        HTTP,
    ),
    Setting(
        "no_prometheus",
        boolean,
        "false",
        "do not serve Prometheus metrics",
        ("amqpd.no_prometheus",),
        HTTP,
        boolean=True,
        negatable=False,
    ),
)
"""Every setting of ``amqpd`` (run the broker)."""

# Config-file keys that need a conversion before their setting's kind sees them.
CONVERTED_KEYS: Final = {"disk_free_limit.relative": ("disk_free_limit", _relative_disk)}

# Keys of options added to the parser by hand elsewhere (their own argparse ``type`` checks
# the value); ignored with a note when this build has no such option.
PLAIN_KEYS: Final[dict[str, str]] = {}

# rabbitmq.conf keys that mean nothing to amqpd (one node, no plugins): noted, not refused.
IGNORED_PREFIXES: Final = (
    "cluster_formation.",
    "cluster_name",
    "cluster_partition_handling",
    "collect_statistics",
    "management.",
    "prometheus.",
    "log.file.rotation.",
    "log.console",
    "log.exchange",
    "queue_master_locator",
    "mirroring_",
    "vm_memory_calculation_strategy",
    "vm_memory_high_watermark_paging_ratio",
    "total_memory_available_override_value",
    "default_vhost",
    "default_permissions.",
    "default_user_tags.",
    "auth_backends.",
    "auth_mechanisms.",
    "ssl_options.versions.",
    "ssl_options.ciphers.",
    "ssl_options.honor_",
    "ssl_options.depth",
    "ssl_options.password",
    "tcp_listen_options.",
    "num_acceptors.",
    "handshake_timeout",
    "ssl_handshake_timeout",
    "credit_flow_default_credit",
    "queue_index_",
    "msg_store_",
    "lazy_queue_explicit_gc_run_operation_threshold",
    "proxy_protocol",
    "background_gc_",
    "consumer_timeout",
    "default_queue_type",
)
