"""Stream storage: append-only segment files with a sparse chunk index (issue 29).

`persistence.stream.format` is pure (chunk and entry encoding, the per-chunk filter); the
model may import it. `persistence.stream.log` does the file I/O and is reached from the
model only through the `StreamLogPort` of amqpd/model/stream.py.
"""
