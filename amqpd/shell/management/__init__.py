"""The management HTTP API (RabbitMQ's paths and JSON shapes) and the web dashboard, served
on the broker's event loop by `amqpd.shell.http_listener`."""

from __future__ import annotations

from amqpd.shell.management.app import create_app

__all__ = ["create_app"]
