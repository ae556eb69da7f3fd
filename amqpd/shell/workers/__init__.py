"""Worker processes (``--workers N``): the supervisor, the vhost placement, the hand-over of
connections to the worker that owns their vhost, and the links between workers
(docs/multicore.md)."""
