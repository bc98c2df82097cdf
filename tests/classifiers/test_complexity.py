import math

import pytest

from classifiers.complexity import ComplexityModel, PromptScore, conversation_text

FAMILIES = ("claude", "gemma", "gpt", "llama", "mistral", "qwen", "yi")


@pytest.fixture(scope="module")
def model() -> ComplexityModel:
    return ComplexityModel.load()


PROMPTS = [
    "hi",
    "What is the capital of France?",
    "If $(x + y)^2 = 45$ and $xy = 10$, what is $(x - y)^2$?",
    "def strange_sort_list(lst):\n    '''Return list in strange order.'''\n",
    "行政行为有抽象行政行为与具体行政行为之分。下列属于抽象行政行为的是\nA. 行政征收\nB. 行政立法\n答案：",
    "x" * 300_000,
]


def test_shipped_artifact_loads_and_knows_training_models(model):
    assert 0 < model.ability_of("llama-3.1-nemotron-51b-instruct") < 1
    assert model.ability_of("llmrouter-dcrouter/gemma-2-9b-it") is not None
    assert model.ability_of("no-such-model") is None


@pytest.mark.parametrize("text", PROMPTS)
def test_score_ranges(model, text):
    score = model.score(text)
    assert isinstance(score, PromptScore)
    assert 0.0 <= score.difficulty <= 1.0
    assert 0.0 <= score.confidence <= 1.0
    assert score.tier in {"easy", "medium", "hard"}
    assert math.isfinite(score.logit)
    assert set(FAMILIES) <= set(score.family_offsets)


def test_p_correct_monotonic_in_ability_and_difficulty(model):
    easy, hard = model.score("What is 2 + 2?"), model.score(PROMPTS[2])
    abilities = [0.05, 0.2, 0.5, 0.8, 0.95]
    for score in (easy, hard):
        ps = [model.p_correct(score, a, "llama") for a in abilities]
        assert ps == sorted(ps) and ps[0] < ps[-1]
    # Same ability and family: a higher logit means a lower chance.
    lo, hi = sorted((easy, hard), key=lambda s: s.logit)
    assert model.p_correct(lo, 0.6) >= model.p_correct(hi, 0.6)
    assert model.p_correct(lo, 0.6, None) == pytest.approx(
        1 / (1 + math.exp(-(math.log(0.6 / 0.4) - lo.logit))))


def test_difficulty_rises_with_logit(model):
    scores = sorted((model.score(t) for t in PROMPTS), key=lambda s: s.logit)
    assert [s.difficulty for s in scores] == sorted(s.difficulty for s in scores)


def test_score_messages_flattens_parts_and_counts_depth(model):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Prove sqrt(2) is irrational."}]},
    ]
    assert conversation_text(messages).startswith("Prove sqrt(2)")
    score = model.score_messages(messages, has_tools=True)
    assert 0.0 <= score.difficulty <= 1.0
    assert model.score_messages([]).tier in {"easy", "medium", "hard"}


def test_family_offsets_keep_the_shared_difficulty_slope(model):
    """Only exact training-model keys carry their own slope on d(x) (the last
    offset column). Offsets are deviations from the average training model,
    whose slope d(x) already holds, so a family row's slope column is minus
    that average: a config model known by family alone keeps slope 1, and
    its P(correct) still falls as prompts get harder."""
    keys = model._offset_keys
    slope = model._offset_w[:, -1] + model._mean_offset_w[-1]
    assert all(slope[keys.index(f)] == pytest.approx(0.0) for f in FAMILIES)
    assert any(abs(slope[i]) > 1e-3 for i in range(len(FAMILIES), len(keys)))
    assert all(s < 1.0 for s in slope)  # every model's P(correct) falls with difficulty
