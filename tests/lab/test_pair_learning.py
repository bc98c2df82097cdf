"""``routegate learn``'s pair heads: chosen on held-out labels, refused without a gain,
honest about small data, written and read back, and used by the router for their pair."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from classifiers.complexity import ComplexityModel
from classifiers.labels import parse_labels
from lab.learn_pairs import learn_with_pairs

REPO = Path(__file__).resolve().parents[2]
# The weak model fails every question about an animal and answers every one about a
# vehicle. One template, so the words that tell them apart are the nouns alone, and a
# held-out prompt's noun was never in a training prompt: n-grams cannot carry over,
# an embedding of what the noun means can.
ANIMALS = ("dog cat horse cow sheep goat pig rabbit mouse rat squirrel fox wolf bear lion "
           "tiger leopard cheetah elephant giraffe zebra hippo rhino camel deer moose otter "
           "beaver badger hedgehog bat whale dolphin seal walrus penguin eagle owl parrot "
           "sparrow pigeon crow swan duck goose chicken turkey frog toad snake lizard turtle "
           "crocodile shark salmon trout octopus squid crab lobster bee ant butterfly spider "
           "koala kangaroo panda gorilla monkey").split()
VEHICLES = ("car truck bus van tractor motorcycle scooter bicycle tram train locomotive subway "
            "taxi limousine jeep ambulance firetruck bulldozer excavator forklift crane "
            "airplane jet helicopter glider blimp rocket spaceship submarine ship ferry yacht "
            "canoe kayak sailboat raft tanker trolley minibus pickup sedan hatchback convertible "
            "coupe wagon caravan trailer snowmobile skateboard rickshaw gondola hovercraft "
            "tank drone zeppelin cruiser barge tugboat speedboat monorail segway moped "
            "unicycle tricycle").split()
TEMPLATES = ("Tell me one fact about the {x}.", "What should I know about a {x}?")


def label_lines(names: tuple[str, str] = ("weak", "strong"), n: int | None = None,
                noise: bool = False) -> list[bytes]:
    weak, strong = names
    rng = np.random.default_rng(5)
    lines = []
    items = [(t.format(x=x), True) for x in ANIMALS for t in TEMPLATES]
    items += [(t.format(x=x), False) for x in VEHICLES for t in TEMPLATES]
    for text, animal in items[:n] if n else items:
        fails = float(rng.random() < 0.5) if noise else float(animal)
        lines.append(orjson.dumps({"prompt": text, "model": strong, "score": 1.0}))
        lines.append(orjson.dumps({"prompt": text, "model": weak, "score": 1.0 - fails}))
    return lines


def _learn(tmp_path: Path, lines: list[bytes], *args: str) -> subprocess.CompletedProcess[str]:
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"\n".join(lines) + b"\n")
    return subprocess.run([sys.executable, "-m", "routegate", "learn", "--labels", str(labels),
                           *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_the_head_that_ranks_the_pairs_held_out_labels_best_is_kept() -> None:
    lines = label_lines()
    labels = parse_labels(lines)
    texts = [json.loads(line)["prompt"] for line in lines[::2]]
    outcome = learn_with_pairs(ComplexityModel.load(), labels, texts, ["weak", "strong"])
    pair = outcome.pairs[0]
    apgr = {kind: value[0] for kind, value in pair.rankings.items()}
    assert set(apgr) == {"irt", "ridge", "knn", "blend"}
    assert pair.chosen == max(apgr, key=apgr.__getitem__)
    # the nouns held out were never trained on: the embedding's heads rank them as the
    # labels do (half the prompts need the strong model: APGR 1 - 0.24 at best), n-grams not
    weak = labels.names.index("weak")
    fails = np.asarray([labels.score[(labels.prompt == i) & (labels.model == weak)][0] == 0
                        for i in range(len(labels.prompts))])[outcome.result.held]
    best = 1 - fails.mean() / 2
    assert pair.chosen != "irt" and apgr[pair.chosen] > best - 0.01, (apgr, best)
    assert apgr["irt"] < best - 0.03, (apgr, best)
    assert pair.passes and outcome.writable
    assert pair.gains[pair.chosen][1] > 0         # the interval's lower end
    assert pair.head is not None and pair.head.kind == pair.chosen


def test_learn_writes_the_head_and_the_artifact_reads_it_back(tmp_path: Path) -> None:
    out = tmp_path / "learned"
    run = _learn(tmp_path, label_lines(), "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert "pair weak -> strong" in run.stdout and "gain over before" in run.stdout
    provenance = json.loads((out / "LEARNED.json").read_text())
    kept = provenance["pairs"][0]["kept"]
    assert kept in ("ridge", "knn", "blend") and provenance["ladder"] == ["weak", "strong"]
    model = ComplexityModel.load(out)
    assert model.pair_ladder == ["weak", "strong"]
    seal, tram = (model.score(t) for t in ("Tell me one fact about the seal?",
                                           "What should I know about the tram today?"))
    assert seal.pair_gains is not None and tram.pair_gains is not None
    assert seal.pair_gains[("weak", "strong")] > tram.pair_gains[("weak", "strong")] + 0.3


def test_learn_refuses_a_head_whose_gain_interval_reaches_zero(tmp_path: Path) -> None:
    out = tmp_path / "learned"
    run = _learn(tmp_path, label_lines(noise=True), "--out", str(out))
    assert run.returncode == 1, run.stdout
    assert "not written" in run.stderr and "95% interval" in run.stderr
    assert not out.exists()
    forced = _learn(tmp_path, label_lines(noise=True), "--out", str(out), "--force")
    assert forced.returncode == 0 and (out / "complexity.npz").is_file()


def test_with_few_labelled_prompts_learn_says_how_many_more_it_needs(tmp_path: Path) -> None:
    run = _learn(tmp_path, label_lines(n=60), "--out", str(tmp_path / "o"))
    assert "needs more labels: 60 labelled prompts, about 100 wanted (40 more)" in run.stderr
    assert "needs more labels: 60 prompts both answered" in run.stdout
    assert "ridge" not in run.stdout           # no static head on 60 prompts


@pytest.fixture(scope="module")
def demo_router(tmp_path_factory: pytest.TempPathFactory):
    """The demo fleet's router with a classifier learned on labels of two of its models."""
    from core.config import load_config
    from gateway.auth import Caller
    from gateway.pipeline.routing import Router
    from gateway.upstreams import build_backends

    tmp = tmp_path_factory.mktemp("pair")
    out = tmp / "learned"
    run = _learn(tmp, label_lines(("small", "medium")), "--out", str(out))
    assert run.returncode == 0, run.stderr
    config = load_config(REPO / "config" / "routegate.yaml")
    router = Router(config, build_backends(config), ComplexityModel.load(out))
    team = config.teams[0]
    return router, Caller(team=team, key=team.key_configs()[0]), config


def test_the_router_uses_the_pair_head_between_those_two_models_only(demo_router) -> None:
    from gateway.pipeline.features import measure
    from gateway.protocols.chat_body import parse_chat

    router, caller, config = demo_router
    models = {m.name: m for m in config.models}
    for text in ("Tell me one fact about the seal.", "Tell me one fact about the tram."):
        body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": text}]})
        chat = parse_chat(body.encode(), {})
        features = asyncio.run(measure(chat, router.encodings, router.scorer(chat, caller)))
        score, scorer = features.score, features.scorer
        assert score is not None and scorer is not None and score.pair_gains is not None
        gain = score.pair_gains[("small", "medium")]
        p = {n: router.predicted_quality(models[n], features) for n in models if n != "embed-small"}
        ability, family = scorer.terms["medium"]
        assert p["medium"] == pytest.approx(scorer.model.p_correct(score, ability, family))
        assert p["small"] == pytest.approx(max(0.0, p["medium"] - gain))   # the head
        large = models["large"]                   # not on the learned ladder: its own P
        assert p["large"] == pytest.approx(scorer.model.p_correct(score, large.ability,
                                                                  large.family))
        chosen = router.choose(chat, caller, features).model
        assert chosen == ("medium" if "seal" in text else "small"), (text, p)
