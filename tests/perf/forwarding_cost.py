"""CPU per crossing message of stage 2's records and confirm join, called from compiled code
(docs/multicore.md "(e) The real records of a hop").

The loops live in tests/perf/kernels/forwarding_loops.py; this script compiles that file with
mypyc into a temporary directory (as the broker's engine would call the records: from
compiled code, not from the interpreter), then times, per message: `encode_forward`,
`RecordReader.next_record`, and `ShardConfirms` for a sole copy settled 100 at a time.

    .venv/bin/python tests/perf/forwarding_cost.py [--messages 500000] [--reps 7]

Needs the compiled build (`pip install -e .`); progress on stderr, the table on stdout.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pamqp.commands import Basic
from pamqp.header import ContentHeader

from amqpd import BUILD

REPO = Path(__file__).resolve().parents[2]
KERNEL = Path(__file__).resolve().parent / "kernels" / "forwarding_loops.py"
STEPS = ("encode_forward (sender)", "RecordReader.next_record (owner)", "ShardConfirms (sole)")


def main(argv: list[str] | None = None) -> int:
    """Compile the loops, run them, print the medians."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--messages", type=int, default=500_000, help="messages per run [500000]")
    p.add_argument("--reps", type=int, default=7, help="runs [7]")
    p.add_argument("--size", type=int, default=100, help="body bytes [100]")
    args = p.parse_args(argv)
    if BUILD.kind != "mypyc":
        print("the broker is not compiled here: run `pip install -e .` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as work:
        shutil.copy(KERNEL, work)
        print("compiling the loops with mypyc ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "mypyc", KERNEL.name],
            cwd=work,
            env={"MYPYPATH": str(REPO), "PATH": "/usr/bin:/bin"},
            check=True,
            capture_output=True,
        )
        sys.path.insert(0, work)
        loops = importlib.import_module(KERNEL.stem)
        header = ContentHeader(0, args.size, Basic.Properties(delivery_mode=2)).marshal()
        runs = []
        for rep in range(1, args.reps + 1):
            runs.append(loops.run(args.messages, header, b"x" * args.size))
            print(f"run {rep}: " + ", ".join(f"{us:.3f}" for us in runs[-1]), file=sys.stderr)
    print(f"{args.messages:,} messages of {args.size} B, medians of {args.reps}\n")
    print("| step | us per message |\n| --- | ---: |")
    for i, step in enumerate(STEPS):
        print(f"| {step} | {statistics.median(run[i] for run in runs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
