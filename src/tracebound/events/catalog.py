"""Built-in event catalog (placeholder; filled in by the catalog work)."""
