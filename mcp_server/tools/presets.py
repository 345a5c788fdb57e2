"""Presets of ``advanced_search`` (and ``guided_query``): how much each result carries.

- ``fast``: no reranking; light results: where the hit is, how good it is and the first
  ``FAST_CONTENT_CHARS`` characters of its content (cut content says ``truncated`` and
  ``omitted_chars``), without ``confidence_factors``, per-leg ranks or format fields;
- ``detailed`` (default): every field of ``search`` results;
- ``full``: ``detailed`` plus ``neighbours``, the chunks right before and after each hit
  in its document (``offset`` -1 / +1), so a hit reads in context without ``get_chunk``.
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from mcp_server.tools import ToolContext

Preset = Literal["fast", "detailed", "full"]

FAST_CONTENT_CHARS = 500
FAST_NO_RERANK = "preset='fast' skips reranking"
_FAST_FIELDS = ("rank", "chunk_id", "document_id", "title", "path", "url", "heading_path", "symbol_path",
                "start_line", "end_line", "source", "confidence", "trust_score", "version_match", "highlights",
                "snippet", "content")
NEIGHBOUR_SPAN = 1


def shape_results(context: ToolContext, preset: Preset, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply ``preset`` to the result rows in place; returns every dict whose ``content`` the size bound may cut."""
    if preset == "fast":
        for row in results:
            light = {key: row[key] for key in _FAST_FIELDS if key in row}
            content: str = light["content"]
            if len(content) > FAST_CONTENT_CHARS:
                light["content"] = content[:FAST_CONTENT_CHARS]
                if "highlights" in row:
                    light["highlights"] = [span for span in row["highlights"] if span["end"] <= FAST_CONTENT_CHARS]
                light["truncated"] = True
                light["omitted_chars"] = len(content) - FAST_CONTENT_CHARS
            row.clear()
            row.update(light)
        return list(results)
    if preset == "detailed" or not results:
        return list(results)
    with context.backend.pool.connection() as conn:
        rows = conn.execute("select chunk_id, neighbour_offset, heading_path, content"
                            " from quarry.chunk_neighbours(%s, %s)",
                            ([UUID(row["chunk_id"]) for row in results], NEIGHBOUR_SPAN)).fetchall()
    around: dict[str, list[dict[str, Any]]] = {}
    for chunk_id, offset, heading_path, content in rows:
        around.setdefault(str(chunk_id), []).append({"offset": offset, "heading_path": heading_path,
                                                     "content": content})
    texts = list(results)
    for row in results:
        row["neighbours"] = around.get(row["chunk_id"], [])
        texts.extend(row["neighbours"])
    return texts
