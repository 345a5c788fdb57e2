"""Keyword and hybrid searches while the text index is rebuilt, against the same searches alone.

    python bench/reindex_searches.py --home HOME [--rounds 3] [--seconds 3]

``quarry.rebuild_text_index`` (``quarry reindex --only text``, the end of a first ingest or of one that
wrote most of the corpus) runs in one transaction, minutes long at 1M chunks. Searches must keep
answering from the postings committed before it meanwhile (docs/benchmarks-log.md § Keyword searches
keep answering while the text index is rebuilt).

HOME is a Quarry home holding a corpus (e.g. ``python bench/ingest_throughput.py``'s, or one the CLI
ingested into). Per round, one client (``bench.ingest_throughput.SearchProbe``: hybrid searches back
to back on its own connection) runs first for ``--seconds`` alone, the reference measured in the same
run, then while ``quarry reindex --only text`` runs through the real CLI. Printed per round: the
reindex's seconds, and for both phases the searches done, their p50 / p95 / max and errors; the
longest search during the reindex against the longest alone says whether searches waited for it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench.ingest_throughput import SearchProbe, database_url, quarry


def reindex_round(env: dict[str, str], url: str, seconds: float) -> tuple[float, SearchProbe, SearchProbe]:
    """One round: the searches alone for ``seconds``, then the same searches during a text reindex."""
    with SearchProbe(url) as alone:
        time.sleep(seconds)
    with SearchProbe(url) as during:
        time.sleep(0.5)  # the client is connected and searching before the rebuild starts
        done = quarry(env, "reindex", "--only", "text", "--json")
    if done.returncode != 0:
        raise SystemExit(f"quarry reindex --only text failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout)["seconds"]["text"]), alone, during


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="the QUARRY_HOME holding the corpus")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long the searches run alone first")
    args = parser.parse_args()
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["QUARRY_HOME"] = str(args.home.resolve())
    url = database_url(env)
    for number in range(1, args.rounds + 1):
        seconds, alone, during = reindex_round(env, url, args.seconds)
        longest = max(during.latencies_ms, default=float("nan")) / max(alone.latencies_ms, default=float("nan"))
        print(f"round {number}: reindex text {seconds:.2f} s; longest search during it / alone {longest:.1f}x\n"
              f"  alone: {alone.line()}\n  during the reindex: {during.line()}", flush=True)


if __name__ == "__main__":
    main()
