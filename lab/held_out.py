"""``routegate eval --held-out FILE``: how a classifier ranks prompts it never trained on.

    rows = read_held_out(Path("arena_chat.jsonl"))
    print(format_held_out(held_out_results(rows, pairs, {"current": model})))

``FILE`` is routing-format JSONL (``prompt``, ``task``, ``source``,
``scores``: the shared data's format, or what ``python -m lab.arena``
writes for Chatbot-Arena prompts). For each (strong, weak) pair the prompts
are ranked by each classifier's ``difficulty`` (hardest first, sent to the
strong model first) and scored by APGR next to prompt length and random (0.5
in expectation), as in the out-of-domain table of
``lab/outofdomain.py``. A pair is given by the models' names as they
are in the file; without one, the file's strongest and weakest models by
mean score.

A few hundred prompts give a wide APGR, so each is shown with a 95%
bootstrap interval over the pair's prompts, and each ranking's difference
from length with one too. The draws are seeded and the same for every
ranking of a pair (paired), so a difference's interval is narrower than the
two rankings' own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from classifiers.complexity import ComplexityModel
from classifiers.labels import MAX_LINE_BYTES, bounded_lines, check_score, json_object
from lab.dataset import Row, model_key
from lab.evaluation import apgr_cpt
from lab.outofdomain import pair_gap, ranking_apgr

BOOTSTRAP_DRAWS = 1000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True, slots=True)
class HeldOutResult:
    strong: str
    weak: str
    prompts: int
    gap: float
    apgr: dict[str, float]   # ranking name -> APGR
    # ranking name -> 95% bootstrap interval of its APGR, and of its APGR minus length's
    interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    versus_length: dict[str, tuple[float, float]] = field(default_factory=dict)


MAX_ROWS = 200_000


def read_held_out(path: Path) -> list[Row]:
    """The file's rows; ValueError naming the line for one that is not a prompt
    with scores in [0, 1] (``source`` and ``task`` may be left out), or is over
    ``MAX_LINE_BYTES``."""
    rows: list[Row] = []
    with open(path, "rb") as fh:
        for n, line in enumerate(bounded_lines(fh), 1):
            if line is None:
                raise ValueError(f"{path}:{n}: a line over {MAX_LINE_BYTES:,} bytes")
            if line.strip():
                if len(rows) == MAX_ROWS:
                    raise ValueError(f"{path}: more than {MAX_ROWS:,} prompts")
                rows.append(_row(line, f"{path}:{n}"))
    if not rows:
        raise ValueError(f"{path}: no prompts in it")
    return rows


def _row(line: bytes, where: str) -> Row:
    obj = json_object(line, where)
    prompt, scores = obj.get("prompt"), obj.get("scores")
    source, task = obj.get("source", "held-out"), obj.get("task", "")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{where}: \"prompt\" must be a non-empty string")
    if not isinstance(source, str) or not isinstance(task, str):
        raise ValueError(f"{where}: \"source\" and \"task\" must be strings")
    if not isinstance(scores, dict) or not scores:
        raise ValueError(f"{where}: \"scores\" must be an object of model: score")
    return Row(prompt, task, source,
               {model_key(source, m): check_score(v, f"{where}: the score of {m!r}")
                for m, v in scores.items()})


def resolve(rows: Sequence[Row], name: str) -> str:
    """The file's model key (``source/name``) for ``name``; ValueError if none or several."""
    keys = {m for row in rows for m in row.scores}
    found = sorted(k for k in keys if k == name or k.endswith("/" + name))
    if len(found) != 1:
        raise ValueError(f"model {name!r} is {'ambiguous' if found else 'not'} in the file "
                         f"(it has: {', '.join(sorted(keys))})")
    return found[0]


def parse_pairs(rows: Sequence[Row], specs: Sequence[str]) -> list[tuple[str, str]]:
    """``--pair STRONG,WEAK`` values as the file's model keys (the file's strongest
    and weakest by mean score without one); ValueError if malformed, or if a pair
    is one model or shares fewer than two prompts."""
    names = [spec.split(",") for spec in specs]
    if any(len(n) != 2 for n in names):
        raise ValueError("--pair takes STRONG,WEAK")
    pairs = ([(resolve(rows, s.strip()), resolve(rows, w.strip())) for s, w in names]
             if names else [default_pair(rows)])
    for strong, weak in pairs:
        shared = sum(1 for r in rows if strong in r.scores and weak in r.scores)
        if strong == weak or shared < 2:
            raise ValueError(f"pair {strong} vs {weak}: "
                             + ("one model twice" if strong == weak
                                else f"{shared} prompt(s) scored for both; 2 or more needed"))
    return pairs


def default_pair(rows: Sequence[Row]) -> tuple[str, str]:
    keys = sorted({m for row in rows for m in row.scores})
    mean = {m: float(np.mean([r.scores[m] for r in rows if m in r.scores])) for m in keys}
    if len(keys) < 2:
        raise ValueError("the file scores one model only: a pair needs two")
    return max(keys, key=mean.__getitem__), min(keys, key=mean.__getitem__)


def held_out_results(rows: Sequence[Row], pairs: Sequence[tuple[str, str]],
                     models: dict[str, ComplexityModel],
                     rankings: dict[str, np.ndarray] | None = None,
                     draws: int = BOOTSTRAP_DRAWS) -> list[HeldOutResult]:
    """Per pair, the APGR of each model's ``difficulty``, of each of ``rankings``
    (one value per row, higher = to the strong model first), of length and random;
    with ``draws`` > 0, bootstrap intervals of each and of its lead over length."""
    prompts = [row.prompt for row in rows]
    rankings = {**{name: np.asarray([m.score(p).difficulty for p in prompts])
                   for name, m in models.items()}, **(rankings or {})}
    rankings["length"] = np.asarray([len(p) for p in prompts], dtype=float)
    results = []
    for strong, weak in pairs:
        both = [i for i, r in enumerate(rows) if strong in r.scores and weak in r.scores]
        apgr = {name: ranking_apgr(values, rows, strong, weak) for name, values in rankings.items()}
        interval, versus = _intervals({k: v[both] for k, v in rankings.items()},
                                      np.asarray([rows[i].scores[strong] for i in both]),
                                      np.asarray([rows[i].scores[weak] for i in both]), draws)
        results.append(HeldOutResult(strong, weak, len(both), pair_gap(rows, strong, weak),
                                     {**apgr, "random": 0.5}, interval, versus))
    return results


def _intervals(rankings: dict[str, np.ndarray], strong: np.ndarray, weak: np.ndarray,
               draws: int) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]]:
    """95% percentile intervals over ``draws`` resamples of the prompts, the same
    resamples for every ranking: of each APGR, and of each minus length's."""
    n = len(strong)
    if draws <= 0 or n < 2:
        return {}, {}
    samples = {name: np.empty(draws) for name in rankings}
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    for d in range(draws):
        idx = rng.integers(0, n, n)
        s, w = strong[idx], weak[idx]
        for name, values in rankings.items():
            samples[name][d] = (0.5 if np.isclose(s.mean(), w.mean())
                                else apgr_cpt(np.argsort(-values[idx], kind="stable"), s, w)[0])

    def bounds(x: np.ndarray) -> tuple[float, float]:
        lo, hi = np.percentile(x, [2.5, 97.5])
        return float(lo), float(hi)

    return ({name: bounds(x) for name, x in samples.items()},
            {name: bounds(x - samples["length"]) for name, x in samples.items() if name != "length"})


def format_held_out(results: Sequence[HeldOutResult], title: str) -> str:
    labels = list(results[0].apgr) if results else []
    width = {k: max(8, len(k)) for k in labels}
    lines = [f"held out: {title} (APGR; hardest first to the strong model)",
             f"{'strong vs weak':<58} {'prompts':>7} {'gap':>6} "
             + " ".join(f"{k:>{width[k]}}" for k in labels),
             "-" * (73 + sum(w + 1 for w in width.values()))]
    for r in results:
        pair = f"{r.strong.split('/', 1)[-1]} vs {r.weak.split('/', 1)[-1]}"
        lines.append(f"{pair:<58} {r.prompts:7d} {r.gap:6.3f} "
                     + " ".join(f"{r.apgr[k]:{width[k]}.3f}" for k in labels))
    if any(r.interval for r in results):
        lines += ["", "95% bootstrap intervals over each pair's prompts (the same draws for "
                      "every ranking), of the APGR and of its lead over length:"]
        lines += [_interval_line(r) for r in results]
    return "\n".join(lines)


def _interval_line(r: HeldOutResult) -> str:
    cells = []
    for name, (lo, hi) in r.interval.items():
        cell = f"{name} {lo:.2f} to {hi:.2f}"
        if name in r.versus_length:
            a, b = r.versus_length[name]
            cell += f" (vs length {a:+.2f} to {b:+.2f})"
        cells.append(cell)
    return f"  {r.strong.split('/', 1)[-1]} vs {r.weak.split('/', 1)[-1]}: " + "; ".join(cells)
