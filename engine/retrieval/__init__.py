"""Retrieval: the one pipeline from a ``SearchRequest`` to ranked, explained hits.

Modules, in the order a request meets them: ``request`` (what a search asks, its
defaults), ``degradation`` (query embedding per space, and what fell short), ``hits``
(the one SQL call), ``reranking``, ``grouping`` (documents ranked from chunks: for
``group_by="document"``, ``quarry eval`` and bench/), ``pipeline`` (``retrieve``: the steps
in order), ``highlights``, ``version_hint``; beside them, ``counting``, ``routing`` and
``suggestions``, which read the same legs for other questions, and ``grep`` (exact text).
Import from the module (this package imports nothing, so the modules that ``request``
serves, such as ``engine.corpus.facets``, can import it freely).
"""
