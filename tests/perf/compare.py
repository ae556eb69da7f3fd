"""amqpd against RabbitMQ, side by side: the workloads of issue 8, interleaved A B A B.

Not part of the pytest run. Starts amqpd (``python -m amqpd``, persistence on, --sync full)
and a private RabbitMQ node (Debian's rabbitmq-server, run as the rabbitmq user on its own
ports and directories; skipped with a message if it is not installed), runs each workload
against both with the same client (``amqpd perf``, or pika for W7), and prints a markdown
table of medians, the ratio amqpd/RabbitMQ, broker CPU seconds per 100k messages (from
/proc/PID/stat; beam.smp for RabbitMQ) and broker memory (VmRSS/VmHWM). The table is also
written to docs/perf-YYYY-MM-DD.md.

    .venv/bin/python tests/perf/compare.py                   # everything, ~15-20 min
    .venv/bin/python tests/perf/compare.py --only W1,W2 --reps 3 --duration 5
    .venv/bin/python tests/perf/compare.py --profile W1,W2   # + a py-spy run of amqpd
    .venv/bin/python tests/perf/compare.py --only W1,W2,WL --no-rabbitmq \\
        --broker-code worktree --baseline HEAD     # compiled (worktree) vs pure (git HEAD)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_brokers import Amqpd, GarageMQ, RabbitMQ

from interop.perf.procstat import ProcessSample
from interop.perf.profiles import format_table, top_functions

REPO = Path(__file__).resolve().parents[2]
Metrics = dict[str, float]
Broker: TypeAlias = Amqpd | RabbitMQ | GarageMQ


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def machine_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# Running one workload against one broker
# ---------------------------------------------------------------------------------------------
def perf(broker: Broker, args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``amqpd perf ARGS --json`` against ``broker`` and return its JSON summary."""
    command = [
        sys.executable,
        "-m",
        "interop.perf.cli",
        "-u",
        broker.url,
        "--json",
        "--interval",
        "0",
        "--broker-pid",
        str(broker.pid),
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"amqpd perf failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@dataclass(frozen=True)
class Figure:
    """One row of the results table."""

    label: str
    key: str
    goal: str = ""
    fmt: str = "{:,.0f}"


@dataclass
class Workload:
    """A named workload: how to run it once and which figures it yields."""

    name: str
    title: str
    figures: list[Figure]
    run: Callable[[Broker, argparse.Namespace], Metrics]
    fresh_broker_per_rep: bool = False
    profile_args: list[str] = field(default_factory=list)


def perf_workload(args: list[str], rate_key: str, latency: str) -> Callable[..., Metrics]:
    """A runner for a plain ``amqpd perf`` workload."""

    def run(broker: Broker, opts: argparse.Namespace) -> Metrics:
        duration = opts.duration + opts.warmup
        result = perf(
            broker,
            [*args, "-z", str(duration), "--warmup", str(opts.warmup)],
            timeout=duration + 180,
        )
        lat = result[f"{latency}_latency_us"]
        b = result["broker"]
        return {
            "rate": result[rate_key],
            "sent": result["published_rate"],
            "p50": lat.get("p50", 0) / 1000,
            "p99": lat.get("p99", 0) / 1000,
            "cpu100k": b["cpu_s_per_100k"] or 0.0,
            "broker_cores": b["cpu_s"] / opts.duration,
            "rss": b["rss_kb"] / 1024,
            "hwm": b["hwm_kb"] / 1024,
        }

    return run


GROUPS = 4  # W1x4's load groups


def perf_results(running: list[subprocess.Popen[Any]], timeout: float) -> list[dict[str, Any]]:
    """The JSON summaries of ``amqpd perf --json`` processes running at once, in order
    (RuntimeError with its stderr's end if one failed)."""
    results = []
    for process in running:
        out, err = process.communicate(timeout=timeout)
        if process.returncode != 0:
            raise RuntimeError(f"amqpd perf failed ({process.returncode}): {err[-2000:]!r}")
        results.append(json.loads(out))
    return results


def _w1_groups(broker: Broker, opts: argparse.Namespace, groups: list[list[str]]) -> Metrics:
    """W1 load groups at once, one ``amqpd perf`` each with its own extra arguments
    (``groups``); the rate is their sum, the broker's CPU (every process of it) per 100k of
    all their messages."""
    duration = opts.duration + opts.warmup
    commands = [
        [
            sys.executable,
            *("-m", "interop.perf.cli", "--json", "--interval", "0", *extra),
            *("--broker-pid", str(broker.pid), "-x", "1", "-y", "1", "-q", "100", "-A", "50"),
            *("-z", str(duration), "--warmup", str(opts.warmup)),
        ]
        for extra in groups
    ]
    running = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
        for command in commands
    ]
    results = perf_results(running, timeout=duration + 180)
    rate = sum(r["consumed_rate"] for r in results)
    broker_cpu = statistics.median(r["broker"]["cpu_s"] for r in results)  # one window each
    return {
        "rate": rate,
        "sent": sum(r["published_rate"] for r in results),
        "cpu100k": broker_cpu / (rate * opts.duration) * 100_000 if rate else 0.0,
        "broker_cores": broker_cpu / opts.duration,
        "rss": results[0]["broker"]["rss_kb"] / 1024,
    }


def w1_groups(broker: Broker, opts: argparse.Namespace) -> Metrics:
    """W1x4: GROUPS W1 load groups at once, each its own producer, consumer and queue, in
    its own vhost (``--workers N`` places vhosts on workers: docs/multicore.md)."""
    vhosts = [f"w1x4-{index}" for index in range(GROUPS)]
    add_vhosts = getattr(broker, "add_vhosts", None)
    if add_vhosts is None:
        raise RuntimeError(f"{broker.name} cannot create vhosts here")
    add_vhosts(vhosts)
    base = broker.url.rstrip("/")
    return _w1_groups(broker, opts, [["-u", f"{base}/{vhost}"] for vhost in vhosts])


# a new queue goes to the worker owning the fewest (amqpd --spread-vhosts; RabbitMQ 3.10
# accepts the argument for classic queues, where a cluster balances masters with it)
BALANCED = ["--queue-arg", "x-queue-master-locator=min-masters"]


def w1_groups_one_vhost(broker: Broker, opts: argparse.Namespace) -> Metrics:
    """W1x4s: GROUPS W1 load groups at once, each its own producer, consumer and queue, all
    in the vhost "/" (``--workers N --spread-vhosts '*'``, compare.py --spread: the queues
    are balanced over the workers and each group's connections move to its queue's
    worker, docs/multicore.md "Stage 2"); summed as W1x4. Each group has its own exchange
    too: a group's teardown deletes its exchange while the others may still publish (a
    shared one failed a run with 404: session 16)."""
    groups = [
        ["-u", broker.url, "--queue-prefix", f"w1x4s-{g}", "--exchange", f"w1x4s-{g}", *BALANCED]
        for g in range(GROUPS)
    ]
    return _w1_groups(broker, opts, groups)


def fill_drain(broker: Broker, opts: argparse.Namespace) -> Metrics:
    """W5: queue N transient messages (confirmed), measure RSS; then drain them."""
    n = str(opts.w5_messages)
    fill = perf(
        broker,
        ["-x", "1", "-y", "0", "-C", n, "-c", "1000", "--keep-queues", "--queue-prefix", "w5"],
        timeout=1200,
    )
    time.sleep(1.0)  # let the broker settle before reading its memory
    settled = ProcessSample.take(broker.pid)
    before = fill["broker"]["rss_kb_before"]
    drain = perf(
        broker,
        [
            "-x",
            "0",
            "-y",
            "1",
            "-D",
            n,
            "-q",
            "100",
            "-A",
            "50",
            "--predeclared",
            "--queue-prefix",
            "w5",
        ],
        timeout=1200,
    )
    return {
        "fill": fill["confirmed_rate"],
        "rss_per_msg": (settled.rss_kb - before) * 1024 / opts.w5_messages,
        "peak_per_msg": (fill["broker"]["hwm_kb"] - before) * 1024 / opts.w5_messages,
        "rate": drain["consumed_rate"],
        "cpu100k": drain["broker"]["cpu_s_per_100k"] or 0.0,
        "rss": settled.rss_kb / 1024,
        "hwm": drain["broker"]["hwm_kb"] / 1024,
    }


def connections(broker: Broker, opts: argparse.Namespace) -> Metrics:
    """W6: 1000 connections with one channel each."""
    result = perf(broker, ["--idle-connections", str(opts.w6_connections), "-z", "3"], timeout=300)
    b = result["broker"]
    return {
        "open_s": result["open_s"],
        "p99": result["open_latency_us"]["p99"] / 1000,
        "rss_per_conn": b["rss_kb_per_connection"],
        "rss": b["rss_kb"] / 1024,
        "hwm": b["hwm_kb"] / 1024,
    }


def pika_w7(broker: Broker, opts: argparse.Namespace) -> Metrics:
    """W7: pika BlockingConnection, confirmed publishes, then basic_get."""
    seconds = str(opts.duration / 2)
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests/perf/pika_w7.py"),
            "--url",
            broker.url,
            "--seconds",
            seconds,
            "--broker-pid",
            str(broker.pid),
        ],
        capture_output=True,
        text=True,
        timeout=opts.duration + 120,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pika_w7 failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    b = result["broker"]
    return {
        "rate": result["publish_rate"],
        "get": result["get_rate"],
        "cpu100k": b["publish_cpu_s_per_100k"],
        "get_cpu100k": b["get_cpu_s_per_100k"],
        "rss": b["rss_kb"] / 1024,
        "hwm": b["hwm_kb"] / 1024,
    }


RATE = "{:,.0f}"
MS = "{:.2f}"
CPU = "{:.3f}"
MEM = "{:,.0f}"
RSS = Figure("broker RSS end / peak (MiB)", "rss", fmt=MEM)
HWM = Figure("", "hwm", fmt=MEM)


def _workloads() -> list[Workload]:
    consume = ["-q", "100", "-A", "50"]
    fanout = ["-t", "fanout", "--queues", "10", "-x", "1", "-y", "10", "--consumer-processes", "2"]
    fanout += consume
    return [
        Workload(
            "W1",
            "transient, 100 B, 1 producer + 1 consumer, prefetch 100, multi-ack 50",
            [
                Figure("e2e msgs/s", "rate", "≥ 1.0x"),
                Figure("sent msgs/s", "sent"),
                Figure("broker CPU s / 100k msgs", "cpu100k", "≤ 1.0x", CPU),
                Figure("deliver latency p50 / p99 (ms)", "p50", fmt=MS),
                Figure("", "p99", fmt=MS),
                RSS,
                HWM,
            ],
            perf_workload(["-x", "1", "-y", "1", *consume], "consumed_rate", "deliver"),
            profile_args=["-x", "1", "-y", "1", *consume],
        ),
        Workload(
            "W1x4",
            f"{GROUPS} W1 load groups at once, each on its own queue in its own vhost",
            [
                Figure("e2e msgs/s (all groups)", "rate", "≥ 1.0x"),
                Figure("broker CPU s / 100k msgs", "cpu100k", "≤ 1.0x", CPU),
                Figure("broker cores", "broker_cores", fmt="{:.2f}"),
                RSS,
            ],
            w1_groups,
        ),
        Workload(
            "W1x4s",
            f"{GROUPS} W1 load groups at once, each on its own queue, all in one vhost "
            "(queues balanced: x-queue-master-locator=min-masters)",
            [
                Figure("e2e msgs/s (all groups)", "rate", "≥ 1.0x"),
                Figure("broker CPU s / 100k msgs", "cpu100k", "≤ 1.0x", CPU),
                Figure("broker cores", "broker_cores", fmt="{:.2f}"),
                RSS,
            ],
            w1_groups_one_vhost,
        ),
        Workload(
            "W1r",
            "W1 at a fixed 2,000 msgs/s (round trips at a low rate)",
            [
                Figure("e2e msgs/s", "rate"),
                Figure("deliver latency p50 / p99 (ms)", "p50", "≤ 1.0x", MS),
                Figure("", "p99", fmt=MS),
                Figure("broker CPU s / 100k msgs", "cpu100k", "≤ 1.0x", CPU),
            ],
            perf_workload(
                ["-x", "1", "-y", "1", "-r", "2000", *consume], "consumed_rate", "deliver"
            ),
            profile_args=["-x", "1", "-y", "1", "-r", "2000", *consume],
        ),
        Workload(
            "W1m",
            "W1 at a fixed 30,000 msgs/s (streaming, below every broker's ceiling: no backlog)",
            [
                Figure("e2e msgs/s", "rate"),
                Figure("deliver latency p50 / p99 (ms)", "p50", fmt=MS),
                Figure("", "p99", fmt=MS),
                Figure("broker CPU s / 100k msgs", "cpu100k", "≤ 1.0x", CPU),
            ],
            perf_workload(
                ["-x", "1", "-y", "1", "-r", "30000", *consume], "consumed_rate", "deliver"
            ),
            profile_args=["-x", "1", "-y", "1", "-r", "30000", *consume],
        ),
        Workload(
            "W1k",
            "W1 at a fixed 20,000 msgs/s (issue 30's CPU-per-message row against GarageMQ)",
            [
                Figure("e2e msgs/s", "rate"),
                Figure("broker CPU s / 100k msgs", "cpu100k", "≤ 0.8x", CPU),
            ],
            perf_workload(
                ["-x", "1", "-y", "1", "-r", "20000", *consume], "consumed_rate", "deliver"
            ),
            profile_args=["-x", "1", "-y", "1", "-r", "20000", *consume],
        ),
        Workload(
            "WL",
            "LavinMQ's benchmark shape: transient, 16 B, 1 producer + 1 no-ack consumer",
            [
                Figure("e2e msgs/s", "rate", "≥ 1.0x"),
                Figure("sent msgs/s", "sent"),
                Figure("broker CPU s / 100k msgs", "cpu100k", "≤ 1.0x", CPU),
                RSS,
                HWM,
            ],
            perf_workload(["-x", "1", "-y", "1", "-s", "16", "-a"], "consumed_rate", "deliver"),
            profile_args=["-x", "1", "-y", "1", "-s", "16", "-a"],
        ),
        Workload(
            "W2",
            "persistent to a durable queue, confirms, window 1000 (no consumer)",
            [
                Figure("confirmed msgs/s", "rate", "≥ 1.0x"),
                Figure("confirm latency p50 / p99 (ms)", "p50", fmt=MS),
                Figure("", "p99", fmt=MS),
                Figure("broker CPU s / 100k msgs", "cpu100k", fmt=CPU),
                RSS,
                HWM,
            ],
            perf_workload(["-x", "1", "-y", "0", "-f", "-c", "1000"], "confirmed_rate", "confirm"),
            profile_args=["-x", "1", "-y", "0", "-f", "-c", "1000"],
        ),
        Workload(
            "W2s",
            "the same, window 1 (each publish waits for its confirm)",
            [
                Figure("confirmed msgs/s", "rate", "≥ 1.0x"),
                Figure("confirm latency p50 / p99 (ms)", "p50", fmt=MS),
                Figure("", "p99", fmt=MS),
                Figure("broker CPU s / 100k msgs", "cpu100k", fmt=CPU),
            ],
            perf_workload(["-x", "1", "-y", "0", "-f", "-c", "1"], "confirmed_rate", "confirm"),
        ),
        Workload(
            "W3",
            "fanout to 10 queues, 10 consumers (2 processes), prefetch 100, multi-ack 50",
            [
                Figure("delivered msgs/s", "rate", "≥ 1.0x"),
                Figure("sent msgs/s", "sent"),
                Figure("broker CPU s / 100k deliveries", "cpu100k", fmt=CPU),
                RSS,
                HWM,
            ],
            perf_workload(fanout, "consumed_rate", "deliver"),
            profile_args=fanout,
        ),
        Workload(
            "W3s",
            "W3 with its queues balanced (x-queue-master-locator=min-masters: spread over "
            "the workers of a spread vhost)",
            [
                Figure("delivered msgs/s", "rate", "≥ 1.0x"),
                Figure("sent msgs/s", "sent"),
                Figure("broker CPU s / 100k deliveries", "cpu100k", fmt=CPU),
                RSS,
            ],
            perf_workload([*fanout, *BALANCED], "consumed_rate", "deliver"),
        ),
        Workload(
            "W3m",
            "W3 with the producer at a fixed 10,000 msgs/s (100,000 deliveries/s: no backlog)",
            [
                Figure("delivered msgs/s", "rate"),
                Figure("deliver latency p50 / p99 (ms)", "p50", fmt=MS),
                Figure("", "p99", fmt=MS),
                Figure("broker CPU s / 100k deliveries", "cpu100k", "≤ 1.0x", CPU),
            ],
            perf_workload([*fanout, "-r", "10000"], "consumed_rate", "deliver"),
            profile_args=[*fanout, "-r", "10000"],
        ),
        Workload(
            "W3ms",
            "W3m with its queues balanced (spread over the workers of a spread vhost: the "
            "CPU per delivery of crossing publishes without a backlog)",
            [
                Figure("delivered msgs/s", "rate"),
                Figure("broker CPU s / 100k deliveries", "cpu100k", "≤ 1.1x", CPU),
            ],
            perf_workload([*fanout, "-r", "10000", *BALANCED], "consumed_rate", "deliver"),
        ),
        Workload(
            "W4",
            "tx.commit per persistent message (no consumer)",
            [
                Figure("committed msgs/s", "rate", "≥ 1.0x"),
                Figure("commit latency p50 / p99 (ms)", "p50", fmt=MS),
                Figure("", "p99", fmt=MS),
                Figure("broker CPU s / 100k msgs", "cpu100k", fmt=CPU),
            ],
            perf_workload(
                ["-x", "1", "-y", "0", "-f", "--tx-size", "1"], "confirmed_rate", "confirm"
            ),
        ),
        Workload(
            "W5",
            "queue N transient 100 B messages (confirmed), then drain (prefetch 100)",
            [
                Figure(
                    "RSS per queued message, settled / peak (bytes)", "rss_per_msg", "≤ 1 KB", MEM
                ),
                Figure("", "peak_per_msg", fmt=MEM),
                Figure("drain msgs/s", "rate", "≥ 1.0x"),
                Figure("fill msgs/s", "fill"),
                Figure("broker CPU s / 100k drained", "cpu100k", fmt=CPU),
                Figure("broker RSS full / peak (MiB)", "rss", fmt=MEM),
                HWM,
            ],
            fill_drain,
            fresh_broker_per_rep=True,
        ),
        Workload(
            "W6",
            "1000 connections with one channel each",
            [
                Figure("open time (s)", "open_s", "≤ 1.0x", "{:.2f}"),
                Figure("RSS per connection (KiB)", "rss_per_conn", "≤ 1.0x", "{:.1f}"),
                Figure("handshake p99 (ms)", "p99", fmt=MS),
                RSS,
                HWM,
            ],
            connections,
            fresh_broker_per_rep=True,
        ),
        Workload(
            "W7",
            "pika BlockingConnection: confirm_delivery publish, then basic_get + ack",
            [
                Figure("publish msgs/s", "rate", "≥ 1.0x"),
                Figure("basic_get msgs/s", "get", "≥ 1.0x"),
                Figure("broker CPU s / 100k publishes", "cpu100k", fmt=CPU),
                Figure("broker CPU s / 100k gets", "get_cpu100k", fmt=CPU),
            ],
            pika_w7,
            profile_args=["(pika: tests/perf/pika_w7.py)"],
        ),
    ]


# ---------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------
@dataclass
class Runs:
    """Every run of one workload: broker name -> list of metrics (None for a failure)."""

    by_broker: dict[str, list[Metrics | None]] = field(default_factory=dict)
    other_load: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def median(self, broker: str, key: str) -> float | None:
        values = [m[key] for m in self.by_broker.get(broker, []) if m and key in m]
        return statistics.median(values) if values else None


def children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the clients, once waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for_quiet(opts: argparse.Namespace) -> float:
    """Wait (up to --quiet-timeout) until the machine's load from other processes, measured
    over 2 s while our brokers idle, is at most --max-other-load cores. Returns that load."""
    deadline = time.monotonic() + opts.quiet_timeout
    while True:
        busy, began = machine_busy_s(), time.monotonic()
        time.sleep(2.0)
        load = (machine_busy_s() - busy) / (time.monotonic() - began)
        if load <= opts.max_other_load or time.monotonic() >= deadline:
            return load
        print(f"  waiting: other processes use {load:.2f} cores", flush=True)


def _measure(workload: Workload, broker: Broker, opts: argparse.Namespace, runs: Runs) -> None:
    if opts.quiet_timeout > 0:
        wait_for_quiet(opts)
    busy, began, client_cpu = machine_busy_s(), time.monotonic(), children_cpu_s()
    broker_cpu = ProcessSample.take(broker.pid).cpu_s
    try:
        metrics: Metrics | None = workload.run(broker, opts)
    except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError) as exc:
        metrics = None
        runs.errors.append(f"{workload.name} {broker.name}: {exc}")
        print(f"  {broker.name}: FAILED {exc}", flush=True)
    wall = time.monotonic() - began
    if metrics is not None:
        metrics["client_cpu"] = children_cpu_s() - client_cpu
        own = ProcessSample.take(broker.pid).cpu_s - broker_cpu + metrics["client_cpu"]
        runs.other_load.append(max(machine_busy_s() - busy - own, 0) / wall)
        shown = ", ".join(f"{k} {v:,.3f}" for k, v in metrics.items())
        print(f"  {broker.name}: {shown}  ({wall:.1f} s)", flush=True)
    runs.by_broker.setdefault(broker.name, []).append(metrics)


def run_workload(workload: Workload, brokers: list[Broker], opts: argparse.Namespace) -> Runs:
    """Run ``workload`` ``opts.reps`` times on every broker, interleaved."""
    runs = Runs()
    print(f"{workload.name}: {workload.title}", flush=True)
    fresh = workload.fresh_broker_per_rep
    if not fresh:
        for broker in brokers:
            broker.start()
    try:
        for _rep in range(opts.reps):
            for broker in brokers:
                if fresh:
                    broker.start()
                try:
                    _measure(workload, broker, opts, runs)
                finally:
                    if fresh:
                        broker.stop()
        if workload.name in opts.profile and workload.profile_args:
            amqpd = next(b for b in brokers if isinstance(b, Amqpd))
            if fresh:
                amqpd.start()
            try:
                runs.errors.extend(profile(workload, amqpd, opts))
            finally:
                if fresh:
                    amqpd.stop()
    finally:
        if not fresh:
            for broker in brokers:
                broker.stop()
    return runs


PROFILES: dict[str, str] = {}


def profile(workload: Workload, amqpd: Amqpd, opts: argparse.Namespace) -> list[str]:
    """One extra (unmeasured) amqpd run under py-spy; its top functions go to PROFILES."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        return [f"{workload.name} profile: py-spy not installed (pip install py-spy)"]
    raw = opts.work_dir / f"{workload.name}-amqpd.pyspy.txt"
    seconds = opts.duration
    recorder = subprocess.Popen(
        [
            py_spy,
            "record",
            "--pid",
            str(amqpd.pid),
            "--format",
            "raw",
            "--threads",
            "--rate",
            "200",
            "--duration",
            str(int(seconds)),
            "-o",
            str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if workload.profile_args[0].startswith("-"):
            perf(amqpd, [*workload.profile_args, "-z", str(seconds + 1)], timeout=seconds + 180)
        else:
            workload.run(amqpd, opts)
    finally:
        recorder.wait(timeout=seconds + 60)
    if not raw.exists():
        return [f"{workload.name} profile: py-spy wrote nothing"]
    summary = top_functions(raw.read_text(), limit=opts.profile_top)
    PROFILES[workload.name] = (
        f"py-spy at 200 Hz for {seconds:g} s during `amqpd perf "
        f"{' '.join(workload.profile_args)}` (raw stacks: {raw}).\n\n" + format_table(summary)
    )
    print(f"  profile: {summary.samples} busy samples -> {raw}", flush=True)
    return []


def _cell(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def results_table(workloads: list[Workload], results: dict[str, Runs], names: list[str]) -> str:
    """The markdown table of medians, one row per figure (paired figures share a row)."""
    # the second amqpd column: a baseline revision, or another --workers count
    baseline = next((n for n in names if n.startswith(("amqpd@", "amqpd --workers"))), None)
    rival = next((n for n in names if not n.startswith("amqpd")), None)
    other = rival or "RabbitMQ"
    head = f"| workload | figure | amqpd | {other} | amqpd / {other} | goal |"
    lines = [head, "| --- | --- | ---: | ---: | ---: | --- |"]
    if baseline is not None:
        head = (
            f"| workload | figure | amqpd | {baseline} | {other} | amqpd / {other} "
            f"| {baseline} / {other} | goal |"
        )
        lines = [head, "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for w in workloads:
        runs = results.get(w.name)
        if runs is None:
            continue
        figures = w.figures
        i = 0
        first = True
        while i < len(figures):
            fig = figures[i]
            pair = figures[i + 1] if i + 1 < len(figures) and figures[i + 1].label == "" else None
            cells, ratios = [], []
            columns = ["amqpd", rival] if baseline is None else ["amqpd", baseline, rival]
            for name in columns:
                if name is None:
                    cells.append("skipped")
                    continue
                a = runs.median(name, fig.key)
                text = _cell(a, fig.fmt)
                if pair is not None:
                    text += " / " + _cell(runs.median(name, pair.key), pair.fmt)
                cells.append(text)
            ratio_cells = []
            for ours in columns[:-1]:
                ratios = []
                for f in [fig] + ([pair] if pair else []):
                    a = runs.median(ours, f.key)
                    b = runs.median(rival, f.key) if rival else None
                    ratios.append(f"{a / b:.2f}x" if a is not None and b else "n/a")
                ratio_cells.append(" / ".join(ratios))
            label = f"**{w.name}** {w.title}" if first else ""
            lines.append(
                f"| {label} | {fig.label} | {' | '.join(cells)} | {' | '.join(ratio_cells)} "
                f"| {fig.goal} |"
            )
            first = False
            i += 2 if pair else 1
    return "\n".join(lines)


def runs_table(workloads: list[Workload], results: dict[str, Runs]) -> str:
    """Every individual run, for the record."""
    lines = [
        "| workload | broker | runs (in order) | other load (cores) |",
        "| --- | --- | --- | ---: |",
    ]
    for w in workloads:
        runs = results.get(w.name)
        if runs is None:
            continue
        load = f"{statistics.median(runs.other_load):.2f}" if runs.other_load else "n/a"
        for name, metrics in runs.by_broker.items():
            shown = "; ".join(
                "failed" if m is None else ", ".join(f"{k} {v:,.3g}" for k, v in m.items())
                for m in metrics
            )
            lines.append(f"| {w.name} | {name} | {shown} | {load} |")
    return "\n".join(lines)


BROKER_PACKAGES = ["amqpd", "exchanges", "confirms", "persistence"]


def snapshot(code: str, work_dir: Path, folder: str = "src") -> tuple[Path, str]:
    """Copy the broker's packages (from git HEAD, another git revision, or the working tree)
    to run them unchanged for the whole comparison, whatever happens to the checkout meanwhile.

    Returns:
        The directory to run ``python -m amqpd`` in, and a description of the code.
    """
    src = work_dir / folder
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    if Path(code).is_dir():  # another checkout, as it is (e.g. built with mypyc in place)
        checkout = Path(code).resolve()
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
        ).stdout.strip()
        for package in BROKER_PACKAGES:
            shutil.copytree(
                checkout / package, src / package, ignore=shutil.ignore_patterns("__pycache__")
            )
        label = f"the checkout {checkout} at {sha}, as built there"
    elif code != "worktree":
        rev = "HEAD" if code == "head" else code
        sha = subprocess.run(
            ["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        archive = subprocess.run(
            ["git", "archive", rev, *BROKER_PACKAGES], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        label = f"commit {sha}"
    else:
        for package in BROKER_PACKAGES:
            shutil.copytree(
                REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__")
            )
        label = f"working tree on top of {sha} (uncommitted changes included)"
    env = dict(os.environ, PYTHONPATH=str(src))
    version = subprocess.run(
        [sys.executable, "-m", "amqpd", "--version"],
        cwd=src,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # "amqpd 0.1.0 (mypyc-compiled core, N modules)" or "(pure Python: ...)": a stale build
    # runs interpreted, which a report must say
    build = version[version.find("(") + 1 : version.rfind(")")] if "(" in version else version
    return src, f"{label}, {build}"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def document(
    opts: argparse.Namespace, command: str, table: str, runs: str, notes: list[str], minutes: float
) -> str:
    """The markdown report."""
    today = datetime.date.today().isoformat()
    parts = [
        f"# amqpd vs RabbitMQ, {today}",
        "",
        f"Command: `{command}` ({minutes:.1f} min).",
        "",
        f"Machine: {os.cpu_count()} x {_cpu_model()}, Linux {platform.release()}, "
        f"Python {platform.python_version()}. amqpd {opts.code_label}, persistence on "
        f"(`--sync {opts.sync}`), uvloop. RabbitMQ {RabbitMQ.version()} (Debian package, "
        "default configuration, no plugins).",
        "",
        f"Each workload ran {opts.reps} times per broker, interleaved (amqpd, RabbitMQ, amqpd, "
        f"...), {opts.duration:g} s measured after {opts.warmup:g} s of warm-up unless stated; "
        "the table shows medians. Both brokers ran on this machine with the client (`amqpd "
        "perf`, pre-encoded batched frames, producers and consumers in separate processes; "
        "pika for W7), so broker, client and anything else share the cores. Broker CPU is "
        "utime+stime of the broker process and its children (`amqpd --workers N`: the "
        "supervisor and its workers) from /proc/PID/stat (beam.smp for RabbitMQ) "
        "over the measured window; RSS is VmRSS / VmHWM from /proc/PID/status. Producers "
        "are not rate-limited: a broker that accepts publishes faster than it delivers builds "
        "a backlog, and the publish->deliver latency then measures that backlog. Before "
        f"each run the script waited up to {opts.quiet_timeout:g} s for other processes to "
        f"use at most {opts.max_other_load:g} cores; the load they added during the runs is "
        'in the last column of "Every run".',
        "",
        "## Results",
        "",
        table,
        "",
        "## Every run",
        "",
        "Other load: CPU used on the machine during the runs by processes other than the "
        "broker and the client's workers, in cores (median over the workload's runs).",
        "",
        runs,
    ]
    if notes:
        parts += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    if PROFILES:
        parts += ["", "## amqpd profiles (py-spy, own time)", ""]
        for name, text in PROFILES.items():
            parts += [f"### {name}", "", text, ""]
    return "\n".join(parts).rstrip() + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command line of compare.py."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--reps", type=int, default=2, help="runs per broker and workload [2]")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per run [10]")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per run [1]")
    p.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W2s")
    p.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1],
        help="amqpd --workers, comma-separated: one amqpd column each (the first is named "
        "amqpd, the ratio's numerator), e.g. 1,2 [1]",
    )
    p.add_argument(
        "--spread",
        action="store_true",
        help="amqpd columns with more than one worker spread every vhost over them "
        "(--spread-vhosts '*', docs/multicore.md \"Stage 2\")",
    )
    p.add_argument("--w5-messages", type=int, default=1_000_000, help="W5 queue depth [1e6]")
    p.add_argument("--w6-connections", type=int, default=1000, help="W6 connections [1000]")
    p.add_argument(
        "--sync",
        choices=["full", "normal"],
        default="full",
        help="amqpd --sync (SQLite synchronous mode) [full]",
    )
    p.add_argument(
        "--broker-code",
        choices=["head", "worktree"],
        default="head",
        help="run the amqpd broker from git HEAD or from a copy of the working tree, taken "
        "once at the start (the client is always this checkout's interop.perf) [head]",
    )
    p.add_argument(
        "--max-other-load",
        type=float,
        default=0.3,
        help="before each run, wait until other processes use at most this many cores [0.3]",
    )
    p.add_argument(
        "--quiet-timeout",
        type=float,
        default=20.0,
        help="longest wait for that, seconds; 0 never waits [20]",
    )
    p.add_argument(
        "--baseline",
        default="",
        help="also run amqpd from this git revision (pure Python: a git archive) or this "
        "directory (another checkout as it is, e.g. compiled in place with `python setup.py "
        "build_ext --inplace`), interleaved, as a third column (before/after in one run)",
    )
    p.add_argument("--no-rabbitmq", action="store_true", help="run amqpd only")
    p.add_argument(
        "--rival",
        choices=["rabbitmq", "garagemq"],
        default="rabbitmq",
        help="the other broker: RabbitMQ, or Debian's GarageMQ (Go; it never answers "
        "exchange.delete, so each of its runs ends with a 10 s teardown wait, see "
        "docs/perf.md) [rabbitmq]",
    )
    p.add_argument(
        "--garagemq-gomaxprocs",
        type=int,
        help="run GarageMQ with GOMAXPROCS=N (1: on one core at a time, like amqpd) "
        "[unset: Go's default, every core]",
    )
    p.add_argument(
        "--garagemq-cpus",
        help="run GarageMQ under taskset -c LIST (e.g. 1: one core for the whole process, "
        "GC and I/O threads included) [unset: every core]",
    )
    p.add_argument(
        "--profile",
        default="",
        help="workloads (W1, W1r, W2, W3, W7) to profile with py-spy in one extra amqpd run",
    )
    p.add_argument("--profile-top", type=int, default=15, help="functions per profile [15]")
    p.add_argument(
        "--work-dir",
        type=Path,
        default=Path(f"/tmp/amqpd-compare-{os.getpid()}"),
        help="data directories and logs [/tmp/amqpd-compare-PID]",
    )
    p.add_argument("--node", default="cmp@localhost", help="RabbitMQ node name [cmp@localhost]")
    p.add_argument(
        "--output", type=Path, help="markdown file [docs/perf-YYYY-MM-DD.md]; '-' writes nothing"
    )
    opts = p.parse_args(argv)
    opts.profile = {w for w in opts.profile.split(",") if w}
    return opts


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    opts = parse_args(argv)
    started = time.monotonic()
    workloads = _workloads()
    if opts.only:
        wanted = {w.strip() for w in opts.only.split(",")}
        workloads = [w for w in workloads if w.name in wanted]
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(opts.work_dir, 0o755)
    source, opts.code_label = snapshot(opts.broker_code, opts.work_dir)
    brokers: list[Broker] = []
    for count in opts.workers:
        name = "amqpd" if count == opts.workers[0] else f"amqpd --workers {count}"
        data = opts.work_dir / f"amqpd-w{count}" / "data"
        amqpd = Amqpd(free_port(), data, opts.sync, source, name, count)
        if opts.spread and count > 1:
            amqpd.name = f"{name} (spread)"
            amqpd.env["AMQPD_SPREAD_VHOSTS"] = "*"
        brokers.append(amqpd)
    notes: list[str] = []
    if opts.baseline:
        base_source, base_label = snapshot(opts.baseline, opts.work_dir, "baseline-src")
        baseline = f"amqpd@{opts.baseline}"
        data = opts.work_dir / "baseline" / "data"
        brokers.append(Amqpd(free_port(), data, opts.sync, base_source, baseline))
        notes.append(f"{baseline}: the same workloads on {base_label}, interleaved.")
    if opts.rival == "garagemq":
        if GarageMQ.installed():
            procs, cpus = opts.garagemq_gomaxprocs, opts.garagemq_cpus
            garage = GarageMQ(free_port(), free_port(), opts.work_dir / "garagemq", procs, cpus)
            brokers.append(garage)
            notes.append(
                f"Rival: GarageMQ {GarageMQ.version()} (Debian package), its shipped "
                "config with tcp.nodelay: true, own ports and data directory"
                + ("" if procs is None else f", GOMAXPROCS={procs}")
                + ("" if cpus is None else f", pinned with taskset -c {cpus}")
                + "."
            )
        else:
            notes.append("GarageMQ is not installed (apt-get install garagemq): skipped.")
    elif opts.no_rabbitmq:
        notes.append("RabbitMQ skipped (--no-rabbitmq).")
    elif not RabbitMQ.installed():
        message = (
            "RabbitMQ is not installed (no rabbitmq-server/rabbitmqctl or no rabbitmq "
            "user): running amqpd only, ratios are n/a. Install Debian's "
            "rabbitmq-server to compare."
        )
        print(message, flush=True)
        notes.append(message)
    else:
        brokers.append(RabbitMQ(free_port(), free_port(), opts.work_dir / "rabbitmq", opts.node))
    results: dict[str, Runs] = {}
    for workload in workloads:
        results[workload.name] = run_workload(workload, brokers, opts)
        notes.extend(results[workload.name].errors)
    names = [b.name for b in brokers]
    table = results_table(workloads, results, names)
    runs = runs_table(workloads, results)
    minutes = (time.monotonic() - started) / 60
    command = shlex.join([sys.executable, "tests/perf/compare.py", *argv])
    text = document(opts, command, table, runs, notes, minutes)
    print()
    print(text)
    if str(opts.output) != "-":
        out = opts.output or REPO / "docs" / f"perf-{datetime.date.today().isoformat()}.md"
        out.write_text(text)
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
