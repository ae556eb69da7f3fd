"""Which build of amqpd runs: the mypyc-compiled core or pure Python, never a stale one.

Theory of operation. ``setup.py`` compiles the modules it lists (MYPYC_MODULES) into C
extension modules beside their sources and writes ``amqpd/_build.json``: the build kind
("mypyc" or "pure") and the SHA-256 of each listed source. Python imports ``x.cpython-*.so``
in preference to the ``x.py`` beside it, so a source edited after the build would silently not
run. :func:`select` runs once, when the ``amqpd`` package is imported (every entry point imports
it first, and the compiled modules' shared library lives inside the package, so importing any
compiled module imports ``amqpd`` first). It picks pure Python when the build is pure, when
``AMQPD_PURE`` is set, or when the compiled build is stale (a source's hash differs from the
build's, or a module's extension file is missing); it then puts a finder first on
``sys.meta_path`` that loads every listed module from its ``.py``.

All or nothing: compiled modules reach each other's classes and functions directly in C, so one
module run from source beside compiled ones would make two classes of one name. Falling back
(rather than refusing to start or rebuilding) keeps the edit-and-test loop and an operator's
hot fix working while never running old code; ``amqpd --version``, ``/api/overview`` and a
warning at start say so (docs/architecture.md, "Compiled core").
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

MANIFEST_NAME = "_build.json"
PURE_ENV = "AMQPD_PURE"
REBUILD_HINT = "pip install -e . rebuilds it"


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """The build this process runs.

    Attributes:
        kind: "mypyc" (the listed modules run compiled) or "pure" (everything from source).
        reason: Why pure ("" when compiled): no compiler at build time, AMQPD_PURE, or stale.
        stale: True when a compiled build exists but its sources changed since.
        modules: The dotted names of the modules the build lists as compiled.
    """

    kind: str
    reason: str
    stale: bool
    modules: tuple[str, ...]

    def describe(self) -> str:
        """One phrase for ``amqpd --version`` and the start-up log."""
        if self.kind == "mypyc":
            return f"mypyc-compiled core, {len(self.modules)} modules"
        return f"pure Python: {self.reason}"


class SourceFinder(importlib.abc.MetaPathFinder):
    """Loads the named modules from their ``.py`` files even where an extension module exists."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A source spec for a listed module; None lets the normal finders handle the rest."""
        if fullname not in self.names or path is None:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            candidate = os.path.join(entry, leaf)
            if os.path.isfile(candidate):
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def module_name(source: str) -> str:
    """``"amqpd/wire/codec.py"`` -> ``"amqpd.wire.codec"``."""
    return source.removesuffix(".py").replace("/", ".")


def read_manifest(root: Path) -> dict[str, object] | None:
    """The manifest setup.py wrote, or None (a source tree that was never installed)."""
    try:
        loaded: object = json.loads((root / "amqpd" / MANIFEST_NAME).read_text())
    except FileNotFoundError:
        return None
    return loaded if isinstance(loaded, dict) else None


def stale_source(root: Path, sources: dict[str, str]) -> str:
    """Why the compiled build at ``root`` cannot run: an edited source or a missing library."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for source, digest in sorted(sources.items()):
        path = root / source
        if not path.with_name(path.stem + suffix).is_file():
            return f"no compiled module for {source}; {REBUILD_HINT}"
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return f"{source} changed since the compiled build; {REBUILD_HINT}"
    return ""


def inspect(root: Path, environ: Mapping[str, str]) -> BuildInfo:
    """Decide the build for the tree at ``root`` (the folder holding the ``amqpd`` package)."""
    manifest = read_manifest(root)
    if manifest is None:
        return BuildInfo("pure", "not built: no amqpd/_build.json", False, ())
    raw = manifest.get("sources")
    sources = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    modules = tuple(module_name(s) for s in sorted(sources))
    if manifest.get("build") != "mypyc":
        return BuildInfo("pure", str(manifest.get("reason") or "pure build"), False, modules)
    if environ.get(PURE_ENV, "") not in ("", "0"):
        return BuildInfo("pure", f"{PURE_ENV} is set", False, modules)
    why = stale_source(root, sources)
    if why:
        return BuildInfo("pure", why, True, modules)
    return BuildInfo("mypyc", "", False, modules)


def select() -> BuildInfo:
    """Decide this process's build; when pure, make every listed module load from source."""
    info = inspect(Path(__file__).resolve().parent.parent, os.environ)
    if info.kind == "pure" and info.modules:
        sys.meta_path.insert(0, SourceFinder(frozenset(info.modules)))
    return info
