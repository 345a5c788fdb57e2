"""A tiny BERT cross-encoder built in-process: ONNX graph, tokenizer.json and config.json.

Mirrors what ``optimum-cli export onnx --task text-classification`` writes for a BERT
cross-encoder (inputs input_ids / attention_mask / token_type_ids, output ``logits``), at a size
that builds and runs in milliseconds. Weights are random but seeded, and scaled so that every
input matters (word order, token types, the mask): ``reference_logits`` is an independent numpy
forward pass of the same network, so a test comparing the two catches a reranker that feeds the
model wrongly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

Array = npt.NDArray[np.float32]
Weights = dict[str, Array]

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WORDS = (
    "postgres", "index", "vector", "query", "table", "row", "column", "search", "rank", "score",
    "document", "code", "python", "function", "return", "error", "install", "config", "server",
    "client", "fast", "slow", "how", "to", "the", "a", "of", "and", "is", "in", "with", "for",
    "create", "drop", "select", "from", "where", "join", "cache", "memory",
    "##s", "##ing", "##ed",
)  # fmt: skip
# Pieces first, then tokens a test can use to reach a row past a truncated embedding table.
VOCAB: dict[str, int] = {token: i for i, token in enumerate((*SPECIALS, *WORDS))}
CLS, SEP = VOCAB["[CLS]"], VOCAB["[SEP]"]
_MASK_FILL = float(np.finfo(np.float32).min)  # what transformers adds at masked key positions


@dataclass(frozen=True)
class TinyBertConfig:
    """The network's shape. ``embedding_rows`` below the vocabulary size makes a broken model."""

    hidden: int = 32
    layers: int = 2
    heads: int = 2
    intermediate: int = 64
    num_labels: int = 1
    max_positions: int = 64
    type_vocab: int = 2
    seed: int = 0
    token_type_input: bool = True
    embedding_rows: int | None = None
    extra_config: dict[str, Any] = field(default_factory=dict)


def build_model_dir(
    target: Path, config: TinyBertConfig | None = None, *, onnx_subdir: bool = False
) -> tuple[Path, Weights]:
    """Write model.onnx (in ``onnx/`` if asked), tokenizer.json and config.json; returns (dir, weights)."""
    config = config or TinyBertConfig()
    target.mkdir(parents=True, exist_ok=True)
    weights = random_weights(config)
    model_path = target / "onnx" / "model.onnx" if onnx_subdir else target / "model.onnx"
    model_path.parent.mkdir(exist_ok=True)
    onnx.save(build_graph(weights, config), str(model_path))
    write_tokenizer(target / "tokenizer.json")
    hf_config: dict[str, Any] = {
        "_name_or_path": "tiny/bert-cross-encoder",
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "vocab_size": len(VOCAB),
        "hidden_size": config.hidden,
        "num_hidden_layers": config.layers,
        "num_attention_heads": config.heads,
        "intermediate_size": config.intermediate,
        "max_position_embeddings": config.max_positions,
        "type_vocab_size": config.type_vocab,
        "pad_token_id": 0,
        "id2label": {str(i): f"LABEL_{i}" for i in range(config.num_labels)},
        "label2id": {f"LABEL_{i}": i for i in range(config.num_labels)},
        **config.extra_config,
    }
    (target / "config.json").write_text(json.dumps(hf_config, indent=2), encoding="utf-8")
    return target, weights


def write_tokenizer(path: Path) -> None:
    """A BERT WordPiece tokenizer.json over VOCAB, pair template ``[CLS] A [SEP] B [SEP]``."""
    tokenizer = Tokenizer(models.WordPiece(VOCAB, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)],
    )
    tokenizer.decoder = decoders.WordPiece()
    # Hub tokenizer files often carry fixed padding/truncation; a reranker must override both.
    tokenizer.enable_truncation(12)
    tokenizer.enable_padding(pad_id=VOCAB["[PAD]"], pad_token="[PAD]", length=24)
    tokenizer.save(str(path))


def random_weights(config: TinyBertConfig) -> Weights:
    """Seeded weights, scaled ~1/sqrt(fan_in) so activations stay O(1) and no input is drowned out."""
    rng = np.random.default_rng(config.seed)
    h, f = config.hidden, config.intermediate

    def normal(*shape: int, scale: float = 1.0) -> Array:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w: Weights = {
        "word": normal(config.embedding_rows or len(VOCAB), h),
        "position": normal(config.max_positions, h),
        "type": normal(config.type_vocab, h),
        "emb_ln_g": 1 + normal(h, scale=0.1),
        "emb_ln_b": normal(h, scale=0.1),
        "pool_w": normal(h, h, scale=h**-0.5),
        "pool_b": normal(h, scale=0.1),
        "cls_w": normal(h, config.num_labels, scale=2 * h**-0.5),
        "cls_b": normal(config.num_labels, scale=0.1),
    }
    for layer in range(config.layers):
        p = f"l{layer}_"
        for name in ("q", "k", "v", "o"):
            w[p + name + "_w"] = normal(h, h, scale=h**-0.5)
            w[p + name + "_b"] = normal(h, scale=0.1)
        w[p + "i_w"], w[p + "i_b"] = normal(h, f, scale=h**-0.5), normal(f, scale=0.1)
        w[p + "f_w"], w[p + "f_b"] = normal(f, h, scale=f**-0.5), normal(h, scale=0.1)
        for ln in ("ln1", "ln2"):
            w[p + ln + "_g"], w[p + ln + "_b"] = 1 + normal(h, scale=0.1), normal(h, scale=0.1)
    return w


def build_graph(w: Weights, config: TinyBertConfig) -> onnx.ModelProto:
    """BertForSequenceClassification as plain ONNX ops (opset 17), laid out as transformers exports it."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    head_dim = config.hidden // config.heads

    def const(name: str, value: npt.NDArray[Any]) -> str:
        inits.append(numpy_helper.from_array(np.array(value, order="C"), name))  # 0-d stays 0-d
        return name

    def op(kind: str, *inputs: str, **attrs: Any) -> str:
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], name=f"{kind}_{len(nodes)}", **attrs))
        return out

    def linear(x: str, name: str) -> str:
        return op("Add", op("MatMul", x, const(name + "_w", w[name + "_w"])), const(name + "_b", w[name + "_b"]))

    def layer_norm(x: str, name: str) -> str:
        gamma, beta = const(name + "_g", w[name + "_g"]), const(name + "_b", w[name + "_b"])
        return op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-12)

    def heads(x: str, perm: list[int]) -> str:
        split = op("Reshape", x, const(f"split{len(nodes)}", np.array([0, 0, config.heads, head_dim], np.int64)))
        return op("Transpose", split, perm=perm)

    zero, one = const("zero", np.array([0], np.int64)), const("one", np.array([1], np.int64))
    length = op("Slice", op("Shape", "input_ids"), one, const("two", np.array([2], np.int64)), zero)
    x = op(
        "Add",
        op("Gather", const("word", w["word"]), "input_ids"),
        op("Slice", const("position", w["position"]), zero, length, zero),
    )
    if config.token_type_input:
        x = op("Add", x, op("Gather", const("type", w["type"]), "token_type_ids"))
    else:
        x = op("Add", x, const("type0", w["type"][0]))
    x = layer_norm(x, "emb_ln")

    keep = op("Cast", "attention_mask", to=TensorProto.FLOAT)
    fill = op(
        "Mul",
        op("Sub", const("f_one", np.array(1.0, np.float32)), keep),
        const("fill", np.array(_MASK_FILL, np.float32)),
    )
    fill = op("Unsqueeze", fill, const("axes12", np.array([1, 2], np.int64)))  # (batch, 1, 1, keys)

    for layer in range(config.layers):
        p = f"l{layer}_"
        q = heads(linear(x, p + "q"), [0, 2, 1, 3])
        k = heads(linear(x, p + "k"), [0, 2, 3, 1])
        v = heads(linear(x, p + "v"), [0, 2, 1, 3])
        scores = op(
            "Add", op("Mul", op("MatMul", q, k), const(p + "scale", np.array(head_dim**-0.5, np.float32))), fill
        )
        context = op("MatMul", op("Softmax", scores, axis=-1), v)
        merged = op(
            "Reshape",
            op("Transpose", context, perm=[0, 2, 1, 3]),
            const(p + "merge", np.array([0, 0, config.hidden], np.int64)),
        )
        x = layer_norm(op("Add", linear(merged, p + "o"), x), p + "ln1")
        inner = linear(x, p + "i")
        # Exact (erf) GELU, as BERT uses: 0.5 x (1 + erf(x / sqrt 2)).
        erf = op("Erf", op("Div", inner, const(p + "sqrt2", np.array(math.sqrt(2.0), np.float32))))
        gelu = op(
            "Mul",
            op("Mul", inner, op("Add", erf, const(p + "gone", np.array(1.0, np.float32)))),
            const(p + "half", np.array(0.5, np.float32)),
        )
        x = layer_norm(op("Add", linear(gelu, p + "f"), x), p + "ln2")

    first = op("Gather", x, const("cls_pos", np.array(0, np.int64)), axis=1)
    pooled = op("Tanh", linear(first, "pool"))
    linear(pooled, "cls")
    nodes[-1].output[0] = "logits"

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if config.token_type_input else [])
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch_size", "sequence_length"]) for n in names]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", config.num_labels])]
    graph = helper.make_graph(nodes, "tiny-bert-cross-encoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def build_foreign_graph(target: Path) -> Path:
    """A valid ONNX model that is no text classifier (input ``pixel_values``), written as model.onnx."""
    node = helper.make_node("Identity", ["pixel_values"], ["logits"])
    graph = helper.make_graph(
        [node],
        "not-a-cross-encoder",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(target / "model.onnx")
    )
    return target


# --- the independent reference ---------------------------------------------------------------


def _layer_norm(x: npt.NDArray[np.float64], gamma: Array, beta: Array) -> npt.NDArray[np.float64]:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    normed: npt.NDArray[np.float64] = (x - mean) / np.sqrt(var + 1e-12) * gamma + beta
    return normed


_erf = np.vectorize(math.erf, otypes=[np.float64])


def reference_logits(
    w: Weights, config: TinyBertConfig, ids: list[int], types: list[int] | None = None
) -> npt.NDArray[np.float64]:
    """Logits for ONE unpadded sequence, in float64 numpy: no graph, no batching, no mask needed."""
    n = len(ids)
    types = types if types is not None else [0] * n
    x = w["word"][ids].astype(np.float64) + w["position"][:n] + w["type"][types]
    x = _layer_norm(x, w["emb_ln_g"], w["emb_ln_b"])
    dh = config.hidden // config.heads
    for layer in range(config.layers):
        p = f"l{layer}_"

        def project(name: str, t: npt.NDArray[np.float64], p: str = p) -> npt.NDArray[np.float64]:
            result: npt.NDArray[np.float64] = t @ w[p + name + "_w"] + w[p + name + "_b"]
            return result

        q, k, v = (project(name, x).reshape(n, config.heads, dh).transpose(1, 0, 2) for name in "qkv")
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
        attn = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn /= attn.sum(axis=-1, keepdims=True)
        context = (attn @ v).transpose(1, 0, 2).reshape(n, config.hidden)
        x = _layer_norm(project("o", context) + x, w[p + "ln1_g"], w[p + "ln1_b"])
        inner = project("i", x)
        gelu = 0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)))
        x = _layer_norm(project("f", gelu) + x, w[p + "ln2_g"], w[p + "ln2_b"])
    pooled = np.tanh(x[0] @ w["pool_w"] + w["pool_b"])
    logits: npt.NDArray[np.float64] = pooled @ w["cls_w"] + w["cls_b"]
    return logits


def pair_ids(query: str, document: str, max_length: int) -> tuple[list[int], list[int]]:
    """``[CLS] query [SEP] document [SEP]`` ids and type ids, by hand from VOCAB (whole words only),
    the document cut to fit ``max_length``: an independent check of the tokenizer setup."""
    q = [VOCAB[word] for word in query.lower().split()]
    d = [VOCAB[word] for word in document.lower().split()][: max(0, max_length - len(q) - 3)]
    ids = [CLS, *q, SEP, *d, SEP]
    return ids, [0] * (len(q) + 2) + [1] * (len(d) + 1)
