"""A local cross-encoder reranker: a sequence-classification model exported to ONNX, run on onnxruntime.

Offline, Quarry reranks only if ``QUARRY_RERANKER=cross-encoder:/path/to/dir`` names a model
directory. Any Hugging Face cross-encoder (BERT, MiniLM, ELECTRA, RoBERTa, XLM-R, ...) works once
exported; the export needs torch, Quarry does not. On a machine with the Hugging Face stack::

    pip install optimum-onnx          # optimum < 2: pip install "optimum[exporters]"
    optimum-cli export onnx --model cross-encoder/ms-marco-MiniLM-L-6-v2 \\
        --task text-classification ./ms-marco-MiniLM-L-6-v2-onnx

then copy the directory over and set
``QUARRY_RERANKER=cross-encoder:/path/to/ms-marco-MiniLM-L-6-v2-onnx``. sentence-transformers
writes the same layout with the graph under ``onnx/``::

    CrossEncoder("cross-encoder/ms-marco-MiniLM-L-6-v2", backend="onnx").save_pretrained(dir)

The directory holds ``model.onnx`` (or ``onnx/model.onnx``), ``tokenizer.json`` (the "fast"
tokenizer file) and, optionally, ``config.json``. From the config we read
``max_position_embeddings`` (caps ``max_length``), ``id2label`` / ``num_labels`` (which logit is
"relevant"), ``pad_token_id`` and Quarry's own optional ``quarry_instruction_template`` (below).

Scores: a single logit goes through a sigmoid (what sentence-transformers does for one-label
cross-encoders); two logits through a softmax, keeping the positive label's probability. Either
way ``relevance_score`` is in [0, 1] and, for one model, comparable across calls.

Instructions: a cross-encoder scores (query, document) and was not trained to follow steering
text, so ``instructions`` are ignored and ``follows_instructions`` is False, unless config.json has
``"quarry_instruction_template": "...{instructions}...{query}..."`` for a model trained on such
queries, in which case the query becomes that template filled in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Encoding, Tokenizer

from engine.config import available_cores
from engine.errors import InvalidRequestError, ProviderError
from engine.rerank.base import RerankResult

__all__ = ["CrossEncoderReranker"]

# Cut batches by padded token count, not pair count: ~2k tokens keeps activations in cache while
# short pairs still share a run. engine/embed/local.py measured this for MiniLM; for a MiniLM-L6-sized
# cross-encoder graph, 50 pairs of 80-300 tokens on 2 threads took 1.6 s at 512-2048 and 1.75 s at 4096.
DEFAULT_BATCH_TOKENS = 2048
_MAX_BATCH = 64
# The query keeps at most this share of max_length: only the document side is truncated, and a
# query longer than the whole window would leave it no room (tokenizers then refuses the pair).
_QUERY_SHARE = 0.5
_POSITIVE_LABELS = frozenset({"1", "label_1", "relevant", "positive", "true", "yes"})
_REQUIRED_INPUTS = ("input_ids", "attention_mask")
_OPTIONAL_INPUTS = ("token_type_ids",)

Scores = npt.NDArray[np.float64]


class CrossEncoderReranker:
    """Scores (query, document) pairs jointly with a local ONNX cross-encoder.

    Construction loads and checks everything (files, config, graph inputs and outputs), so a bad
    directory fails at configuration time with ``InvalidRequestError``; a failing model run later
    raises ``ProviderError``. ``max_length`` is the pair's token budget, special tokens included
    (capped by the model's positions): the query keeps at most half of it, documents are truncated.
    ``threads`` defaults to the usable cores. Safe to share between threads (no per-call state).
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        max_length: int = 512,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        threads: int | None = None,
    ) -> None:
        model_dir = Path(model_dir).expanduser()
        if not model_dir.is_dir():
            raise InvalidRequestError(f"cross-encoder model directory {str(model_dir)!r} does not exist")
        model_path = next(
            (p for p in (model_dir / "model.onnx", model_dir / "onnx" / "model.onnx") if p.is_file()), None
        )
        if model_path is None:
            raise InvalidRequestError(
                f"no model.onnx in {str(model_dir)!r} (nor in its onnx/ folder); export the model with "
                "`optimum-cli export onnx --task text-classification`"
            )
        tokenizer_path = model_dir / "tokenizer.json"
        if not tokenizer_path.is_file():
            raise InvalidRequestError(
                f"no tokenizer.json in {str(model_dir)!r}; it is written by optimum-cli and by "
                "save_pretrained() of a fast tokenizer"
            )
        if batch_tokens < 1:
            raise InvalidRequestError("batch_tokens must be positive")
        config = _read_config(model_dir / "config.json")

        self._model_name = _model_name(config, model_dir)
        self._batch_tokens = batch_tokens
        self._instruction_template = _instruction_template(config)
        self._session = _load_session(model_path, threads if threads is not None else available_cores())
        self._feeds_token_types = _check_inputs(self._session, model_path)
        self._output, num_labels = _check_output(self._session, model_path, config)
        self._positive = _positive_label(config) if num_labels == 2 else 0

        # Two copies: "only_second" truncation refuses single texts, and the query is measured alone.
        self._queries = _load_tokenizer(tokenizer_path)
        self._pairs = _load_tokenizer(tokenizer_path)
        self._pad_id = _pad_id(self._pairs, config)
        self._max_length = _usable_length(max_length, config)
        specials = self._pairs.num_special_tokens_to_add(True)
        if self._max_length < specials + 2:
            raise InvalidRequestError(f"max_length {max_length} leaves no room for a query and a document")
        self._query_tokens = int((self._max_length - specials) * _QUERY_SHARE)
        # tokenizer.json may ship fixed-length padding or its own truncation; we pad per batch ourselves.
        for tokenizer in (self._queries, self._pairs):
            tokenizer.no_padding()
            tokenizer.no_truncation()
        self._pairs.enable_truncation(self._max_length, strategy="only_second")

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def follows_instructions(self) -> bool:
        """Whether ``instructions`` reach the model; if False, ``rerank`` ignores them."""
        return self._instruction_template is not None

    @property
    def max_length(self) -> int:
        """Tokens per (query, document) pair, special tokens included."""
        return self._max_length

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        instructions: str | None = None,
        top_k: int | None = None,
    ) -> list[RerankResult]:
        """The documents by relevance to ``query``, best first, at most ``top_k`` of them.

        ``instructions`` are ignored unless ``follows_instructions`` (see the module docstring):
        a plain cross-encoder was never trained to read them, and prepending them would only
        shift its scores unpredictably. Raises ``ProviderError`` if the model run fails.
        """
        if isinstance(documents, str):
            raise TypeError("rerank a sequence of documents, not a single str")
        if top_k is not None and top_k < 0:
            raise InvalidRequestError("top_k must not be negative")
        if not documents or top_k == 0:
            return []
        if instructions and self._instruction_template is not None:
            query = self._instruction_template.format(instructions=instructions, query=query)
        scores = self.scores(query, documents)
        # Stable sort: ties keep the input (fused) order.
        order = sorted(range(len(documents)), key=lambda i: -scores[i])
        return [RerankResult(index=i, relevance_score=float(scores[i])) for i in order[:top_k]]

    def scores(self, query: str, documents: Sequence[str]) -> Scores:
        """Each document's relevance in [0, 1], in input order (no instructions, no sorting)."""
        encodings = self._encode(query, documents)
        out = np.zeros(len(encodings), dtype=np.float64)
        # Sort by length so each batch pads little, then write scores back by original index.
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        batch: list[int] = []
        for i in order:
            # Lengths ascend, so adding pair i makes the batch (len(batch) + 1) x len(pair i) padded.
            width = len(encodings[i].ids)
            if batch and (len(batch) == _MAX_BATCH or (len(batch) + 1) * width > self._batch_tokens):
                out[batch] = self._score([encodings[j] for j in batch])
                batch = []
            batch.append(i)
        if batch:
            out[batch] = self._score([encodings[j] for j in batch])
        return out

    def _encode(self, query: str, documents: Sequence[str]) -> list[Encoding]:
        head = self._queries.encode(query, add_special_tokens=False)
        if len(head.ids) > self._query_tokens:
            # Cut the text at a token boundary; the offsets point into the original string.
            query = query[: head.offsets[self._query_tokens - 1][1]]
        try:
            return self._pairs.encode_batch([(query, doc) for doc in documents])
        except Exception as exc:  # tokenizers raises bare Exception, e.g. if a query still overflows
            raise ProviderError(f"cross-encoder tokenization failed: {exc}") from exc

    def _score(self, encodings: Sequence[Encoding]) -> Scores:
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._feeds_token_types:
            feeds["token_type_ids"] = types
        try:
            logits = np.asarray(self._session.run([self._output], feeds)[0], dtype=np.float64)
        except Exception as exc:  # onnxruntime's errors derive from Exception only
            raise ProviderError(f"cross-encoder model run failed: {exc}") from exc
        return _relevance(logits.reshape(len(encodings), -1), self._positive)


def _relevance(logits: Scores, positive: int) -> Scores:
    """Sigmoid of a single logit; softmax probability of the positive label for two."""
    if logits.shape[1] == 1:
        result: Scores = 0.5 * (1.0 + np.tanh(0.5 * logits[:, 0]))  # sigmoid without exp overflow
        return result
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    positive_probs: Scores = probs[:, positive]
    return positive_probs


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"cannot read {str(path)!r}: {exc}") from exc
    if not isinstance(config, dict):
        raise InvalidRequestError(f"{str(path)!r} is not a JSON object")
    return config


def _model_name(config: dict[str, Any], model_dir: Path) -> str:
    # Exports keep the hub id in _name_or_path; a local path there would say nothing useful.
    name = config.get("_name_or_path")
    if isinstance(name, str) and name and not Path(name).is_absolute():
        return name
    return model_dir.name


def _instruction_template(config: dict[str, Any]) -> str | None:
    template = config.get("quarry_instruction_template")
    if template is None:
        return None
    if not isinstance(template, str) or "{query}" not in template or "{instructions}" not in template:
        raise InvalidRequestError("quarry_instruction_template must be a string containing {instructions} and {query}")
    try:
        template.format(instructions="", query="")
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidRequestError(f"quarry_instruction_template is not a valid format string: {exc}") from exc
    return template


def _usable_length(requested: int, config: dict[str, Any]) -> int:
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int) or positions <= 0:
        return requested
    model_type = str(config.get("model_type", ""))
    if model_type.endswith("roberta") or model_type == "camembert":
        # RoBERTa-family positions start after the padding index: 514 positions hold 512 tokens.
        pad = config.get("pad_token_id")
        positions -= (pad if isinstance(pad, int) else 1) + 1
    return min(requested, positions)


def _pad_id(tokenizer: Tokenizer, config: dict[str, Any]) -> int:
    # Padded positions are masked out, so any in-vocabulary id works; prefer the model's own.
    padding = tokenizer.padding
    if padding is not None and isinstance(padding.get("pad_id"), int):
        return int(padding["pad_id"])
    pad = config.get("pad_token_id")
    return pad if isinstance(pad, int) and pad >= 0 else 0


def _positive_label(config: dict[str, Any]) -> int:
    id2label = config.get("id2label")
    if isinstance(id2label, dict):
        for key, label in id2label.items():
            if str(label).strip().lower() in _POSITIVE_LABELS and str(key).isdigit() and int(key) in (0, 1):
                return int(key)
    return 1


def _load_tokenizer(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises bare Exception for malformed files
        raise InvalidRequestError(f"cannot load {str(path)!r} as a tokenizers tokenizer: {exc}") from exc


def _load_session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    # One request's batches run one after another; parallelism is inside each operator.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's errors derive from Exception only
        raise InvalidRequestError(f"cannot load {str(path)!r} as an ONNX model: {exc}") from exc


def _check_inputs(session: ort.InferenceSession, path: Path) -> bool:
    """Check the graph takes what we feed; returns whether it wants token_type_ids."""
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in _REQUIRED_INPUTS if n not in names]
    unknown = [n for n in names if n not in _REQUIRED_INPUTS + _OPTIONAL_INPUTS]
    if missing or unknown:
        problem = f"lacks inputs {missing}" if missing else f"has inputs Quarry cannot feed {unknown}"
        raise InvalidRequestError(
            f"{str(path)!r} is not a text-classification export: it {problem} "
            f"(expected input_ids, attention_mask and optionally token_type_ids; got {names})"
        )
    for i in session.get_inputs():
        if i.type != "tensor(int64)":
            raise InvalidRequestError(f"{str(path)!r}: input {i.name} is {i.type}, expected tensor(int64)")
    return "token_type_ids" in names


def _check_output(session: ort.InferenceSession, path: Path, config: dict[str, Any]) -> tuple[str, int]:
    """The logits output's name and label count (1 or 2), from the graph or else the config."""
    outputs = session.get_outputs()
    logits = next((o for o in outputs if o.name == "logits"), outputs[0] if len(outputs) == 1 else None)
    if logits is None:
        names = [o.name for o in outputs]
        raise InvalidRequestError(f"{str(path)!r} has no 'logits' output (outputs: {names})")
    shape = list(logits.shape) if logits.shape is not None else []
    labels: int | None = shape[1] if len(shape) == 2 and isinstance(shape[1], int) else None
    if labels is None:  # a dynamic label axis: trust the config, which exports always carry
        configured = config.get("num_labels") or len(config.get("id2label") or {}) or None
        labels = int(configured) if configured is not None else None
    if len(shape) != 2 or labels not in (1, 2):
        raise InvalidRequestError(
            f"{str(path)!r} output {logits.name!r} has shape {shape} with {labels} labels; a relevance "
            "cross-encoder outputs logits of shape (batch, 1) or (batch, 2)"
        )
    return logits.name, labels
