"""Document and query vectors for the peers, computed once per text set and cached as .npy files.

Every system is measured with Quarry's own embedder (``LocalMiniLM``). The cache key covers the
prepared model file (its name carries the source digest and the preparation version) and every
input text, so a changed model or corpus is embedded afresh and nothing stale is reused.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.embed.base import Vectors
from engine.embed.local import LocalMiniLM


def cached_vectors(embedder: LocalMiniLM, texts: Sequence[str], cache_dir: Path, label: str) -> Vectors:
    """Vectors of ``texts`` (as passages; MiniLM embeds queries the same way), from cache when present."""
    digest = hashlib.sha256(embedder.prepare().name.encode())
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    path = cache_dir / f"{label}.{digest.hexdigest()[:16]}.npy"
    if path.exists():
        vectors: Vectors = np.load(path)
        return vectors
    started = time.perf_counter()
    vectors = embedder.embed_documents(list(texts))
    print(f"  embedded {len(texts)} {label} texts in {time.perf_counter() - started:.1f}s", flush=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp.npy")
    np.save(temporary, vectors)
    temporary.replace(path)
    return vectors
