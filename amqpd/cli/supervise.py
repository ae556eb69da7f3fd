"""``python -m amqpd.cli.supervise COUNT ARGS...``: the lean main process of ``amqpd
--workers N`` (the ``amqpd`` command execs it, amqpd/shell/workers/supervisor.py), which
imports the supervisor and the log setup only, not the broker."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from amqpd.cli.logs import configure_logging, reopen_logs
from amqpd.shell.workers.supervisor import LOG_VARIABLE, Supervisor


def main() -> int:
    """Configure logging as the ``amqpd`` command was told, then supervise the workers."""
    log = json.loads(os.environ.pop(LOG_VARIABLE, "{}"))
    file = log.get("file")
    level, log_format = log.get("level") or "info", log.get("format") or "text"
    configure_logging(level, log_format, Path(file) if file else None)
    return Supervisor(sys.argv[2:], int(sys.argv[1]), reopen_logs).run()


if __name__ == "__main__":
    sys.exit(main())
