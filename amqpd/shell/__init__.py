"""The anyio I/O shell: sockets, TLS, timers, signals, the admin socket."""
