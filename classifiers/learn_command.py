"""``routegate learn --labels FILE --out DIR``: the command around ``classifiers/learning.py``.

It prints the held-out APGR of the current classifier and of the learned one
on the same held-out half of the labels, and writes ``DIR`` only when the
learned one is better there (``--force`` writes anyway). The artifact
written is refitted on every label, with the penalty chosen on the split.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

from classifiers.complexity import DEFAULT_ARTIFACT, ComplexityModel
from classifiers.dataset import file_digest
from classifiers.labels import LabelError, read_labels
from classifiers.learning import HELD_FRACTION, Result, fit_labels, learn


def register_learn(subparsers) -> None:
    cmd = subparsers.add_parser(
        "learn", help="refit the classifier on labelled traffic",
        description="Labels are JSON lines {\"prompt\": str (or \"messages\"), \"model\": "
                    "str, \"score\": 0..1}, one per model that answered a prompt; model "
                    "names may be any (\"strong\", \"weak\"). Reports held-out APGR before "
                    "and after on a split of the prompts.")
    cmd.add_argument("--labels", type=Path, required=True, help="JSONL label file")
    cmd.add_argument("--out", type=Path, required=True, help="directory to write")
    cmd.add_argument("--classifier", type=Path, default=None,
                     help="the artifact to start from (default: the shipped one)")
    cmd.add_argument("--held-out", type=float, default=HELD_FRACTION,
                     help="share of the prompts held out to compare before and after")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--force", action="store_true",
                     help="write even when the learned model is not better held out")
    cmd.set_defaults(func=run_learn)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def report(result: Result) -> str:
    strong, weak = result.names[result.strong], result.names[result.weak]
    return "\n".join([
        f"labels: {result.n_train_labels} for training; {result.n_held_prompts} held-out "
        f"prompts answered by both {strong} (strong) and {weak} (weak)",
        f"penalty on the new difficulty term: {result.fit.lam:g} (3-fold CV log loss "
        + ", ".join(f"{k:g}: {v:.4f}" for k, v in result.cv.items()) + ")",
        f"held-out APGR  before (current classifier): {_fmt(result.before)}",
        f"held-out APGR  after  (learned):            {_fmt(result.after)}",
    ])


def run_learn(args: argparse.Namespace) -> int:
    from classifiers.learned_artifact import write_learned

    try:
        labels = read_labels(args.labels)
    except (OSError, LabelError) as exc:
        print(f"routegate learn: {exc}", file=sys.stderr)
        return 2
    model = ComplexityModel.load(args.classifier)
    result, base = learn(model, labels, seed=args.seed, held_fraction=args.held_out)
    print(report(result))
    better = (result.before is not None and result.after is not None
              and result.after > result.before)
    if not better and not args.force:
        print("not written: the learned model is not better on the held-out prompts "
              "(--force writes it anyway)", file=sys.stderr)
        return 1
    final = fit_labels(base, labels, np.arange(len(labels)), result.fit.lam)
    provenance = {
        "labels": str(args.labels), "labels_sha256": file_digest(args.labels),
        "n_labels": len(labels), "n_prompts": len(labels.prompts), "models": labels.names,
        "strong": labels.names[result.strong], "weak": labels.names[result.weak],
        "base_artifact": str(args.classifier or DEFAULT_ARTIFACT),
        "base_sha256": file_digest(_artifact_file(args.classifier)),
        "held_out_fraction": args.held_out, "seed": args.seed, "lambda": result.fit.lam,
        "held_out_apgr_before": result.before, "held_out_apgr_after": result.after,
        "refit_on": "all labels", "beta": final.beta,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    target = write_learned(args.out, args.classifier, final, labels.names, result.weak,
                           base, provenance)
    print(f"wrote {target}")
    return 0


def _artifact_file(path: Path | None) -> Path:
    if path is None:
        return DEFAULT_ARTIFACT
    return path / DEFAULT_ARTIFACT.name if path.is_dir() else path
