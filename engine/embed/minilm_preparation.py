"""Building the fast int8 model ``LocalMiniLM`` serves from the shipped export.

The shipped export runs its int8 weights in fp32 behind a torch-dynamo graph (see
``engine.embed.local``); on first use per cache directory, ``prepare_model``:

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
without VNNI, whose int8 kernels would saturate, get ORT's exact kernels instead (see ``session`` in
``engine.embed.minilm_runtime``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from engine.config import available_cores
from engine.embed.minilm_runtime import DIMENSION, pad, session

if TYPE_CHECKING:
    import onnx

__all__ = ["prepare_model"]

_LAYERS, _HEADS, _FFN = 6, 12, 1536
_SMOOTH_ALPHA = 0.5
_FFN_OUTLIERS = 8

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

# --- preparation (runs once per cache dir; onnx and the quantizer are imported only here) ---------


def prepare_model(source: Path, target: Path, tokenizer: Tokenizer) -> None:
    """Build the fast int8 model from ``source`` and write it to ``target`` atomically."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weights = _folded_weights(onnx.load(str(source)))
    probe, probe_names = _build(weights, probe=True)
    maxima = _calibrate(session(probe.SerializeToString(), available_cores()), probe_names, tokenizer)
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
            reduce_range=False,  # 7-bit weights cost accuracy; saturation is handled in session
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
    ids, mask = pad(rows)
    outputs = session.run(None, {"input_ids": ids, "attention_mask": mask})
    real = mask.astype(bool)
    return {name: np.abs(value[real]).max(axis=0) for name, value in zip(names, outputs[1:], strict=True)}
