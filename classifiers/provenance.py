"""``classifiers/artifacts/PROVENANCE.md``: where the shipped artifact came from."""

from __future__ import annotations

import json
import platform
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy
import sklearn

from classifiers.dataset import TRAIN_FILES, Row, file_digest

_LICENCES = """\
- `llmrouter_*.jsonl`: github ulab-uiuc/LLMRouter `data/dcrouter_preprocessed`, MIT licence.
- `routerbench_*_train.jsonl`: RouterBench subsets (Martian) as redistributed in
  github shuhao02/RouterDC; no licence file.
- `routerdc7_train.jsonl`: github shuhao02/RouterDC `datasets/split2_model7`; no licence file.

The artifact holds only learned weights (hashed n-gram weights, abilities,
interactions), no prompt text. The data files themselves are not in this
repository; they are read from `../shared/datasets/routing/`."""

_DESIGN = """\
P(model m answers x) = sigmoid(theta_m - d(x) + o_m(x)), fitted in four scikit-learn stages
(see `classifiers/training.py`): a multinomial skill classifier (16 skills, hashed features
folded to 2^14 buckets), an item-response logistic regression (abilities + interactions)
followed by a one-step estimate of each prompt's own difficulty, a ridge regression from
hashed word uni/bigrams + byte 4-grams (2^18 buckets) and 15 dense markers to those
difficulties, and a final logistic regression that refits
abilities, the calibration slope of d(x) and the interactions on out-of-fold predictions.
Models are keyed `source/name`: each source has its own abilities and interactions, while
the difficulty weights and the skill classifier are shared by all three sources."""


def _file_table(data_dir: Path, rows: Sequence[Row]) -> list[str]:
    counts = Counter()
    for row in rows:
        counts[row.source] += 1
    lines = ["| file | sha256 |", "|---|---|"]
    for name in (*TRAIN_FILES, "models.json"):
        lines.append(f"| `{name}` | `{file_digest(Path(data_dir) / name)}` |")
    lines += ["", "| source | prompts |", "|---|---|"]
    lines += [f"| {source} | {n} |" for source, n in sorted(counts.items())]
    return lines


def write_provenance(path: Path, artifact: Path, data_dir: Path, rows: Sequence[Row],
                     arrays: dict[str, np.ndarray], meta: dict[str, Any], command: str) -> None:
    n_pairs = sum(len(row.scores) for row in rows)
    sections = [
        "# complexity.npz provenance",
        "",
        f"Built by: `{command}`",
        "",
        f"- artifact: `{artifact.name}`, sha256 `{file_digest(artifact)}`, "
        f"{artifact.stat().st_size:,} bytes",
        f"- seed: {meta['seed']}; rows: {len(rows)} prompts, {n_pairs} (prompt, model) outcomes",
        f"- python {platform.python_version()}, scikit-learn {sklearn.__version__}, "
        f"numpy {np.__version__}, scipy {scipy.__version__}",
        f"- hyper-parameters: `{json.dumps(meta['config'], sort_keys=True)}`",
        "  (best held-out log loss of 4 settings on a seeded 20% prompt hold-out of",
        "  llmrouter_train; llmrouter_test is only used to report)",
        "",
        "## Training data",
        "",
        *_file_table(data_dir, rows),
        "",
        "## Contents",
        "",
        _DESIGN,
        "",
        "| array | shape | dtype |",
        "|---|---|---|",
        *[f"| `{k}` | {tuple(v.shape)} | {v.dtype} |" for k, v in sorted(arrays.items())],
        "",
        f"Tier cuts (training tertiles of the logit): {meta['tier_cuts']}; "
        f"difficulty reference (weak model): `{meta['weak_model']}`.",
        "",
        "## Licences",
        "",
        _LICENCES,
        "",
    ]
    path.write_text("\n".join(sections), encoding="utf-8")
