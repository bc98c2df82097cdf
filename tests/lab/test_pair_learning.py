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
                noise: bool = False, rates: tuple[float, float] | None = None) -> list[bytes]:
    """``rates``: how often the weak model fails an animal's prompt and a vehicle's."""
    weak, strong = names
    rng = np.random.default_rng(5)
    lines = []
    items = [(t.format(x=x), True) for x in ANIMALS for t in TEMPLATES]
    items += [(t.format(x=x), False) for x in VEHICLES for t in TEMPLATES]
    for text, animal in items[:n] if n else items:
        fails = float(rng.random() < 0.5) if noise else float(animal)
        if rates is not None:
            fails = float(rng.random() < rates[0 if animal else 1])
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
    # --force writes the artifact, not the head its figures did not keep: IRT alone
    [pair] = json.loads((out / "LEARNED.json").read_text())["pairs"]
    assert pair["passes"] is False and pair["kept"] == "irt"
    arrays = np.load(out / "complexity.npz")
    assert list(arrays["pair_kind"]) == ["irt"] and arrays["pair_calib_0"].size == 0


def test_with_few_labelled_prompts_learn_says_how_many_more_it_needs(tmp_path: Path) -> None:
    run = _learn(tmp_path, label_lines(n=60), "--out", str(tmp_path / "o"))
    assert "needs more labels: 60 labelled prompts, about 100 wanted (40 more)" in run.stderr
    assert "needs more labels: 60 prompts both answered" in run.stdout
    assert "ridge" not in run.stdout           # no static head on 60 prompts
    lines = label_lines(n=60)
    texts = [json.loads(line)["prompt"] for line in lines[::2]]
    [pair] = learn_with_pairs(ComplexityModel.load(), parse_labels(lines), texts,
                              ["weak", "strong"]).pairs
    # the item-response refit alone: no ranking scored, no calibration, no say in the write
    assert pair.chosen is None and pair.calibration is None and pair.rankings == {}
    assert pair.head is not None and pair.head.kind == "irt" and pair.head.calib_x.size == 0
    # So few that learn cannot even fit: it says why, and how many more it needs.
    run = _learn(tmp_path, label_lines(n=2), "--out", str(tmp_path / "o"))
    assert run.returncode == 2
    assert "needs more labels: 2 labelled prompts, about 100 wanted (98 more)" in run.stderr


def test_a_pair_whose_held_out_lead_is_not_clearly_positive_is_not_scored() -> None:
    """APGR divides by the strong model's lead on the held-out prompts: on a lead at or
    below zero the worst ranking scores best. Such a pair is not compared, and learn
    cannot keep (or write) a head for it."""
    from lab.evaluation import gap_is_clear
    from lab.pair_heads import PairResult, evaluate_pair

    rng = np.random.default_rng(3)
    n = 200
    strong, weak = rng.integers(0, 2, n).astype(float), rng.integers(0, 2, n).astype(float)
    held = np.arange(n) % 2 == 0
    weak[held] = np.maximum(weak[held], strong[held])       # the weak one leads held out
    result = PairResult("weak", "strong", n, int(held.sum()))
    evaluate_pair(result, None, strong - weak, held, -(strong - weak), rng.random(n),
                  strong, weak)
    assert result.chosen is None and not result.passes and result.calibration is None
    assert "not clearly above zero" in result.note
    assert not gap_is_clear(strong[held], weak[held])
    assert gap_is_clear(np.r_[np.ones(60), np.zeros(40)], np.r_[np.zeros(60), np.zeros(40)])
    assert not gap_is_clear(np.r_[1.0, 0.0], np.r_[0.0, 0.0])    # one prompt of two: noise


def test_the_written_heads_gain_is_on_the_scale_new_prompts_show(tmp_path: Path) -> None:
    """The router compares the gain itself with the quality target. The weak model fails
    70% of the animals' prompts and 10% of the vehicles': on prompts learn never saw,
    the written head's gains average near what those prompts showed (the calibration is
    fitted on the out-of-fold outputs of the head that is written; fitted on the held-out
    outputs of the head trained on half, then put on the one refitted on all, it was not)."""
    out, new = tmp_path / "learned", {*ANIMALS[1::3], *VEHICLES[1::3]}   # never labelled
    rows = [json.loads(line) for line in label_lines(rates=(0.7, 0.1))]
    noun = {r["prompt"]: r["prompt"].rstrip(".?").split()[-1] for r in rows}
    lines = [orjson.dumps(r) for r in rows if noun[r["prompt"]] not in new]

    def realized(nouns: list[str]) -> float:     # the new prompts' own gains, as drawn
        return float(np.mean([1.0 - r["score"] for r in rows if r["model"] == "weak"
                              and noun[r["prompt"]] in new and noun[r["prompt"]] in nouns]))
    run = _learn(tmp_path, lines, "--out", str(out), "--force")
    assert run.returncode == 0, run.stderr
    [pair] = json.loads((out / "LEARNED.json").read_text())["pairs"]
    assert pair["passes"] and pair["kept"] != "irt", pair
    model = ComplexityModel.load(out)

    def mean_gain(nouns: list[str]) -> float:
        gains = [model.score(t.format(x=x)).pair_gains for x in nouns if x in new
                 for t in TEMPLATES]
        return float(np.mean([g[("weak", "strong")] for g in gains if g]))
    got = {k: (mean_gain(n), realized(n))
           for k, n in (("animals", ANIMALS), ("vehicles", VEHICLES), ("all", ANIMALS + VEHICLES))}
    assert got["all"][0] == pytest.approx(got["all"][1], abs=0.1), got
    assert got["animals"][0] > got["vehicles"][0] + 0.2, got
    # where the strong model is needed, not squeezed toward the mean: the calibration
    # fitted on the half-trained head's outputs gave the animals 0.46 (they showed 0.72)
    assert got["animals"][0] == pytest.approx(got["animals"][1], abs=0.15), got


def test_learn_with_no_fold_to_choose_the_penalty_on_says_so(tmp_path: Path) -> None:
    run = _learn(tmp_path, label_lines(), "--out", str(tmp_path / "o"), "--held-out", "0.995")
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "too few training prompts for a 3-fold cross-validation" in run.stderr


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
        assert p["small"] == pytest.approx(min(1.0, max(0.0, p["medium"] - gain)))  # the head
        large = models["large"]                   # not on the learned ladder: its own P
        assert p["large"] == pytest.approx(scorer.model.p_correct(score, large.ability,
                                                                  large.family))
        chosen = router.choose(chat, caller, features).model
        assert chosen == ("medium" if "seal" in text else "small"), (text, p)


def test_a_refused_answer_climbs_to_the_stronger_model_a_head_ranked_below(
        tmp_path: Path) -> None:
    """``medium`` answers every animal's prompt and ``small`` none; on a vehicle's, small
    answers all and medium 60%: the head's gain there is negative, so small's P is
    above medium's. A choice of small still climbs to medium (the learned ladder says
    it is above), where the rungs were the models predicted at least as likely correct."""
    from core.config import ModelFacts, load_config
    from gateway.auth import Caller
    from gateway.pipeline.features import measure
    from gateway.pipeline.routing import Router
    from gateway.protocols.chat_body import parse_chat
    from gateway.upstreams import build_backends

    rng = np.random.default_rng(3)
    lines = []
    for x, animal in [(x, True) for x in ANIMALS] + [(x, False) for x in VEHICLES]:
        for t in TEMPLATES:
            medium = 1.0 if animal else float(rng.random() < 0.6)
            lines += [orjson.dumps({"prompt": t.format(x=x), "model": "medium", "score": medium}),
                      orjson.dumps({"prompt": t.format(x=x), "model": "small",
                                    "score": 0.0 if animal else 1.0})]
    out = tmp_path / "learned"
    run = _learn(tmp_path, lines, "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    config = load_config(REPO / "config" / "routegate.yaml")
    router = Router(config, build_backends(config), ComplexityModel.load(out))
    team = config.teams[0]
    caller = Caller(team=team, key=team.key_configs()[0])
    models = {m.name: ModelFacts.of(m) for m in config.models}
    body = json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": "Tell me one fact about the tram."}]})
    chat = parse_chat(body.encode(), {})
    features = asyncio.run(measure(chat, router.encodings, router.scorer(chat, caller)))
    assert features.score is not None and features.score.pair_gains is not None
    assert features.score.pair_gains[("small", "medium")] < 0
    p = {n: router.predicted_quality(models[n], features) for n in ("small", "medium")}
    assert p["small"] > p["medium"]
    decision = router.choose(chat, caller, features)
    assert decision.model == "small"
    assert "medium" in decision.fallbacks, decision


def test_heads_along_a_ladder_of_no_configured_model_cost_and_decide_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Label names are free: heads learned on ``weak`` and ``strong`` name none of the
    demo fleet's models. The router warns once, scores without them (no embedding on
    the request path), and routes by the item-response model alone."""
    from core.config import load_config
    from gateway.auth import Caller
    from gateway.pipeline.features import Scorer, measure
    from gateway.pipeline.routing import Router
    from gateway.protocols.chat_body import parse_chat
    from gateway.upstreams import build_backends

    out = tmp_path / "learned"
    assert _learn(tmp_path, label_lines(), "--out", str(out)).returncode == 0
    model = ComplexityModel.load(out)
    config = load_config(REPO / "config" / "routegate.yaml")
    with caplog.at_level("WARNING", logger="routegate.classifier"):
        assert Scorer.of(model, config).pairs is False
    assert "0 of its 1 pairs" in caplog.text
    router = Router(config, build_backends(config), model)
    team = config.teams[0]
    caller = Caller(team=team, key=team.key_configs()[0])
    body = json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": "Tell me one fact about the seal."}]})
    chat = parse_chat(body.encode(), {})
    features = asyncio.run(measure(chat, router.encodings, router.scorer(chat, caller)))
    assert features.score is not None and features.score.pair_gains is None
    assert model.score("Tell me one fact about the seal.").pair_gains is not None


def test_before_ranks_a_pair_on_one_scale_however_much_text_was_kept(tmp_path: Path) -> None:
    """"Before" is the current classifier's ranking whether or not the prompts' text was
    logged: its item-response heads need none (the demo fleet's), so all, none or half
    the text give the same ranking; a head on the embedding needs every prompt's, and
    with half of them the whole pair is ranked by ``difficulty``, never half by each."""
    from lab.learn_pairs import _before

    lines = label_lines(("small", "medium"))
    labels = parse_labels(lines)
    texts = [json.loads(line)["prompt"] for line in lines[::2]]
    half = [t if i % 2 else None for i, t in enumerate(texts)]
    none: list[str | None] = [None] * len(texts)
    demo = ComplexityModel.load(REPO / "classifiers" / "artifacts" / "demo_fleet.npz")
    assert demo.head_reads_text(("small", "medium")) is False
    rankings = [_before(demo, labels, t)("small", "medium") for t in (texts, half, none)]
    assert np.array_equal(rankings[0], rankings[1]) and np.array_equal(rankings[0], rankings[2])
    assert not np.array_equal(rankings[0], _before(demo, labels, texts)("medium", "large"))
    out = tmp_path / "learned"
    assert _learn(tmp_path, lines, "--out", str(out), "--force").returncode == 0
    ridge = ComplexityModel.load(out)
    assert ridge.head_reads_text(("small", "medium")) is True
    difficulty = _before(ridge, labels, none)("small", "medium")
    assert np.array_equal(_before(ridge, labels, half)("small", "medium"), difficulty)
    assert not np.array_equal(_before(ridge, labels, texts)("small", "medium"), difficulty)


def test_a_knn_head_keeps_a_bounded_draw_of_its_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A team's traffic may label 100,000s of prompts: the knn head keeps at most
    MAX_KNN_ROWS of them (its request-path cost is a product with each), learn's own
    neighbour search works on blocks of that size, and an artifact keeping more is
    refused when it loads."""
    import lab.pair_heads as lab_heads
    from classifiers.pair_heads import heads_from_arrays, heads_to_arrays
    from lab.pair_heads import PairResult, final_head, kept_rows, knn_predict

    monkeypatch.setattr(lab_heads, "MAX_KNN_ROWS", 50)
    rng = np.random.default_rng(6)
    emb = rng.normal(size=(180, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    gain = (emb[:, 0] > 0).astype(float)
    rows = kept_rows(180)
    assert rows.size == 50 and np.unique(rows).size == 50 and (kept_rows(180) == rows).all()
    assert knn_predict(emb, gain, 5, emb).shape == (180,)
    result = PairResult("weak", "strong", 180, 90, chosen="knn", calibration=(
        np.zeros(0), np.zeros(0)))
    result.gains["knn"] = (0.1, 0.05, 0.2)                     # it passes
    head = final_head(result, emb, gain)
    assert head.kind == "knn" and head.knn_y.size == 50
    arrays = heads_to_arrays(["weak", "strong"], [head])
    import classifiers.pair_heads as product_heads
    monkeypatch.setattr(product_heads, "MAX_KNN_ROWS", 49)
    with pytest.raises(ValueError, match="keeps 50 labelled prompts"):
        heads_from_arrays(arrays, None)
