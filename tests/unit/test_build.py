"""The compiled build: the README install runs the mypyc-compiled core, never a stale one.

The unit suite runs twice in CI (scripts/test-all): on the compiled install, and with
AMQPD_PURE=1 on the same install, which loads every compiled module from its source instead.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import amqpd
from amqpd.buildinfo import MANIFEST_NAME, PURE_ENV, inspect
from amqpd.cli.main import build_parser
from tests.unit.management_support import Api

ROOT = Path(amqpd.__file__).resolve().parent.parent
PURE_RUN = os.environ.get(PURE_ENV, "") not in ("", "0")
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def is_compiled(module: ModuleType) -> bool:
    """True when ``module`` was loaded from a C extension (a compiled build)."""
    return isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader)


def test_the_readme_install_runs_the_compiled_modules() -> None:
    build = amqpd.BUILD
    assert build.modules, "amqpd/_build.json lists no compiled modules: run pip install -e ."
    if PURE_RUN:
        assert (build.kind, build.reason) == ("pure", f"{PURE_ENV} is set")
    else:
        assert build.kind == "mypyc", f"the README install should compile the core: {build}"
    for name in build.modules:
        module = importlib.import_module(name)
        assert is_compiled(module) is not PURE_RUN, module.__file__
    assert not is_compiled(amqpd.buildinfo)  # not listed: always interpreted


def test_version_and_overview_say_which_build_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    expected = "pure Python: AMQPD_PURE is set" if PURE_RUN else "mypyc-compiled core, "
    assert expected in capsys.readouterr().out
    overview = Api().get("/api/overview").json()
    assert overview["amqpd_build"] == ("pure" if PURE_RUN else "mypyc")
    assert overview["product_version"] == amqpd.__version__  # RabbitMQ's fields stay as they were


def _tree(tmp_path: Path, build: str, sources: dict[str, bytes], libraries: bool) -> Path:
    for source, text in sources.items():
        path = tmp_path / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
        if libraries:
            path.with_name(path.stem + SUFFIX).write_bytes(b"")
    manifest = {
        "build": build,
        "reason": "no C compiler (cc)" if build == "pure" else "",
        "sources": {s: hashlib.sha256(t).hexdigest() for s, t in sources.items()},
    }
    (tmp_path / "amqpd" / MANIFEST_NAME).write_text(json.dumps(manifest))
    return tmp_path


def test_inspect_chooses_pure_for_a_pure_build_the_switch_or_a_stale_source(
    tmp_path: Path,
) -> None:
    sources = {"amqpd/wire/codec.py": b"A = 1\n", "exchanges/topic.py": b"B = 2\n"}
    root = _tree(tmp_path, "mypyc", sources, libraries=True)
    fresh = inspect(root, {})
    assert (fresh.kind, fresh.stale) == ("mypyc", False)
    assert fresh.modules == ("amqpd.wire.codec", "exchanges.topic")
    assert inspect(root, {PURE_ENV: "0"}).kind == "mypyc"
    switched = inspect(root, {PURE_ENV: "1"})
    assert (switched.kind, switched.reason, switched.stale) == ("pure", "AMQPD_PURE is set", False)

    (root / "exchanges" / "topic.py").write_bytes(b"B = 3\n")
    stale = inspect(root, {})
    assert (stale.kind, stale.stale) == ("pure", True)
    assert stale.reason.startswith("exchanges/topic.py changed since the compiled build")
    (root / "exchanges" / "topic.py").write_bytes(b"B = 2\n")
    assert inspect(root, {}).kind == "mypyc"

    (root / "amqpd" / "wire" / ("codec" + SUFFIX)).unlink()
    missing = inspect(root, {})
    assert (missing.kind, missing.stale) == ("pure", True)
    assert missing.reason.startswith("no compiled module for amqpd/wire/codec.py")

    pure = inspect(_tree(tmp_path / "p", "pure", sources, libraries=False), {})
    assert (pure.kind, pure.reason, pure.stale) == ("pure", "no C compiler (cc)", False)
    assert inspect(tmp_path / "never-built", {}).reason == "not built: no amqpd/_build.json"


def test_an_edited_source_runs_from_source_never_the_old_library(tmp_path: Path) -> None:
    """A copy of the installed tree with one compiled module's source edited after the build."""
    for package in ("amqpd", "exchanges", "confirms", "persistence", "interop"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    edited = tmp_path / "amqpd" / "model" / "statistics.py"
    assert edited.with_name("statistics" + SUFFIX).is_file()
    edited.write_text(edited.read_text() + "\nEDITED_AFTER_BUILD = True\n")
    script = (
        "import amqpd, amqpd.model.statistics as s, amqpd.wire.codec as c\n"
        "from importlib.machinery import ExtensionFileLoader as E\n"
        "print(amqpd.__file__, amqpd.BUILD.kind, amqpd.BUILD.stale,"
        " getattr(s, 'EDITED_AFTER_BUILD', False),"
        " isinstance(s.__loader__, E), isinstance(c.__loader__, E))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV} | {"PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    path, kind, stale, edited_seen, stats_compiled, codec_compiled = run.stdout.split()
    assert Path(path).is_relative_to(tmp_path)
    # All or nothing: the untouched codec runs from source too, beside the edited module.
    assert (kind, stale, edited_seen, stats_compiled, codec_compiled) == (
        "pure",
        "True",
        "True",
        "False",
        "False",
    )
    version = subprocess.run(
        [sys.executable, "-m", "amqpd", "--version"], cwd=tmp_path, env=env, capture_output=True
    )
    assert version.returncode == 0, version.stderr
    assert (
        b"pure Python: amqpd/model/statistics.py changed since the compiled build; "
        b"pip install -e . rebuilds it"
    ) in version.stdout
