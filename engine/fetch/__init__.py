"""Fetchers: where a corpus lives (a website, a package registry, a git remote) brought to disk.

Each fetcher turns a location into a ``FetchedTree`` (``engine.fetch.tree``): a folder under
``QUARRY_HOME/fetch`` holding what it fetched, the listing the ingest reads from it, each
document's citation URL, the version it is, and every item it could not fetch with a reason.
The one ingest pipeline (``engine.ingest.pipeline``) then parses, embeds and writes it as it
does a local folder; change detection that only the fetcher can do (ETag/Last-Modified, a
package's hash, a git revision) happens here, the content-hash comparison there.
"""
