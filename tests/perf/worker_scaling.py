"""The scaling curve of ``amqpd --workers N`` on independent queue groups (issue 26's
many-core goal: N workers give >= 0.7 x N of one worker's rate, up to 8).

For each worker count N (``--workers 1,2,4,8,16``) the script starts one ``amqpd --workers
N`` node, creates N vhosts (``--groups-per-worker`` each; the node places a new vhost on
its least-loaded worker, so each worker gets the same number of groups) and runs one
``amqpd perf`` load group per vhost at once (W1 by default: one producer, one consumer,
its own queue). The figures are the sum of the groups' delivery rates, the node's CPU
(supervisor and every worker) per 100k delivered messages, and the cores the clients and
other processes used meanwhile. Worker counts run interleaved, ``--reps`` times each; the
table holds medians.

Example (docs/perf-2026-11-27-session13.md ran it on the 16-core device machine)::

    .venv/bin/python tests/perf/worker_scaling.py --workers 1,2,4,8,16 --reps 2

Progress goes to stderr, the result table (markdown) to stdout and ``--output``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import free_port, machine_busy_s, perf_results
from perf_brokers import Amqpd

from amqpd.shell.workers.placement import FILENAME

REPO = Path(__file__).resolve().parents[2]
W1 = "-x 1 -y 1 -q 100 -A 50"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class Run:
    """One node, all its groups at once."""

    workers: int
    groups: int
    rate: float  # msgs/s, all groups (delivered; or confirmed, see --rate-key)
    broker_cpu_s: float  # the node (supervisor and workers) over the measured window
    client_cpu_s: float  # every amqpd perf process, whole run
    other_load: float  # cores used by other processes during the run
    wall: float
    duration: float

    @property
    def cpu_per_100k(self) -> float:
        return self.broker_cpu_s / max(self.rate * self.duration, 1) * 100_000  # per message

    @property
    def broker_cores(self) -> float:
        return self.broker_cpu_s / self.duration


def _perf_command(url: str, pid: int, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable,
        *("-m", "interop.perf.cli", "-u", url, "--json", "--interval", "0"),
        *("--broker-pid", str(pid)),
        *("-z", str(args.duration + args.warmup), "--warmup", str(args.warmup)),
        *shlex.split(args.perf_args),
    ]


def _definitions(path: Path, vhosts: list[str]) -> Path:
    """A definitions file with ``vhosts`` and every permission on them for guest: imported
    at startup, the node places each new vhost on its least-loaded worker."""
    every = {"configure": ".*", "write": ".*", "read": ".*"}
    document = {
        "vhosts": [{"name": name} for name in vhosts],
        "permissions": [{"user": "guest", "vhost": name, **every} for name in vhosts],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def _groups_per_worker(data_dir: Path, vhosts: list[str], workers: int) -> list[int]:
    """How many of ``vhosts`` each worker serves (worker 0's placement record)."""
    if workers == 1:
        return [len(vhosts)]
    placed = json.loads((data_dir / FILENAME).read_text())["vhosts"]
    return [sum(1 for name in vhosts if placed[name] == index) for index in range(workers)]


def one_run(workers: int, args: argparse.Namespace, work: Path) -> Run:
    """Start ``amqpd --workers N``, run every group at once, stop it."""
    groups = workers * args.groups_per_worker
    vhosts = [f"scale-{index}" for index in range(groups)]
    broker = Amqpd(free_port(), work / f"w{workers}" / "data", "full", workers=workers)
    broker.env["AMQPD_DEFINITIONS"] = str(_definitions(work / f"w{workers}.json", vhosts))
    broker.start()
    try:
        spread = _groups_per_worker(broker.data_dir, vhosts, workers)
        if len(set(spread)) != 1:
            raise RuntimeError(f"the groups are not spread evenly over the workers: {spread}")
        base = broker.url.rstrip("/")
        busy, began = machine_busy_s(), time.monotonic()
        running = [
            subprocess.Popen(
                _perf_command(f"{base}/{vhost}", broker.pid, args),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=REPO,
            )
            for vhost in vhosts
        ]
        results = perf_results(running, timeout=args.duration + args.warmup + 180)
        wall = time.monotonic() - began
        node_cpu = statistics.median(r["broker"]["cpu_s"] for r in results)  # one window each
        client = sum(w["cpu_s"] for r in results for w in r["workers"])
        # the node's CPU over the whole run is not measured; its window's rate stands in
        node_whole_run = node_cpu / args.duration * wall
        other = max(machine_busy_s() - busy - node_whole_run - client, 0.0) / wall
    finally:
        broker.stop()
    return Run(
        workers,
        groups,
        rate=sum(r[args.rate_key] for r in results),
        broker_cpu_s=node_cpu,
        client_cpu_s=client,
        other_load=other,
        wall=wall,
        duration=args.duration,
    )


def report(runs: list[Run], args: argparse.Namespace) -> str:
    counts = sorted({r.workers for r in runs})
    lines = [
        f"`amqpd --workers N`, N x {args.groups_per_worker} groups of `amqpd perf "
        f"{args.perf_args}` (each group its own vhost, so its own worker), {args.duration:g} s "
        f"measured after {args.warmup:g} s, medians of {args.reps}, worker counts interleaved; "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        "",
        f"| workers | groups | {args.rate_key.replace('_rate', '')} msgs/s | x one worker "
        "| x / N (goal >= 0.7 up to 8) | node cores | node CPU s / 100k | client cores "
        "| other load (cores) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = statistics.median(r.rate for r in runs if r.workers == counts[0]) or 1.0
    for n in counts:
        mine = [r for r in runs if r.workers == n]
        rate = statistics.median(r.rate for r in mine)
        scale = rate / base * counts[0]
        lines.append(
            f"| {n} | {mine[0].groups} | {rate:,.0f} | {scale:.2f}x | {scale / n:.2f} | "
            f"{statistics.median(r.broker_cores for r in mine):.2f} | "
            f"{statistics.median(r.cpu_per_100k for r in mine):.3f} | "
            f"{statistics.median(r.client_cpu_s / r.wall for r in mine):.2f} | "
            f"{statistics.median(r.other_load for r in mine):.2f} |"
        )
    lines += [
        "",
        "Every run: " + "; ".join(f"N={r.workers} {r.rate:,.0f}" for r in runs),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8,16", help="worker counts [1,2,4,8,16]")
    parser.add_argument("--groups-per-worker", type=int, default=1, help="load groups [1]")
    parser.add_argument("--perf-args", default=W1, help=f"amqpd perf options per group [{W1}]")
    parser.add_argument(
        "--rate-key",
        default="consumed_rate",
        help="amqpd perf's figure to sum: consumed_rate, or confirmed_rate for a publisher "
        "with confirms and no consumer (W2: --perf-args '-x 1 -y 0 -f -c 1000') [consumed_rate]",
    )
    parser.add_argument("--reps", type=int, default=2, help="runs of each count [2]")
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds [8]")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring [2]")
    parser.add_argument("--output", type=Path, help="also write the table here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = [int(n) for n in args.workers.split(",")]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="amqpd-scaling-") as tmp:
        for rep in range(1, args.reps + 1):
            for n in counts:
                run = one_run(n, args, Path(tmp))
                runs.append(run)
                say(
                    f"rep {rep} workers {n:2d}: {run.rate:10,.0f} msgs/s, node "
                    f"{run.broker_cores:.2f} cores = {run.cpu_per_100k:.3f} s/100k, clients "
                    f"{run.client_cpu_s / run.wall:.2f} cores, other {run.other_load:.2f}"
                )
    text = report(runs, args)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
