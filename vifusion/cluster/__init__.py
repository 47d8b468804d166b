"""The cluster: where actors run, the names they share, and where a running service answers."""
