"""persistence package."""
