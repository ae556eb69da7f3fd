"""The federation links' error texts (amqpd/shell/links/client.py `error_text`)."""

from __future__ import annotations

import errno

import aiormq.exceptions

from amqpd.shell.links.client import error_text


def test_refused_connection_is_named_as_rabbitmq_names_it() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    wrapped = aiormq.exceptions.AMQPConnectionError("could not connect")
    wrapped.__cause__ = refused
    assert error_text(wrapped) == "econnrefused"


def test_a_refused_vhost_is_said_in_words() -> None:
    frame = aiormq.exceptions.InvalidFrameError(
        "Expected one of ['Connection.OpenOk'], got <Connection.Close object at 0x1>"
    )
    assert "refused Connection.Open" in error_text(frame)


def test_an_exception_chain_that_loops_ends() -> None:
    first, second = RuntimeError("first"), RuntimeError("second")
    first.__context__, second.__context__ = second, first
    assert error_text(first) == "RuntimeError: first"
