"""``lab.new_traffic``'s draw learns on the learn half alone: the labels and texts handed
to ``learn`` are its prompts, none of the half the learned model is then scored on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import lab.new_traffic as new_traffic
from classifiers.complexity import DEFAULT_ARTIFACT
from classifiers.labels import Labels
from classifiers.sketch import digest_of
from lab.dataset import Row
from lab.new_traffic import run_draw, split_draw


def test_a_draw_learns_on_its_learn_half_and_nothing_of_its_test_half(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rows = [Row(f"What is {i} plus {i + 1}?", "t", "src", {"src/a": float(i % 2), "src/b": 1.0})
            for i in range(60)]
    learned: list[tuple[Labels, list[str]]] = []

    def learn(current: object, labels: Labels, texts: list[str], *args: object,
              **kwargs: object) -> SimpleNamespace:
        learned.append((labels, texts))
        return SimpleNamespace(pairs=[SimpleNamespace(head=None)], writable=False)
    monkeypatch.setattr(new_traffic, "PAIRS", {"src": ("b", "a")})
    monkeypatch.setattr(new_traffic, "learn_with_pairs", learn)
    monkeypatch.setattr(new_traffic, "learned_model", lambda *args: None)
    monkeypatch.setattr(new_traffic, "_learned_gain", lambda model, text, ladder: len(text) % 5)
    result = run_draw("src", rows, DEFAULT_ARTIFACT, draw=1, limit=40, work=tmp_path)
    learn_half, test_half = split_draw(rows, "src/b", "src/a", 1, 40)
    assert (result.n_learn, result.n_test) == (len(learn_half), len(test_half)) == (20, 20)
    [(labels, texts)] = learned
    digests = {p.digest for p in labels.prompts}
    assert digests == {digest_of(r.prompt) for r in learn_half}
    assert not digests & {digest_of(r.prompt) for r in test_half}
    assert sorted(texts) == sorted(r.prompt for r in learn_half)
