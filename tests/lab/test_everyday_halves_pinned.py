"""The everyday prompts' halves are the ones the shipped demo classifier was built on:
``demo_fleet.npz`` keeps the digests of the prompts it was fitted on, and they are the
selection half's, every one, and none of the report half's (the half the figures report)."""

from __future__ import annotations

from pathlib import Path

from classifiers.complexity import ComplexityModel
from classifiers.sketch import digest_of
from lab.everyday import half_of, read_prompts

DEMO = Path(__file__).resolve().parents[2] / "classifiers" / "artifacts" / "demo_fleet.npz"


def test_the_demo_classifier_was_fitted_on_the_selection_half_alone() -> None:
    fitted = ComplexityModel.load(DEMO).fitted_prompts
    assert fitted is not None
    select = {digest_of(r["prompt"]) for r in read_prompts(half="select")}
    report = {digest_of(r["prompt"]) for r in read_prompts(half="report")}
    assert select == fitted
    assert not report & fitted


def test_a_prompts_half_is_pinned() -> None:
    # lab/everyday.py: the one prompt also in the shipped model's training is a selection one
    assert half_of("What is the square root of 81?") == "select"
    assert half_of("hi") == "select" and half_of("Hey, good morning!") == "report"
