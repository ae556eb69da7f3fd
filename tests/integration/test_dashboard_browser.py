"""The web dashboard in a real headless browser (Debian's chromium, driven by Playwright):
every page loads without console errors, the overview charts draw their data, tables sort
and filter, and a purge clicked on the queues page empties the queue (checked over AMQP)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pika
import pytest
from playwright.sync_api import ConsoleMessage, Dialog, Error, Page, sync_playwright

from amqpd.cli.ctl import main as ctl
from amqpd.shell.alarm_limits import MEMORY_COMMAND as MEMORY_LIMIT
from tests.conftest import node_under_test

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

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
CLOSE_REASON = "closed from the dashboard"
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
                if _optional(message):
                    return
                if message.type == "error":
                    errors.append(f"console: {message.text} at {message.location}")

            def page_error(error: Error) -> None:
                errors.append(f"page error: {error}")

            page.on("console", console)
            page.on("pageerror", page_error)
            page.on("dialog", _answer)
            yield page
        finally:
            browser.close()


# endpoints the dashboard asks for and does without where the broker has none (404)
_OPTIONAL = ("/memory", "/user-limits")


def _optional(message: ConsoleMessage) -> bool:
    url = str(message.location.get("url", "")).split("?")[0]
    return "Failed to load resource" in message.text and url.endswith(_OPTIONAL)


def _answer(dialog: Dialog) -> None:
    """Confirm purges and deletes; give a reason when closing a connection."""
    if dialog.type == "prompt":
        dialog.accept(CLOSE_REASON)
    else:
        dialog.accept()


def _wait_closed(conn: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker:
    """Serve ``conn`` until the broker closes it (a deadline); the close."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        try:
            conn.process_data_events(time_limit=1)
        except pika.exceptions.ConnectionClosedByBroker as closed:
            return closed
    raise AssertionError("the broker did not close the connection")


def _column(page: Page, table: str, index: int) -> list[str]:
    return [
        text.strip()
        for text in page.locator(f"#{table} tbody tr td:nth-child({index})").all_inner_texts()
    ]


GUEST = ("guest", "guest")


def test_dashboard_pages_charts_and_purge(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"  # amqpd ctl reaches the broker through its admin socket there
    with node_under_test(tmp_path_factory, http=True, data_dir=data) as server:
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
            policy = {"pattern": "^dash-", "definition": {"max-length": 100}}
            with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as client:
                assert client.put("api/policies/%2F/dash-cap", json=policy).status_code == 201
            with _browser_page(errors) as page:
                page.goto(base)
                # a wrong password: the form says so (no browser login dialog blocks it)
                page.fill("input[name=username]", "guest")
                page.fill("input[name=password]", "wrong")
                page.click("form#login button[type=submit]")
                page.wait_for_selector("#login-error:not([hidden])")
                assert page.inner_text("#login-error") == "Login failed"
                assert all("401" in error for error in errors), errors  # the refused request
                errors.clear()
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
                assert _column(page, "queues", 7) == ["9", "5", "2"]  # largest first
                page.fill("#queues-filter", "purge")
                assert _column(page, "queues", 2) == ["purge-me"]

                # purge from the page: the queue is empty for AMQP clients too
                page.click("#queues button.purge[data-name=purge-me]")
                page.wait_for_function(
                    "[...document.querySelectorAll('#queues tbody tr td:nth-child(7)')]"
                    ".map(td => td.textContent).join() === '0'"
                )
                assert channel.queue_declare("purge-me", passive=True).method.message_count == 0
                assert channel.queue_declare("also-kept", passive=True).method.message_count == 9

                # one queue's page: its consumer, and get a message back (requeued)
                consumer = conn.channel()
                consumer.basic_consume("also-kept", lambda *args: None, consumer_tag="watcher")
                page.goto(base + "#/queues/%2F/also-kept")
                page.wait_for_selector("text=watcher")
                consumer.close()
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
                assert _column(page, "policies", 2) == ["dash-cap"]
                assert _column(page, "policies", 5) == ['{"max-length":100}']
                assert _column(page, "operator-policies", 1) == ["No operator policies."]

                # shovels: a local -> local shovel's state (then cleared again)
                shovel = f"{base}api/parameters/shovel/%2F/dash"
                value = {"src-uri": "amqp://", "src-queue": "keep-me", "dest-uri": "amqp://"}
                value["dest-queue"] = "moved"
                assert httpx.put(shovel, json={"value": value}, auth=GUEST).status_code == 201
                page.click("nav a[data-page=shovels]")
                page.wait_for_function(
                    "[...document.querySelectorAll('#shovels tbody tr td:nth-child(3)')]"
                    ".map(td => td.textContent).join() === 'running'"
                )
                assert _column(page, "shovels", 2) == ["dash"]
                assert httpx.delete(shovel, auth=GUEST).status_code == 204
                page.wait_for_selector("#shovels td.empty")

                # federation: an exchange federated from this broker's own dash-src
                upstream = f"{base}api/parameters/federation-upstream/%2F/self"
                value = {"uri": "amqp://", "exchange": "dash-src"}
                assert httpx.put(upstream, json={"value": value}, auth=GUEST).status_code == 201
                exchange = f"{base}api/exchanges/%2F/dash-fed"
                assert httpx.put(exchange, json={"type": "fanout"}, auth=GUEST).status_code == 201
                policy = f"{base}api/policies/%2F/dash-fed"
                body = {"pattern": "^dash-fed$", "definition": {"federation-upstream": "self"}}
                body.update({"apply-to": "exchanges", "priority": 1})  # over dash-cap
                assert httpx.put(policy, json=body, auth=GUEST).status_code == 201
                page.wait_for_function(
                    "[...document.querySelectorAll('#federation-links tbody tr td:nth-child(6)')]"
                    ".map(td => td.textContent).join() === 'running'"
                )
                assert _column(page, "federation-links", 3) == ["dash-fed"]
                assert httpx.delete(policy, auth=GUEST).status_code == 204
                page.wait_for_selector("#federation-links td.empty")

                # a resource alarm shows on every page, and goes away when it clears
                assert ctl([MEMORY_LIMIT, "0", "--data-dir", str(data)], io.StringIO()) == 0
                page.wait_for_selector("#alarms:not([hidden])")
                assert "Memory alarm" in page.inner_text("#alarms")
                restored = ctl([MEMORY_LIMIT, "0.4", "--data-dir", str(data)], io.StringIO())
                assert restored == 0
                page.wait_for_selector("#alarms", state="hidden")

                # force-close the AMQP connection from the connections page
                page.click("nav a[data-page=connections]")
                page.click("#connections button.close")
                page.wait_for_selector("#connections td.empty")
                closed = _wait_closed(conn)
                assert closed.reply_code == 320
                assert CLOSE_REASON in closed.reply_text
        finally:
            if conn.is_open:
                conn.close()
        assert errors == []


def test_a_management_user_sees_what_its_tags_allow(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with node_under_test(tmp_path_factory, http=True) as server:
        base = f"http://127.0.0.1:{server.management_port}/"
        with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as admin:
            made = admin.put("api/users/viewer", json={"password": "s3cret", "tags": "management"})
            assert made.status_code in (201, 204), made.text
            allowed = admin.put(
                "api/permissions/%2F/viewer", json={"configure": ".*", "write": ".*", "read": ".*"}
            )
            assert allowed.status_code in (201, 204), allowed.text
            declared = admin.put("api/queues/%2F/visible", json={"durable": False})
            assert declared.status_code in (201, 204), declared.text
        errors: list[str] = []
        with _browser_page(errors) as page:
            page.goto(base)
            page.fill("input[name=username]", "viewer")
            page.fill("input[name=password]", "s3cret")
            page.click("form#login button[type=submit]")
            page.wait_for_selector("text=Node details need the monitoring or administrator tag.")
            assert page.is_hidden("nav a[data-page=admin]")  # administrators only
            page.click("nav a[data-page=queues]")
            page.wait_for_selector("#queues tbody tr td a")
            assert _column(page, "queues", 2) == ["visible"]
            # typed by hand: the API refuses, the page says why and stays logged in
            page.goto(base + "#/admin")
            page.wait_for_selector("#status.error")
            assert "Not administrator user" in page.inner_text("#status")
            assert page.is_visible("#nav")
        assert all("401" in error for error in errors), errors  # only the refused request
