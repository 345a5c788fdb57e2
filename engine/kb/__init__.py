"""The knowledge base served by the ``kb`` tool profile: graph records, evidence, their links.

Graph records (``records``) are nodes and relations of a fixed catalogue (``catalog``), stored
canonically in ``quarry.kb_records``. Evidence (``evidence``) is the exact bytes a client gave,
stored in ``quarry.kb_evidence``; its text is indexed (``indexing``) as documents of the ``kb``
standalone source by the ordinary ingest pipeline, so the one retrieval pipeline finds it.
Every write goes through a definer function of sql/088-knowledge-base.sql that checks the
caller's admin key.
"""
