"""``amqpd perf``: parse the options, run, print the summary (``amqpd perf --help``)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence

from interop.perf.client import BrokerClosed
from interop.perf.connections import hold_connections
from interop.perf.options import parse_options
from interop.perf.report import as_json, format_text, summarise
from interop.perf.runner import RunFailed, run


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``amqpd perf``; returns the process exit status."""
    options = parse_options(sys.argv[1:] if argv is None else argv)
    try:
        if options.idle_connections:
            outcome = asyncio.run(hold_connections(options))
            print(json.dumps(outcome.as_json(), indent=2) if options.json else outcome.text())
            return 0
        measured = run(options, progress=sys.stderr if options.interval else None)
        for warning in measured.warnings:
            print(f"amqpd perf: {warning}", file=sys.stderr)
        summary = summarise(measured)
    except (RunFailed, BrokerClosed, OSError) as exc:
        print(f"amqpd perf: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(json.dumps(as_json(summary), indent=2) if options.json else format_text(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
