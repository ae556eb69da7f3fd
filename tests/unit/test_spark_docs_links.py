"""The Spark connector's documents point only at files that exist.

Checked: markdown links with a relative target, and code spans that name a path (a ``/`` and a
file extension, e.g. ``tests/perf/spark_rows.py``), resolved against the document's folder or
the repository root. No Spark, no sockets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md", "docs/spark.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`([\w./-]+/[\w.-]+\.(?:md|py|toml|txt|json|ya?ml))`")


def _targets(text: str) -> list[str]:
    links = [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:|^#", t)]
    return [t.split("#")[0] for t in links] + CODE_PATH.findall(text)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_relative_links_and_paths_exist(document: str) -> None:
    path = ROOT / document
    targets = _targets(path.read_text())
    assert targets, f"{document}: expected some links or paths to check"
    missing = [t for t in targets if not (path.parent / t).exists() and not (ROOT / t).exists()]
    assert missing == [], f"{document} points at files that are not in the repository"


def test_the_checker_sees_a_broken_link() -> None:
    text = "see [x](../shared/NOT-HERE.md) and `tests/perf/nope.py`, not [y](https://a.b/c)"
    assert _targets(text) == ["../shared/NOT-HERE.md", "tests/perf/nope.py"]
