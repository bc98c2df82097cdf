"""Does the reading encoder pay? ``routegate learn --labels FILE --compare-encoder``.

    report = compare_encoder(labels, texts, result, base)   # held-out APGR per ranking

On the same split as ``learn``: a ridge head on the encoder's embeddings
(``lab/encoder.py``, and its static distillation,
``lab/static_encoder.py``), fitted to each training prompt's gain (the
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

from classifiers.labels import Labels
from lab.encoder_table import embedders
from lab.learning import Base, Result, gain, held_out_apgr

ALPHAS = (0.3, 1.0, 3.0, 10.0, 30.0)


def compare_encoder(labels: Labels, texts: Sequence[str], result: Result, base: Base
                    ) -> dict[str, float | None]:
    """Held-out APGR of a ridge head on MiniLM's embeddings ("encoder"), of its mean
    with the learned gain, and of a head on the static distillation ("static")."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import cross_val_score

    held = result.held                     # the prompts ``learn`` held out
    train = ~held
    strong, weak = result.strong, result.weak
    index, s, w = labels.pair_scores(train, strong, weak)
    if index.size < 10:
        return {"encoder": None, "mean with learned": None, "static": None}
    target = s - w
    learned = gain(result.fit, base, strong, weak)

    def z(values: np.ndarray) -> np.ndarray:
        return (values - values[index].mean()) / (values[index].std() + 1e-12)

    figures: dict[str, float | None] = {}
    for name, embed in embedders().items():
        emb = embed(list(texts))
        alpha = max(ALPHAS, key=lambda a: cross_val_score(Ridge(alpha=a), emb[index], target,
                                                          cv=3).mean())
        head = Ridge(alpha=alpha).fit(emb[index], target).predict(emb)
        key = "encoder" if name == "MiniLM" else name
        figures[key] = held_out_apgr(labels, held, strong, weak, head)[0]
        figures[f"{key} alpha"] = alpha
        if key == "encoder":
            figures["mean with learned"] = held_out_apgr(labels, held, strong, weak,
                                                         z(head) + z(learned))[0]
    return figures
