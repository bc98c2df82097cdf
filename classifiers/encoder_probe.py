"""Does the reading encoder pay? ``routegate learn --labels FILE --compare-encoder``.

    report = compare_encoder(labels, texts, result, base)   # held-out APGR per ranking

On the same split as ``learn``: a ridge head on the encoder's embeddings
(``classifiers/encoder.py``), fitted to each training prompt's gain (the
strong model's score minus the weak one's; the penalty by 3-fold CV within
the training prompts), ranks the held-out prompts; so does its mean with
the learned gain (each standardised on the training prompts). The figures
are printed next to ``learn``'s own, so the choice is made on labels the
encoder never trained on. Embedding costs tens of milliseconds a prompt on
this CPU, so this runs only when asked.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from classifiers.encoder import load_encoder
from classifiers.labels import Labels
from classifiers.learning import Base, Result, gain, held_out_apgr

ALPHAS = (0.3, 1.0, 3.0, 10.0, 30.0)
BATCH = 16
MAX_TOKENS = 128


def compare_encoder(labels: Labels, texts: Sequence[str], result: Result, base: Base,
                    seed: int = 0, held_fraction: float = 0.5) -> dict[str, float | None]:
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import cross_val_score

    encoder = load_encoder()
    emb = np.vstack([encoder.embed(list(texts[i:i + BATCH]), max_tokens=MAX_TOKENS)
                     for i in range(0, len(texts), BATCH)])
    train, held = labels.split(held_fraction, seed)
    strong, weak = result.strong, result.weak
    index, s, w = labels.pair_scores(train, strong, weak)
    if index.size < 10:
        return {"encoder": None, "mean with learned": None}
    target = s - w
    alpha = max(ALPHAS, key=lambda a: cross_val_score(Ridge(alpha=a), emb[index], target,
                                                      cv=3).mean())
    head = Ridge(alpha=alpha).fit(emb[index], target).predict(emb)
    learned = gain(result.fit, base, strong, weak)

    def z(values: np.ndarray) -> np.ndarray:
        return (values - values[index].mean()) / (values[index].std() + 1e-12)

    return {"encoder": held_out_apgr(labels, held, strong, weak, head)[0],
            "mean with learned": held_out_apgr(labels, held, strong, weak,
                                               z(head) + z(learned))[0],
            "alpha": alpha}
