import io
import os
import sys
from pathlib import Path

import orjson
import pytest

from classifiers.complexity import ComplexityModel
from lab.commands import main

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))
    return env


def test_calibrate_prints_ability(tmp_path, capsys):
    data = tmp_path / "labelled.jsonl"
    rows = [{"prompt": f"What is {i} + {i}?", "score": float(i % 3 != 0)} for i in range(30)]
    data.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    assert main(["calibrate", "--model", "mine", "--data", str(data), "--family", "qwen"]) == 0
    out = capsys.readouterr().out
    ability = float(out.split("ability:")[1].split()[0])
    assert 0.3 < ability < 1.0


@pytest.mark.skipif(not (SHARED / "datasets" / "routing").is_dir(), reason="no shared data")
def test_calibrate_on_shared_format_recovers_known_ability(capsys):
    data = SHARED / "datasets" / "routing" / "llmrouter_test.jsonl"
    assert main(["calibrate", "--model", "gemma-2-9b-it", "--data", str(data)]) == 0
    assert "ability:" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["empty-dir", "cut", "foreign", "missing"])
def test_a_bad_artifact_is_one_line_and_exit_2(tmp_path, capsys, make):
    """--classifier / --artifact / --learned naming something that is not a usable
    artifact: exit 2 and one line naming the file, on every command, no traceback."""
    import numpy as np

    from classifiers.complexity import DEFAULT_ARTIFACT, ArtifactError
    from routegate.cli import main as cli

    target = tmp_path / make
    if make == "empty-dir":
        target.mkdir()
    elif make == "cut":
        target.write_bytes(DEFAULT_ARTIFACT.read_bytes()[:100_000])
    elif make == "foreign":
        with open(target, "wb") as fh:
            np.savez(fh, x=np.zeros(3))
    with pytest.raises(ArtifactError, match=str(target)):
        ComplexityModel.load(target)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(orjson.dumps({"prompt": f"q{i}", "model": m, "score": s}).decode()
                              + "\n" for i in range(4) for m, s in (("a", 1), ("b", 0))))
    for argv in (["classify", "--classifier", str(target)], ["eval", "--artifact", str(target)],
                 ["eval", "--learned", str(target)],
                 ["learn", "--labels", str(labels), "--out", str(tmp_path / "out"),
                  "--classifier", str(target)]):
        sys.stdin = io.TextIOWrapper(io.BytesIO(b'{"id": 1, "prompt": "hi"}\n'))
        try:
            assert cli(argv) == 2, argv
        finally:
            sys.stdin = sys.__stdin__
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(target) in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "out").exists()
