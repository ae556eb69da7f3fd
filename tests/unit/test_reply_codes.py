"""amqpd.wire.errors: reply codes, their names and which of them close the connection, as
RabbitMQ's rabbit_framing decides (soft codes close the channel, hard ones the connection)."""

from __future__ import annotations

import pytest

from amqpd.wire.errors import AMQPError, ReplyCode, reply_name


@pytest.mark.parametrize("code", [311, 312, 313, 403, 404, 405, 406])
def test_soft_codes_close_only_the_channel(code: int) -> None:
    assert not ReplyCode(code).closes_connection
    assert not AMQPError(code, "x").closes_connection


@pytest.mark.parametrize("code", [320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541])
def test_hard_codes_close_the_connection(code: int) -> None:
    assert ReplyCode(code).closes_connection
    assert AMQPError(code, "x").closes_connection


def test_an_unknown_code_closes_the_connection_and_is_shown_as_a_number() -> None:
    error = AMQPError(599, "odd")
    assert error.closes_connection
    assert error.reply_text == "599 - odd"
    assert reply_name(599) == "599"


def test_reply_text_is_name_dash_text_cut_at_255() -> None:
    assert AMQPError(404, "no queue 'q' in vhost '/'").reply_text == (
        "NOT_FOUND - no queue 'q' in vhost '/'"
    )
    assert len(AMQPError(406, "x" * 400).reply_text) == 255


def test_codes_format_as_plain_numbers() -> None:
    assert f"{ReplyCode.NOT_FOUND}" == "404"
    assert str(ReplyCode.CONNECTION_FORCED) == "320"
