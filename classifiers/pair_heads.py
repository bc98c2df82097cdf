"""Pair heads: what ``routegate learn`` keeps for a decision between two neighbours.

    heads = PairHeads.from_arrays(arrays, learned_names)   # in a learned complexity.npz
    gains = heads.gains(text, irt_p)        # {(weak, strong): P(strong) - P(weak)}
    chained(irt_p, heads.ladder, gains)     # each model's P(correct), for the policy

A team's models form a ladder, cheapest (weakest) first. For each pair of
neighbours ``learn`` fitted several predictors of the strong one's gain over
the weak one, P(strong answers) - P(weak answers), and kept the one that
ranked the pair's held-out labels best (``lab/pair_heads.py``). Every head
here is a mix of three parts, so one formula serves them all:

- ``irt``: the learned item-response model's own difference for the pair;
- ``ridge``: a linear map of the prompt's static embedding
  (``classifiers/static_embedding.py``);
- ``knn``: the mean gain of the ``k`` labelled prompts nearest in that
  embedding (cosine).

``mix`` weighs them: (1, 0, 0) is the IRT alone, (0, 1, 0) the ridge head, and
a blend any convex mix. The mix is then calibrated: an increasing map, fitted
on outputs it gave labelled prompts it was not fitted on, from the raw mix to the
gain those prompts showed, since a head chosen for its ranking may be off in scale, and the
router compares the gain itself with the quality target. ``chained`` turns gains into each model's P(correct):
the top model keeps the item-response model's P, and each lower model gets the
next one's P less the pair's gain. So the weaker neighbour serves a quality
target ``q`` (``auto:q``) exactly when the head's predicted gain is at most
P(stronger) - q; without heads the chain gives back the item-response model's
own P for every model.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from classifiers.static_embedding import StaticEmbedding

PARTS = ("irt", "ridge", "knn")
MAX_NEIGHBOURS = 100
# Labelled prompts a knn head keeps: its cost is a product with each, 124 us at p99 at
# 5,000 (8 ms at 20,000), and a team's traffic may label 100,000s.
MAX_KNN_ROWS = 5_000


@dataclass(frozen=True, slots=True)
class PairHead:
    weak: str
    strong: str
    kind: str                  # "irt", "ridge", "knn" or "blend": what learn kept
    mix: np.ndarray            # (3,) weights of the PARTS
    ridge_w: np.ndarray        # (dims,)
    ridge_b: float
    knn_x: np.ndarray          # (n, dims) float16, unit rows; empty without a knn part
    knn_y: np.ndarray          # (n,) the labelled gains
    knn_k: int
    calib_x: np.ndarray        # the raw gain's calibration (lab/pair_heads.py), piecewise
    calib_y: np.ndarray        # linear, flat beyond its ends; empty: none
    # The mix and the calibration as floats: a head's gain on the request path then makes
    # no numpy call where it needs none (np.interp on one value: 30-40 us after idle).
    _mix: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _calib: tuple[list[float], list[float]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_mix", tuple(float(w) for w in self.mix))
        object.__setattr__(self, "_calib", (np.asarray(self.calib_x, float).tolist(),
                                            np.asarray(self.calib_y, float).tolist()))

    def gain(self, emb: np.ndarray | None, irt_gain: float) -> float:
        """The predicted gain, calibrated; ``emb`` is needed when a ridge or knn part
        weighs."""
        raw = self.raw_gain(emb, irt_gain)
        return _interp(raw, *self._calib) if self._calib[0] else raw

    def raw_gain(self, emb: np.ndarray | None, irt_gain: float) -> float:
        irt, ridge, knn = self._mix
        total = irt * irt_gain
        if ridge and emb is not None:
            total += ridge * (float(self.ridge_w @ emb) + self.ridge_b)
        if knn and emb is not None and self.knn_y.size:
            sims = self.knn_x @ emb.astype(self.knn_x.dtype)
            k = min(self.knn_k, sims.size)
            nearest = np.argpartition(-sims, k - 1)[:k]
            total += knn * float(self.knn_y[nearest].mean())
        return float(total)

    @property
    def reads_embedding(self) -> bool:
        return bool(self.mix[1] or self.mix[2])


@dataclass(frozen=True, slots=True)
class PairHeads:
    ladder: list[str]                       # weakest first
    heads: list[PairHead]                   # one per neighbouring pair (irt: mix (1, 0, 0))
    static: StaticEmbedding | None          # None when no head reads it

    def gains(self, text: str, irt_p: dict[str, float], raw: bool = False
              ) -> dict[tuple[str, str], float]:
        """Each pair's predicted gain on ``text``; ``irt_p``: the item-response model's
        P(correct) of the ladder's models (by name). ``raw``: before the calibration
        (the order the head was chosen for; the calibration only flattens it)."""
        needed = self.static is not None and any(h.reads_embedding for h in self.heads)
        emb = self.static.embed(text) if needed and self.static is not None else None
        pick = PairHead.raw_gain if raw else PairHead.gain
        return {(h.weak, h.strong): pick(h, emb, irt_p[h.strong] - irt_p[h.weak])
                for h in self.heads}


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    """``np.interp(x, xs, ys)`` of one value (``xs`` increasing): linear between the
    points, flat beyond the ends."""
    j = bisect_right(xs, x)
    if j == 0:
        return ys[0]
    if j == len(xs):
        return ys[-1]
    x0, x1, y0 = xs[j - 1], xs[j], ys[j - 1]
    return y0 + (x - x0) * (ys[j] - y0) / (x1 - x0)


def chained(p: dict[str, float], ladder: list[str],
            gains: dict[tuple[str, str], float]) -> dict[str, float]:
    """Each model's P(correct): the top of the ladder keeps ``p``; going down, a model
    gets the one above's P less the pair's gain (the head's, else ``p``'s difference).
    Models off the ladder keep ``p``."""
    out = dict(p)
    rungs = [name for name in ladder if name in p]
    for weak, strong in reversed(list(zip(rungs, rungs[1:], strict=False))):
        step = gains.get((weak, strong), p[strong] - p[weak])
        out[weak] = min(1.0, max(0.0, out[strong] - step))
    return out


def heads_to_arrays(ladder: list[str], heads: list[PairHead]) -> dict[str, np.ndarray]:
    """The ``pair_*`` arrays of a learned artifact."""
    dims = next((h.ridge_w.size for h in heads if h.ridge_w.size), 0)
    arrays: dict[str, np.ndarray] = {
        "pair_ladder": np.asarray(ladder),
        "pair_kind": np.asarray([h.kind for h in heads]),
        "pair_mix": np.asarray([h.mix for h in heads], dtype=np.float64).reshape(len(heads), 3),
        "pair_ridge_w": np.asarray([h.ridge_w if h.ridge_w.size else np.zeros(dims)
                                    for h in heads], dtype=np.float32).reshape(len(heads), dims),
        "pair_ridge_b": np.asarray([h.ridge_b for h in heads], dtype=np.float64),
        "pair_knn_k": np.asarray([h.knn_k for h in heads], dtype=np.int64),
    }
    for i, h in enumerate(heads):
        arrays[f"pair_calib_{i}"] = np.vstack([h.calib_x, h.calib_y]).astype(np.float64)
        arrays[f"pair_knn_x_{i}"] = h.knn_x.astype(np.float16).reshape(-1, max(dims, 1))
        arrays[f"pair_knn_y_{i}"] = h.knn_y.astype(np.float32)
    return arrays


def heads_from_arrays(arrays: dict[str, np.ndarray], static: StaticEmbedding | None
                      ) -> PairHeads | None:
    """The pair heads of a learned artifact, or None when it has none."""
    if "pair_ladder" not in arrays:
        return None
    ladder = [str(n) for n in arrays["pair_ladder"]]
    heads = []
    for i, (weak, strong) in enumerate(zip(ladder, ladder[1:], strict=False)):
        y = arrays[f"pair_knn_y_{i}"].astype(np.float32)
        if y.size > MAX_KNN_ROWS:
            raise ValueError(f"its pair head {weak} -> {strong} keeps {y.size:,} labelled "
                             f"prompts for its neighbours, more than {MAX_KNN_ROWS:,}")
        calib = arrays[f"pair_calib_{i}"]
        heads.append(PairHead(
            weak, strong, str(arrays["pair_kind"][i]), arrays["pair_mix"][i].astype(np.float64),
            arrays["pair_ridge_w"][i].astype(np.float32), float(arrays["pair_ridge_b"][i]),
            arrays[f"pair_knn_x_{i}"].astype(np.float32), y,
            int(min(arrays["pair_knn_k"][i], MAX_NEIGHBOURS)), calib[0], calib[1]))
    if any(h.reads_embedding for h in heads) and static is None:
        raise ValueError("its pair heads read the static embedding, which is missing")
    if static is not None and any(h.reads_embedding and h.ridge_w.size != static.dims
                                  for h in heads):
        raise ValueError(f"its pair heads were fitted on a {heads[0].ridge_w.size}-d "
                         f"static embedding, the shipped one is {static.dims}-d")
    return PairHeads(ladder, heads, static)
