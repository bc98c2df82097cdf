"""Does ``routegate learn`` pay on traffic the shipped model never saw? ``python -m lab.new_traffic``.

    python -m lab.new_traffic [--draws 3] [--max-prompts 800]     # also: routegate eval --new-traffic

For each label source of the shared routing data (``lab/dataset.py``), with
that source's prompts left out of the shipped model's training (the artifact
is trained again without them, and without the other sources' prompts that
repeat them verbatim or nearly, ``overlapping``; ``lab/build.py``; cached), a
seeded draw of at most ``--max-prompts`` of its prompts that both models of
the source's pair answered is cut in half by a hash: ``learn`` runs on one
half (its own labels, two models, at most 400 prompts: ``lab/learn_pairs.py``,
the same function the command runs, selection and all), the artifact it would
write is loaded as the router loads it, and both rank the other half.

Per draw: the shipped model's APGR (its ``difficulty``, hardest first), the
learned one's (the kept pair head's gain as the router reads it, calibrated: a
step function, whose ties count at their mean gain) and the difference, each
with a 95% bootstrap interval over the ranked half (the same draws for both);
which head was kept; and
whether ``learn`` would have written it (its own gain interval above zero).
Then the mean per source and over sources. The pair of each source is fixed
here (``PAIRS``): the project's reference pair where there is one.

The held-out sets that must never be trained or selected on (MT-Bench,
RouteLLM's evaluation files, RouterArena) are not read; this reads only the
shared ``*_train`` files.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from classifiers.artifact import write_npz
from classifiers.complexity import ComplexityModel
from classifiers.labels import Labels, LabelSet
from classifiers.sketch import digest_of, sketch_of
from lab.dataset import TRAIN_FILES, Row, default_data_dir, file_digest, load_rows
from lab.learn_pairs import Outcome, learn_with_pairs
from lab.pair_heads import DRAWS, _apgr, _interval, bootstrap

# (strong, weak) per source: llmrouter's reference pair (``routegate eval``), RouteLLM's
# GPT-4 against Mixtral for RouterBench, and RouterDC's strongest and weakest by mean.
PAIRS = {"llmrouter-dcrouter": ("llama-3.1-nemotron-51b-instruct", "gemma-2-9b-it"),
         "routerbench": ("gpt-4-1106-preview", "mistralai/mixtral-8x7b-chat"),
         "routerdc7": ("cognitivecomputations/dolphin-2.9-llama3-8b",
                       "itpossible/Chinese-Mistral-7B-v0.1")}
MAX_PROMPTS = 800
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "routegate-new-traffic"


@dataclass
class DrawResult:
    source: str
    draw: int
    n_learn: int
    n_test: int
    gap: float
    shipped: tuple[float, float, float]     # APGR, 95% interval
    learned: tuple[float, float, float]
    diff: tuple[float, float, float]
    kept: str
    written: bool


def base_without(source: str, rows: Sequence[Row], cache: Path) -> Path:
    """The shipped recipe trained on every source but ``source``, and without any other
    source's prompt that is one of its prompts (``overlapping``), cached by the data's
    digest."""
    from lab.build import build_artifact
    from lab.training import TrainConfig

    data = hashlib.sha256("".join(file_digest(default_data_dir() / f)
                                  for f in TRAIN_FILES).encode()).hexdigest()[:12]
    path = cache / f"without-{source.replace('/', '_')}-{data}-{LEFT_OUT_RULE}.npz"
    if not path.is_file():
        print(f"training without {source} (once; cached at {path})", file=sys.stderr, flush=True)
        seen = overlapping(source, rows)
        kept = [r for r in rows if r.source != source and not seen(r.prompt)]
        print(f"  left out {sum(r.source != source for r in rows) - len(kept)} rows of other "
              f"sources that repeat its prompts", file=sys.stderr, flush=True)
        arrays, meta = build_artifact(kept, TrainConfig(), 0)
        write_npz(path, arrays, meta)
    return path


# Bumped when the rule that leaves a source out changes: the cached artifacts are redone.
LEFT_OUT_RULE = "dedup1"
SHINGLE_WORDS = 10          # a near duplicate shares half its runs of this many words
TEMPLATE_RUNS = 20          # a run in more of the source's prompts than this is a template


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i:i + SHINGLE_WORDS])
            for i in range(max(1, len(words) - SHINGLE_WORDS + 1))}


def overlapping(source: str, rows: Sequence[Row]) -> Callable[[str], bool]:
    """Whether a prompt is one of ``source``'s, verbatim or nearly: the data sets share
    benchmarks (GSM8K, MBPP, HumanEval, ARC), reformatted. Nearly: at least half its runs
    of ``SHINGLE_WORDS`` words are runs of the source's prompts, leaving out the runs in
    more than ``TEMPLATE_RUNS`` of them (a benchmark's instructions)."""
    mine = [r.prompt for r in rows if r.source == source]
    counts = Counter(g for p in set(mine) for g in _shingles(p))
    runs = {g for g, c in counts.items() if c <= TEMPLATE_RUNS}
    exact = set(mine)

    def seen(prompt: str) -> bool:
        if prompt in exact:
            return True
        grams = _shingles(prompt)
        return bool(grams) and len(grams & runs) >= len(grams) / 2
    return seen


def split_draw(rows: Sequence[Row], strong: str, weak: str, draw: int, limit: int
               ) -> tuple[list[Row], list[Row]]:
    """(learn half, test half) of a seeded sample of at most ``limit`` of the rows both
    models answered: ordered by a keyed hash of the prompt and cut in the middle, so the
    learn half is at most ``limit // 2`` prompts."""
    both = [r for r in rows if strong in r.scores and weak in r.scores]
    pick = sorted(np.random.default_rng(draw).permutation(len(both))[:limit])
    key = str(draw).encode()
    sample = sorted((both[i] for i in pick), key=lambda r: hashlib.blake2b(
        r.prompt.encode(), digest_size=8, key=key).digest())
    return sample[:len(sample) // 2], sample[len(sample) // 2:]


def labels_of(rows: Sequence[Row], strong: str, weak: str) -> Labels:
    labels = LabelSet()
    for row in rows:
        for key in (weak, strong):
            labels.add(digest_of(row.prompt), partial(sketch_of, row.prompt),
                       key.split("/", 1)[1], row.scores[key], "new traffic")
    return labels.build()


def learned_model(base_path: Path, outcome: Outcome, labels: Labels, out: Path
                  ) -> ComplexityModel:
    """The artifact ``learn`` would write (forced), loaded as the router loads it."""
    from lab.learned_artifact import write_learned

    result = outcome.result
    write_learned(out, base_path, outcome.final, labels, (result.strong, result.weak),
                  outcome.base, {"labels": "lab.new_traffic"},
                  (outcome.ladder, outcome.heads, outcome.static))
    return ComplexityModel.load(out)


def run_draw(source: str, rows: Sequence[Row], base_path: Path, draw: int, limit: int,
             work: Path) -> DrawResult:
    strong, weak = (f"{source}/{name}" for name in PAIRS[source])
    learn_rows, test_rows = split_draw(rows, strong, weak, draw, limit)
    labels = labels_of(learn_rows, strong, weak)
    texts = {digest_of(r.prompt): r.prompt for r in learn_rows}
    ladder = [weak.split("/", 1)[1], strong.split("/", 1)[1]]
    base = ComplexityModel.load(base_path)
    outcome = learn_with_pairs(base, labels, [texts[p.digest] for p in labels.prompts],
                               ladder, seed=draw)
    model = learned_model(base_path, outcome, labels, work / f"learned-{draw}")
    s = np.asarray([r.scores[strong] for r in test_rows])
    w = np.asarray([r.scores[weak] for r in test_rows])
    shipped = np.asarray([base.score(r.prompt).difficulty for r in test_rows])
    learned = np.asarray([_learned_gain(model, r.prompt, ladder) for r in test_rows])
    samples = bootstrap({"shipped": shipped, "learned": learned}, s, w, DRAWS)
    point = {k: _apgr(v, s, w) for k, v in (("shipped", shipped), ("learned", learned))}
    pair = outcome.pairs[0]
    return DrawResult(source, draw, len(labels.prompts), len(test_rows), float(s.mean() - w.mean()),
                      (point["shipped"], *_interval(samples["shipped"])),
                      (point["learned"], *_interval(samples["learned"])),
                      (point["learned"] - point["shipped"],
                       *_interval(samples["learned"] - samples["shipped"])),
                      pair.head.kind if pair.head is not None else "none", outcome.writable)


def _learned_gain(model: ComplexityModel, text: str, ladder: list[str]) -> float:
    """The pair's gain as the router reads it: calibrated (a step function: its ties are
    scored at their mean gain, ``ranked_gains``)."""
    score = model.score(text)
    return model.pair_gains(text, score)[(ladder[0], ladder[1])]


def _cell(v: tuple[float, float, float], signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(v[0])} [{f.format(v[1])}, {f.format(v[2])}]"


def format_table(results: Sequence[DrawResult]) -> str:
    lines = ["| source | draw | learn / test prompts | gap | shipped APGR [95%] | learned APGR "
             "[95%] | learned − shipped [95%] | head kept | learn writes |",
             "|---|--:|--:|--:|--:|--:|--:|---|---|"]
    for r in results:
        lines.append(f"| {r.source} | {r.draw} | {r.n_learn} / {r.n_test} | {r.gap:.3f} | "
                     f"{_cell(r.shipped)} | {_cell(r.learned)} | {_cell(r.diff, True)} | "
                     f"{r.kept} | {'yes' if r.written else 'no'} |")
    sources = sorted({r.source for r in results})
    means = {s: [float(np.mean([v for r in results if r.source == s for v in values(r)]))
                 for values in _COLUMNS.values()] for s in sources}
    lines += ["", "| source | " + " | ".join(_COLUMNS) + " |", "|---|" + "--:|" * len(_COLUMNS)]
    lines += [f"| {s} (mean of draws) | " + " | ".join(f"{v:.3f}" for v in row) + " |"
              for s, row in means.items()]
    overall = np.mean(list(means.values()), axis=0)
    lines.append("| **mean over sources** | " + " | ".join(f"**{v:.3f}**" for v in overall)
                 + " |")
    return "\n".join(lines)


# The summary's columns: "deployed" is what the team would route with, the learned
# model where learn writes it, else the shipped one.
_COLUMNS = {
    "shipped": lambda r: [r.shipped[0]],
    "learned (forced)": lambda r: [r.learned[0]],
    "learned − shipped": lambda r: [r.diff[0]],
    "deployed": lambda r: [r.learned[0] if r.written else r.shipped[0]],
}


def run(draws: int, limit: int, cache: Path, only: Sequence[str] = ()) -> str:
    rows = load_rows(default_data_dir(), TRAIN_FILES)
    cache.mkdir(parents=True, exist_ok=True)
    results = []
    for source in PAIRS:
        if only and source not in only:
            continue
        base = base_without(source, rows, cache)
        mine = [r for r in rows if r.source == source]
        with tempfile.TemporaryDirectory() as tmp:
            for draw in range(draws):
                result = run_draw(source, mine, base, draw, limit, Path(tmp))
                print(format_table([result]).splitlines()[2], file=sys.stderr, flush=True)
                results.append(result)
    return format_table(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.new_traffic",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=3, help="draws per source")
    parser.add_argument("--max-prompts", type=int, default=MAX_PROMPTS,
                        help="prompts per draw, learned on half and ranked on the other half")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where the artifacts trained without a source are kept")
    parser.add_argument("--only", nargs="+", default=(), choices=sorted(PAIRS))
    args = parser.parse_args(argv)
    if not 1 <= args.draws <= 20 or not 40 <= args.max_prompts <= 5000:
        print("lab.new_traffic: --draws takes 1 to 20, --max-prompts 40 to 5000",
              file=sys.stderr)
        return 2
    print(run(args.draws, args.max_prompts, args.cache, args.only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
