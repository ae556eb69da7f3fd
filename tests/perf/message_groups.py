"""The message-group goal at full size: 100 groups over 4 consumer processes, 100,000
messages, consumer 0 SIGKILLed after 5,000 reports (tests/integration/groups_run.py).

Not part of the pytest run (the suite runs the same scenario with 10,000 messages). Starts
an in-process amqpd, checks every property of the goal (per-group order, one consumer per
group at a time, groups spread, the killed consumer's groups taken over with nothing lost,
JMSXGroupFirstForConsumer) and prints the counts and the time from the first send to the
last report.

    .venv/bin/python tests/perf/message_groups.py
    .venv/bin/python tests/perf/message_groups.py -n 20000 --kill-after 1000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import running_server
from tests.integration.groups_run import check, run


def main(argv: list[str] | None = None) -> int:
    """Run, check, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="messages")
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--kill-after", type=int, default=5_000)
    opts = parser.parse_args(argv)
    with running_server() as server:
        reports = run(
            server.port,
            "perf.groups",
            groups=opts.groups,
            messages=opts.n,
            kill_after=opts.kill_after,
            timeout=1800,
        )
    check(reports, groups=opts.groups, messages=opts.n)
    delivered = {name: len(got) for name, got in sorted(reports.by_consumer.items())}
    owned = {name: len(g) for name, g in sorted(reports.groups_before_kill.items())}
    victim = reports.groups_before_kill[reports.victim]
    print(f"{opts.n:,} messages, {opts.groups} groups, 4 consumer processes: all checks passed")
    print(f"groups per consumer when c0 was killed: {owned}")
    print(f"reports per consumer: {delivered} ({sum(delivered.values()) - opts.n} redelivered)")
    print(f"c0's {len(victim)} groups taken over by the others; {reports.seconds:.1f} s")
    print(f"{opts.n / reports.seconds:,.0f} msgs/s from first send to last report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
