"""The command line: argument parsing, subcommands, log setup."""
