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

# pyproject's lab extra: what train, eval, calibrate, learn and loadtest need and serving does not.
LAB_EXTRA = frozenset({"sklearn", "scipy", "wordfreq", "matplotlib", "tqdm"})
LAB_COMMANDS = ("train", "eval", "calibrate", "learn", "loadtest")
INSTALL_LAB = "pip install 'routegate[lab]'"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routegate", description="Cost-aware model router gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    product.register(sub)               # serve, check-config, hash-key, worker, report, classify
    if lab_missing() is not None:       # the image: the product alone; listed, and refused in main
        for name in LAB_COMMANDS:
            sub.add_parser(name, help=f"(needs the lab extra: {INSTALL_LAB})")
        return parser
    from lab import commands as lab_commands
    from lab import learn_command
    from loadtest import commands as loadtest_commands
    lab_commands.register(sub)          # train, eval, calibrate
    learn_command.register_learn(sub)   # learn --labels FILE | --from-traffic --team T
    loadtest_commands.register(sub)     # loadtest run | experiment
    return parser


def lab_missing() -> str | None:
    """The lab extra's module that cannot be imported, or None when the lab commands can load."""
    try:
        from lab import commands, learn_command  # noqa: F401
        from loadtest import commands as _  # noqa: F401
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in LAB_EXTRA:
            raise
        return str(exc.name)
    return None


def _say_install(missing: str) -> int:
    print(f"routegate: this command needs {missing}, from the lab extra: {INSTALL_LAB}",
          file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in LAB_COMMANDS and (missing := lab_missing()) is not None:
        return _say_install(missing)
    try:
        return product.main(argv, build_parser())
    except ModuleNotFoundError as exc:  # a lab module importing the extra only when run
        if (exc.name or "").split(".")[0] not in LAB_EXTRA:
            raise
        return _say_install(str(exc.name))


if __name__ == "__main__":
    sys.exit(main())
