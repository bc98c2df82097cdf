"""Out-of-domain validation: train without a task (or a source), rank its prompts.

    python -m classifiers.holdout --out-of-domain          # the table in PROVENANCE.md
    results = out_of_domain(rows, fit_ranker(TrainConfig()), by="task")

Users send prompts unlike any training set, so an in-distribution split says
little about how the difficulty generalizes. Here each task is left out in
turn (a task is a skill of ``SKILL_OF_TASK``: the same benchmark in two
sources leaves together), the artifact is trained on everything else, and the
held-out prompts are ranked by ``difficulty``. Per (source, task) the ranking
is scored by APGR for the strongest-vs-weakest model pair of that source
(mean score over the source's rows), next to prompt length and random (0.5
in expectation). Leaving a whole source out works the same way.

Two rankings of the artifact are scored: ``difficulty`` (hardest first, as
the issue measured it) and ``gain``, P(strong) - P(weak) as ``routegate
eval`` and the router rank (only when both models are in the artifact, so
not for a left-out source). Where the weakest model scores about 0 on a task
(llama3-chatqa on MMLU, GPQA), hardest-first sends to the strong model
exactly the prompts it fails too, so ``difficulty`` sits below 0.5 there by
construction; ``gain`` does not. Rows whose pair differs by less than
``MIN_GAP`` on the task are shown but left out of the mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from classifiers.dataset import SKILL_OF_TASK, Row
from classifiers.evaluation import apgr_cpt

# (prompts, strong, weak) -> ranking values (higher = send to strong first), or None
# when the ranker cannot rank for that pair (a model the artifact does not know).
Ranker = Callable[[Sequence[str], str, str], "np.ndarray | None"]
MIN_GAP = 0.05  # below this strong-weak gap on a task, PGR divides by noise


@dataclass(frozen=True, slots=True)
class DomainResult:
    held_out: str  # "task math_word" or "source routerdc7"
    source: str
    task: str
    prompts: int
    strong: str
    weak: str
    apgr: dict[str, float]  # ranking name -> APGR


def source_pairs(rows: Sequence[Row]) -> dict[str, tuple[str, str]]:
    """Per source, (strongest, weakest) model by mean score over its rows."""
    pairs = {}
    for source in sorted({row.source for row in rows}):
        mine = [row for row in rows if row.source == source]
        models = sorted({m for row in mine for m in row.scores})
        mean = {m: float(np.mean([row.scores[m] for row in mine if m in row.scores]))
                for m in models}
        pairs[source] = (max(models, key=mean.__getitem__), min(models, key=mean.__getitem__))
    return pairs


def ranking_apgr(difficulty: np.ndarray, rows: Sequence[Row], strong: str, weak: str) -> float:
    """APGR of sending the highest-ranked prompts first to ``strong`` (stable: ties keep
    order). Prompts without an outcome for both models are skipped."""
    keep = [i for i, row in enumerate(rows) if strong in row.scores and weak in row.scores]
    difficulty, rows = difficulty[keep], [rows[i] for i in keep]
    strong_s = np.asarray([row.scores[strong] for row in rows])
    weak_s = np.asarray([row.scores[weak] for row in rows])
    if np.isclose(strong_s.mean(), weak_s.mean()):
        return 0.5  # no gap to recover: every ranking is as good as random
    return apgr_cpt(np.argsort(-difficulty, kind="stable"), strong_s, weak_s)[0]


def group_of(row: Row, by: str) -> str:
    return SKILL_OF_TASK[row.task] if by == "task" else row.source


def pair_gap(rows: Sequence[Row], strong: str, weak: str) -> float:
    both = [row for row in rows if strong in row.scores and weak in row.scores]
    return float(np.mean([row.scores[strong] - row.scores[weak] for row in both]))


def score_held_out(name: str, held: Sequence[Row], rankers: dict[str, Ranker],
                   pairs: dict[str, tuple[str, str]]) -> list[DomainResult]:
    """One result per (source, task) of the held-out rows."""
    results = []
    for source, task in sorted({(row.source, row.task) for row in held}):
        rows = [row for row in held if (row.source, row.task) == (source, task)]
        prompts = [row.prompt for row in rows]
        strong, weak = pairs[source]
        apgr = {}
        for label, rank in rankers.items():
            values = rank(prompts, strong, weak)
            apgr[label] = np.nan if values is None else ranking_apgr(values, rows, strong, weak)
        apgr["length"] = ranking_apgr(np.asarray([len(p) for p in prompts], dtype=float),
                                      rows, strong, weak)
        apgr["random"] = 0.5
        apgr["gap"] = pair_gap(rows, strong, weak)
        results.append(DomainResult(name, source, task, len(rows), strong, weak, apgr))
    return results


def out_of_domain(rows: Sequence[Row], fit: Callable[[Sequence[Row]], dict[str, Ranker]],
                  by: str = "task", only: Sequence[str] = ()) -> list[DomainResult]:
    """Leave each task (``by="task"``) or source (``by="source"``) out in turn.

    ``fit(train_rows)`` returns named rankers (prompts -> difficulty); prompt
    length and random are added to every table.
    """
    pairs = source_pairs(rows)
    results = []
    for group in sorted({group_of(row, by) for row in rows}):
        if only and group not in only:
            continue
        train = [row for row in rows if group_of(row, by) != group]
        held = [row for row in rows if group_of(row, by) == group]
        found = score_held_out(f"{by} {group}", held, fit(train), pairs)
        for r in found:
            print(f"{r.held_out:<28} {r.source:<20} {r.task:<22} "
                  + " ".join(f"{k} {v:.3f}" for k, v in r.apgr.items()), flush=True)
        print(f"[{by} {group} done]", flush=True)
        results.extend(found)
    return results


def mean_row(results: Sequence[DomainResult]) -> dict[str, float]:
    """Mean per column over the rows whose pair has a real gap (``MIN_GAP``)."""
    kept = [r for r in results if r.apgr["gap"] >= MIN_GAP]
    return {k: float(np.nanmean([r.apgr[k] for r in kept])) if kept else np.nan
            for k in results[0].apgr}


def format_table(results: Sequence[DomainResult]) -> str:
    """Markdown: one line per held-out (source, task), then the mean over lines."""
    labels = list(results[0].apgr)
    head = "| held out | source | task | prompts | " + " | ".join(labels) + " |"
    lines = [head, "|---|---|---|--:|" + "--:|" * len(labels)]
    for r in results:
        cells = " | ".join("n/a" if np.isnan(r.apgr[k]) else f"{r.apgr[k]:.3f}" for k in labels)
        mark = "" if r.apgr["gap"] >= MIN_GAP else " (no gap)"
        lines.append(f"| {r.held_out} | {r.source} | {r.task}{mark} | {r.prompts} | {cells} |")
    means = " | ".join(f"**{v:.3f}**" for v in mean_row(results).values())
    lines.append(f"| **mean** (gap >= {MIN_GAP}) | | | | {means} |")
    return "\n".join(lines)
