"""AMQPS: pika and py-amqp over TLS with certificates the test generates; wrong CAs;
EXTERNAL login when configured; why a handshake failed, in the log."""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import amqp
import amqp.exceptions
import pika
import pika.credentials
import pika.exceptions
import pytest

from amqpd.model.broker import BrokerConfig
from amqpd.shell.server import Server, ServerConfig, background_server
from amqpd.shell.tls import TLSOptions
from tests.conftest import NodeUnderTest, node_process
from tests.integration.tls_certs import Pki, make_pki

WITH_EXTERNAL = ("PLAIN", "AMQPLAIN", "EXTERNAL")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextmanager
def tls_server(
    pki: Pki,
    tmp_path: Path,
    verify_peer: bool = False,
    fail_if_no_peer_cert: bool = False,
    login_from: str = "distinguished_name",
    mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN"),  # RabbitMQ's default
    certificate_user: bool = True,
    in_process: bool = False,
) -> Iterator[Server | NodeUnderTest]:
    """A broker with an AMQPS listener; under AMQPD_TEST_WORKERS a node (its options on
    the command line), unless the test reaches into the broker (``in_process``).
    ``certificate_user``: the client certificate's DN is a user (for EXTERNAL)."""
    users: list[dict[str, object]] = [
        {"name": "app", "password": "app-secret", "tags": []},
        {"name": "CN=app-client,O=amqpd tests", "password_hash": ""},
        {"name": "app-client", "password_hash": ""},
    ]
    if not certificate_user:
        del users[1]
    definitions = tmp_path / "definitions.json"
    definitions.write_text(
        json.dumps(
            {
                "users": users,
                "permissions": [
                    {"user": name, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
                    for name in (str(user["name"]) for user in users)
                ],
            }
        )
    )
    workers = int(os.environ.get("AMQPD_TEST_WORKERS") or 1)
    if workers > 1 and not in_process:
        options = [
            *("--tls-port", "0", "--tls-cert", str(pki.server_cert)),
            *("--tls-key", str(pki.server_key), "--tls-ca", str(pki.ca)),
            *("--tls-cert-login-from", login_from, "--auth-mechanisms", ",".join(mechanisms)),
            *("--definitions", str(definitions)),
        ]
        if verify_peer:
            options.append("--tls-verify-peer")
        if fail_if_no_peer_cert:
            options.append("--tls-fail-if-no-peer-cert")
        with node_process(tmp_path / "node", workers, tuple(options)) as node:
            yield node
        return
    config = ServerConfig(
        port=0,
        tls_port=0,
        tls=TLSOptions(
            pki.server_cert,
            pki.server_key,
            pki.ca,
            verify_peer,
            fail_if_no_peer_cert,
            login_from,
        ),
        definitions=definitions,
    )
    with background_server(BrokerConfig(auth_mechanisms=mechanisms), config) as server:
        yield server


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def tls_params(
    server: Server | NodeUnderTest,
    context: ssl.SSLContext,
    credentials: pika.credentials.VALID_TYPES | None = None,
) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        "127.0.0.1",
        server.tls_port,
        ssl_options=pika.SSLOptions(context, "localhost"),
        credentials=credentials or pika.PlainCredentials("app", "app-secret"),
        connection_attempts=1,
        socket_timeout=5,
    )


def roundtrip(conn: pika.BlockingConnection) -> None:
    try:
        channel = conn.channel()
        channel.queue_declare("tls-q", auto_delete=True)
        channel.basic_publish("", "tls-q", b"over tls")
        _method, _props, body = channel.basic_get("tls-q", auto_ack=True)
        assert body == b"over tls"
    finally:
        conn.close()


def assert_plain_port_still_serves(server: Server | NodeUnderTest) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    roundtrip(conn)


def test_pika_over_tls_with_plain_login(pki: Pki, tmp_path: Path) -> None:
    with tls_server(pki, tmp_path) as server:
        assert server.tls_port and server.tls_port != server.port
        roundtrip(pika.BlockingConnection(tls_params(server, client_context(pki.ca))))
        assert_plain_port_still_serves(server)


def test_client_trusting_another_ca_refuses_the_server(pki: Pki, tmp_path: Path) -> None:
    with tls_server(pki, tmp_path) as server:
        with pytest.raises(ssl.SSLCertVerificationError, match="CERTIFICATE_VERIFY_FAILED"):
            pika.BlockingConnection(tls_params(server, client_context(pki.other_ca)))
        roundtrip(pika.BlockingConnection(tls_params(server, client_context(pki.ca))))


def test_client_certificate_from_another_ca_is_refused(pki: Pki, tmp_path: Path) -> None:
    with tls_server(  # its log records are this process's
        pki, tmp_path, verify_peer=True, fail_if_no_peer_cert=True, in_process=True
    ) as server:
        rogue = client_context(pki.ca, pki.rogue_cert, pki.rogue_key)
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            conn = pika.BlockingConnection(tls_params(server, rogue))
            conn.close()  # pragma: no cover - reached only if the broker let it in
        good = client_context(pki.ca, pki.client_cert, pki.client_key)
        roundtrip(pika.BlockingConnection(tls_params(server, good)))


def test_fail_if_no_peer_cert_refuses_a_client_without_one(pki: Pki, tmp_path: Path) -> None:
    with tls_server(pki, tmp_path, verify_peer=True, fail_if_no_peer_cert=True) as server:
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            conn = pika.BlockingConnection(tls_params(server, client_context(pki.ca)))
            conn.close()  # pragma: no cover
        assert_plain_port_still_serves(server)


@pytest.mark.parametrize("login_from", ["distinguished_name", "common_name"])
def test_external_login_with_a_client_certificate(
    pki: Pki, tmp_path: Path, login_from: str
) -> None:
    with tls_server(
        pki, tmp_path, verify_peer=True, login_from=login_from, mechanisms=WITH_EXTERNAL
    ) as server:
        context = client_context(pki.ca, pki.client_cert, pki.client_key)
        credentials = pika.credentials.ExternalCredentials()
        roundtrip(pika.BlockingConnection(tls_params(server, context, credentials)))


def test_external_is_not_offered_without_a_client_certificate(pki: Pki, tmp_path: Path) -> None:
    with tls_server(pki, tmp_path, verify_peer=True, mechanisms=WITH_EXTERNAL) as server:
        context = client_context(pki.ca)  # verify_peer but no certificate: PLAIN only
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            conn = pika.BlockingConnection(
                tls_params(server, context, pika.credentials.ExternalCredentials())
            )
            conn.close()  # pragma: no cover
        roundtrip(pika.BlockingConnection(tls_params(server, context)))


def test_external_login_of_an_unknown_certificate_user_is_403(pki: Pki, tmp_path: Path) -> None:
    with tls_server(
        pki, tmp_path, verify_peer=True, mechanisms=WITH_EXTERNAL, certificate_user=False
    ) as server:
        context = client_context(pki.ca, pki.client_cert, pki.client_key)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
            pika.BlockingConnection(
                tls_params(server, context, pika.credentials.ExternalCredentials())
            )
        assert "403" in str(info.value) and "EXTERNAL" in str(info.value)


def test_a_silent_tls_client_is_dropped_after_the_handshake_timeout(
    pki: Pki, tmp_path: Path
) -> None:
    import socket
    import time

    with tls_server(pki, tmp_path, in_process=True) as server:
        assert isinstance(server, Server)  # its setting changed here
        server.broker.config.handshake_timeout = 0.5
        with socket.create_connection(("127.0.0.1", server.tls_port), timeout=5) as sock:
            began = time.monotonic()
            assert sock.recv(1) == b""  # the broker closed it without a word
            assert time.monotonic() - began < 4
        assert_plain_port_still_serves(server)


def py_amqp_ssl(ca: Path, cert: Path, key: Path) -> dict[str, object]:
    return {
        "ca_certs": str(ca),
        "certfile": str(cert),
        "keyfile": str(key),
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": "localhost",
    }


def test_py_amqp_with_a_client_certificate_logs_in_with_plain_by_default(
    pki: Pki, tmp_path: Path
) -> None:
    """py-amqp (Celery's transport) prefers EXTERNAL whenever it is offered; like RabbitMQ,
    amqpd offers only PLAIN and AMQPLAIN unless EXTERNAL is configured, while still
    verifying the certificate (issue 21, item 12)."""
    with tls_server(pki, tmp_path, verify_peer=True) as server:
        conn = amqp.Connection(  # Celery's broker_use_ssl options
            f"127.0.0.1:{server.tls_port}",
            userid="app",
            password="app-secret",
            ssl=py_amqp_ssl(pki.ca, pki.client_cert, pki.client_key),
            connect_timeout=10,
        )
        conn.connect()
        try:
            assert conn.mechanisms == [b"AMQPLAIN", b"PLAIN"]
            channel = conn.channel()
            channel.queue_declare("py-amqp-tls", auto_delete=True)
            channel.basic_publish(amqp.Message("over tls"), routing_key="py-amqp-tls")
            message = channel.basic_get("py-amqp-tls", no_ack=True)
            assert message is not None and message.body == "over tls"
        finally:
            conn.close()
        # the certificate is still verified: one from another CA never gets in
        refused = amqp.Connection(
            f"127.0.0.1:{server.tls_port}",
            userid="app",
            password="app-secret",
            ssl=py_amqp_ssl(pki.ca, pki.rogue_cert, pki.rogue_key),
            connect_timeout=10,
        )
        with pytest.raises((OSError, amqp.exceptions.AMQPError)):
            refused.connect()


def test_a_failed_tls_handshake_is_logged_with_its_reason(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="amqpd.shell.peers")
    with tls_server(  # its log records are this process's
        pki, tmp_path, verify_peer=True, fail_if_no_peer_cert=True, in_process=True
    ) as server:
        rogue = client_context(pki.ca, pki.rogue_cert, pki.rogue_key)
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(tls_params(server, rogue)).close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            "TLS handshake" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)  # the broker logs from its own thread: poll for the record
    [line] = [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]
    reason = line.split("failed: ", 1)[1]
    assert reason.startswith("certificate verify failed: "), line
    assert len(reason) > len("certificate verify failed: ")
