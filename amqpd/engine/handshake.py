"""The connection handshake's pure parts: what the broker announces in Connection.Start
(server properties, offered SASL mechanisms), how a Start-Ok response (PLAIN, AMQPLAIN,
EXTERNAL) yields a user and password and whether that login is refused, and what a Tune-Ok
settles on."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from typing import Any, Final

from pamqp import commands as spec
from pamqp import decode

import amqpd
from amqpd.model.auth import AccessControl
from amqpd.model.broker import BrokerConfig
from amqpd.wire.errors import ACCESS_REFUSED, NOT_ALLOWED, AMQPError

SERVER_CAPABILITIES: Final = {  # rabbit_reader:server_capabilities, in its order
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
    "consumer_selectors": True,  # basic.consume x-selector (amqpd/model/selective.py)
    "queue_browsing": True,  # basic.consume x-browse (amqpd/model/selective.py)
    "message_groups": True,  # queue argument x-message-groups (amqpd/model/groups.py)
    "delayed_messages": True,  # x-delayed-message exchanges (amqpd/model/delayed.py)
}

# The RabbitMQ release whose behaviour amqpd follows and is compared with side by side.
# Clients key behaviour off ``product`` / ``version``: kombu (Celery's transport) uses
# RabbitMQ's basic.qos semantics (global=true: one prefetch for the channel, changed on the
# fly) only for product "RabbitMQ" >= 3.3, and the spec's per-channel reading otherwise,
# which on RabbitMQ's (and amqpd's) per-consumer global=false leaves Celery's prefetch
# increases for ETA tasks unapplied. amqpd implements RabbitMQ's semantics, so it says so;
# ``information`` and ``platform`` name amqpd. Operators can override any of these
# (`BrokerConfig.server_properties`, RabbitMQ's ``server_properties``).
RABBITMQ_VERSION: Final = amqpd.RABBITMQ_VERSION
MECHANISMS: Final = ("PLAIN", "AMQPLAIN", "EXTERNAL")
FRAME_MIN_SIZE: Final = 4096  # the frame size limit until Tune-Ok, and the least allowed


def server_properties(
    configured: Iterable[tuple[str, str]] = (), cluster_name: str = "amqpd"
) -> dict[str, Any]:
    """Connection.Start's server-properties: the defaults (``cluster_name``: the broker's,
    which federation peers read), overridden by ``configured`` (longstr values), the
    capabilities always built in, sorted by key (rabbit_reader)."""
    properties: dict[str, Any] = {
        "product": "RabbitMQ",
        "version": RABBITMQ_VERSION,
        "platform": f"Python {platform.python_version()}",
        "copyright": "amqpd contributors",
        "information": f"amqpd {amqpd.__version__}: an AMQP 0-9-1 broker in Python "
        f"that behaves as RabbitMQ {RABBITMQ_VERSION.rsplit('.', 1)[0]}",
        "cluster_name": cluster_name,
    }
    properties.update(configured)
    properties["capabilities"] = dict(SERVER_CAPABILITIES)
    return dict(sorted(properties.items()))


def offered_mechanisms(configured: Iterable[str], peer_cert_user: str | None) -> str:
    """The SASL mechanisms Connection.Start offers: the configured ones (RabbitMQ's
    ``auth_mechanisms``), EXTERNAL only on a connection with a verified client certificate
    (rabbit_auth_mechanism_ssl:should_offer), space-separated in RabbitMQ's order."""
    return " ".join(sorted(m for m in configured if m != "EXTERNAL" or peer_cert_user is not None))


def start_method(properties: dict[str, Any], mechanisms: str) -> spec.Connection.Start:
    """Connection.Start with these server properties and offered mechanisms."""
    return spec.Connection.Start(
        version_major=0,
        version_minor=9,
        server_properties=properties,
        mechanisms=mechanisms,
        locales="en_US",
    )


def credentials(
    mechanism: str, response: str | bytes | None, peer_cert_user: str | None, offered: str
) -> tuple[str, str | None]:
    """The user and password of a Start-Ok response (password None: EXTERNAL, the
    certificate identity ``peer_cert_user`` was verified by TLS); ``mechanism`` must be
    one of the ``offered`` ones.

    Raises:
        AMQPError: 403 for a malformed response or an unsupported mechanism.
    """
    raw = response.encode() if isinstance(response, str) else bytes(response or b"")
    if mechanism not in offered.split():
        raise AMQPError(
            ACCESS_REFUSED,
            f"unsupported authentication mechanism '{mechanism}' ({offered})",
            10,
            11,
        )
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise AMQPError(ACCESS_REFUSED, "malformed PLAIN response", 10, 11)
        return parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
    if mechanism == "AMQPLAIN":
        try:
            _, table = decode.field_table(len(raw).to_bytes(4, "big") + raw)
        except Exception as exc:
            raise AMQPError(ACCESS_REFUSED, "malformed AMQPLAIN response", 10, 11) from exc
        return str(table.get("LOGIN", "")), str(table.get("PASSWORD", ""))
    if mechanism == "EXTERNAL" and peer_cert_user is not None:
        return peer_cert_user, None  # rabbitmq_auth_mechanism_ssl
    raise AMQPError(
        ACCESS_REFUSED, f"unsupported authentication mechanism '{mechanism}' ({offered})", 10, 11
    )


def login_refusal(
    access: AccessControl, user: str, password: str | None, loopback: bool
) -> str | None:
    """Why a login is refused (for the log only: the client always gets the same text, so
    it cannot tell an unknown user from a bad password), or None. ``password`` None is
    EXTERNAL: the certificate was verified, the user must exist."""
    if password is None:
        if user not in access.state.users:
            return f"user '{user}' - not found"
    elif access.authenticate(user, password) is None:
        return f"user '{user}' - invalid credentials"
    if not loopback and access.loopback_only(user):
        return f"user '{user}' can only connect via localhost"
    return None


def negotiate(method: spec.Connection.TuneOk, config: BrokerConfig) -> tuple[int, int]:
    """The (frame_max, channel_max) a Tune-Ok settles on (0: the broker's own).

    Raises:
        AMQPError: 530 for a value outside what the broker allows.
    """
    frame_max = method.frame_max or config.frame_max
    if frame_max < FRAME_MIN_SIZE:
        raise AMQPError(NOT_ALLOWED, f"frame_max={frame_max} < {FRAME_MIN_SIZE} min size", 10, 31)
    if frame_max > config.frame_max:
        raise AMQPError(NOT_ALLOWED, f"frame_max={frame_max} > {config.frame_max} max size", 10, 31)
    channel_max = method.channel_max or config.channel_max
    if channel_max > config.channel_max:
        raise AMQPError(
            NOT_ALLOWED, f"channel_max={channel_max} > {config.channel_max} max channels", 10, 31
        )
    return frame_max, channel_max
