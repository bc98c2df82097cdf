import subprocess
import sys

import numpy as np

from classifiers.features import (
    DENSE_NAMES,
    HEAD_CHARS,
    N_HASH,
    TAIL_CHARS,
    bounded_window,
    featurize,
)

SAMPLE = "Write a function `def f(x): return x**2` and solve $x^2 = 4$.\nA) 2\nB) -2\n答案："


def test_featurize_is_deterministic_within_process():
    a, b = featurize(SAMPLE), featurize(SAMPLE)
    assert np.array_equal(a.indices, b.indices)
    assert np.array_equal(a.values, b.values)
    assert np.array_equal(a.dense, b.dense)


def test_featurize_is_deterministic_across_processes():
    # Python's hash() is salted per process; ours must not be.
    code = (
        "from classifiers.features import featurize;"
        f"f = featurize({SAMPLE!r}); print(int(f.indices.sum()), int(f.indices[:5].sum()))"
    )
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, env={"PYTHONHASHSEED": seed, "PATH": ""},
                       cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2])
                       ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1


def test_indices_in_range_and_dense_shape():
    feats = featurize(SAMPLE, n_messages=3, has_tools=True, has_response_format=True)
    assert feats.indices.min() >= 0 and feats.indices.max() < N_HASH
    assert feats.indices.shape == feats.values.shape
    assert feats.dense.shape == (len(DENSE_NAMES),)
    dense = dict(zip(DENSE_NAMES, feats.dense, strict=True))
    assert dense["has_tools"] == 1.0 and dense["has_response_format"] == 1.0
    assert dense["log_messages"] > 0 and dense["cjk_ratio"] > 0 and dense["mc_options"] > 0


def test_work_is_bounded_for_huge_prompts():
    huge = "word " * 200_000  # 1 MB
    window = bounded_window(huge)
    assert len(window) <= HEAD_CHARS + TAIL_CHARS + 1
    feats = featurize(huge)
    small = featurize(huge[: HEAD_CHARS + TAIL_CHARS + 1])
    assert feats.indices.size <= 3 * (HEAD_CHARS + TAIL_CHARS + 1) * 4
    assert abs(feats.indices.size - small.indices.size) < 10
    # Length still counts the whole prompt.
    assert feats.dense[0] > small.dense[0]


def test_empty_and_odd_inputs():
    for text in ("", "a", "?!", "\ud800 lone surrogate", "中"):
        feats = featurize(text)
        assert np.all(np.isfinite(feats.values)) and np.all(np.isfinite(feats.dense))
