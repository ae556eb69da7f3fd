"""The import rules of docs/architecture.md: the layer contracts in pyproject.toml
(`lint-imports`) and no import circles anywhere, TYPE_CHECKING imports included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("amqpd", "exchanges", "confirms", "persistence", "interop")


def test_layer_contracts_hold() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import circles: each module that both imports and is imported by another module
    (directly or not), grouped with those modules."""
    circles: set[tuple[str, ...]] = set()
    for module in graph.modules:
        both_ways = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if both_ways:
            circles.add(tuple(sorted({module, *both_ways})))
    return sorted(list(circle) for circle in circles)


def test_no_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert _cycles(graph) == []
