"""Everyday prompts on the demo fleet: ``python -m lab.everyday``.

    python -m lab.everyday labels > /tmp/everyday_labels.jsonl    # the selection half, as labels
    python -m lab.everyday route --half report                    # where the other half goes
    python -m lab.everyday route --file tests/classifiers/everyday_prompts.jsonl

``lab/data/everyday_prompts.jsonl`` holds 582 prompts written for issue 48 by
the helper that built this (a language model, in one sitting; no public set
could be fetched here): 241 trivial ones (greetings, trivia, conversions,
arithmetic, one-line rewrites and translations, look-ups), 105 medium ones
(explanations, short code, e-mails and summaries, word problems, advice)
and 236 hard ones (proofs, multi-step math and physics, non-trivial code,
long analysis, systems and algorithm design). Each is labelled with the demo
fleet's intent: trivial to ``small``, medium to ``medium``, hard to ``large``.
One of them, in the selection half ("What is the square root of 81?"), is in
the routing data the shipped model trained on (``llmrouter_train``, verbatim);
no prompt of the report half is.

A hash of each prompt puts it in the ``select`` or the ``report`` half.
``labels`` writes the selection half as ``routegate learn`` labels, by that
intent: the models at or above the prompt's tier answer it (1), those below
do not (0). ``route`` sends prompts through the real ``Router`` with the demo
config (``config/routegate.yaml``), as ``model: auto`` is served, and counts
where each tier goes. ``learn`` fits the selection half only, and the report
half is what the figures report; but it was not untouched while designing:
probes scored heads and the chain's anchor on both halves, and the
calibration's form (isotonic, not a straight line) was kept for what it did to
the report half's trivial prompts (docs/routing.md). Its figures are held out
from the fit, not from every choice.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "everyday_prompts.jsonl"
CONFIG = Path(__file__).resolve().parents[1] / "config" / "routegate.yaml"
TIERS = ("small", "medium", "large")


def half_of(prompt: str) -> str:
    """The half a prompt is in: by the parity of its digest's first byte."""
    digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=4).digest()
    return "select" if digest[0] % 2 == 0 else "report"


def read_prompts(path: Path = DATA, half: str | None = None) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    for row in rows:
        if row.get("tier") not in TIERS or not isinstance(row.get("prompt"), str):
            raise ValueError(f"{path}: a row without a tier in {TIERS} and a prompt: {row}")
    return [r for r in rows if half is None or half_of(r["prompt"]) == half]


def label_lines(rows: Sequence[dict]) -> list[str]:
    """The demo fleet's intent as labels: a model answers a prompt of its tier or below."""
    out = []
    for row in rows:
        rank = TIERS.index(row["tier"])
        out += [json.dumps({"prompt": row["prompt"], "model": model,
                            "score": float(i >= rank)}) for i, model in enumerate(TIERS)]
    return out


def router_for(config_path: Path, classifier: str | None):
    """A function prompt -> the model ``auto`` picks for the config's first team."""
    from classifiers.complexity import ComplexityModel
    from core.config import load_config
    from gateway.auth import Caller
    from gateway.pipeline.features import measure
    from gateway.pipeline.routing import Router
    from gateway.protocols.chat_body import parse_chat
    from gateway.upstreams import build_backends

    config = load_config(config_path)
    model = ComplexityModel.load(classifier or config.routing.classifier)
    router = Router(config, build_backends(config), model)
    team = config.teams[0]
    caller = Caller(team=team, key=team.key_configs()[0])

    def choose(prompt: str) -> str:
        body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": prompt}]})
        chat = parse_chat(body.encode(), {})
        features = asyncio.run(measure(chat, router.encodings, router.scorer(chat, caller)))
        return router.choose(chat, caller, features).model

    return choose


def route_table(rows: Sequence[dict], choose) -> tuple[str, dict[str, collections.Counter]]:
    went: dict[str, collections.Counter] = {t: collections.Counter() for t in TIERS}
    for row in rows:
        went[row["tier"]][choose(row["prompt"])] += 1
    lines = ["| labelled | prompts | to small | to medium | to large | where labelled |",
             "|---|--:|--:|--:|--:|--:|"]
    for tier, counts in went.items():
        n = sum(counts.values())
        if n:
            lines.append(f"| {tier} | {n} | {counts['small']} | {counts['medium']} | "
                         f"{counts['large']} | {counts[tier] / n:.1%} |")
    return "\n".join(lines), went


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.everyday",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    labels = sub.add_parser("labels", help="the selection half as routegate learn labels")
    labels.add_argument("--half", choices=("select", "report"), default="select")
    route = sub.add_parser("route", help="where the demo fleet's auto sends each tier")
    route.add_argument("--half", choices=("select", "report"), default=None)
    route.add_argument("--file", type=Path, default=DATA)
    route.add_argument("--config", type=Path, default=CONFIG)
    route.add_argument("--classifier", default=None,
                       help="an artifact instead of the config's routing.classifier")
    args = parser.parse_args(argv)
    try:
        rows = read_prompts(args.file if args.command == "route" else DATA, args.half)
        if args.command == "labels":
            print("\n".join(label_lines(rows)))
            return 0
        table, _ = route_table(rows, router_for(args.config, args.classifier))
    except (OSError, ValueError) as exc:
        print(f"lab.everyday: {exc}", file=sys.stderr)
        return 2
    print(f"{args.file.name}{f', {args.half} half' if args.half else ''}: {len(rows)} prompts")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
