"""The web dashboard in a real headless browser (Debian's chromium, driven by Playwright):
every page loads without console errors, the overview charts draw their data, tables sort
and filter, and a purge clicked on the queues page empties the queue (checked over AMQP)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pika
import pytest
from playwright.sync_api import ConsoleMessage, Error, Page, sync_playwright

from amqpd.model.broker import BrokerConfig
from amqpd.shell.server import ServerConfig, background_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MIB = 1024 * 1024
WAIT_MS = 60_000  # generous: a busy machine, a cold browser

# coloured pixels on a chart: the series were drawn, not only the grey grid and labels
_SERIES_PIXELS = """(id) => {
  const canvas = document.getElementById(id);
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let count = 0;
  for (let i = 0; i < data.length; i += 4) {
    const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
    if (a > 200 && Math.max(r, g, b) - Math.min(r, g, b) > 60) count += 1;
  }
  return count;
}"""


@contextmanager
def _browser_page(errors: list[str]) -> Iterator[Page]:
    """A page in a fresh headless chromium; console errors and page errors go to
    ``errors``. The browser is closed when the block ends."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)

            def console(message: ConsoleMessage) -> None:
                if message.type == "error":
                    errors.append(f"console: {message.text} at {message.location}")

            def page_error(error: Error) -> None:
                errors.append(f"page error: {error}")

            page.on("console", console)
            page.on("pageerror", page_error)
            page.on("dialog", lambda dialog: dialog.accept())  # purge / delete confirmations
            yield page
        finally:
            browser.close()


def _column(page: Page, table: str, index: int) -> list[str]:
    return [
        text.strip()
        for text in page.locator(f"#{table} tbody tr td:nth-child({index})").all_inner_texts()
    ]


def test_dashboard_pages_charts_and_purge() -> None:
    memory = [10 * MIB]  # what the broker's memory probe reports
    config = ServerConfig(
        port=0, management_port=0, memory_check_interval=0.05, memory_probe=lambda: memory[0]
    )
    with background_server(BrokerConfig(memory_high_watermark=100 * MIB), config) as server:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        errors: list[str] = []
        try:
            channel = conn.channel()
            for name, count in (("purge-me", 5), ("keep-me", 2), ("also-kept", 9)):
                channel.queue_declare(name)
                for i in range(count):
                    channel.basic_publish("", name, f"{name} {i}".encode())
            channel.exchange_declare("dash.topic", "topic")
            channel.queue_bind("keep-me", "dash.topic", "dash.#")
            assert channel.queue_declare("purge-me", passive=True).method.message_count == 5
            base = f"http://127.0.0.1:{server.management_port}/"
            with _browser_page(errors) as page:
                page.goto(base)
                page.fill("input[name=username]", "guest")
                page.fill("input[name=password]", "guest")
                page.click("form#login button[type=submit]")

                # overview: totals and the charts draw the sampled data
                page.wait_for_selector("#chart-queued[data-samples]")
                page.wait_for_function(
                    "document.querySelector('[data-total=ready] b').textContent === '16'"
                )
                assert page.evaluate(_SERIES_PIXELS, "chart-queued") > 0
                page.wait_for_selector("#chart-rates[data-samples]")
                assert page.locator("#alarms").is_hidden()

                # queues: sortable and filterable
                page.click("nav a[data-page=queues]")
                page.wait_for_selector("#queues tbody tr td a")
                assert _column(page, "queues", 2) == ["also-kept", "keep-me", "purge-me"]
                page.click("#queues th[data-key=messages_ready]")
                assert _column(page, "queues", 6) == ["9", "5", "2"]  # largest first
                page.fill("#queues-filter", "purge")
                assert _column(page, "queues", 2) == ["purge-me"]

                # purge from the page: the queue is empty for AMQP clients too
                page.click("#queues button.purge[data-name=purge-me]")
                page.wait_for_function(
                    "[...document.querySelectorAll('#queues tbody tr td:nth-child(6)')]"
                    ".map(td => td.textContent).join() === '0'"
                )
                assert channel.queue_declare("purge-me", passive=True).method.message_count == 0
                assert channel.queue_declare("also-kept", passive=True).method.message_count == 9

                # one queue's page: get a message back (requeued)
                page.goto(base + "#/queues/%2F/keep-me")
                page.click("#get-messages button[type=submit]")
                page.wait_for_selector("#messages .message pre")
                assert page.inner_text("#messages .message pre") == "keep-me 0"

                # the other pages list what the broker has
                page.click("nav a[data-page=exchanges]")
                page.wait_for_selector("#bindings tbody tr td")
                assert "dash.topic" in _column(page, "exchanges", 2)
                assert "dash.#" in _column(page, "bindings", 5)
                page.click("nav a[data-page=connections]")
                page.wait_for_selector("#connections tbody tr td button.close")
                assert _column(page, "connections", 3) == ["guest"]
                page.wait_for_selector("#channels tbody tr td")
                page.click("nav a[data-page=admin]")
                page.wait_for_selector("#permissions tbody tr td")
                assert "guest" in _column(page, "users", 1)
                assert "/" in _column(page, "vhosts", 1)

                # a resource alarm shows on every page, and goes away when it clears
                memory[0] = 200 * MIB
                page.wait_for_selector("#alarms:not([hidden])")
                assert "Memory alarm" in page.inner_text("#alarms")
                memory[0] = 10 * MIB
                page.wait_for_selector("#alarms", state="hidden")
        finally:
            conn.close()
        assert errors == []
