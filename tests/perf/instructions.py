"""Instructions per delivery, one process against ``--workers N``: the broker's own work,
without the noise of a shared machine (docs/multicore.md "Instructions per delivery").

CPU seconds per message move by a third from run to run on a small VM (time-sharing with
the load generator, caches, the host), and this VM has no hardware counters for
``perf stat``. valgrind's callgrind counts the instructions each broker process executes
(every worker and the supervisor; ``--trace-children``) instead: the same run gives the
same count within about 1 %. Each configuration runs twice, with COUNT1 and COUNT2
messages per producer, and the difference, divided by the extra deliveries, is the
instructions per delivery with the start, the connections and the warm-up left out.

Under valgrind the broker runs ~50 times slower while `amqpd perf` runs natively, so the
broker is saturated (large batches per wake-up, as in compare.py's saturating rows); the
counts say what the broker executes per message, not how long it takes. They leave out
the kernel (system calls) and cache misses: a process that shares its core executes the
same instructions more slowly.

    .venv/bin/python tests/perf/instructions.py [--workers 2] [--workload W3s] \\
        [--counts 2000,6000]

Needs valgrind (`apt-get install valgrind`) and the compiled build (`pip install -e .`);
progress on stderr, the table on stdout. Each run takes about a minute here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from amqpd import BUILD

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_brokers import wait_for_port

CONSUME = ["-q", "100", "-A", "50"]
WORKLOADS = {  # name: (amqpd perf arguments, deliveries per publish)
    "W3s": (
        ["-t", "fanout", "--queues", "10", "-x", "1", "-y", "10", "--consumer-processes", "2"],
        10,
    ),
    "W1": (["-x", "1", "-y", "1"], 1),
}
BALANCED = ["--queue-arg", "x-queue-master-locator=min-masters"]
START_TIMEOUT = 300.0  # s: the interpreter starts slowly under valgrind


@dataclass(frozen=True, slots=True)
class Count:
    """The instructions the broker's processes executed over one measured run."""

    workers: int
    messages: int
    per_process: dict[int, int]

    @property
    def total(self) -> int:
        return sum(self.per_process.values())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _processes(root: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(root)], capture_output=True, text=True)
    return [root, *(int(pid) for pid in found.stdout.split())]


def _control(option: str, pids: list[int]) -> None:
    for pid in pids:
        subprocess.run(["callgrind_control", option, str(pid)], capture_output=True, check=True)


def _summary(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary line in {path}")


def measure(workers: int, messages: int, workload: str, work: Path) -> Count:
    """Run the broker under callgrind and count one run of ``messages`` per producer."""
    perf_args, _copies = WORKLOADS[workload]
    out = work / f"w{workers}-m{messages}"
    out.mkdir()
    port = _free_port()
    options = ["--workers", str(workers)]
    queue_args: list[str] = []
    if workers > 1:
        options += ["--spread-vhosts", "*"]
        queue_args = BALANCED
    env = dict(os.environ, AMQPD_MANAGEMENT_PORT="0", AMQPD_PROMETHEUS_PORT="0")
    broker = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            "--trace-children=yes",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}/callgrind.%p",
            sys.executable,
            "-m",
            "amqpd",
            "--port",
            str(port),
            "--data-dir",
            str(out / "data"),
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=(out / "broker.log").open("wb"),
        env=env,
    )
    try:
        wait_for_port(port, START_TIMEOUT)
        pids = _processes(broker.pid)
        _control("--instr=on", pids)
        client = [
            sys.executable,
            "-m",
            "amqpd",
            "perf",
            "-u",
            f"amqp://guest:guest@127.0.0.1:{port}/",
            *perf_args,
            *CONSUME,
            *queue_args,
        ]
        # the warm-up declares the topology (and moves the connections to their queues)
        subprocess.run(
            [*client, "-C", "200", "-D", "200", "--keep-queues"],
            check=True,
            capture_output=True,
            timeout=600,
        )
        _control("--zero", pids)
        subprocess.run(
            [*client, "-C", str(messages), "-D", str(messages), "--predeclared"],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        _control("--dump", pids)
    finally:
        broker.send_signal(signal.SIGINT)
        try:
            broker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
    counts = {}
    for pid in pids:
        dumps = sorted(out.glob(f"callgrind.{pid}.*"))
        if not dumps:
            raise RuntimeError(f"process {pid} wrote no dump: see {out}")
        counts[pid] = _summary(dumps[0])
    return Count(workers, messages, counts)


def main(argv: list[str] | None = None) -> int:
    """Measure one process and ``--workers N``, print instructions per delivery."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="the worker count compared to 1 [2]")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="W3s", help="[W3s]")
    p.add_argument(
        "--counts", default="2000,6000", help="messages per producer, two runs [2000,6000]"
    )
    p.add_argument("--keep", type=Path, help="keep the callgrind files in this directory")
    args = p.parse_args(argv)
    try:
        low, high = (int(part) for part in args.counts.split(","))
    except ValueError:
        p.error("--counts takes two integers, e.g. 2000,6000")
    if high <= low:
        p.error("--counts: the second must be larger")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    if BUILD.kind != "mypyc":
        print("the broker is not compiled here: run `pip install -e .` first", file=sys.stderr)
        return 2
    _perf_args, copies = WORKLOADS[args.workload]
    work = Path(tempfile.mkdtemp(prefix="amqpd-instructions-", dir=args.keep))
    rows = []
    try:
        for workers in (1, args.workers):
            counts = []
            for messages in (low, high):
                print(
                    f"{args.workload}, --workers {workers}, {messages} messages under "
                    "callgrind ...",
                    file=sys.stderr,
                )
                counts.append(measure(workers, messages, args.workload, work))
                print(f"  {counts[-1].total:,} instructions", file=sys.stderr)
            per_delivery = (counts[1].total - counts[0].total) / ((high - low) * copies)
            rows.append((workers, per_delivery, counts[1]))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    base = rows[0][1]
    print(
        f"{args.workload}: instructions per delivery (callgrind, {BUILD.describe()}; "
        f"runs of {low} and {high} messages per producer)"
    )
    for workers, per_delivery, count in rows:
        shares = " + ".join(f"{n / count.total:.0%}" for n in count.per_process.values())
        print(
            f"  --workers {workers}: {per_delivery:,.0f} ({per_delivery / base:.3f}x one "
            f"process; processes' shares of the larger run: {shares})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
