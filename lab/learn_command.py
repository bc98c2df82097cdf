"""``routegate learn``: the command around ``lab/learning.py``.

    routegate learn --labels labels.jsonl --out learned/
    routegate learn --from-traffic --team acme --since 7d --out learned/acme

Labels come from a JSONL file or from a team's traffic (``labelling/``: its
escalations and feedback, in the gateway's Redis; ``--config`` says where,
and for the traffic the starting point is the team's current classifier).
It prints the held-out APGR of the current classifier and of the learned one
on the same held-out half of the labels, then a table per pair of neighbouring
models on the ladder (``--ladder``; with ``--from-traffic`` the team's models by
price): each pair head's held-out APGR and its gain over the current one, with
95% bootstrap intervals (``lab/learn_pairs.py``, ``lab/pair_heads.py``). It
writes ``DIR`` only when every compared pair's kept head gains with the lower
end of its interval above zero (``--force`` writes anyway), and says how many
more labels it needs under 100 labelled prompts. The artifact written is
refitted on every label, with the penalty chosen on the split.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

from budget.redis_client import open_redis
from classifiers.complexity import DEFAULT_ARTIFACT, ComplexityModel
from classifiers.labels import LabelError, Labels, prompt_texts, read_labels
from core.config import ConfigError, GatewayConfig, load_config
from core.durations import parse_since
from lab.dataset import file_digest
from lab.learn_pairs import Outcome, learn_with_pairs
from lab.learning import HELD_FRACTION, Result
from lab.pair_heads import MIN_PROMPTS, format_pair, pair_provenance
from labelling.store import LabelStore
from labelling.traffic import labels_digest, traffic_labels

CONFIG_ENV, DEFAULT_CONFIG = "ROUTEGATE_CONFIG", "config/routegate.yaml"


def register_learn(subparsers) -> None:
    cmd = subparsers.add_parser(
        "learn", help="refit the classifier on labelled traffic",
        description="Labels are JSON lines {\"prompt\": str (or \"messages\"), \"model\": "
                    "str, \"score\": 0..1}, one per model that answered a prompt; model "
                    "names may be any (\"strong\", \"weak\"). Or a team's own traffic: "
                    "its escalations and POST /v1/feedback scores, kept in the gateway's "
                    "Redis. Reports held-out APGR before and after on a split of the prompts.")
    source = cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("--labels", type=Path, help="JSONL label file")
    source.add_argument("--from-traffic", action="store_true",
                        help="the labels the gateway recorded for --team")
    cmd.add_argument("--team", help="with --from-traffic: whose labels")
    cmd.add_argument("--since", default=None, help="with --from-traffic: 90m, 12h, 7d (default: "
                     "all kept)")
    cmd.add_argument("--config", default=os.environ.get(CONFIG_ENV, DEFAULT_CONFIG),
                     help="with --from-traffic: the gateway's config (where its Redis is)")
    cmd.add_argument("--out", type=Path, required=True, help="directory to write")
    cmd.add_argument("--classifier", type=Path, default=None,
                     help="the artifact to start from (default: the shipped one)")
    cmd.add_argument("--held-out", type=_fraction, default=HELD_FRACTION,
                     help="share of the prompts held out to compare before and after")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--compare-encoder", action="store_true",
                     help="with --labels: also rank the held-out prompts with the reading "
                          "encoder (lab/encoder_probe.py; tens of ms a prompt)")
    cmd.add_argument("--ladder", default=None, metavar="WEAK,...,STRONG",
                     help="the models in the order the router climbs them, cheapest first "
                          "(default: with --from-traffic the team's models by price, else "
                          "the labelled models by their lead where both answered)")
    cmd.add_argument("--force", action="store_true",
                     help="write even when the learned model is not better held out")
    cmd.set_defaults(func=run_learn)


def _fraction(text: str) -> float:
    """An argparse type: a share strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:                 # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1, got {text}")
    return value


def _writable(out: Path) -> str | None:
    """Why ``--out`` cannot be written, checked before the fit; None if it can."""
    if out.exists() and not out.is_dir():
        return f"--out {out}: exists and is not a directory"
    parent = out if out.exists() else next((p for p in out.parents if p.exists()), None)
    if parent is None or not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {out}: cannot write there"
    return None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def report(result: Result, model: ComplexityModel) -> str:
    strong, weak = result.names[result.strong], result.names[result.weak]
    if model.fitted_prompts is not None:
        kept = (f"; {result.n_fitted} prompts the current classifier was fitted on are "
                "never held out")
    elif model.is_learned:
        kept = ("; the current classifier was learned by an older routegate that did not "
                "keep its prompts: 'before' may be in-sample")
    else:
        kept = ""
    return "\n".join([
        f"labels: {result.n_train_labels} for training; {result.n_held_prompts} held-out "
        f"prompts answered by both {strong} (strong) and {weak} (weak){kept}",
        f"penalty on the new difficulty term: {result.fit.lam:g} (3-fold CV log loss "
        + ", ".join(f"{k:g}: {v:.4f}" for k, v in result.cv.items()) + ")",
        f"held-out APGR  before (current classifier): {_fmt(result.before)}",
        f"held-out APGR  after  (learned):            {_fmt(result.after)}",
    ])


def _needs_more(n_prompts: int) -> str:
    return (f"needs more labels: {n_prompts} labelled prompts, about {MIN_PROMPTS} wanted "
            f"({MIN_PROMPTS - n_prompts} more)")


def run_learn(args: argparse.Namespace) -> int:
    problem = _writable(args.out)
    try:
        if problem is not None:
            raise ValueError(problem)
        labels, source, start, texts, ladder = _read(args)
        strong, weak = labels.strong_weak()
        if strong == weak:
            raise LabelError("the labelled models do not differ in mean score: learning "
                             "needs one that answers better than another")
        ladder = _check_ladder(ladder, labels)
        model = ComplexityModel.load(start)
        try:
            outcome = learn_with_pairs(model, labels, texts, ladder, seed=args.seed,
                                       held_fraction=args.held_out)
        except ValueError as exc:            # too few to fit at all: say how many more
            if len(labels.prompts) < MIN_PROMPTS:
                raise ValueError(f"{exc}; {_needs_more(len(labels.prompts))}") from None
            raise
    except (OSError, LabelError, ConfigError, ValueError) as exc:   # ArtifactError too
        print(f"routegate learn: {exc}", file=sys.stderr)
        return 2
    result = outcome.result
    print(report(result, model))
    if outcome.needs:
        print(f"{_needs_more(outcome.n_prompts)}; with fewer, only the item-response refit "
              "is compared, and its interval is wide", file=sys.stderr)
    for pair in outcome.pairs:
        print(format_pair(pair))
    if args.compare_encoder and args.labels:
        _compare_encoder(args, labels, result, outcome.base)
    if not outcome.writable and not args.force:
        print(f"not written: {_why_not(outcome)} (--force writes it anyway)", file=sys.stderr)
        return 1
    return _write(args, outcome, labels, source, start)


def _why_not(outcome: Outcome) -> str:
    result = outcome.result
    if result.before is None and result.n_fitted:
        return (f"{result.n_held_prompts} held-out prompts the current classifier was not "
                "fitted on, too few to compare on: label more traffic first")
    if not outcome.compared:
        return "no pair has held-out prompts enough to compare on: label more traffic first"
    failing = [p for p in outcome.compared if not p.passes]
    return "; ".join(f"{p.weak} -> {p.strong}: the learned model is not better on the "
                     f"held-out prompts (gain {p.gains[p.chosen][0]:+.3f}, 95% interval "
                     f"{p.gains[p.chosen][1]:+.3f} to {p.gains[p.chosen][2]:+.3f})"
                     for p in failing if p.chosen is not None)


def _check_ladder(ladder: list[str] | None, labels: Labels) -> list[str] | None:
    if ladder is None:
        return None
    missing = [name for name in ladder if name not in labels.names]
    if missing or len(ladder) < 2 or len(set(ladder)) != len(ladder):
        raise ValueError(f"--ladder {','.join(ladder)}: needs two or more distinct labelled "
                         f"models (labelled: {', '.join(labels.names)})")
    return ladder


def _write(args: argparse.Namespace, outcome: Outcome, labels: Labels,
           source: dict[str, Any], start: Path | None) -> int:
    from lab.learned_artifact import write_learned

    result, final = outcome.result, outcome.final
    provenance = {
        **source, "n_labels": len(labels), "n_prompts": len(labels.prompts),
        "models": labels.names,
        "strong": labels.names[result.strong], "weak": labels.names[result.weak],
        "base_artifact": str(start or DEFAULT_ARTIFACT),
        "base_sha256": file_digest(ComplexityModel.artifact_file(start)),
        "held_out_fraction": args.held_out, "seed": args.seed, "lambda": result.fit.lam,
        "held_out_apgr_before": result.before, "held_out_apgr_after": result.after,
        "refit_on": "all labels", "beta": final.beta, "ladder": outcome.ladder,
        "pairs": [pair_provenance(p) for p in outcome.pairs],
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        target = write_learned(args.out, start, final, labels, (result.strong, result.weak),
                               outcome.base, provenance,
                               (outcome.ladder, outcome.heads, outcome.static))
    except OSError as exc:
        print(f"routegate learn: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {target}")
    return 0


def _compare_encoder(args: argparse.Namespace, labels: Labels, result: Result,
                     base: Any) -> None:
    from lab.encoder_probe import compare_encoder

    texts = prompt_texts(args.labels)
    figures = compare_encoder(labels, [texts[p.digest] for p in labels.prompts], result, base)
    print(f"held-out APGR  encoder (MiniLM + ridge, alpha {figures.get('encoder alpha')}): "
          f"{_fmt(figures['encoder'])}")
    print(f"held-out APGR  mean of encoder and learned:   {_fmt(figures['mean with learned'])}")
    print(f"held-out APGR  static encoder (distilled + ridge, alpha "
          f"{figures.get('static alpha')}): {_fmt(figures['static'])}")


def _read(args: argparse.Namespace) -> tuple[Labels, dict[str, Any], Path | None,
                                             list[str | None], list[str] | None]:
    """(labels, where they came from, the classifier to start from, each prompt's text
    or None, the ladder or None for the default)."""
    ladder = args.ladder.split(",") if args.ladder else None
    if not args.from_traffic:
        labels = read_labels(args.labels)
        known = prompt_texts(args.labels)
        return (labels,
                {"labels": str(args.labels), "labels_sha256": file_digest(args.labels)},
                args.classifier, [known.get(p.digest) for p in labels.prompts], ladder)
    if not args.team:
        raise ValueError("--from-traffic needs --team")
    config = load_config(args.config)
    team = next((t for t in config.teams if t.name == args.team), None)
    if team is None:
        raise ValueError(f"no team {args.team!r} in {args.config}")
    since_s = parse_since(args.since).total_seconds() if args.since else None
    labels, summary = asyncio.run(_from_redis(config, team.name, since_s))
    print(f"traffic labels of {team.name}: {summary['by_source']}"
          + (f", {summary['skipped']} unreadable skipped" if summary["skipped"] else "")
          + (f", {summary['repeated']} repeats of a request's label counted once"
             if summary["repeated"] else ""))
    current = team.classifier or config.routing.classifier
    source = {"labels": f"traffic: team {team.name}, since {args.since or 'all kept'}",
              "labels_sha256": labels_digest(labels), "by_source": summary["by_source"]}
    texts = [summary["texts"].get(p.digest) for p in labels.prompts]
    return (labels, source, args.classifier or (Path(current) if current else None), texts,
            ladder or team_ladder(config, team.name, labels.names))


def team_ladder(config: GatewayConfig, team: str, labelled: list[str]) -> list[str] | None:
    """The team's chat models that have labels, cheapest first (by input plus output
    price per Mtok): the order its router climbs; None with fewer than two."""
    chosen = next(t for t in config.teams if t.name == team)
    models = [m for m in config.models if m.kind == "chat" and m.name in labelled
              and (chosen.allowed_models is None or m.name in chosen.allowed_models)]
    models.sort(key=lambda m: (m.price.input_per_mtok + m.price.output_per_mtok, m.ability))
    return [m.name for m in models] if len(models) >= 2 else None


async def _from_redis(config: GatewayConfig, team: str, since_s: float | None
                      ) -> tuple[Labels, dict[str, Any]]:
    handle = await open_redis(config.effective_redis_url, Path(config.data_dir))
    try:
        store = LabelStore(handle.client, config.budget.key_prefix, config.learning)
        return await traffic_labels(store, team, since_s)
    finally:
        await handle.close()


