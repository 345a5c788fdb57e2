"""Re-crawling an unchanged website: how much of the first crawl's time it costs, and that it embeds nothing.

    python bench/crawl.py [--site /usr/share/doc/python3.11/html] [--pages 300] [--home bench/.out/crawl]

Serves a real documentation site (the Python 3.11 docs HTML from Debian's python3.11-doc) on
loopback with the standard library's HTTP server, which answers ``If-Modified-Since`` with 304,
then runs ``quarry ingest http://127.0.0.1:PORT/ --source bench-crawl --max-pages N`` three
times with the real CLI on the embedded database of a fresh QUARRY_HOME: a first crawl, an
unchanged re-crawl, and a re-crawl after one page changed. Reports wall time, the ingest's
own counts (fetched, unchanged, embedded) and the server's request and 304 counts per run, and
the ratio of each re-crawl to the first. The model is the local default, so the first crawl
is bound by embedding, as a real one is.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
SOURCE = "bench-crawl"


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    statuses: ClassVar[Counter[int]] = Counter()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        CountingHandler.statuses[int(code) if str(code).isdigit() else 0] += 1

    def log_message(self, format: str, *args: Any) -> None:
        pass


def ingest(env: dict[str, str], url: str, pages: int) -> tuple[float, dict[str, Any], Counter[int]]:
    CountingHandler.statuses = Counter()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "engine.cli", "ingest", url, "--source", SOURCE,
                           "--max-pages", str(pages), "--json"], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"quarry ingest failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary: dict[str, Any] = json.loads(done.stdout)
    return wall, summary, Counter(CountingHandler.statuses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--home", type=Path, default=BENCH_DIR / ".out" / "crawl")
    args = parser.parse_args()
    if not (args.site / "index.html").exists():
        raise SystemExit(f"{args.site} holds no site (apt-get install python3.11-doc)")
    site = args.home / "site"
    shutil.rmtree(args.home, ignore_errors=True)
    shutil.copytree(args.site, site, symlinks=False)  # a copy: one page is changed below
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUARRY_")
           and key not in ("DATABASE_URL", "VOYAGE_API_KEY")}
    env |= {"QUARRY_HOME": str(args.home / "home"), "QUARRY_TEXT_MODEL": "local", "QUARRY_CODE_MODEL": "local"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(CountingHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        runs = []
        for name in ("first crawl", "unchanged re-crawl", "one page changed"):
            if name == "one page changed":
                page = site / "library" / "functions.html"
                text = page.read_text()
                assert "Return the absolute value of a number." in text  # inside the page's main content
                page.write_text(text.replace("Return the absolute value of a number.",
                                             "Return the absolute value of a number, as abs() always has.", 1))
                os.utime(page, (time.time() + 5, time.time() + 5))
            wall, summary, statuses = ingest(env, url, args.pages)
            runs.append(wall)
            print(f"{name}: {wall:.1f} s wall; {summary['added']} added, {summary['updated']} updated, "
                  f"{summary['unchanged']} unchanged, {summary['deleted']} deleted, {len(summary['failed'])} "
                  f"failed; {summary['vectors_embedded']} embedded; requests {sum(statuses.values())} "
                  f"({statuses[304]} answered 304); {summary['fetched']}"
                  + ("" if len(runs) == 1 else f"; {wall / runs[0]:.1%} of the first crawl"), flush=True)
    finally:
        server.shutdown()
        subprocess.run([sys.executable, "-m", "engine.cli", "stop"], cwd=REPO, env=env, capture_output=True,
                       check=False)


if __name__ == "__main__":
    main()
