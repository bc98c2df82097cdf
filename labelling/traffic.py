"""A team's labels from the gateway's traffic, as ``routegate learn`` reads them.

    labels, summary = await traffic_labels(store, "acme", since_s=7 * 86400)
    summary     # {"by_source": {"escalation": 40, "feedback": 12}, "skipped": 0, ...}
    summary["texts"]    # digest -> prompt text, for labels kept with logging.prompts

Labels whose sketch this featurizer cannot read (written by another version,
or damaged) are skipped and counted, not guessed at. A label that repeats
another's request id, model and source is counted once: a batch line that
ran again after a crash (its request id is the line's) labels its prompt
again, and one prompt must not weigh twice.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from functools import partial
from typing import Any

from classifiers.labels import LabelError, Labels, LabelSet, check_label
from classifiers.sketch import PromptSketch, SketchError
from labelling.store import LabelStore


async def traffic_labels(store: LabelStore, team: str, since_s: float | None
                         ) -> tuple[Labels, dict[str, Any]]:
    labels = LabelSet()
    by_source: Counter[str] = Counter()
    skipped = repeated = 0
    seen: set[tuple[str, str, str]] = set()
    texts: dict[bytes, str] = {}         # kept only with logging.prompts
    async for label in store.read(team, since_s):
        if label.request_id:
            key = (label.request_id, label.model, label.source)
            if key in seen:
                repeated += 1
                continue
            seen.add(key)
        try:
            sketch = PromptSketch.from_bytes(label.sketch)
            model, score = check_label(label.model, label.score, f"label {label.request_id}")
        except (SketchError, LabelError):
            skipped += 1
            continue
        labels.add(sketch.digest, partial(_same, sketch), model, score, f"label {label.request_id}")
        if label.text is not None:
            texts.setdefault(sketch.digest, label.text)
        by_source[label.source] += 1
    return labels.build(), {"by_source": dict(by_source), "skipped": skipped,
                            "repeated": repeated, "texts": texts}


def _same(sketch: PromptSketch) -> PromptSketch:
    return sketch


def labels_digest(labels: Labels) -> str:
    """sha256 of what was learned from: each label's prompt digest, model and score."""
    h = hashlib.sha256()
    for p, m, s in zip(labels.prompt, labels.model, labels.score, strict=True):
        h.update(labels.prompts[p].digest + labels.names[m].encode() + b"\0" + repr(s).encode())
    return h.hexdigest()
