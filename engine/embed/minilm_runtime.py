"""Tokenizing, padding and running MiniLM on onnxruntime: what serving and preparing share.

Preparation measures activation ranges on a probe model through these same helpers, and
those ranges hold only for inputs tokenized, truncated and padded the way served batches
are (see ``pad``: padding with [PAD] would double a batch's range). The probe and the
served model get their sessions the same way, including the kernel choice that keeps int8
results exact on x86 CPUs without VNNI (see ``session``).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

if TYPE_CHECKING:  # numpy is imported where a batch is padded: see engine.embed.local
    import numpy as np
    import numpy.typing as npt
    import onnxruntime as ort

__all__ = ["DIMENSION", "MAX_TOKENS", "load_tokenizer", "pad", "session"]

DIMENSION = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model; longer texts are truncated

# ORT's fused SkipLayerNormalization kernel is slower here than the plain Add + LayerNormalization
# it replaces (measured ~12% end to end), so that one fusion is turned off.
_DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]

_TOKENIZER_FILE = Path(__file__).with_name("minilm_tokenizer.json")
_PAD_ID = 1012  # "." in the vocabulary; see pad


def _int8_products_saturate() -> bool:
    """True on x86 without VNNI, where ORT's u8 x s8 kernels (vpmaddubsw) sum pairs of products in
    saturating int16: 255 * 127 * 2 overflows, and BERT activations fill the u8 range."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return False  # ARM's int8 dot products accumulate in 32 bits
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # cannot tell: assume the worst
    flags = {f for line in cpuinfo.splitlines() if line.startswith("flags") for f in line.split()}
    return not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}


def load_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(_TOKENIZER_FILE))
    # The vendored file pads/truncates to a fixed 128; we truncate at 256 like sentence-transformers
    # and pad per batch ourselves.
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.no_padding()
    if tokenizer.token_to_id(".") != _PAD_ID:
        raise RuntimeError("unexpected vocabulary in the vendored MiniLM tokenizer")
    return tokenizer


def session(model: str | bytes, threads: int) -> ort.InferenceSession:
    """An inference session on ``threads`` threads (one for a search's queries: ``LocalMiniLM``).

    ORT's pool threads spin for a while after every run. Between the batches of an ingest that is
    10-17 % more passages/s (measured on 2 quiet cores). A server embedding one query per search
    on two threads kept them from spinning, which burned more CPU than the search itself (26.7 ms a
    call); on one thread there is no pool to spin.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if _int8_products_saturate():
        # Exact (u8 x u8) int8 kernels instead: slower, but the same vectors as on VNNI CPUs. Only
        # where needed: on VNNI CPUs ORT would still switch kernels, and lose speed for nothing.
        options.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(
        model, options, providers=["CPUExecutionProvider"], disabled_optimizers=_DISABLED_OPTIMIZERS
    )


def pad(rows: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Right-pad token ids to the longest row; returns (ids, mask).

    Padded positions are masked out of attention and pooling, so their token is free. [PAD]'s
    hidden states are atypical and roughly double the int8 activation range of a batch (its
    quantization is per tensor); padding with "." keeps the range that of real text.
    """
    import numpy as np

    ids = np.full((len(rows), max(len(r) for r in rows)), _PAD_ID, dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask
