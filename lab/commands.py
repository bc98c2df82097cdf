"""The lab's CLI subcommands of the classifier: train, eval, calibrate.

    routegate train                       # rebuild classifiers/artifacts/complexity.npz
    routegate eval                        # routing table on llmrouter_test.jsonl
    routegate calibrate --model my-llm --data labelled.jsonl --family llama
    # routegate learn is lab/learn_command.py (it also reads the traffic's labels);
    # routegate classify is the product's (classifiers/classify_command.py)

``routegate/cli.py`` calls ``register(subparsers)``; ``python -m lab.commands
<subcommand>`` runs the same handlers without the gateway.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

import numpy as np

from classifiers.artifact import write_npz
from classifiers.complexity import DEFAULT_ARTIFACT, ComplexityModel
from lab.dataset import (
    PRICED_SOURCE,
    TEST_FILE,
    TRAIN_FILES,
    default_data_dir,
    load_prices,
    load_rows,
)

MAX_BOOTSTRAP = 100_000     # eval --held-out resamples: a bound on its run time


def register(subparsers) -> None:
    """Add the classifier subcommands to an argparse subparsers object."""
    train = subparsers.add_parser("train", help="rebuild the complexity artifact")
    train.add_argument("--data", type=Path, default=None, help="routing data directory")
    train.add_argument("--out", type=Path, default=DEFAULT_ARTIFACT)
    train.add_argument("--seed", type=int, default=0)
    train.set_defaults(func=run_train)

    ev = subparsers.add_parser("eval", help="routing quality on llmrouter_test.jsonl")
    ev.add_argument("--data", type=Path, default=None)
    ev.add_argument("--artifact", type=Path, default=None,
                    help="the current classifier (default: the shipped one)")
    ev.add_argument("--learned", type=Path, default=None,
                    help="a directory `routegate learn` wrote: shown next to the current one")
    ev.add_argument("--held-out", type=Path, default=None,
                    help="routing-format JSONL never trained on (python -m lab.arena "
                         "writes chat prompts): rank it instead of the shared test file")
    ev.add_argument("--pair", action="append", default=[], metavar="STRONG,WEAK",
                    help="with --held-out, a model pair to score (repeatable; default: the "
                         "file's strongest and weakest by mean score)")
    ev.add_argument("--bootstrap", type=int, default=1000, metavar="DRAWS",
                    help="with --held-out, resamples for the 95%% intervals (0: none)")
    ev.add_argument("--new-traffic", action="store_true",
                    help="does learn pay on a source the shipped model never saw: per source, "
                         "learn on half of a draw of its prompts and rank the other half "
                         "(python -m lab.new_traffic; trains without each source once, cached)")
    ev.add_argument("--draws", type=int, default=3, help="with --new-traffic: draws per source")
    ev.set_defaults(func=run_eval)

    cal = subparsers.add_parser("calibrate", help="fit a model's ability from labelled prompts")
    cal.add_argument("--model", required=True)
    cal.add_argument("--data", type=Path, required=True)
    cal.add_argument("--family", default=None, help="family whose offsets to apply")
    cal.add_argument("--artifact", type=Path, default=None)
    cal.set_defaults(func=run_calibrate)


def run_train(args: argparse.Namespace) -> int:
    from lab.build import build_artifact
    from lab.provenance import write_provenance
    from lab.training import TrainConfig

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data_dir = args.data or default_data_dir()
    rows = load_rows(data_dir, TRAIN_FILES)
    arrays, meta = build_artifact(rows, TrainConfig(), args.seed)
    write_npz(args.out, arrays, meta)
    command = "routegate train " + shlex.join(
        [*(["--data", str(args.data)] if args.data else []), "--seed", str(args.seed)]
    )
    write_provenance(Path(args.out).parent / "PROVENANCE.md", Path(args.out), data_dir,
                     rows, arrays, meta, command)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size:,} bytes)")
    return 0


def reference_pair(data_dir: Path, prices: dict[str, float]) -> tuple[str, str]:
    """(strong, weak) for APGR, chosen on the *train* file: best mean score, cheapest."""
    rows = load_rows(data_dir, [TRAIN_FILES[0]])
    mean = {m: float(np.mean([r.scores[m] for r in rows])) for m in prices}
    strong = max(prices, key=lambda m: mean[m])
    weak = min(prices, key=lambda m: (prices[m], -mean[m]))
    return strong, weak


def evaluation_report(data_dir: Path | None = None, artifact: Path | None = None,
                      model: ComplexityModel | None = None):
    """The report on the shared test file, with the ranking by the classifier's own
    ``difficulty`` among the rankings; of ``model``, else of the one at ``artifact``."""
    from lab.eval_compare import difficulty_apgr
    from lab.evaluation import evaluate

    data_dir = data_dir or default_data_dir()
    prices = load_prices(data_dir)
    strong, weak = reference_pair(data_dir, prices)
    rows = [r for r in load_rows(data_dir, [TEST_FILE]) if r.source == PRICED_SOURCE]
    model = model or ComplexityModel.load(artifact)
    report = evaluate(model, rows, prices, strong, weak)
    report.apgr["difficulty"] = difficulty_apgr(
        model, [r.prompt for r in rows], np.asarray([r.scores[strong] for r in rows]),
        np.asarray([r.scores[weak] for r in rows]))
    return report


def run_eval(args: argparse.Namespace) -> int:
    from lab.evaluation import format_report

    if args.learned is not None and not (args.learned / DEFAULT_ARTIFACT.name).is_file():
        print(f"routegate eval: {args.learned} holds no {DEFAULT_ARTIFACT.name} "
              "(a directory `routegate learn --out` wrote)", file=sys.stderr)
        return 2
    if args.held_out is not None:
        return run_held_out(args)
    if args.new_traffic:
        from lab import new_traffic

        return new_traffic.main(["--draws", str(args.draws)])
    if args.learned is None:
        print(format_report(evaluation_report(args.data, args.artifact)))
        return 0
    from lab.eval_compare import held_out_section, side_by_side

    current = evaluation_report(args.data, args.artifact)
    model = ComplexityModel.load(args.learned)
    learned = evaluation_report(args.data, model=model)
    print(side_by_side(current, learned, ("current", "learned")))
    print()
    print(held_out_section(model.meta.get("learned")))   # learn's provenance, in the artifact
    return 0


def run_held_out(args: argparse.Namespace) -> int:
    """``routegate eval --held-out FILE [--pair S,W]... [--learned DIR]``."""
    from lab import held_out

    try:
        rows = held_out.read_held_out(args.held_out)
        pairs = held_out.parse_pairs(rows, args.pair)
    except (OSError, ValueError) as exc:      # UnicodeDecodeError is a ValueError
        print(f"routegate eval --held-out: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.bootstrap <= MAX_BOOTSTRAP:
        print(f"routegate eval --held-out: --bootstrap takes 0 to {MAX_BOOTSTRAP:,} draws",
              file=sys.stderr)
        return 2
    models = {"current": ComplexityModel.load(args.artifact)}
    if args.learned is not None:
        models["learned"] = ComplexityModel.load(args.learned)
    results = held_out.held_out_results(rows, pairs, models, draws=args.bootstrap)
    print(held_out.format_held_out(results, f"{args.held_out.name}, {len(rows)} prompts"))
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    from lab.calibration import fit_ability, format_calibration, read_examples

    model = ComplexityModel.load(args.artifact)
    examples = read_examples(str(args.data), model, args.model)
    if not examples:
        print(f"no labelled prompts for {args.model} in {args.data}", file=sys.stderr)
        return 1
    print(format_calibration(fit_ability(model, examples, args.family), args.model))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.commands")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
