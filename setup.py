"""Build amqpd: the sans-IO core compiled with mypyc, or pure Python.

``pip install -e .``, ``pip install .`` and ``pip wheel .`` all run this file. It compiles the
modules in :data:`MYPYC_MODULES` (and only those) into C extensions with mypyc when a C compiler
and Python's headers are present; without them, or with ``AMQPD_PURE=1`` in the environment, the
same package installs as pure Python. Either way it writes ``amqpd/_build.json``: which build this
is and the SHA-256 of every compiled module's source, so that ``amqpd/build.py`` can refuse to run
a compiled module whose ``.py`` was edited after the build (docs/architecture.md, "Compiled core").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
MANIFEST = ROOT / "amqpd" / "_build.json"
PACKAGES = ("amqpd", "exchanges", "confirms", "persistence")

# THE list of compiled modules: explicit file names, never a glob, so that a module added on
# another branch stays interpreted until someone adds it here (and its tests pass compiled).
# Not listed on purpose: exchanges/base.py (a @runtime_checkable Protocol, which mypyc rejects),
# package __init__ files, everything that does I/O (shell, cli, store backends), and the model's
# and engine's management-only modules, off the per-message path (definitions, inventory,
# scrape, admin and ctl commands, operations, parameters, policy_admin, shovels, federation).
MYPYC_MODULES: tuple[str, ...] = (
    # wire
    "amqpd/wire/codec.py",
    "amqpd/wire/content_header.py",
    "amqpd/wire/errors.py",
    "amqpd/wire/properties.py",
    "amqpd/wire/forwarding.py",  # records between workers (stage 2: one per crossing message)
    # exchanges (pure routing)
    "exchanges/binding_table.py",
    "exchanges/destinations.py",
    "exchanges/direct.py",
    "exchanges/fanout.py",
    "exchanges/federation_upstream.py",
    "exchanges/consistent_hash.py",
    "exchanges/hash_ring.py",
    "exchanges/headers.py",
    "exchanges/headers_match.py",
    "exchanges/headers_values.py",
    "exchanges/identity.py",
    "exchanges/modulus_hash.py",
    "exchanges/registry.py",
    "exchanges/router_base.py",
    "exchanges/topic.py",
    "exchanges/topic_trie.py",
    # confirms
    "confirms/coalesce.py",
    "confirms/tracker.py",
    "confirms/shards.py",
    # model
    "amqpd/model/alarms.py",
    "amqpd/model/auth.py",
    "amqpd/model/batches.py",
    "amqpd/model/broker.py",
    "amqpd/model/deadletter.py",
    "amqpd/model/declare_checks.py",
    "amqpd/model/dedup.py",
    "amqpd/model/enqueue.py",  # every routed message's enqueue (local or forwarded)
    "amqpd/model/exchange.py",
    "amqpd/model/federated_queues.py",
    "amqpd/model/federation_exchange.py",
    "amqpd/model/forwarded.py",  # stage 2: a forwarded publish, enqueued by its owner
    "amqpd/model/message.py",
    "amqpd/model/outbound.py",  # stage 2: the copies of publishes for other workers' queues
    "amqpd/model/paging.py",
    "amqpd/model/policies.py",
    "amqpd/model/priority.py",
    "amqpd/model/queue.py",
    "amqpd/model/queue_limits.py",  # Queue's TTL, x-expires and length limits (per message)
    "amqpd/model/queue_args.py",
    "amqpd/model/replica.py",  # stage 2: another worker's queue (a Queue subclass)
    "amqpd/model/routing.py",  # the base of VirtualHost: every publish is routed here
    "amqpd/model/selective.py",
    "amqpd/model/selector.py",
    "amqpd/model/sender_selected.py",
    "amqpd/model/statistics.py",
    "amqpd/model/stream.py",
    "amqpd/model/stream_args.py",
    "amqpd/model/stream_delivery.py",
    "amqpd/model/stream_dedup.py",  # subclasses the compiled Deduplicator
    "amqpd/model/vhost.py",
    # engine
    "amqpd/engine/channel.py",
    "amqpd/engine/channel_batches.py",  # a channel's confirms and commit-oks at a batch
    "amqpd/engine/channel_modes.py",
    "amqpd/engine/connection.py",
    "amqpd/engine/connection_open.py",
    "amqpd/engine/connection_timers.py",
    "amqpd/engine/consuming.py",
    "amqpd/engine/content.py",
    "amqpd/engine/handshake.py",
    "amqpd/engine/outbox.py",
    "amqpd/engine/permissions.py",
    "amqpd/engine/rates.py",
    "amqpd/engine/moving.py",  # stage 2: which methods a moved connection replays
    "amqpd/engine/reply_to.py",
    "amqpd/engine/spread_publish.py",  # stage 2: confirms joined over workers
    "amqpd/engine/topology.py",
    "amqpd/engine/transaction.py",
    "amqpd/engine/unacked.py",
    # persistence: the pure journal and its records (the store backends do I/O)
    "persistence/fieldcodec.py",
    "persistence/journal.py",
    "persistence/records.py",
    # persistence: the stream log's format and files (each published and replayed message)
    "persistence/stream/format.py",
    "persistence/stream/log.py",
    "persistence/stream/segment.py",
)

# All compiled modules share one C library, amqpd/_core__mypyc*.so (inside the amqpd package,
# so importing any compiled module imports amqpd first, and amqpd/build.py runs its check).
GROUP_NAME = "amqpd._core"


def pure_reason() -> str | None:
    """Why this build is pure Python, or None when mypyc can compile it."""
    if os.environ.get("AMQPD_PURE", "") not in ("", "0"):
        return "AMQPD_PURE is set"
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "Python's headers (Python.h) are missing"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    return None


def write_manifest(build: str, reason: str) -> None:
    """Record the build kind and each compiled module's source hash for amqpd/build.py."""
    sources = {
        path: hashlib.sha256((ROOT / path).read_bytes()).hexdigest() for path in MYPYC_MODULES
    }
    manifest = {"build": build, "reason": reason, "sources": sources}
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    if not MANIFEST.exists() or MANIFEST.read_text() != text:
        MANIFEST.write_text(text)


def extension_files() -> list[Path]:
    """Every C extension module in the source tree (only this file ever builds them)."""
    suffixes = tuple(
        s for s in (sysconfig.get_config_var("EXT_SUFFIX"), ".abi3.so", ".so", ".pyd") if s
    )
    found: list[Path] = []
    for package in PACKAGES:
        found.extend(p for p in (ROOT / package).rglob("*") if p.name.endswith(suffixes))
    return found


class BuildExt(build_ext):
    """build_ext that first removes old in-place extension modules (editable installs).

    Python imports ``x.cpython-311-*.so`` in preference to ``x.py``: a module dropped from
    MYPYC_MODULES must not keep running from the library an earlier build left beside it.
    """

    def run(self) -> None:
        if self.inplace:
            for path in extension_files():
                path.unlink()
        super().run()


def mypyc_extensions() -> list[object]:
    from mypyc.build import mypycify

    return list(
        mypycify(
            ["--config-file", str(ROOT / "pyproject.toml"), *MYPYC_MODULES],
            opt_level="3",
            group_name=GROUP_NAME,
        )
    )


REASON = pure_reason()
if REASON is None:
    write_manifest("mypyc", "")
    EXTENSIONS = mypyc_extensions()
else:
    print(f"amqpd: building pure Python: {REASON}", file=sys.stderr)
    write_manifest("pure", REASON)
    EXTENSIONS = []
    for leftover in extension_files():  # an earlier compiled editable install's libraries
        leftover.unlink()

setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": BuildExt})
