"""Ingest: where videos come from, what is refused, the job queue, the pool that runs it and the indexer."""
