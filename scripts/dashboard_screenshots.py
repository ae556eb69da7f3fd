"""Take a screenshot of each dashboard page into docs/dashboard/ (run by hand, not by tests).

Starts a broker on free loopback ports, gives it some traffic (queues with messages, a
consumer, a confirm-mode publisher), opens the dashboard in Debian's chromium through
Playwright, logs in as guest, waits for the server's sample history to cover a few
samples and saves overview.png, queues.png (with "Add a new queue" open), queue.png,
stream.png (the stream "orders.log" with a consumer reading it from the first offset),
exchanges.png, exchange.png, connections.png, connection.png, admin.png, queue-700px.png
(a 700 px wide window) and alarm.png (the memory alarm banner, after lowering the
watermark below the broker's memory).

    PYTHONPATH=$PWD .venv/bin/python scripts/dashboard_screenshots.py [--out docs/dashboard]
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from pathlib import Path

import pika
import pika.exceptions
from playwright.sync_api import sync_playwright

from amqpd.model.broker import BrokerConfig
from amqpd.shell.server import ServerConfig, background_server

CHROMIUM = "/usr/bin/chromium"
WATERMARK = 1 << 30  # 1 GiB; lowered to ALARM_WATERMARK for the alarm screenshot
ALARM_WATERMARK = 16 << 20  # below any broker's resident memory
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _traffic(port: int, stop: threading.Event) -> None:
    """Publish steadily to two queues and consume one of them until ``stop``."""
    params = pika.ConnectionParameters(
        "127.0.0.1", port, client_properties={"connection_name": "orders-service"}
    )
    conn = pika.BlockingConnection(params)
    publisher = conn.channel()
    publisher.confirm_delivery()
    publisher.exchange_declare("orders", "topic", durable=True)
    for name in ("orders.created", "orders.audit", "invoices"):
        publisher.queue_declare(name, durable=True)
    publisher.queue_bind("orders.created", "orders", "order.created.#")
    publisher.queue_bind("orders.audit", "orders", "order.#")
    publisher.queue_declare("orders.log", durable=True, arguments={"x-queue-type": "stream"})
    publisher.queue_bind("orders.log", "orders", "order.#")
    reader = conn.channel()
    reader.basic_qos(prefetch_count=50)
    reader.basic_consume(
        "orders.log",
        lambda ch, m, p, b: ch.basic_ack(m.delivery_tag),
        consumer_tag="log-reader",
        arguments={"x-stream-offset": "first"},
    )
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=20)
    consumer.basic_consume("orders.created", lambda ch, m, p, b: ch.basic_ack(m.delivery_tag))
    for i in range(40):
        publisher.basic_publish("", "invoices", f"invoice {i}".encode())
    sent = 0
    while not stop.is_set():
        for _ in range(25):
            publisher.basic_publish(
                "orders", "order.created.eu", f'{{"order": {sent}, "total": 12.50}}'.encode()
            )
            sent += 1
        conn.sleep(0.2)  # serves the consumers meanwhile; a steady ~100 msg/s
    with contextlib.suppress(pika.exceptions.AMQPError):  # deliveries still in flight
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard"))
    parser.add_argument("--samples", type=int, default=8, help="overview refreshes to wait")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    config = ServerConfig(port=0, management_port=0, prometheus_port=0)
    with background_server(BrokerConfig(memory_high_watermark=WATERMARK), config) as server:
        stop = threading.Event()
        worker = threading.Thread(target=_traffic, args=(server.port, stop), daemon=True)
        worker.start()
        base = f"http://127.0.0.1:{server.management_port}/"
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
                )
                page = browser.new_page(viewport={"width": 1360, "height": 900})
                page.goto(base)
                page.fill("input[name=username]", "guest")
                page.fill("input[name=password]", "guest")
                page.click("form#login button[type=submit]")
                page.wait_for_selector("#chart-rates")
                deadline = time.monotonic() + 5 * args.samples + 30
                while time.monotonic() < deadline:
                    samples = page.get_attribute("#chart-rates", "data-samples") or "0"
                    if int(samples) >= args.samples:
                        break
                    page.wait_for_timeout(1000)
                page.screenshot(path=str(args.out / "overview.png"), full_page=True)
                for name, hash_, selector in (
                    ("queues", "#/queues", "#queues tbody tr td"),
                    ("queue", "#/queues/%2F/orders.created", "#get-messages"),
                    ("stream", "#/queues/%2F/orders.log", "#consumers td.offset"),
                    ("exchanges", "#/exchanges", "#bindings tbody tr td"),
                    ("exchange", "#/exchanges/%2F/orders", "#exchange-source-bindings td"),
                    ("connections", "#/connections", "#channels tbody tr td"),
                    ("admin", "#/admin", "#permissions tbody tr td"),
                ):
                    page.goto(base + hash_)
                    page.wait_for_selector(selector)
                    if name == "queues":
                        page.click("#add-queue-panel summary")
                    if name == "queue":
                        page.click("#publish-message-panel summary")
                        page.fill("#get-messages input[name=count]", "2")
                        page.click("#get-messages button[type=submit]")
                        page.wait_for_selector("#messages > *")
                    page.wait_for_timeout(500)  # the charts' first drawing
                    page.screenshot(path=str(args.out / f"{name}.png"), full_page=True)
                    if name == "connections":
                        page.click("#connections tbody td a")
                        page.wait_for_selector("#connection-channels tbody td")
                        page.wait_for_timeout(500)
                        page.screenshot(path=str(args.out / "connection.png"), full_page=True)
                page.set_viewport_size({"width": 700, "height": 900})
                page.goto(base + "#/queues/%2F/invoices")
                page.wait_for_selector("#get-messages")
                page.click("#add-binding-panel summary")
                page.wait_for_timeout(500)
                page.screenshot(path=str(args.out / "queue-700px.png"), full_page=True)
                page.set_viewport_size({"width": 1360, "height": 900})
                # the broker's next memory check raises the alarm (a screenshot aid only:
                # the watermark is set from this thread)
                server.broker.alarms.memory_limit = ALARM_WATERMARK
                page.goto(base + "#/")
                page.wait_for_selector("#alarms:not([hidden])")
                page.wait_for_selector("#nodes td.alarm")
                page.screenshot(path=str(args.out / "alarm.png"))
                browser.close()
        finally:
            stop.set()
            worker.join(timeout=30)
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()
