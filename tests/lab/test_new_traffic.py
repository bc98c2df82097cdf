"""``python -m lab.new_traffic``: its draws, its labels and its summary (the full table
trains three artifacts: docs/routing.md has its figures and command)."""

from __future__ import annotations

import numpy as np
import pytest

from lab.dataset import Row
from lab.new_traffic import DrawResult, format_table, labels_of, overlapping, split_draw
from lab.pair_heads import _apgr, bootstrap, ranked_gains


def _rows(n: int) -> list[Row]:
    return [Row(f"prompt number {i}", "t", "src", {"src/a": float(i % 2), "src/b": 1.0,
                                                    **({"src/c": 0.0} if i % 3 else {})})
            for i in range(n)]


def test_a_draw_is_two_disjoint_halves_of_prompts_both_models_answered() -> None:
    rows = _rows(300)
    learn, test = split_draw(rows, "src/b", "src/c", draw=0, limit=120)
    assert len(learn) == len(test) == 60               # at most half the draw learns
    assert not {r.prompt for r in learn} & {r.prompt for r in test}
    assert all("src/c" in r.scores for r in learn + test)
    again, _ = split_draw(rows, "src/b", "src/c", draw=0, limit=120)
    other, _ = split_draw(rows, "src/b", "src/c", draw=1, limit=120)
    assert again == learn and other != learn
    labels = labels_of(learn, "src/b", "src/a")
    assert labels.names == ["a", "b"] and len(labels) == 2 * len(learn)


def test_the_summary_averages_draws_then_sources_and_shows_what_would_be_deployed() -> None:
    def result(source: str, shipped: float, learned: float, written: bool) -> DrawResult:
        return DrawResult(source, 0, 10, 10, 0.1, (shipped, 0, 1), (learned, 0, 1),
                          (learned - shipped, -1, 1), "ridge", written)

    table = format_table([result("a", 0.5, 0.7, True), result("a", 0.5, 0.4, False),
                          result("b", 0.6, 0.7, False)])
    last = table.splitlines()[-1]
    cells = [float(c.strip(" *")) for c in last.split("|")[2:-1]]
    # a: shipped 0.5, learned 0.55, deployed (0.7 + 0.5) / 2; b: 0.6, 0.7, 0.6 (not written)
    assert cells == pytest.approx([0.55, 0.625, 0.075, 0.6])


def test_an_odd_draw_still_learns_on_at_most_half() -> None:
    learn, test = split_draw(_rows(30), "src/b", "src/c", draw=2, limit=19)
    assert (len(learn), len(test)) == (9, 10)


def test_a_sources_prompts_repeated_by_another_source_are_left_out_with_it() -> None:
    gsm = "Natalia sold clips to 48 of her friends in April, and then she sold half as many " \
          "clips in May. How many clips did Natalia sell altogether in April and May?"
    rows = [Row(gsm, "math", "mine", {}), Row("Translate 'cat' to French.", "t", "mine", {})]
    seen = overlapping("mine", rows)
    assert seen(gsm)                                                    # verbatim
    assert seen("Question: " + gsm.replace("altogether", "in all") + "\nAnswer:")  # reformatted
    assert not seen("Natalia sold clips to 48 of her friends. How many pens did Tom buy?")
    assert not seen("What is the capital of France?")
    # A run in more than TEMPLATE_RUNS of the source's prompts is its template, not a repeat.
    template = "Answer the following question with a single word and nothing else please: "
    many = [Row(template + f"item {i}?", "t", "mine", {}) for i in range(30)]
    assert not overlapping("mine", many)(template + "what colour is the sky?")


def test_ties_count_at_their_mean_gain() -> None:
    """A step function (a calibrated gain) ties prompts: the APGR is the one expected when
    the router breaks ties at random, the same in the point figure and the bootstrap."""
    rng = np.random.default_rng(4)
    strong, weak = rng.random(60), rng.random(60) * 0.6
    steps = np.round(rng.random(60) * 2) / 2                             # three values
    assert ranked_gains(steps, strong - weak).sum() == pytest.approx((strong - weak).sum())
    shuffled = []
    for _ in range(3000):
        p = rng.permutation(60)
        shuffled.append(_apgr(steps[p] + np.linspace(0, 1e-9, 60), strong[p], weak[p]))
    assert _apgr(steps, strong, weak) == pytest.approx(np.mean(shuffled), abs=0.01)
    # In file order the first of the tied prompts would go first: a different figure.
    firsts = np.argsort(-steps, kind="stable")
    in_order = np.concatenate([[0.0], np.cumsum((strong - weak)[firsts])])
    assert _apgr(steps, strong, weak) != pytest.approx(
        float((in_order / 60 / (strong - weak).mean()).mean()), abs=1e-6)
    unique = rng.random(60)
    sample = bootstrap({"u": unique, "s": steps}, strong, weak, draws=50)
    assert sample["u"].shape == sample["s"].shape == (50,)
