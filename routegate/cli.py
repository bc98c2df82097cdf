"""``routegate``: every subcommand, the one place the product's and the lab's meet.

    routegate serve --config config/routegate.yaml
    routegate learn --labels labels.jsonl --out learned/
    python -m routegate.cli --help

The product (``gateway.cli.register``) never imports the lab; this module,
above both, puts their commands in one parser.
"""

from __future__ import annotations

import argparse
import sys

from gateway import cli as product
from lab import commands as lab_commands
from lab import learn_command
from loadtest import commands as loadtest_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routegate", description="Cost-aware model router gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    product.register(sub)               # serve, check-config, hash-key, worker, report, classify
    lab_commands.register(sub)          # train, eval, calibrate
    learn_command.register_learn(sub)   # learn --labels FILE | --from-traffic --team T
    loadtest_commands.register(sub)     # loadtest run | experiment
    return parser


# pyproject's lab extra: what train, eval, calibrate, learn and loadtest need and serving does not.
LAB_EXTRA = frozenset({"sklearn", "scipy", "wordfreq", "matplotlib", "tqdm"})


def main(argv: list[str] | None = None) -> int:
    try:
        return product.main(argv, build_parser())
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in LAB_EXTRA:
            raise
        print(f"routegate: this command needs {exc.name}, from the lab extra: "
              "pip install 'routegate[lab]'", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
