"""Rerankers: reorder a query's fused candidates by a cross-encoder's relevance score."""
