"""The dashboard as the place to work, in a real headless browser (Debian's chromium through
Playwright, one browser for the module): every form does what it says, checked through the
management API (declare a queue, an exchange and a binding; publish and get; move messages
with a shovel; users, vhosts, permissions, policies and limits; definitions export and
import), a stream's page (its offsets, segments and consumers' offsets; no get, purge or
move), the charts draw the server's history, a missing queue says so, and a 700 px wide
window has no horizontal overflow. Screenshots go to a temporary directory."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest
from playwright.sync_api import ConsoleMessage, Dialog, Error, Page, sync_playwright

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
WAIT_MS = 60_000  # generous: a busy machine, a cold browser
PAGES = ("", "connections", "exchanges", "queues", "shovels", "admin")

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


@dataclass
class Dashboard:
    """The running broker, an API client and the logged-in page."""

    page: Page
    api: httpx.Client
    base: str
    amqp_port: int
    shots: Path
    errors: list[str]

    def go(self, fragment: str) -> None:
        """Open ``#/fragment`` (a fresh page state, as a link or the address bar would)."""
        self.page.goto(f"{self.base}#/{fragment}")
        self.page.wait_for_function(
            "document.getElementById('refreshed').textContent.startsWith('last at')"
        )

    def open_form(self, form_id: str) -> None:
        details = self.page.locator(f"#{form_id}-panel")
        if details.get_attribute("open") is None:
            details.locator("summary").first.click()

    def submit(self, form_id: str, expect: str) -> None:
        """Submit the form and wait for the status line to confirm it with ``expect``."""
        self.page.evaluate("document.getElementById('status').hidden = true")
        self.page.click(f"form#{form_id} button[type=submit]")
        self.page.wait_for_selector("#status:not([hidden])")
        status = self.page.inner_text("#status")
        assert expect in status, status
        assert self.page.get_attribute("#status", "class") == "ok", status

    def facts(self, selector: str) -> dict[str, str]:
        """A facts table's rows (``table.facts`` under ``selector``) as {label: text}."""
        rows = self.page.locator(f"{selector} table.facts tr").all()
        return {row.locator("th").inner_text(): row.locator("td").inner_text() for row in rows}

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)


def _answer(dialog: Dialog) -> None:
    dialog.accept("closed from the dashboard" if dialog.type == "prompt" else None)


def _ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def _poll(condition: Any, what: str) -> None:
    """Wait (a deadline) for a condition the broker reaches on its own (a shovel's work)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    shots = tmp_path_factory.mktemp("dashboard-shots")
    with node_under_test(tmp_path_factory, http=True) as server:  # a node under workers
        base = f"http://127.0.0.1:{server.management_port}/"
        errors: list[str] = []
        with (
            httpx.Client(base_url=base + "api/", auth=("guest", "guest"), timeout=30) as client,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(WAIT_MS)

                def console(message: ConsoleMessage) -> None:
                    # a refused request is the page's to explain (tested where it matters)
                    if message.type == "error" and "Failed to load resource" not in message.text:
                        errors.append(f"console: {message.text} at {message.location}")

                def page_error(error: Error) -> None:
                    errors.append(f"page error: {error}")

                page.on("console", console)
                page.on("pageerror", page_error)
                page.on("dialog", _answer)
                page.goto(base)
                page.fill("input[name=username]", "guest")
                page.fill("input[name=password]", "guest")
                page.click("form#login button[type=submit]")
                page.wait_for_selector("#nav:not([hidden])")
                yield Dashboard(page, client, base, server.port, shots, errors)
            finally:
                browser.close()
        assert errors == []


def test_add_a_queue_with_arguments(dash: Dashboard) -> None:
    dash.go("queues")
    dash.open_form("add-queue")
    form = dash.page.locator("form#add-queue")
    form.locator("input[name=name]").fill("form-q")
    form.locator("button.link", has_text="x-max-length").first.click()
    row = form.locator(".kv-row").first
    assert row.locator(".kv-key").input_value() == "x-max-length"
    row.locator(".kv-value").fill("50")
    dash.submit("add-queue", "Queue 'form-q' declared")
    queue = _ok(dash.api.get("queues/%2F/form-q"))
    assert queue["durable"] is True and queue["arguments"] == {"x-max-length": 50}
    dash.page.wait_for_selector("#queues a:text-is('form-q')")


def test_add_an_exchange_bind_and_unbind(dash: Dashboard) -> None:
    _ok(dash.api.put("queues/%2F/bound-q", json={"durable": False}))
    dash.go("exchanges")
    dash.open_form("add-exchange")
    form = dash.page.locator("form#add-exchange")
    form.locator("input[name=name]").fill("form-x")
    form.locator("select[name=type]").select_option("topic")
    form.locator("select[name=durable]").select_option("false")
    dash.submit("add-exchange", "Exchange 'form-x' declared")
    exchange = _ok(dash.api.get("exchanges/%2F/form-x"))
    assert exchange["type"] == "topic" and exchange["durable"] is False

    # the exchange's own page: bind a queue to it
    dash.page.click("#exchanges a:text-is('form-x')")
    dash.page.wait_for_selector("h1:has-text('form-x')")
    dash.open_form("add-binding")
    form = dash.page.locator("form#add-binding")
    form.locator("input[name=destination]").fill("bound-q")
    form.locator("input[name=routing_key]").fill("orders.#")
    dash.submit("add-binding", "'bound-q' bound to exchange 'form-x'")
    bindings = _ok(dash.api.get("bindings/%2F/e/form-x/q/bound-q"))
    assert [b["routing_key"] for b in bindings] == ["orders.#"]
    dash.page.wait_for_selector("#exchange-source-bindings td:text-is('orders.#')")
    dash.shot("exchange")

    # the queue's page lists the binding (and the default one); unbind from there
    dash.go("queues/%2F/bound-q")
    dash.page.wait_for_selector("#queue-bindings td:text-is('orders.#')")
    assert "(Default exchange binding)" in dash.page.inner_text("#queue-bindings")
    dash.page.click("#queue-bindings button.unbind")
    dash.page.wait_for_selector("#queue-bindings td:text-is('orders.#')", state="detached")
    assert _ok(dash.api.get("bindings/%2F/e/form-x/q/bound-q")) == []

    # and bind again from the queue's side
    dash.open_form("add-binding")
    form = dash.page.locator("form#add-binding")
    form.locator("input[name=source]").fill("form-x")
    form.locator("input[name=routing_key]").fill("again")
    dash.submit("add-binding", "Queue 'bound-q' bound to exchange 'form-x'")
    bindings = _ok(dash.api.get("bindings/%2F/e/form-x/q/bound-q"))
    assert [b["routing_key"] for b in bindings] == ["again"]


def test_publish_from_the_queue_page_then_get(dash: Dashboard) -> None:
    _ok(dash.api.put("queues/%2F/publish-q", json={"durable": True}))
    dash.go("queues/%2F/publish-q")
    dash.open_form("publish-message")
    form = dash.page.locator("form#publish-message")
    form.locator("select[name=delivery_mode]").select_option("2")
    header = form.locator(".kv[data-name=headers] .kv-row").first
    header.locator(".kv-key").fill("origin")
    header.locator(".kv-value").fill("dashboard")
    form.locator("textarea[name=payload]").fill("hello from the form")
    dash.submit("publish-message", "Message published.")
    [got] = _ok(
        dash.api.post(
            "queues/%2F/publish-q/get",
            json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        )
    )
    assert got["payload"] == "hello from the form"
    assert got["properties"]["delivery_mode"] == 2
    assert got["properties"]["headers"] == {"origin": "dashboard"}
    # and "Get messages" on the page shows it
    dash.page.click("#get-messages button[type=submit]")
    dash.page.wait_for_selector("#messages .message pre")
    assert dash.page.inner_text("#messages .message pre") == "hello from the form"
    # the queue's charts draw the server's history once it has sampled the queue
    dash.page.wait_for_function(
        "Number(document.getElementById('chart-queue-depth').dataset.samples || 0) > 0"
    )
    assert dash.page.evaluate(_SERIES_PIXELS, "chart-queue-depth") > 0
    dash.shot("queue")


def test_move_messages_to_another_queue(dash: Dashboard) -> None:
    _ok(dash.api.put("queues/%2F/move-src", json={"durable": True}))
    _ok(dash.api.put("queues/%2F/move-dst", json={"durable": True}))
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", dash.amqp_port))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(3):
            channel.basic_publish("", "move-src", f"m{i}".encode())
    finally:
        conn.close()
    dash.go("queues/%2F/move-src")
    dash.open_form("move-messages")
    dash.page.locator("form#move-messages input[name=destination]").fill("move-dst")
    dash.submit("move-messages", "Moving the messages of 'move-src' to 'move-dst'")

    def moved() -> bool:
        src = _ok(dash.api.get("queues/%2F/move-src"))["messages"]
        dst = _ok(dash.api.get("queues/%2F/move-dst"))["messages"]
        return bool(src == 0 and dst == 3)

    _poll(moved, "the shovel to move the messages")
    # the shovel removes itself once it moved what the queue held (src-delete-after)
    _poll(
        lambda: dash.api.get("parameters/shovel/%2F/Move%20from%20move-src").status_code == 404,
        "the shovel to finish",
    )
    got = _ok(
        dash.api.post(
            "queues/%2F/move-dst/get",
            json={"count": 3, "ackmode": "ack_requeue_false", "encoding": "auto"},
        )
    )
    assert [m["payload"] for m in got] == ["m0", "m1", "m2"]


def test_a_stream_page_shows_offsets_and_offers_no_get_purge_or_move(dash: Dashboard) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", dash.amqp_port))
    try:
        channel = conn.channel()
        channel.queue_declare("dash-stream", durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_delivery()
        for i in range(5):
            channel.basic_publish("", "dash-stream", f"s{i}".encode())
        reader = conn.channel()
        reader.basic_qos(prefetch_count=2)
        got: list[int] = []

        def on_message(_ch: Any, _method: Any, properties: Any, _body: bytes) -> None:
            got.append(properties.headers["x-stream-offset"])  # not acked: prefetch 2 holds

        arguments = {"x-stream-offset": 1}
        reader.basic_consume("dash-stream", on_message, consumer_tag="tail", arguments=arguments)
        deadline = time.monotonic() + WAIT_MS / 1000
        while len(got) < 2 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=1)
        assert got == [1, 2]
        queue = _ok(dash.api.get("queues/%2F/dash-stream"))
        assert queue["type"] == "stream" and queue["consumer_offsets"] == {"tail": 3}
        dash.go("queues/%2F/dash-stream")
        dash.page.wait_for_selector("#stream:not([hidden]) table.facts")
        facts = dash.facts("#stream")
        labels = {"Messages kept": "messages", "Segments": "segments"}
        labels.update({"First offset": "first_offset", "Last offset": "last_offset"})
        labels.update({"Committed offset": "committed_offset", "Size on disk": "stream_bytes"})
        assert {label: facts[label] for label in labels} == {
            label: str(queue[key]) + (" B" if key == "stream_bytes" else "")  # under 1 KiB
            for label, key in labels.items()
        }
        assert (queue["first_offset"], queue["last_offset"], queue["committed_offset"]) == (0, 4, 4)
        # the consumers table's Offset column: the next offset the consumer will be sent
        dash.page.wait_for_selector("#consumers td.offset")
        assert dash.page.is_visible("#consumers th:text-is('Offset')")
        row = dash.page.locator("#consumers tbody tr", has_text="tail")
        assert row.locator("td.offset").inner_text() == "3"
        # what a stream refuses is not offered; Delete is
        for refused in ("#get-messages-section", "#move-messages-panel", "#purge-queue"):
            assert dash.page.is_hidden(refused), refused
        assert dash.page.is_visible("button.delete:text-is('Delete queue')")
        dash.shot("stream")

        # the list: "stream" in the type column, kept messages as Ready and Total, no
        # unacked count (acked messages stay in a stream), no Purge
        dash.go("queues")
        row = dash.page.locator("#queues tbody tr", has_text="dash-stream")
        cells = row.locator("td").all_inner_texts()
        assert (cells[2], cells[6], cells[7], cells[8]) == ("stream", "5", "\u2013", "5")
        assert row.locator("button.purge").count() == 0
        assert row.locator("button.delete").count() == 1
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()

    # a classic queue's page still offers them
    _ok(dash.api.put("queues/%2F/classic-q", json={"durable": False}))
    dash.go("queues/%2F/classic-q")
    for offered in ("#get-messages-section", "#move-messages-panel", "#purge-queue"):
        assert dash.page.is_visible(offered), offered
    assert dash.page.is_hidden("#stream") and dash.page.is_hidden("#consumers th:text-is('Offset')")


def test_add_a_stream_from_the_form(dash: Dashboard) -> None:
    dash.go("queues")
    dash.open_form("add-queue")
    form = dash.page.locator("form#add-queue")
    form.locator("select[name=durable]").select_option("false")
    form.locator("select[name=auto_delete]").select_option("true")
    form.locator("select[name=type]").select_option("stream")
    # a stream is durable and not auto-delete: the form says so and keeps them
    durable = form.locator("select[name=durable]")
    assert durable.is_disabled() and durable.input_value() == "true"
    assert form.locator("select[name=auto_delete]").input_value() == "false"
    assert "always durable" in form.locator("#stream-note").inner_text()
    form.locator("input[name=name]").fill("form-stream")
    form.locator("button.link", has_text="x-max-age").first.click()
    form.locator(".kv-row").first.locator(".kv-value").fill("1D")
    dash.submit("add-queue", "Queue 'form-stream' declared")
    queue = _ok(dash.api.get("queues/%2F/form-stream"))
    assert (queue["type"], queue["durable"], queue["auto_delete"]) == ("stream", True, False)
    assert queue["arguments"] == {"x-queue-type": "stream", "x-max-age": "1D"}
    form.locator("select[name=type]").select_option("classic")
    assert durable.is_enabled()
    assert form.locator("#stream-note").is_hidden()
    # the API's refusal is shown as it comes (a stream declared again as classic)
    form.locator("input[name=name]").fill("form-stream")
    dash.page.evaluate("document.getElementById('status').hidden = true")
    dash.page.click("form#add-queue button[type=submit]")
    dash.page.wait_for_selector("#status.error:not([hidden])")
    assert "inequivalent arg 'x-queue-type'" in dash.page.inner_text("#status")


def test_users_vhosts_permissions_policies_and_limits(dash: Dashboard) -> None:
    dash.go("admin")
    dash.page.wait_for_selector("#users tbody td:text-is('guest')")
    # a user
    dash.open_form("add-user")
    form = dash.page.locator("form#add-user")
    form.locator("input[name=username]").fill("alice")
    form.locator("input[name=password]").fill("s3cret")
    form.locator("button.link", has_text="monitoring").click()
    dash.submit("add-user", "User 'alice' saved.")
    assert _ok(dash.api.get("users/alice"))["tags"] == ["monitoring"]
    assert httpx.get(dash.base + "api/whoami", auth=("alice", "s3cret")).status_code == 200
    # edit it: the row's Edit fills the form; an empty password keeps the current one
    dash.page.wait_for_selector("#users td:text-is('alice')")
    dash.page.locator("#users tr", has_text="alice").locator("button.edit").click()
    assert form.locator("input[name=username]").input_value() == "alice"
    form.locator("input[name=tags]").fill("administrator")
    dash.submit("add-user", "User 'alice' saved.")
    assert _ok(dash.api.get("users/alice"))["tags"] == ["administrator"]
    assert httpx.get(dash.base + "api/whoami", auth=("alice", "s3cret")).status_code == 200

    # a virtual host
    dash.open_form("add-vhost")
    form = dash.page.locator("form#add-vhost")
    form.locator("input[name=vhost]").fill("dev")
    form.locator("input[name=description]").fill("for the developers")
    dash.submit("add-vhost", "Virtual host 'dev' saved.")
    assert _ok(dash.api.get("vhosts/dev"))["description"] == "for the developers"

    # a permission (the selects list the new user and vhost)
    dash.open_form("set-permission")
    form = dash.page.locator("form#set-permission")
    vhost_option = "form#set-permission select[name=vhost] option[value=dev]"
    dash.page.wait_for_selector(vhost_option, state="attached")
    form.locator("select[name=user]").select_option("alice")
    form.locator("select[name=vhost]").select_option("dev")
    form.locator("input[name=write]").fill("^amq\\.")
    dash.submit("set-permission", "Permissions of 'alice' in 'dev' set.")
    permission = _ok(dash.api.get("permissions/dev/alice"))
    assert (permission["configure"], permission["write"], permission["read"]) == (
        ".*",
        "^amq\\.",
        ".*",
    )
    dash.page.wait_for_selector("#permissions td:text-is('alice')")
    dash.page.locator("#permissions tr", has_text="alice").locator("button.edit").click()
    assert form.locator("input[name=write]").input_value() == "^amq\\."
    form.locator("input[name=read]").fill("^reports$")
    dash.submit("set-permission", "Permissions of 'alice' in 'dev' set.")
    assert _ok(dash.api.get("permissions/dev/alice"))["read"] == "^reports$"

    # a policy: the queue list then names it
    _ok(dash.api.put("queues/%2F/capped-q", json={"durable": False}))
    dash.open_form("add-policy")
    form = dash.page.locator("form#add-policy")
    form.locator("select[name=vhost]").select_option("/")
    form.locator("input[name=name]").fill("cap")
    form.locator("input[name=pattern]").fill("^capped-")
    form.locator("select[name=apply-to]").select_option("queues")
    form.locator("input[name=priority]").fill("3")
    form.locator("button.link", has_text="max-length").first.click()
    form.locator(".kv[data-name=definition] .kv-value").first.fill("5")
    dash.submit("add-policy", "Policy 'cap' saved in '/'.")
    policy = _ok(dash.api.get("policies/%2F/cap"))
    assert policy["definition"] == {"max-length": 5}
    assert policy["apply-to"] == "queues" and policy["priority"] == 3
    dash.page.wait_for_selector("#policies td:text-is('cap')")
    # edit it: the row's Edit fills the form with the policy, definition included
    dash.page.locator("#policies tr", has_text="cap").locator("button.edit").click()
    assert form.locator("input[name=pattern]").input_value() == "^capped-"
    value = form.locator(".kv[data-name=definition] .kv-value").first
    assert value.input_value() == "5"
    value.fill("9")
    dash.submit("add-policy", "Policy 'cap' saved in '/'.")
    policy = _ok(dash.api.get("policies/%2F/cap"))
    assert policy["definition"] == {"max-length": 9} and policy["apply-to"] == "queues"

    # a vhost limit
    dash.open_form("set-vhost-limit")
    form = dash.page.locator("form#set-vhost-limit")
    form.locator("select[name=vhost]").select_option("dev")
    form.locator("input[name=value]").fill("10")
    dash.submit("set-vhost-limit", "Limit max-connections of 'dev' set to 10.")
    assert _ok(dash.api.get("vhost-limits/dev")) == [
        {"vhost": "dev", "value": {"max-connections": 10}}
    ]
    dash.page.wait_for_selector("#vhost-limits td:text-is('dev')")

    # user limits: a form where the broker has /api/user-limits, no section where not
    if dash.api.get("user-limits").status_code == 404:
        dash.page.wait_for_selector("#user-limits", state="hidden")
    else:
        dash.open_form("set-user-limit")
        form = dash.page.locator("form#set-user-limit")
        form.locator("select[name=user]").select_option("alice")
        form.locator("input[name=value]").fill("4")
        dash.submit("set-user-limit", "Limit max-connections of 'alice' set to 4.")
        limits = _ok(dash.api.get("user-limits/alice"))
        assert limits[0]["value"]["max-connections"] == 4
    dash.shot("admin")

    dash.go("queues")
    dash.page.wait_for_selector("#queues tr:has-text('capped-q') .tag.policy:text-is('cap')")

    # delete the user from its row (confirmed)
    dash.go("admin")
    dash.page.locator("#users tr", has_text="alice").locator("button.delete").click()
    dash.page.wait_for_selector("#users td:text-is('alice')", state="detached")
    assert dash.api.get("users/alice").status_code == 404


def test_definitions_export_and_import(dash: Dashboard, tmp_path: Path) -> None:
    _ok(dash.api.put("queues/%2F/exported-q", json={"durable": True}))
    dash.go("")
    with dash.page.expect_download() as download:
        dash.page.click("#export-definitions")
    exported = json.loads(Path(download.value.path()).read_text())
    assert "exported-q" in [q["name"] for q in exported["queues"]]

    definitions = {
        "vhosts": [{"name": "imported"}],
        "queues": [
            {
                "name": "imported-q",
                "vhost": "imported",
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-max-length": 7},
            }
        ],
    }
    upload = tmp_path / "definitions.json"
    upload.write_text(json.dumps(definitions))
    dash.page.set_input_files("#definitions-file", str(upload))
    dash.submit("import-definitions", "Your definitions were imported successfully.")
    queue = _ok(dash.api.get("queues/imported/imported-q"))
    assert queue["arguments"] == {"x-max-length": 7}


def test_a_missing_queue_or_exchange_says_so(dash: Dashboard) -> None:
    dash.go("queues/%2F/no-such-queue")
    dash.page.wait_for_selector("#missing:not([hidden])")
    text = dash.page.inner_text("#missing")
    assert "Queue 'no-such-queue' does not exist in virtual host '/'" in text
    assert "#/queues/" in dash.page.url  # the page stays on what was asked for
    dash.shot("missing-queue")
    dash.go("exchanges/%2F/no-such-exchange")
    dash.page.wait_for_selector("#missing:not([hidden])")
    assert "Exchange 'no-such-exchange' does not exist" in dash.page.inner_text("#missing")


def test_overview_history_memory_and_churn(dash: Dashboard) -> None:
    dash.go("")
    # the charts come from the server's history (samples in /api/overview) once it has a
    # point in the range (a broker that started seconds ago has none yet)
    ranged = "overview?lengths_age=600&lengths_incr=5"
    _poll(
        lambda: bool(_ok(dash.api.get(ranged))["queue_totals"]["messages_details"]["samples"]),
        "the first sample in the range",
    )
    overview = _ok(dash.api.get(ranged))
    dash.page.wait_for_function(
        "Number(document.getElementById('chart-queued').dataset.samples || 0) > 0"
    )
    # the memory breakdown where the broker reports one; a clear line where it does not
    memory = dash.api.get(f"nodes/{overview['node']}/memory")
    if memory.status_code == 200:
        dash.page.wait_for_selector("#memory-breakdown")
    else:
        assert memory.status_code == 404
        dash.page.wait_for_selector("#memory-unavailable:text-is('Not reported by this broker.')")
    if "churn_rates" in overview:
        dash.page.wait_for_selector("#churn")
    dash.shot("overview")


def test_vhost_and_refresh_selectors(dash: Dashboard) -> None:
    _ok(dash.api.put("vhosts/selected", json={}))
    _ok(dash.api.put("queues/selected/only-here", json={"durable": False}))
    dash.go("queues")
    dash.page.wait_for_selector("#vhost-select option[value=selected]", state="attached")
    dash.page.select_option("#vhost-select", "selected")
    dash.page.wait_for_selector("#queues a:text-is('only-here')")
    names = dash.page.locator("#queues tbody td:nth-child(2)").all_inner_texts()
    assert names == ["only-here"]
    assert "form-q" not in names
    dash.page.select_option("#vhost-select", "")
    dash.page.wait_for_selector("#queues a:text-is('form-q')")
    dash.page.select_option("#refresh-select", "0")
    assert dash.page.inner_text("#refresh-text") == "Not refreshed automatically"
    dash.page.select_option("#refresh-select", "10000")
    assert dash.page.inner_text("#refresh-text") == "Refreshed every 10 seconds"


def test_a_connection_page(dash: Dashboard) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", dash.amqp_port))
    try:
        conn.channel()
        dash.go("connections")
        dash.page.click("#connections tbody td a")
        dash.page.wait_for_selector("#connection-channels tbody .state.running")
        assert "guest" in dash.page.inner_text("table.facts")
        dash.page.wait_for_function(
            "document.getElementById('chart-connection-rates').dataset.samples !== undefined"
        )
    finally:
        conn.close()


def test_a_700_px_window_has_no_horizontal_overflow(dash: Dashboard) -> None:
    dash.page.set_viewport_size({"width": 700, "height": 900})
    try:
        fragments = [*PAGES, "queues/%2F/form-q", "queues/%2F/dash-stream", "exchanges/%2F/form-x"]
        for fragment in fragments:
            dash.go(fragment)
            for form in dash.page.locator("details.form-panel:visible > summary").all():
                form.click()  # open forms must fit too
            overflow = dash.page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, (fragment, overflow)
            dash.shot(f"narrow-{fragment.replace('/', '_').replace('%2F', '') or 'overview'}")
    finally:
        dash.page.set_viewport_size({"width": 1280, "height": 900})
