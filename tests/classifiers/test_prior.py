"""The shape prior and the closeness weight that shrinks the learned difficulty toward it."""

import numpy as np
import pytest

from classifiers import features
from classifiers.complexity import ComplexityModel
from classifiers.prior import (
    SHAPE_NAMES,
    bigram_buckets,
    closeness,
    fit_prior,
    n_seen_bigrams,
    seen_buckets,
    shape_features,
)


@pytest.fixture(scope="module")
def model() -> ComplexityModel:
    return ComplexityModel.load()


def test_shape_features_are_bounded_and_grow_with_the_request() -> None:
    short, long = shape_features("hi"), shape_features("Prove that 2 + 2 = 4. " * 50)
    assert short.shape == long.shape == (len(SHAPE_NAMES),)
    assert np.all(long[:3] > short[:3])  # tokens, numbers, operators
    assert np.isfinite(shape_features("x" * 1_000_000)).all()


def test_closeness_is_a_capped_count() -> None:
    assert closeness(0, 6.0) == 0.0
    assert closeness(3, 6.0) == pytest.approx(0.5)
    assert closeness(60, 6.0) == 1.0


def test_bigrams_are_the_middle_block_of_the_features() -> None:
    feats = features.featurize("what is the capital of france")
    assert feats.n_words == 6 and bigram_buckets(feats).size == 5
    assert bigram_buckets(features.featurize("hi")).size == 0


def test_seen_buckets_need_two_prompts_and_exclude_the_prompt_itself() -> None:
    a, b = np.asarray([1, 2, 3]), np.asarray([2, 3, 4])
    seen, own = seen_buckets([a, b, np.asarray([3])], n_buckets=8)
    assert seen.tolist() == [False, False, True, True, False, False, False, False]
    assert own.tolist() == [1, 1, 1]  # bucket 3 is also in two other prompts


def test_fit_prior_learns_within_groups_only() -> None:
    # Group means differ wildly, but inside each group difficulty rises with x.
    x = np.asarray([[0.0], [1.0], [10.0], [11.0]])
    y = np.asarray([5.0, 6.0, -5.0, -4.0])
    coef, intercept = fit_prior(x, y, ["a", "a", "b", "b"])
    assert coef[0] > 0  # a pooled fit would find a negative slope
    assert float(x.mean(axis=0) @ coef + intercept) == pytest.approx(y.mean())


def test_confidence_falls_far_from_the_training_data(model) -> None:
    benchmark = ("Natalia sold clips to 48 of her friends in April, and then she sold half as "
                 "many clips in May. How many clips did Natalia sell altogether in April and May?")
    assert model.score("hi").confidence == 0.0  # no bigram at all: the prior alone
    assert model.score(benchmark).confidence > model.score("hi").confidence
    seen = [n_seen_bigrams(features.featurize(t), model._seen)
            for t in (benchmark, "Hello! How are you today?")]
    assert seen[0] > 3 * seen[1] > 0


def test_greetings_score_below_proofs(model) -> None:
    greeting = model.score("Hello! How are you today?")
    proof = model.score("Let f be a continuous function on [0, 1] with f(0) = f(1). Prove that "
                        "for every positive integer n there exist x and y in [0, 1] with "
                        "y - x = 1/n and f(x) = f(y).")
    assert greeting.logit < proof.logit and greeting.difficulty < proof.difficulty


def test_learned_weight_pulls_d_part_way_from_the_prior() -> None:
    """d(x) = prior + learned_weight * closeness * (learned - prior); an artifact without
    the key (before issue 22's selection) keeps the whole learned pull."""
    from classifiers.artifact import read_npz

    arrays, meta = read_npz(ComplexityModel.artifact_file())
    models = {w: ComplexityModel(arrays, {**meta, "learned_weight": w}) for w in (0.0, 0.5, 1.0)}
    legacy = {k: v for k, v in meta.items() if k != "learned_weight"}
    benchmark = ("Natalia sold clips to 48 of her friends in April, and then she sold half as "
                 "many clips in May. How many clips did Natalia sell altogether in April and May?")
    d = {w: m.score(benchmark).logit for w, m in models.items()}
    assert d[0.0] != pytest.approx(d[1.0], abs=1e-3)   # the learned part moves it
    assert d[0.5] == pytest.approx((d[0.0] + d[1.0]) / 2)
    assert ComplexityModel(arrays, legacy).score(benchmark).logit == pytest.approx(d[1.0])
    # The closeness (and so the confidence) does not depend on the weight.
    assert models[0.5].score(benchmark).confidence > 0
    assert len({round(m.score("hi").logit, 9) for m in models.values()}) == 1   # no evidence
