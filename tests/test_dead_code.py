"""No dead code: vulture, configured by ``[tool.vulture]`` in pyproject.toml (the packages,
vulture_allowlist.py with the reason for each name it keeps), reports nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_vulture_finds_no_unused_code() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vulture"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.stderr == "", result.stderr
    assert result.stdout == "", (
        "unused code (delete it, or justify it in vulture_allowlist.py):\n" + result.stdout
    )
    assert result.returncode == 0
