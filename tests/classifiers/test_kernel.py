"""The compiled score (classifiers/kernel.py) against the numpy reference it replaces
on the request path: the same score, within float32 rounding, on every shipped model
and on prompts that reach each of the kernel's branches."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from classifiers import features
from classifiers.complexity import ComplexityModel
from classifiers.kernel import CompiledScore
from classifiers.prior import shape_features

# Below the n-grams' 4 bytes, empty, spaces only, punctuation only, non-ASCII words,
# CJK, digits and operators, a seen bigram's repeats, a prompt past the window.
EDGES = ["", "a", "abc", "ab c", "    ", "??!!", "héllo wörld, 你好! x=1;", "数学题：证明勾股定理",
         "1+1=? 2*3/4^5 <> 99.5", "the the the the the the", "x" * 5000,
         "Prove that sqrt(2) is irrational.\n(a) yes (b) no\nanswer:",
         "def f(x):\n    return x ** 2  # step by step\n```python\nimport os\n```",
         "What is the capital of France?", "hi"]


def _prompts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    words = ("the a proof of why design algorithm 42 3.14 x = y + 1 ; ( ) ? def return "
             "explain concurrency trade-off 你好 naïve résumé \n . , ! :").split(" ")
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 900))) for _ in range(n)]


@pytest.fixture(scope="module", params=[None, "demo_fleet.npz"], ids=["shipped", "demo_fleet"])
def model(request: pytest.FixtureRequest) -> ComplexityModel:
    loaded = ComplexityModel.load(request.param)
    if not loaded.wait_compiled():
        pytest.fail("numba is in [dev]: the compiled score must be built")
    return loaded


def test_compiled_score_is_the_numpy_score(model: ComplexityModel) -> None:
    for text in EDGES + _prompts(7, 60):
        for n_messages, flags in ((1, (False, False)), (3, (True, True))):
            feats = features.featurize(text, n_messages=n_messages, has_tools=flags[0],
                                       has_response_format=flags[1])
            ref = model.score_features(feats, shape_features(text))
            got = model._score_compiled(text, n_messages, flags, 0.0)
            assert got.logit == pytest.approx(ref.logit, abs=1e-5), text[:40]
            assert got.difficulty == pytest.approx(ref.difficulty, abs=1e-5), text[:40]
            assert got.confidence == pytest.approx(ref.confidence, abs=1e-5), text[:40]
            assert got.family_offsets.keys() == ref.family_offsets.keys()
            for key, value in ref.family_offsets.items():
                assert got.family_offsets[key] == pytest.approx(value, abs=1e-5), key


# Pieces that reach each branch of the kernel's string counts: the needles and their
# overlaps ("step by step by step"), the regular expressions' edges (\s is \x1c-\x1f
# too; "$" pairs 1 to 80 apart, and past; options at a line's start after blank lines),
# numbers with one fraction.
_PIECES = ("step by step", " by ", "def ", "return", "print(", "answer:", "```", "why ",
           "analy", "prove", "$", "$x$", "\\frac", "\\", "\n", "\n\n  ", "(a) ", "b)",
           "c.", "h:", "i)", "(", ")", ".", ",", ":", "?", "!", "1", "12", "3.5", "4,",
           ",6", " ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x7f", "=", "<>", "^",
           "a", "x" * 90, "Z", "#include", "elif ")


def test_the_kernel_counts_an_ascii_windows_strings_as_python_does() -> None:
    """``kernel_strings.strings`` against ``features.markers`` and ``prior.shape_values``:
    the regular expressions and ``str.count`` it replaces on an ASCII window."""
    from classifiers.kernel_strings import strings as count_strings
    from classifiers.prior import shape_values

    rng = random.Random(11)
    texts = [p for p in EDGES if p.lower().isascii()] + ["".join(
        rng.choice(_PIECES) for _ in range(rng.randint(1, 400))) for _ in range(3000)]
    for text in texts:
        lowered = features.bounded_window(text).lower()
        dense = np.zeros(features.N_DENSE)
        shape = np.zeros(len(shape_values(text, lowered)))
        count_strings(lowered.encode(), dense, shape)
        want = np.asarray(features.markers(text, lowered, 1, (False, False)), np.float32)
        strings = [features.CODE_FENCE, features.CODE_KEYWORDS, features.LATEX,
                   features.MC_OPTIONS, features.LOG_LINES, features.QUESTION_MARKS,
                   features.ANSWER_MARKERS]
        assert dense[strings].tolist() == want[strings].tolist(), repr(text[:80])
        assert shape[1:] == pytest.approx(shape_values(text, lowered)[1:], abs=1e-12), (
            repr(text[:80]))


def test_score_uses_the_kernel_and_the_switch_turns_it_off(
        model: ComplexityModel, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "Derive the closed form of the sum of the first n cubes, step by step."
    compiled = model.score(text)
    monkeypatch.setenv("ROUTEGATE_CLASSIFIER_KERNEL", "numpy")
    reference = ComplexityModel.load(model.artifact_file(
        "demo_fleet.npz" if model.is_learned else None))
    assert reference._kernel is None and reference.score_path == "numpy"
    assert compiled.logit == pytest.approx(reference.score(text).logit, abs=1e-5)
    assert compiled.tier == reference.score(text).tier
    assert (compiled.pair_gains is None) == (reference.score(text).pair_gains is None)


def test_the_kernel_reads_the_models_own_tables() -> None:
    """No second copy of the 1 MB tables: the kernel's arrays are the model's."""
    model = ComplexityModel.load("demo_fleet.npz")
    assert isinstance(model._kernel, CompiledScore) and model.wait_compiled()
    assert np.shares_memory(model._kernel.args[2], model._hash_w)
    assert np.shares_memory(model._kernel.args[5], model._skill_hash_w)
    assert model._learned is not None
    assert np.shares_memory(model._kernel.args[20], model._learned.hash_w)


@pytest.mark.parametrize("index, cut", [
    (2, "hash_w"), (3, "dense_w"), (5, "skill_hash_w"), (7, "skill_dense_w"), (13, "prior_w"),
    (16, "zipf"), (17, "seen"), (20, "learned hash_w"), (21, "learned dense_w")])
def test_a_table_that_does_not_fit_is_not_compiled(index: int, cut: str) -> None:
    """numba does not check bounds: a table shorter than the buckets it is indexed by
    must keep the kernel from running (numpy's take raises where it would read past)."""
    from classifiers import kernel

    model = ComplexityModel.load("demo_fleet.npz")
    assert model._kernel is not None
    args = list(model._kernel.args)
    assert kernel._shape_problem(tuple(args)) is None
    args[index] = args[index][: args[index].shape[0] // 2]
    assert kernel._shape_problem(tuple(args)), cut


def test_a_kernel_that_fails_to_build_leaves_the_numpy_score(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A damaged numba cache file (or a full disk) fails the warm-up call: the model
    still loads, and scores with numpy, instead of being refused as an artifact."""
    from classifiers import kernel

    def broken(*args: object) -> None:
        raise EOFError("pickle data was truncated")

    monkeypatch.setattr(kernel, "_compiled", lambda: broken)
    with caplog.at_level("WARNING", logger="routegate.classifier"):
        model = ComplexityModel.load("demo_fleet.npz")
        assert not model.wait_compiled()
    assert model._kernel is not None and not model._kernel.ready
    assert model.score_path == "numpy"
    assert "could not be built (EOFError" in caplog.text
    assert model.score("What is 2 + 2?").tier in ("easy", "medium", "hard")


def test_the_model_scores_with_numpy_until_the_kernel_is_ready(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A start never waits for numba: the build runs in a thread, and a score asked
    before it is done is numpy's."""
    import threading

    from classifiers import kernel

    release = threading.Event()
    real = kernel._compiled()

    def slow() -> object:
        release.wait(30)
        return real

    monkeypatch.setattr(kernel, "_compiled", slow)
    model = ComplexityModel.load("demo_fleet.npz")
    assert model._kernel is not None and not model._kernel.ready
    assert model.score_path == "building"
    calls: list[tuple] = []
    compiled = model._score_compiled

    def counted(*args: Any) -> Any:
        calls.append(args)
        return compiled(*args)

    monkeypatch.setattr(model, "_score_compiled", counted)
    before = model.score("What is the capital of France?")
    assert calls == [] and before.tier in ("easy", "medium", "hard")
    release.set()
    assert model.wait_compiled() and model.score_path == "compiled"
    model.score("What is the capital of France?")
    assert len(calls) == 1
