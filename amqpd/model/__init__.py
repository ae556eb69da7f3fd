"""The broker model (sans-IO): broker, vhosts, queues, consumers, messages, access control."""
