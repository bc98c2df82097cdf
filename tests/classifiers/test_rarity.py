"""Word rarity for the prior: the table, the features, and the fit between tasks."""

import numpy as np
import pytest

from classifiers import features
from classifiers.artifact import read_npz
from classifiers.complexity import ComplexityModel
from classifiers.prior import fit_prior
from classifiers.rarity import RARITY_NAMES, SKIP, build_table, rarity_features


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return build_table()[0]


def test_the_table_ranks_words_by_frequency_and_skips_punctuation_and_numbers(table) -> None:
    code = {w: int(table[features.unigram_bucket(w)]) for w in ("the", "france", "gremolata")}
    assert code["the"] > code["france"] > code["gremolata"] > 0
    assert table[features.unigram_bucket("?")] == SKIP
    assert table[features.unigram_bucket("1234")] == SKIP
    assert features.unigram_bucket("two words") is None


def test_rarity_grows_with_rare_words_and_is_bounded(table) -> None:
    common = rarity_features(features.featurize("What is the capital of France?"), table)
    rare = rarity_features(features.featurize("What is gremolata, and who was Dijkstra?"), table)
    assert common.shape == (len(RARITY_NAMES),)
    assert np.all(rare[:2] > common[:2]) and rare[2] > common[2]
    assert np.all((0 <= rare) & (rare <= 1))
    assert not rarity_features(features.featurize("?!?! ... 1234"), table).any()


def test_the_shipped_table_is_the_one_training_builds(table) -> None:
    arrays, meta = read_npz(ComplexityModel.artifact_file())
    assert np.array_equal(arrays["word_zipf"], table)
    assert meta["word_frequency"]["source"] == "wordfreq"


def test_fit_prior_takes_the_between_columns_from_group_means() -> None:
    # Within each group difficulty does not move with column 1; across groups it does.
    x = np.asarray([[0.0, 0.1], [1.0, 0.1], [0.0, 0.9], [1.0, 0.9]])
    y = np.asarray([-1.0, -1.0, 1.0, 1.0])
    groups = ["a", "a", "b", "b"]
    within, _ = fit_prior(x, y, groups)
    both, intercept = fit_prior(x, y, groups, between=[1])
    assert within[1] == pytest.approx(0.0) and both[1] > 0.5
    assert float(x[2] @ both + intercept) > float(x[0] @ both + intercept)


def test_an_artifact_without_rarity_keeps_the_shape_prior() -> None:
    arrays, meta = read_npz(ComplexityModel.artifact_file())
    old = ComplexityModel({k: v for k, v in arrays.items() if k not in ("prior_r", "word_zipf")},
                          meta)
    new = ComplexityModel(arrays, meta)
    assert np.array_equal(new._prior_w, old._prior_w)  # same weights on shape in both
    question = "What is the capital of France?"
    assert features.featurize(question).n_words > 0
    assert old.score(question).logit != new.score(question).logit
