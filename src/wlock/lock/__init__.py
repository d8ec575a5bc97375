"""What to get: the manifest (weights.toml), the lock (weights.lock), and resolving one into
the other against the Hub. Every name that becomes a path is checked here (names)."""
