"""``python -m amqpd``: the ``amqpd`` command (amqpd/cli/main.py)."""

from amqpd.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
