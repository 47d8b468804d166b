"""Queries: the searcher, one ranking from several lists, thumbnails and WebVTT transcripts."""
