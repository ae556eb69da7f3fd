"""interop package."""
