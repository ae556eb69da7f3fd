"""The wire format: frame codec, raw content-header properties, reply codes."""
