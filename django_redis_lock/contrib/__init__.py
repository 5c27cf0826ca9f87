"""Optional integrations, each behind an extra of its own; nothing here is imported by default."""
