"""The connection handshake's pure parts: what the broker announces in Connection.Start and
how a Start-Ok response (SASL PLAIN, AMQPLAIN, EXTERNAL) yields a user and password."""

from __future__ import annotations

import platform
from typing import Final

from pamqp import commands as spec
from pamqp import decode

import amqpd
from amqpd.wire.errors import ACCESS_REFUSED, AMQPError

SERVER_CAPABILITIES: Final = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
    "consumer_selectors": True,  # basic.consume x-selector (amqpd/model/selective.py)
    "queue_browsing": True,  # basic.consume x-browse (amqpd/model/selective.py)
}


def start_method(peer_cert_user: str | None) -> spec.Connection.Start:
    """Connection.Start; EXTERNAL is offered only with a verified client certificate."""
    return spec.Connection.Start(
        version_major=0,
        version_minor=9,
        server_properties={
            "product": "amqpd",
            "version": amqpd.__version__,
            "platform": f"Python {platform.python_version()}",
            "copyright": "amqpd contributors",
            "information": "An AMQP 0-9-1 broker in Python",
            "capabilities": dict(SERVER_CAPABILITIES),
            "cluster_name": "amqpd",
        },
        mechanisms="PLAIN AMQPLAIN EXTERNAL" if peer_cert_user else "PLAIN AMQPLAIN",
        locales="en_US",
    )


def credentials(
    mechanism: str, response: str | bytes | None, peer_cert_user: str | None
) -> tuple[str, str | None]:
    """The user and password of a Start-Ok response (password None: EXTERNAL, the
    certificate identity ``peer_cert_user`` was verified by TLS).

    Raises:
        AMQPError: 403 for a malformed response or an unsupported mechanism.
    """
    raw = response.encode() if isinstance(response, str) else bytes(response or b"")
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
        ACCESS_REFUSED,
        f"unsupported authentication mechanism '{mechanism}' (PLAIN, AMQPLAIN)",
        10,
        11,
    )
