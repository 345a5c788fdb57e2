"""What a response costs besides retrieval: highlighting hits, and the MCP tool catalogue in a client's context.

    python bench/response_costs.py [--home DIR] [--rounds 300]

Highlighting: ``engine.retrieval.highlights`` over 10 stored SciFact chunks (bench/quality.py's database), p50 of
``--rounds``, and the query-lexeme lookup (one round trip). Catalogue: ``tools/list`` as the server lists it
(compact JSON) per tool profile, to a search key and to an admin key, against pydantic's schemas as generated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from psycopg_pool import ConnectionPool

from bench.quality import DEFAULT_HOME
from bench.quarry_system import bench_database_url
from engine.config import Settings
from engine.retrieval.highlights import Highlighter, query_lexemes
from mcp_server.profiles import PROFILE_NAMES, build_profile
from mcp_server.server import listing
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

    # What tools/list sends, per profile and audience: the server's own listing, as compact JSON.
    settings = Settings()
    for name in PROFILE_NAMES:
        specs = build_profile(name, settings).tools
        for audience, shown in (("search key", [s for s in specs if s.audience == "everyone"]),
                                ("admin key", list(specs))):
            tools = [listing(spec).model_dump(mode="json", by_alias=True, exclude_none=True) for spec in shown]
            size = len(json.dumps({"tools": tools}, separators=(",", ":")))
            print(f"tools/list, profile {name}, {audience}: {len(tools)} tools, {size:,} bytes")
    raw = sum(len(json.dumps({"name": spec.name, "description": spec.description,
                              "inputSchema": spec.arguments.model_json_schema()}, separators=(",", ":")))
              for spec in all_tools())
    print(f"every tool's input schema as pydantic generates it: {raw:,} bytes")


if __name__ == "__main__":
    main()
