"""``routegate learn``: the command around ``lab/learning.py``.

    routegate learn --labels labels.jsonl --out learned/
    routegate learn --from-traffic --team acme --since 7d --out learned/acme

Labels come from a JSONL file or from a team's traffic (``labelling/``: its
escalations and feedback, in the gateway's Redis; ``--config`` says where,
and for the traffic the starting point is the team's current classifier).
It prints the held-out APGR of the current classifier and of the learned one
on the same held-out half of the labels, and writes ``DIR`` only when the
learned one is better there (``--force`` writes anyway). The artifact
written is refitted on every label, with the penalty chosen on the split.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from budget.redis_client import open_redis
from classifiers.complexity import DEFAULT_ARTIFACT, ComplexityModel
from classifiers.labels import LabelError, Labels, read_labels
from core.config import ConfigError, GatewayConfig, load_config
from core.durations import parse_since
from lab.dataset import file_digest
from lab.learning import HELD_FRACTION, Result, fit_labels, learn
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


def run_learn(args: argparse.Namespace) -> int:
    from lab.learned_artifact import write_learned

    problem = _writable(args.out)
    try:
        if problem is not None:
            raise ValueError(problem)
        labels, source, start = _read(args)
        strong, weak = labels.strong_weak()
        if strong == weak:
            raise LabelError("the labelled models do not differ in mean score: learning "
                             "needs one that answers better than another")
        model = ComplexityModel.load(start)
        result, base = learn(model, labels, seed=args.seed, held_fraction=args.held_out)
    except (OSError, LabelError, ConfigError, ValueError) as exc:   # ArtifactError too
        print(f"routegate learn: {exc}", file=sys.stderr)
        return 2
    print(report(result, model))
    if args.compare_encoder and args.labels:
        _compare_encoder(args, labels, result, base)
    better = (result.before is not None and result.after is not None
              and result.after > result.before)
    if not better and not args.force:
        why = (f"{result.n_held_prompts} held-out prompts the current classifier was not "
               "fitted on, too few to compare on: label more traffic first"
               if result.before is None and result.n_fitted else
               "the learned model is not better on the held-out prompts")
        print(f"not written: {why} (--force writes it anyway)", file=sys.stderr)
        return 1
    final = fit_labels(base, labels, np.arange(len(labels)), result.fit.lam)
    provenance = {
        **source, "n_labels": len(labels), "n_prompts": len(labels.prompts),
        "models": labels.names,
        "strong": labels.names[result.strong], "weak": labels.names[result.weak],
        "base_artifact": str(start or DEFAULT_ARTIFACT),
        "base_sha256": file_digest(ComplexityModel.artifact_file(start)),
        "held_out_fraction": args.held_out, "seed": args.seed, "lambda": result.fit.lam,
        "held_out_apgr_before": result.before, "held_out_apgr_after": result.after,
        "refit_on": "all labels", "beta": final.beta,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        target = write_learned(args.out, start, final, labels,
                               (result.strong, result.weak), base, provenance)
    except OSError as exc:
        print(f"routegate learn: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {target}")
    return 0


def _compare_encoder(args: argparse.Namespace, labels: Labels, result: Result,
                     base: Any) -> None:
    from classifiers.labels import prompt_texts
    from lab.encoder_probe import compare_encoder

    texts = prompt_texts(args.labels)
    figures = compare_encoder(labels, [texts[p.digest] for p in labels.prompts], result, base)
    print(f"held-out APGR  encoder (MiniLM + ridge, alpha {figures.get('encoder alpha')}): "
          f"{_fmt(figures['encoder'])}")
    print(f"held-out APGR  mean of encoder and learned:   {_fmt(figures['mean with learned'])}")
    print(f"held-out APGR  static encoder (distilled + ridge, alpha "
          f"{figures.get('static alpha')}): {_fmt(figures['static'])}")


def _read(args: argparse.Namespace) -> tuple[Labels, dict[str, Any], Path | None]:
    """(labels, where they came from, the classifier to start from)."""
    if not args.from_traffic:
        return (read_labels(args.labels),
                {"labels": str(args.labels), "labels_sha256": file_digest(args.labels)},
                args.classifier)
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
    return labels, source, args.classifier or (Path(current) if current else None)


async def _from_redis(config: GatewayConfig, team: str, since_s: float | None
                      ) -> tuple[Labels, dict[str, Any]]:
    handle = await open_redis(config.effective_redis_url, Path(config.data_dir))
    try:
        store = LabelStore(handle.client, config.budget.key_prefix, config.learning)
        return await traffic_labels(store, team, since_s)
    finally:
        await handle.close()


