"""``routegate learn``'s pair heads: per neighbouring pair, the predictor that ranks best.

    pairs = fit_pairs(PairData(labels, texts, ladder, train, held), current, irt)
    for pair in pairs: print(format_pair(pair))     # held-out APGR and intervals, per head
    heads = [pair.head for pair in pairs]           # what the artifact keeps

For each pair of neighbours on the ladder (weakest first), on the prompts both
answered, four predictors of the strong model's gain (its score minus the
weak one's) are fitted on the training split and rank the held-out split:

- ``irt``: the refitted item-response model's P(strong) - P(weak) (``lab/learning.py``);
- ``ridge``: ridge regression on the static embedding
  (``classifiers/static_embedding.py``), the penalty by leave-one-out;
- ``knn``: the mean gain of the nearest labelled prompts (cosine), ``k`` by
  leave-one-out;
- ``blend``: the mean of the three.

The one with the best held-out APGR is kept, refitted on all the pair's prompts,
with an isotonic calibration of its gain fitted on outputs it gave prompts it
was not fitted on: a static head's out-of-fold outputs over all the pair's
prompts, the refit's on the held-out ones (the router compares the gain with
the quality target, so its scale matters, not only its order).
Each ranking gets a 95% bootstrap interval (the held-out prompts resampled,
the same draws for all), and so does its gain over "before" (the current
classifier's ranking of the pair: its own pair head, else its ``difficulty``).
The head is kept over the item-response model alone only when the lower end
of that gain's interval is above zero (``passes``). The kept head was chosen
on the same held-out prompts, so its interval is a little optimistic;
``python -m lab.new_traffic`` scores the whole procedure on prompts it never saw.
A pair with fewer than ``MIN_PROMPTS`` prompts both answered gets no head:
it needs more labels, and ``needs`` says how many.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from classifiers.labels import Labels
from classifiers.pair_heads import MAX_KNN_ROWS, PairHead
from classifiers.static_embedding import StaticEmbedding
from lab.evaluation import gap_is_clear

MIN_PROMPTS = 100          # labelled prompts both models of a pair answered
KINDS = ("irt", "ridge", "knn", "blend")
MIXES = {"irt": (1.0, 0.0, 0.0), "ridge": (0.0, 1.0, 0.0), "knn": (0.0, 0.0, 1.0),
         "blend": (1 / 3, 1 / 3, 1 / 3)}
ALPHAS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
NEIGHBOURS = (5, 10, 25, 50)
DRAWS = 1000
BOOTSTRAP_SEED = 48
OOF_FOLDS = 5              # the calibration's out-of-fold outputs

Ranking = Callable[[str, str], np.ndarray]   # (weak, strong) -> a value per prompt


@dataclass(frozen=True)
class PairData:
    """What the heads are fitted on: the labels, each prompt's text (None: only its
    sketch is known), the ladder, and the learn split (masks over prompts)."""
    labels: Labels
    texts: Sequence[str | None]
    ladder: list[str]
    train: np.ndarray
    held: np.ndarray


@dataclass
class PairResult:
    weak: str
    strong: str
    n_prompts: int                      # prompts both answered
    n_held: int
    before: tuple[float, float, float] | None = None            # APGR, 95% interval
    rankings: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    gains: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # minus before
    chosen: str | None = None
    calibration: tuple[np.ndarray, np.ndarray] | None = None   # of the chosen kind
    note: str = ""
    head: PairHead | None = None

    @property
    def needs(self) -> int:
        """How many more labelled prompts the pair needs for a head (0: enough)."""
        return max(0, MIN_PROMPTS - self.n_prompts)

    @property
    def passes(self) -> bool:
        """The kept head's gain over before has its interval's lower end above zero."""
        return self.chosen is not None and self.gains[self.chosen][1] > 0


def ridge_head(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """(weights, intercept), the penalty by efficient leave-one-out (sklearn's RidgeCV)."""
    from sklearn.linear_model import RidgeCV

    fit = RidgeCV(alphas=ALPHAS).fit(x, y)
    return np.asarray(fit.coef_, dtype=np.float32), float(fit.intercept_)


def kept_rows(n: int) -> np.ndarray:
    """Which of ``n`` labelled prompts a knn head keeps: all of them up to
    ``MAX_KNN_ROWS``, else a seeded draw of that many (its cost, and learn's, bounded)."""
    if n <= MAX_KNN_ROWS:
        return np.arange(n)
    return np.sort(np.random.default_rng(BOOTSTRAP_SEED).choice(n, MAX_KNN_ROWS,
                                                                 replace=False))


def knn_k(x: np.ndarray, y: np.ndarray) -> int:
    """The neighbour count with the least leave-one-out squared error (on the rows a
    head would keep)."""
    rows = kept_rows(len(y))
    x, y = x[rows], y[rows]
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    order = np.argsort(-sims, axis=1)
    errors = {k: float(((y[order[:, :k]].mean(axis=1) - y) ** 2).mean())
              for k in NEIGHBOURS if k < len(y)}
    return min(errors, key=errors.__getitem__) if errors else max(1, len(y) - 1)


def knn_predict(x_train: np.ndarray, y_train: np.ndarray, k: int, x: np.ndarray) -> np.ndarray:
    rows = kept_rows(len(y_train))
    x_train, y_train = x_train[rows], y_train[rows]
    k = min(k, len(y_train))
    out = np.empty(len(x))
    for at in range(0, len(x), MAX_KNN_ROWS):          # a bounded block of similarities
        block = x[at:at + MAX_KNN_ROWS] @ x_train.T
        nearest = np.argpartition(-block, k - 1, axis=1)[:, :k]
        out[at:at + MAX_KNN_ROWS] = y_train[nearest].mean(axis=1)
    return out


def _interval(samples: np.ndarray) -> tuple[float, float]:
    lo, hi = np.percentile(samples, [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap(rankings: dict[str, np.ndarray], strong: np.ndarray, weak: np.ndarray,
              draws: int = DRAWS) -> dict[str, np.ndarray]:
    """APGR of each ranking on ``draws`` resamples of the prompts (the same for all).

    APGR is the area under the gain curve over the strong-weak gap. Both are
    resampled here, but the area is divided by the gap *observed* on all the
    prompts: a resample whose own gap is near zero would otherwise give any APGR
    at all (a few hundred prompts with a gap of 0.05 gave intervals past 1)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    out = {name: np.empty(draws) for name in rankings}
    n, gap = len(strong), float(strong.mean() - weak.mean())
    gains = strong - weak
    for d in range(draws):
        idx = rng.integers(0, n, n)
        g = gains[idx]
        for name, values in rankings.items():
            curve = np.cumsum(ranked_gains(values[idx], g)) / n
            out[name][d] = (curve.sum() / (n + 1)) / gap      # k = 0..n, PGR(0) = 0
    return out


def ranked_gains(values: np.ndarray, gains: np.ndarray) -> np.ndarray:
    """``gains`` in the order ``values`` ranks them, highest first, each run of equal
    values given its mean gain: the expected curve when a router breaks those ties at
    random (a calibrated gain, a step function, ties many prompts)."""
    order = np.argsort(-values, kind="stable")
    v, g = values[order], gains[order].astype(float)
    starts = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))
    if starts.size == v.size:
        return g
    sizes = np.diff(np.concatenate([starts, [v.size]]))
    return np.repeat(np.add.reduceat(g, starts) / sizes, sizes)


def _apgr(values: np.ndarray, strong: np.ndarray, weak: np.ndarray) -> float:
    """APGR of ranking by ``values``, ties at their mean gain (``ranked_gains``)."""
    gap = float(strong.mean() - weak.mean())
    curve = np.concatenate([[0.0], np.cumsum(ranked_gains(values, strong - weak))])
    return float((curve / len(strong) / gap).mean())


def _predictions(emb: np.ndarray | None, gain: np.ndarray, fit_on: np.ndarray,
                 irt: np.ndarray) -> dict[str, np.ndarray]:
    """Each kind's gain on every row, fitted on the rows ``fit_on`` (indices)."""
    out = {"irt": irt}
    if emb is not None:
        w, b = ridge_head(emb[fit_on], gain[fit_on])
        out["ridge"] = emb @ w + b
        k = knn_k(emb[fit_on], gain[fit_on])
        out["knn"] = knn_predict(emb[fit_on], gain[fit_on], k, emb)
        out["blend"] = (out["irt"] + out["ridge"] + out["knn"]) / 3
    return out


def evaluate_pair(result: PairResult, emb: np.ndarray | None, gain: np.ndarray,
                  is_held: np.ndarray, irt: np.ndarray, before: np.ndarray,
                  strong: np.ndarray, weak: np.ndarray) -> None:
    """Fill ``result``'s held-out rankings, intervals and choice (rows: the pair's prompts)."""
    held = np.flatnonzero(is_held)
    s, w = strong[held], weak[held]
    if held.size < 10 or not gap_is_clear(s, w):
        lead = f"{float(s.mean() - w.mean()):+.3f}" if held.size else "none"
        result.note = (result.note + "; " if result.note else "") + (
            f"{held.size} held-out prompts, {result.strong}'s lead over {result.weak} on "
            f"them {lead}: not clearly above zero, so no ranking can be scored on them; "
            "the item-response refit alone")
        return
    preds = _predictions(emb, gain, np.flatnonzero(~is_held), irt)
    rankings = {"before": before[held], **{k: v[held] for k, v in preds.items()}}
    samples = bootstrap(rankings, s, w)
    point = {k: _apgr(v, s, w) for k, v in rankings.items()}
    result.before = (point["before"], *_interval(samples["before"]))
    for kind in preds:
        result.rankings[kind] = (point[kind], *_interval(samples[kind]))
        result.gains[kind] = (point[kind] - point["before"],
                              *_interval(samples[kind] - samples["before"]))
    result.chosen = max(preds, key=lambda k: point[k])     # KINDS order breaks ties
    if result.chosen == "irt" or emb is None:        # out of sample: the held-out rows
        result.calibration = calibration(irt[held], gain[held])
    else:
        result.calibration = calibration(out_of_fold(result.chosen, emb, gain, irt), gain)


def out_of_fold(kind: str, emb: np.ndarray | None, gain: np.ndarray,
                irt: np.ndarray) -> np.ndarray:
    """``kind``'s output on every one of the pair's prompts from a head fitted without it
    (``OOF_FOLDS`` folds): the scale a head refitted on all the prompts has on prompts it
    never saw, which is what its calibration must map. (``irt``: the item-response
    refit's, from the learn split; its scale does not hang on one split.)"""
    if kind == "irt" or emb is None:
        return irt
    fold = np.random.default_rng(BOOTSTRAP_SEED).permutation(gain.size) % OOF_FOLDS
    out = np.empty(gain.size)
    for k in range(OOF_FOLDS):
        test = fold == k
        out[test] = _predictions(emb, gain, np.flatnonzero(~test), irt)[kind][test]
    return out


def calibration(raw: np.ndarray, actual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints of the isotonic (increasing) regression of ``actual`` on ``raw``,
    within [-1, 1], read between them by linear interpolation and flat beyond."""
    from sklearn.isotonic import IsotonicRegression

    fit = IsotonicRegression(y_min=-1.0, y_max=1.0, out_of_bounds="clip").fit(raw, actual)
    return np.asarray(fit.X_thresholds_, float), np.asarray(fit.y_thresholds_, float)


def final_head(result: PairResult, emb: np.ndarray | None, gain: np.ndarray) -> PairHead:
    """The chosen kind refitted on all the pair's prompts, if it passes (``--force``
    writes the artifact, never a head its own figures did not keep); else IRT alone."""
    kind = result.chosen if result.passes and result.chosen else "irt"
    dims = emb.shape[1] if emb is not None else 0
    ridge_w, ridge_b = np.zeros(dims, dtype=np.float32), 0.0
    knn_x, knn_y, k = np.zeros((0, dims), dtype=np.float16), np.zeros(0, np.float32), 0
    if kind in ("ridge", "blend") and emb is not None:
        ridge_w, ridge_b = ridge_head(emb, gain)
    if kind in ("knn", "blend") and emb is not None:
        k, rows = knn_k(emb, gain), kept_rows(len(gain))
        knn_x, knn_y = emb[rows].astype(np.float16), gain[rows].astype(np.float32)
    calib = result.calibration if result.passes and result.calibration else (
        np.zeros(0), np.zeros(0))
    return PairHead(result.weak, result.strong, kind, np.asarray(MIXES[kind]), ridge_w,
                    ridge_b, knn_x, knn_y, k, *calib)


def fit_pairs(data: PairData, before: Ranking, irt_gain: Ranking, static: StaticEmbedding | None
              ) -> list[PairResult]:
    """One result per neighbouring pair of ``data.ladder``. ``before(weak, strong)``: the
    current classifier's ranking of every prompt for that pair (names);
    ``irt_gain(weak, strong)``: the refitted item-response model's gain per prompt."""
    labels, results = data.labels, []
    everything = np.ones(len(labels.prompts), dtype=bool)
    embedded: dict[int, np.ndarray] = {}
    for weak_name, strong_name in zip(data.ladder, data.ladder[1:], strict=False):
        strong, weak = labels.names.index(strong_name), labels.names.index(weak_name)
        index, s, w = labels.pair_scores(everything, strong, weak)
        result = PairResult(weak_name, strong_name, int(index.size),
                            int(data.held[index].sum()))
        results.append(result)
        emb = None
        if result.needs:            # no head, no calibration, no say in the write
            result.note = (f"needs more labels: {result.n_prompts} prompts both answered, "
                           f"about {MIN_PROMPTS} wanted ({result.needs} more); the "
                           "item-response refit alone")
        else:
            emb = _embeddings(data, index, static, embedded)
            if emb is None:
                result.note = ("no static heads: some prompts are known only by their sketch "
                               "(logging.prompts keeps the text)")
            evaluate_pair(result, emb, s - w, data.held[index],
                          irt_gain(weak_name, strong_name)[index],
                          before(weak_name, strong_name)[index], s, w)
        result.head = final_head(result, emb, s - w)
    return results


def _embeddings(data: PairData, index: np.ndarray, static: StaticEmbedding | None,
                cache: dict[int, np.ndarray]) -> np.ndarray | None:
    if static is None or any(data.texts[i] is None for i in index):
        return None
    for i in index:
        if int(i) not in cache:
            cache[int(i)] = static.embed(str(data.texts[i]))
    return np.vstack([cache[int(i)] for i in index])


def _cell(value: tuple[float, float, float], signed: bool = False) -> str:
    fmt = "{:+.3f}" if signed else "{:.3f}"
    return f"{fmt.format(value[0])} [{fmt.format(value[1])}, {fmt.format(value[2])}]"


def format_pair(result: PairResult) -> str:
    """The pair's held-out table, one line per ranking, and what was kept."""
    lines = [f"pair {result.weak} -> {result.strong}: {result.n_prompts} prompts both "
             f"answered, {result.n_held} held out"]
    if result.before is not None:
        lines.append(f"  {'ranking':<18} {'held-out APGR [95%]':<26} gain over before [95%]")
        lines.append(f"  {'before (current)':<18} {_cell(result.before):<26}")
        for kind, value in result.rankings.items():
            lines.append(f"  {kind:<18} {_cell(value):<26} {_cell(result.gains[kind], True)}")
    if result.note:
        lines.append(f"  {result.note}")
    if result.chosen is not None:
        verdict = ("kept: its gain's interval is above zero" if result.passes else
                   "not kept over the item-response model: its gain's interval reaches zero")
        lines.append(f"  best held out: {result.chosen}; {verdict}")
    return "\n".join(lines)


def pair_provenance(result: PairResult) -> dict:
    """What ``LEARNED.json`` keeps of a pair: the figures and the choice."""
    return {"weak": result.weak, "strong": result.strong, "prompts": result.n_prompts,
            "held_out": result.n_held, "before": result.before, "rankings": result.rankings,
            "gains": result.gains, "chosen": result.chosen, "passes": result.passes,
            "kept": None if result.head is None else result.head.kind, "note": result.note}
