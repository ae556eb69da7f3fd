"""``amqpd perf``: a load generator for any AMQP 0-9-1 broker (RabbitMQ PerfTest's spirit).

Modules, from the wire up:

- `wire`: URL parsing, pre-encoded publish/ack/commit frames, a frame splitter;
- `client`: a minimal asyncio client (handshake and cold methods through pamqp);
- `deliveries`: in-place parsing of Deliver + header + body frames for consumers;
- `confirms`: publisher-side confirm bookkeeping by batch;
- `stats`: log-linear latency histograms and percentiles;
- `topology`: exchange, queues, bindings and who publishes/consumes where;
- `producer`, `consumer`: one connection each, run as asyncio tasks;
- `worker`: a process running some producers or consumers; `runner`: the coordinator;
- `report`: the summary as text or JSON; `connections`: the idle-connections mode;
- `procstat`: CPU seconds and RSS of a process from /proc; `options`, `cli`: the command.
"""

from __future__ import annotations

from interop.perf.options import PerfOptions, parse_options

__all__ = ["PerfOptions", "parse_options"]
