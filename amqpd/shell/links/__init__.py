"""Links between brokers: dynamic shovels (shovel.py), run by supervisor.py."""
