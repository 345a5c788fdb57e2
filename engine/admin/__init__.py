"""Keeping the corpus in shape: durable jobs, re-embedding a space, rebuilding derived data."""
