"""What a response costs besides retrieval: highlighting hits, and the MCP tool catalogue in a client's context.

    python bench/response_costs.py [--home DIR] [--rounds 300]

Highlighting: ``engine.retrieval.highlights`` over 10 stored SciFact chunks (bench/quality.py's database), p50 of
``--rounds``, and the query-lexeme lookup (one round trip). Catalogue: ``tools/list`` as published (compact JSON)
against pydantic's schemas as generated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool
from pydantic import BaseModel

from bench.quality import DEFAULT_HOME
from bench.quarry_system import bench_database_url
from engine.retrieval.highlights import Highlighter, query_lexemes
from mcp_server.schemas import published_schema
from mcp_server.tools import all_tools

QUERY = "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=DEFAULT_HOME)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with ConnectionPool(bench_database_url(args.home, "bench_scifact"), min_size=1, max_size=1) as pool:
        with pool.connection() as conn:
            contents = [row[0] for row in conn.execute("select content from quarry.chunks order by id limit 10")]
        lookups, highlighting = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            lexemes = query_lexemes(pool, [QUERY])
            lookups.append(time.perf_counter() - started)
            started = time.perf_counter()
            highlighter = Highlighter(lexemes)
            for content in contents:
                highlighter.highlight(content)
            highlighting.append(time.perf_counter() - started)
    print(f"highlighting 10 hits: p50 {1000 * statistics.median(highlighting):.2f} ms; "
          f"query lexemes: p50 {1000 * statistics.median(lookups):.2f} ms")

    def size(schema_of: Callable[[type[BaseModel]], dict[str, Any]]) -> int:
        return sum(len(json.dumps({"name": tool.name, "description": tool.description,
                                   "inputSchema": schema_of(tool.arguments)}, separators=(",", ":")))
                   for tool in all_tools())

    print(f"tools/list ({len(all_tools())} tools): {size(published_schema) / 1000:.1f} KB published, "
          f"{size(lambda model: model.model_json_schema()) / 1000:.1f} KB as pydantic generates it")


if __name__ == "__main__":
    main()
