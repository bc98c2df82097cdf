"""Writing what ``routegate learn`` fitted: the base artifact plus the learned terms.

    write_learned(Path("out"), base_path, fit, labels, (strong, weak), base, provenance)
    ComplexityModel.load("out")           # routing.classifier: out, classify --classifier out

The directory holds ``complexity.npz`` (the base artifact's arrays, unchanged,
plus ``learned_*``: see ``LearnedTerms`` in ``classifiers/learned_terms.py``, and
``learned_prompts``, the digests of the prompts fitted: a later ``learn`` from
this artifact holds out only prompts it has not seen; and ``pair_*``, a head per
neighbouring pair of the ladder, ``classifiers/pair_heads.py``) and
``LEARNED.json``, its provenance: the label file's digest, the base
artifact's, the split, the cross-validated penalty and the held-out APGR
before and after. The same provenance is in the artifact's metadata.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from classifiers.artifact import read_npz, write_npz
from classifiers.complexity import DEFAULT_ARTIFACT
from classifiers.labels import Labels
from classifiers.pair_heads import PairHead, heads_to_arrays
from classifiers.sketch import DIGEST_BYTES
from classifiers.static_embedding import StaticEmbedding
from lab.learning import Base, Fit, delta


def learned_arrays(fit: Fit, names: list[str], weak: int, strong: int,
                   fitted_on: Sequence[bytes]) -> dict[str, np.ndarray]:
    """``fitted_on``: the digests of the prompts fitted (``Labels.prompts``), kept so
    that learning again holds out only prompts this artifact has not seen."""
    digests = sorted(set(fitted_on))
    idx = np.fromiter(sorted(fit.hash_w), dtype=np.int32, count=len(fit.hash_w))
    return {
        "learned_hash_idx": idx,
        "learned_hash_w": np.asarray([fit.hash_w[int(i)] for i in idx], dtype=np.float32),
        "learned_dense_w": fit.dense_w.astype(np.float64),
        "learned_beta": np.asarray([fit.beta]),
        "learned_names": np.asarray(names),
        "learned_ability": fit.ability.astype(np.float64),
        "learned_skill_w": fit.skill_w.astype(np.float64),
        "learned_weak": np.asarray([names[weak]]),
        "learned_strong": np.asarray([names[strong]]),
        "learned_prompts": np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(
            len(digests), DIGEST_BYTES),
    }


def write_learned(out: Path, base_path: Path | None, fit: Fit, labels: Labels,
                  pair: tuple[int, int], base: Base, provenance: dict[str, Any],
                  heads: tuple[list[str], list[PairHead], StaticEmbedding | None] | None = None
                  ) -> Path:
    """``pair``: (strong, weak) indices into ``labels.names``; ``heads``: the ladder,
    a head per neighbouring pair and the static embedding they read
    (``lab/pair_heads.py``), kept as ``pair_*`` arrays."""
    strong, weak = pair
    source = DEFAULT_ARTIFACT if base_path is None else Path(base_path)
    if source.is_dir():
        source = source / DEFAULT_ARTIFACT.name
    arrays, meta = read_npz(source)
    arrays = {k: v for k, v in arrays.items()
              if not k.startswith("learned_") and not k.startswith("pair_")}
    arrays.update(learned_arrays(fit, labels.names, weak, strong,
                                 [p.digest for p in labels.prompts]))
    # ``difficulty`` becomes how much the strongest labelled model is needed:
    # P(it answers) - P(the weakest answers), at least 0; tiers are the
    # tertiles of the learned d(x) = beta * d0(x) + delta(x) on the labelled prompts.
    d = fit.beta * base.d0 + delta(fit, base, np.arange(base.d0.size))
    meta = {**meta, "weak_logit": float(fit.ability[weak]),
            "tier_cuts": [float(np.quantile(d, 1 / 3)), float(np.quantile(d, 2 / 3))],
            "learned": provenance}
    meta.pop("pair_heads", None)
    if heads is not None:
        ladder, kept, static = heads
        arrays.update(heads_to_arrays(ladder, kept))
        reads = any(h.reads_embedding for h in kept)
        meta["pair_heads"] = {"ladder": ladder, "kinds": [h.kind for h in kept],
                              "static": static.meta if reads and static is not None else None}
    out.mkdir(parents=True, exist_ok=True)
    target, record = out / DEFAULT_ARTIFACT.name, out / "LEARNED.json"
    # The provenance is staged first and put in place only once the artifact is:
    # a write that fails half-way leaves the two as they were, matching.
    staged = record.with_name(record.name + ".tmp")
    staged.write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
    try:
        write_npz(target, arrays, meta)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    os.replace(staged, record)
    return target
