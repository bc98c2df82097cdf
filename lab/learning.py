"""``routegate learn``: refit the complexity model on labels from the traffic it serves.

    labels = read_labels("labels.jsonl")
    result, base = learn(ComplexityModel.load(), labels, seed=0)
    result.before, result.after          # held-out APGR of the current and the learned
    write_learned(Path("out"), base_path, result.fit, labels, (result.strong, result.weak),
                  base, provenance)      # lab/learned_artifact.py

Warm start: the shipped model's difficulty d0(x) and skill posterior z(x) stay
as they are, and the labels fit what sits on top of them, with every
unfamiliar model as a new name:

    P(m answers x) = sigmoid(a_m - (beta * d0(x) + delta(x)) + u_m . z(x))
    delta(x)       = w . hashed(x) + v . dense(x)

- ``a_m``: each labelled model's ability; ``u_m``: its own strengths by skill;
- ``beta`` (from 1) rescales the shipped difficulty to this traffic;
- ``delta``: what the shipped difficulty misses here, on the same hashed
  n-grams and markers (``classifiers/features.py``).

L2 penalties pull ``beta`` to 1 and the rest to 0 (the shipped model), so
with few labels the learned model is the shipped one. The strength on
``delta`` is chosen by 3-fold cross-validation of the log loss within the
training prompts; the held-out prompts are only scored, before and after.
Soft labels (a score of 0.7) are fitted as such: the loss is the cross
entropy. Solved with L-BFGS (scipy): 12 s for 1,000 labels with the CV, measured.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from classifiers.complexity import ComplexityModel
from classifiers.labels import Labels
from classifiers.sketch import PromptSketch
from lab.design import feature_matrix
from lab.evaluation import apgr_cpt, gap_is_clear

log = logging.getLogger("routegate.learn")

LAMBDAS = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3)   # L2 on delta's weights (mean loss scale)
BETA_L2 = 1e-2
U_L2 = 1e-2
A_L2 = 1e-2    # abilities, toward their start: delta and a shift together otherwise
HELD_FRACTION = 0.5


@dataclass(frozen=True, slots=True)
class Base:
    """The shipped model's view of each prompt: d0 and the skill mix."""
    d0: np.ndarray             # (n_prompts,)
    skill: np.ndarray          # (n_prompts, n_skills)
    hashed: sp.csr_matrix      # (n_prompts, N_HASH)
    dense: np.ndarray          # (n_prompts, N_DENSE)


@dataclass
class Fit:
    ability: np.ndarray        # logit a_m per label name
    beta: float
    hash_w: dict[int, float]   # delta's weights, by hash bucket (nonzero only)
    dense_w: np.ndarray        # delta's dense weights (raw feature scale)
    skill_w: np.ndarray        # (n_names, n_skills)
    lam: float


@dataclass
class Result:
    fit: Fit
    names: list[str]
    weak: int
    strong: int
    before: float | None       # held-out APGR, the current classifier's difficulty
    after: float | None        # held-out APGR, the learned gain (P strong - P weak)
    n_train_labels: int
    n_held_prompts: int
    held: np.ndarray           # mask over labels.prompts: the held-out ones
    n_fitted: int              # prompts never held out: the current classifier was fitted on them
    cv: dict[float, float] = field(default_factory=dict)   # lambda -> CV log loss


def base_terms(model: ComplexityModel, prompts: Sequence[PromptSketch]) -> Base:
    d0, skills = [], []
    for sketch in prompts:
        learned, skill, _ = model.raw_parts(sketch.feats)
        d0.append(model.shrunk_logit(sketch.shape, sketch.feats, learned)[0])
        skills.append(skill)
    hashed, dense = feature_matrix([sketch.feats for sketch in prompts])
    return Base(np.asarray(d0), np.vstack(skills), hashed, dense)


class _Problem:
    """The penalised cross entropy over a set of labels, and its gradient."""

    def __init__(self, base: Base, labels: Labels, rows: np.ndarray, n_names: int,
                 lam: float) -> None:
        self.p, self.m, self.y = labels.prompt[rows], labels.model[rows], labels.score[rows]
        used = np.unique(base.hashed[np.unique(self.p)].indices)
        self.cols = used
        self.h = base.hashed[:, used].tocsr()[self.p]            # (labels, K)
        self.mu = base.dense[self.p].mean(0)
        # Centred, not scaled: a marker that barely varies in the labels must
        # not get a large weight that an unseen prompt then multiplies.
        self.x = base.dense[self.p] - self.mu                      # (labels, D)
        self.d0, self.z = base.d0[self.p], base.skill[self.p]
        self.n_names, self.lam, self.n = n_names, lam, len(rows)
        self.k, self.dd, self.s = len(used), self.x.shape[1], self.z.shape[1]
        self.a0 = np.zeros(n_names)

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, ...]:
        i = np.cumsum([self.n_names, 1, self.k, self.dd])
        a, beta, w, v, u = np.split(theta, i)
        return a, beta[0], w, v, u.reshape(self.n_names, self.s)

    def start(self, ability: np.ndarray) -> np.ndarray:
        self.a0 = ability
        return np.concatenate([ability, [1.0], np.zeros(self.k + self.dd + self.n_names * self.s)])

    def loss(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, beta, w, v, u = self.unpack(theta)
        logit = a[self.m] - beta * self.d0 - self.h @ w - self.x @ v + (self.z * u[self.m]).sum(1)
        prob = 1.0 / (1.0 + np.exp(-np.clip(logit, -30, 30)))
        ce = -(self.y * np.log(prob + 1e-12) + (1 - self.y) * np.log(1 - prob + 1e-12)).sum()
        r = (prob - self.y) / self.n                  # d(mean ce) / d logit
        g_a = np.bincount(self.m, r, self.n_names) + 2 * A_L2 * (a - self.a0)
        g_u = np.zeros_like(u)
        np.add.at(g_u, self.m, self.z * r[:, None])
        reg = (self.lam * (w @ w + v @ v) + BETA_L2 * (beta - 1) ** 2 + U_L2 * (u * u).sum()
               + A_L2 * float((a - self.a0) @ (a - self.a0)))
        grad = np.concatenate([g_a, [-(r @ self.d0) + 2 * BETA_L2 * (beta - 1)],
                               -(self.h.T @ r) + 2 * self.lam * w, -(self.x.T @ r) + 2 * self.lam * v,
                               (g_u + 2 * U_L2 * u).ravel()])
        return ce / self.n + reg, grad

    def solve(self, start: np.ndarray) -> np.ndarray:
        out = minimize(self.loss, start, jac=True, method="L-BFGS-B",
                       options={"maxiter": 500})
        return np.asarray(out.x)

    def to_fit(self, theta: np.ndarray) -> Fit:
        a, beta, w, v, u = self.unpack(theta)
        dense_w = v
        # Centring moved a constant into delta: fold it into the abilities.
        shift = float(dense_w @ self.mu)
        hash_w = {int(c): float(x) for c, x in zip(self.cols, w, strict=True) if abs(x) > 1e-7}
        return Fit(a + shift, float(beta), hash_w, dense_w, u, self.lam)


def _start_ability(labels: Labels, rows: np.ndarray, base: Base) -> np.ndarray:
    """Each name's logit ability with the shipped difficulty alone: the mean
    score's logit plus the mean d0 of the prompts it answered."""
    out = np.zeros(len(labels.names))
    for j in range(len(labels.names)):
        mine = rows[labels.model[rows] == j]
        if mine.size:
            mean = float(np.clip(labels.score[mine].mean(), 0.02, 0.98))
            out[j] = np.log(mean / (1 - mean)) + float(base.d0[labels.prompt[mine]].mean())
    return out


def fit_labels(base: Base, labels: Labels, rows: np.ndarray, lam: float,
               warm: np.ndarray | None = None) -> Fit:
    return _solve(base, labels, rows, lam, warm)[0]


def _solve(base: Base, labels: Labels, rows: np.ndarray, lam: float,
           warm: np.ndarray | None = None) -> tuple[Fit, np.ndarray]:
    """(the fit, its parameter vector); ``warm``: start from another penalty's solution
    on the same rows (the optimum is unique: only the time to reach it changes)."""
    problem = _Problem(base, labels, rows, len(labels.names), lam)
    start = problem.start(_start_ability(labels, rows, base))
    theta = problem.solve(start if warm is None else warm)
    return problem.to_fit(theta), theta


def predict_logit(fit: Fit, base: Base, prompts: np.ndarray, names: np.ndarray) -> np.ndarray:
    """logit P(names[i] answers prompts[i]) under ``fit``."""
    return (fit.ability[names] - fit.beta * base.d0[prompts] - delta(fit, base, prompts)
            + (base.skill[prompts] * fit.skill_w[names]).sum(1))


def delta(fit: Fit, base: Base, prompts: np.ndarray) -> np.ndarray:
    cols = np.fromiter(fit.hash_w, dtype=np.int64, count=len(fit.hash_w))
    weights = np.fromiter(fit.hash_w.values(), dtype=np.float64, count=len(fit.hash_w))
    hashed = base.hashed[prompts][:, cols] @ weights if cols.size else 0.0
    return hashed + base.dense[prompts] @ fit.dense_w


def _log_loss(fit: Fit, base: Base, labels: Labels, rows: np.ndarray) -> float:
    logit = predict_logit(fit, base, labels.prompt[rows], labels.model[rows])
    prob = np.clip(1.0 / (1.0 + np.exp(-logit)), 1e-6, 1 - 1e-6)
    y = labels.score[rows]
    return float(-(y * np.log(prob) + (1 - y) * np.log(1 - prob)).mean())


def choose_lambda(base: Base, labels: Labels, train: np.ndarray, seed: int
                  ) -> tuple[float, dict[float, float]]:
    """3-fold CV by prompt within the training prompts; within a fold the penalties
    run from the strongest down, each starting from the last one's solution."""
    prompts = np.flatnonzero(train)
    fold = np.random.default_rng(seed).integers(0, 3, len(labels.prompts))
    totals, ran = dict.fromkeys(LAMBDAS, 0.0), 0
    for k in range(3):
        fit_rows = np.flatnonzero(np.isin(labels.prompt, prompts[fold[prompts] != k]))
        val_rows = np.flatnonzero(np.isin(labels.prompt, prompts[fold[prompts] == k]))
        if not (fit_rows.size and val_rows.size):
            continue
        ran += 1
        warm = None
        for lam in sorted(LAMBDAS, reverse=True):
            fit, warm = _solve(base, labels, fit_rows, lam, warm)
            totals[lam] += _log_loss(fit, base, labels, val_rows)
    if not ran:
        raise ValueError("too few training prompts for a 3-fold cross-validation of the "
                         "penalty: label more, or hold out less (--held-out)")
    losses = {lam: totals[lam] / ran for lam in LAMBDAS}    # the folds that ran
    return min(losses, key=lambda lam: losses[lam]), losses


def held_out_apgr(labels: Labels, held: np.ndarray, strong: int, weak: int,
                  need: np.ndarray) -> tuple[float | None, int]:
    """APGR on the held-out prompts both answered, sending them to the strong
    model in order of ``need`` (per prompt, larger first)."""
    index, s, w = labels.pair_scores(held, strong, weak)
    if index.size < 10 or not gap_is_clear(s, w):
        return None, int(index.size)
    ranking = np.argsort(-need[index], kind="stable")
    return apgr_cpt(ranking, s, w)[0], int(index.size)


def gain(fit: Fit, base: Base, strong: int, weak: int) -> np.ndarray:
    """Per prompt, P(strong answers) - P(weak answers): how much the strong model is
    needed, the order the router sends prompts up in (and ``routegate eval``'s)."""
    everything = np.arange(base.d0.size)
    p = [1.0 / (1.0 + np.exp(-predict_logit(fit, base, everything, np.full(everything.size, m))))
         for m in (strong, weak)]
    return p[0] - p[1]


def learn(model: ComplexityModel, labels: Labels, seed: int = 0,
          held_fraction: float = HELD_FRACTION) -> tuple[Result, Base]:
    """Fit on a split of ``labels``; score the current classifier (``model``) and the
    fit on the rest. When ``model`` was itself learned, the prompts it was fitted
    on stay in training: held out, they would score it in-sample."""
    base = base_terms(model, labels.prompts)
    fitted = model.fitted_prompts or frozenset()
    train, held = labels.split(held_fraction, seed, fitted)
    train_rows = np.flatnonzero(train[labels.prompt])
    if train_rows.size == 0:
        raise ValueError("no labels left to train on after the held-out split")
    lam, cv = choose_lambda(base, labels, train, seed)
    log.info("learn: lambda %.3g by 3-fold CV (%s)", lam, cv)
    fit = fit_labels(base, labels, train_rows, lam)
    strong, weak = labels.strong_weak()
    current = np.asarray([model.score_features(p.feats, p.shape).difficulty
                          for p in labels.prompts])
    before, n_held = held_out_apgr(labels, held, strong, weak, current)
    after, _ = held_out_apgr(labels, held, strong, weak, gain(fit, base, strong, weak))
    n_fitted = sum(p.digest in fitted for p in labels.prompts)
    return Result(fit, labels.names, weak, strong, before, after, int(train_rows.size),
                  n_held, held, n_fitted, cv), base
