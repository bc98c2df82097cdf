"""Out-of-domain validation: train without a task (or a source), rank its prompts.

    python -m lab.model_selection --out-of-domain          # the table in PROVENANCE.md
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

That pair is often a poor stand-in for the strong-versus-fair pairs a router
is judged on (GPT-4 against Mixtral): a weakest model that scores 0.0-0.2
on a task fails for its format, not the prompt. A second table therefore
scores each ranking against a strong model that answers every prompt, one
APGR per model that answers between ``FAIR`` of the task's prompts, and
their mean (``versus_perfect``): how well the ranking puts first the prompts
a fair model fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lab.dataset import SKILL_OF_TASK, Row
from lab.evaluation import apgr_cpt

# (prompts, strong, weak) -> ranking values (higher = send to strong first), or None
# when the ranker cannot rank for that pair (a model the artifact does not know).
Ranker = Callable[[Sequence[str], str, str], "np.ndarray | None"]
MIN_GAP = 0.05  # below this strong-weak gap on a task, PGR divides by noise
FAIR = (0.3, 0.9)  # share of a task's prompts a model answers to count as failing by difficulty


@dataclass(frozen=True, slots=True)
class DomainResult:
    held_out: str  # "task math_word" or "source routerdc7"
    source: str
    task: str
    prompts: int
    strong: str
    weak: str
    apgr: dict[str, float]  # ranking name -> APGR
    perfect: dict[str, float] = field(default_factory=dict)  # ranking -> ``versus_perfect``


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


def fair_models(rows: Sequence[Row]) -> list[str]:
    """The models scored on every row that answer between ``FAIR`` of them."""
    common = set.intersection(*(set(row.scores) for row in rows)) if rows else set()
    return [m for m in sorted(common)
            if FAIR[0] <= float(np.mean([row.scores[m] for row in rows])) <= FAIR[1]]


def versus_perfect(difficulty: np.ndarray, rows: Sequence[Row]) -> float:
    """Mean APGR of the ranking against a model that answers every prompt, over the
    ``fair_models`` of the rows (NaN without one)."""
    order = np.argsort(-difficulty, kind="stable")
    strong = np.ones(len(rows))
    scores = [apgr_cpt(order, strong, np.asarray([row.scores[m] for row in rows]))[0]
              for m in fair_models(rows)]
    return float(np.mean(scores)) if scores else float("nan")


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
        apgr, perfect = {}, {}
        ranked = {label: rank(prompts, strong, weak) for label, rank in rankers.items()}
        ranked["length"] = np.asarray([len(p) for p in prompts], dtype=float)
        for label, values in ranked.items():
            apgr[label] = np.nan if values is None else ranking_apgr(values, rows, strong, weak)
            perfect[label] = np.nan if values is None else versus_perfect(values, rows)
        apgr["random"] = 0.5
        apgr["gap"] = pair_gap(rows, strong, weak)
        results.append(DomainResult(name, source, task, len(rows), strong, weak, apgr, perfect))
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


def _cells(values: dict[str, float], labels: Sequence[str]) -> str:
    return " | ".join("n/a" if np.isnan(values[k]) else f"{values[k]:.3f}" for k in labels)


def format_table(results: Sequence[DomainResult]) -> str:
    """Markdown: one line per held-out (source, task), then the mean over lines; then
    the same against a model that answers everything (``versus_perfect``)."""
    labels = list(results[0].apgr)
    head = "| held out | source | task | prompts | " + " | ".join(labels) + " |"
    lines = [head, "|---|---|---|--:|" + "--:|" * len(labels)]
    for r in results:
        mark = "" if r.apgr["gap"] >= MIN_GAP else " (no gap)"
        lines.append(f"| {r.held_out} | {r.source} | {r.task}{mark} | {r.prompts} | "
                     f"{_cells(r.apgr, labels)} |")
    means = " | ".join(f"**{v:.3f}**" for v in mean_row(results).values())
    lines.append(f"| **mean** (gap >= {MIN_GAP}) | | | | {means} |")
    return "\n".join(lines + ["", format_versus_perfect(results)])


def format_versus_perfect(results: Sequence[DomainResult]) -> str:
    """Markdown: each row's ``versus_perfect`` per ranking, and the mean over rows with a
    fair model."""
    labels = list(results[0].perfect)
    kept = [r for r in results if not np.isnan(r.perfect["length"])]
    lines = [f"Against a model that answers every prompt (mean APGR over the models "
             f"answering {FAIR[0]:g}-{FAIR[1]:g} of the task's prompts):", "",
             "| held out | source | task | prompts | " + " | ".join(labels) + " |",
             "|---|---|---|--:|" + "--:|" * len(labels)]
    lines += [f"| {r.held_out} | {r.source} | {r.task} | {r.prompts} | {_cells(r.perfect, labels)} |"
              for r in kept]
    means = " | ".join(f"**{np.nanmean([r.perfect[k] for r in kept]):.3f}**" if kept else "n/a"
                       for k in labels)
    lines.append(f"| **mean** ({len(kept)} rows with a fair model) | | | | {means} |")
    return "\n".join(lines)
