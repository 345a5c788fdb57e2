"""Reading what is stored: documents and chunks, links between them, facets, citation URLs."""
