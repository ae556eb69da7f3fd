"""A broker process loads the heavy client libraries only where it uses them
(docs/architecture.md "Lazy imports"): aiormq with the first shovel or federation link
(amqpd/shell/links/link_specs.py), httpx with worker 0's calls to the other workers,
asyncpg with a PostgreSQL store. Checked in a fresh interpreter: this test process has
imported all three already."""

from __future__ import annotations

import subprocess
import sys

BROKER_MODULES = (
    "amqpd.cli.main",
    "amqpd.shell.server",
    "amqpd.shell.links.node_links",
    "amqpd.shell.workers.node",
    "amqpd.shell.workers.gateway",
)


def _loaded_after_importing(modules: tuple[str, ...], wanted: tuple[str, ...]) -> list[str]:
    program = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(','.join(m for m in {wanted!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    return [name for name in result.stdout.strip().split(",") if name]


def test_a_broker_process_loads_no_link_http_or_postgresql_client() -> None:
    assert _loaded_after_importing(BROKER_MODULES, ("aiormq", "httpx", "asyncpg")) == []


def test_a_links_module_loads_aiormq_when_imported() -> None:
    """The check above can fail: importing a link's module does load aiormq."""
    loaded = _loaded_after_importing(("amqpd.shell.links.shovel",), ("aiormq",))
    assert loaded == ["aiormq"]
